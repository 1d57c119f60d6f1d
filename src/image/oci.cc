// resolve() and sniff(): the files of a staged OCI layout or docker-save archive, read through
// the parsers of oci_parse.cc. Files are opened with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) below the staging directory, must be regular files (a fifo is not waited
// on), and are read up to a bound; the manifest and config blobs are checked against their
// digest and size here, the layer blobs' size here and their digest by apply_layer.
#include "image/oci.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "common/fd.h"
#include "common/openat2.h"
#include "image/oci_parse.h"
#include "image/sha256.h"

namespace space::image {

namespace fs = std::filesystem;
using detail::Descriptor;

namespace {

constexpr uint64_t kResolveStrict = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

// A regular file below `dirfd`, with its size; errors name `rel`.
struct OpenFile {
  UniqueFd fd;
  uint64_t size = 0;
};
Result<OpenFile> open_below(int dirfd, const std::string& rel) {
  int fd = sys_openat2(dirfd, rel.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC,
                       kResolveStrict);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return fail(Code::kInvalidArgument, rel + ": missing", err);
    if (err == ELOOP || err == EXDEV)
      return fail(Code::kInvalidArgument, rel + ": a symlink (refused in an image archive)", err);
    if (err == ENOSYS || err == EPERM)
      return fail(Code::kUnavailable, "openat2 is not available (Linux 5.6 or later needed)", err);
    return fail_sys("openat2", "\"" + rel + "\"", err);
  }
  OpenFile f{UniqueFd(fd), 0};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail_sys("fstat", "\"" + rel + "\"");
  if (!S_ISREG(st.st_mode)) return fail(Code::kInvalidArgument, rel + ": not a regular file");
  f.size = static_cast<uint64_t>(st.st_size);
  return f;
}

Result<std::string> read_all(const OpenFile& f, const std::string& rel, uint64_t max) {
  if (f.size > max)
    return fail(Code::kInvalidArgument, rel + ": larger than " + std::to_string(max) + " bytes");
  std::string out(f.size, '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(f.fd.get(), out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_sys("read", "\"" + rel + "\"");
    if (n == 0) return fail(Code::kInvalidArgument, rel + ": shorter than its size");
    got += static_cast<size_t>(n);
  }
  return out;
}

std::string blob_rel(const std::string& digest) {
  return "blobs/sha256/" + digest.substr(std::string_view("sha256:").size());
}

// A JSON blob named by a descriptor: its size and sha256 must be the descriptor's.
Result<std::string> read_blob(int dirfd, const Descriptor& d) {
  std::string rel = blob_rel(d.digest);
  OpenFile f = TRY(open_below(dirfd, rel));
  if (f.size != d.size)
    return fail(Code::kInvalidArgument, "blob " + d.digest + " is " + std::to_string(f.size) +
                                            " bytes; its descriptor says " +
                                            std::to_string(d.size));
  std::string text = TRY(read_all(f, rel, kMaxJsonBlobBytes));
  if (std::string got = sha256_digest(text); got != d.digest)
    return fail(Code::kInvalidArgument, "blob " + d.digest + ": its content hashes to " + got);
  return text;
}

Result<std::string> read_json_file(int dirfd, const std::string& rel) {
  OpenFile f = TRY(open_below(dirfd, rel));
  return read_all(f, rel, kMaxJsonBlobBytes);
}

// The index -> manifest walk of an OCI layout.
Result<detail::ManifestDoc> walk_to_manifest(int dirfd, const Platform& want, Resolved& out) {
  std::string text = TRY(read_json_file(dirfd, "index.json"));
  auto chosen = detail::choose_manifest(text, want);
  if (!chosen) return fail(std::move(chosen.error()).wrap("index.json"));
  std::set<std::string> seen;
  for (int depth = 1;; ++depth) {
    Descriptor d = std::move(*chosen);
    if (!seen.insert(d.digest).second)
      return fail(Code::kInvalidArgument,
                  "index " + d.digest + " refers back to itself (a loop of indexes)");
    std::string blob = TRY_CTX(read_blob(dirfd, d), "reading " + d.digest);
    if (detail::is_manifest_type(d.media_type)) {
      auto doc = detail::parse_manifest(blob, d.media_type);
      if (!doc) return fail(std::move(doc.error()).wrap("manifest " + d.digest));
      out.manifest_digest = d.digest;
      return std::move(*doc);
    }
    if (depth >= kMaxIndexDepth)
      return fail(Code::kInvalidArgument,
                  "indexes nested more than " + std::to_string(kMaxIndexDepth) + " deep");
    chosen = detail::choose_manifest(blob, want);
    if (!chosen) return fail(std::move(chosen.error()).wrap("index " + d.digest));
  }
}

// Config blob text -> out.config, with one diff_id per layer.
Result<void> take_config(std::string_view text, const Platform& want, Resolved& out) {
  auto parsed = parse_config_blob(text);
  if (!parsed) return fail(std::move(parsed.error()).wrap("config " + out.config_digest));
  if (!parsed->os.empty() && !parsed->architecture.empty() &&
      (parsed->os != want.os || parsed->architecture != want.architecture))
    return fail(Code::kInvalidArgument, "the image is for " + parsed->os.substr(0, 64) + "/" +
                                            parsed->architecture.substr(0, 64) +
                                            "; this host runs " + want.os + "/" +
                                            want.architecture);
  if (parsed->diff_ids.size() != out.layers.size())
    return fail(Code::kInvalidArgument, "config " + out.config_digest + " lists " +
                                            std::to_string(parsed->diff_ids.size()) +
                                            " diff_ids for " + std::to_string(out.layers.size()) +
                                            " layers");
  for (size_t i = 0; i < out.layers.size(); ++i) out.layers[i].diff_id = parsed->diff_ids[i];
  out.config = std::move(parsed->config);
  return {};
}

Result<Resolved> resolve_oci(int dirfd, const fs::path& dir, const Platform& want) {
  Resolved out;
  out.format = "oci";
  std::string layout = TRY(read_json_file(dirfd, "oci-layout"));
  auto lj = detail::parse_json(layout);
  if (!lj) return fail(std::move(lj.error()).wrap("oci-layout"));
  auto version = lj->is_object() ? lj->find("imageLayoutVersion") : lj->end();
  if (!lj->is_object() || version == lj->end() || !version->is_string() ||
      !version->get<std::string>().starts_with("1."))
    return fail(Code::kInvalidArgument, "oci-layout: imageLayoutVersion is not 1.x");
  detail::ManifestDoc doc = TRY(walk_to_manifest(dirfd, want, out));
  out.config_digest = doc.config.digest;
  std::string config = TRY_CTX(read_blob(dirfd, doc.config), "reading the config");
  for (size_t i = 0; i < doc.layers.size(); ++i) {
    const Descriptor& d = doc.layers[i];
    std::string rel = blob_rel(d.digest);
    auto f = open_below(dirfd, rel);
    if (!f) return fail(std::move(f.error()).wrap("layer " + std::to_string(i)));
    if (f->size != d.size)
      return fail(Code::kInvalidArgument, "layer " + std::to_string(i) + ": blob " + d.digest +
                                              " is " + std::to_string(f->size) +
                                              " bytes; the manifest says " +
                                              std::to_string(d.size));
    out.layers.push_back(Layer{d.digest, d.media_type, d.size, "", dir / rel});
  }
  TRY_VOID(take_config(config, want, out));
  return out;
}

// "<64 hex>.json" or "blobs/sha256/<64 hex>": the digest a docker-save file's name states.
std::string digest_in_name(const std::string& rel) {
  std::string_view name = rel;
  if (name.starts_with("blobs/sha256/"))
    name.remove_prefix(13);
  else if (name.ends_with(".json") && name.find('/') == std::string_view::npos)
    name.remove_suffix(5);
  else
    return "";
  std::string d = "sha256:" + std::string(name);
  return valid_sha256_digest(d) ? d : "";
}

Result<Resolved> resolve_docker(int dirfd, const fs::path& dir, const Platform& want) {
  Resolved out;
  out.format = "docker";
  std::string text = TRY(read_json_file(dirfd, "manifest.json"));
  auto doc = detail::parse_docker_manifest(text);
  if (!doc) return fail(std::move(doc.error()).wrap("manifest.json"));
  OpenFile cf = TRY_CTX(open_below(dirfd, doc->config), "the config");
  std::string config = TRY(read_all(cf, doc->config, kMaxJsonBlobBytes));
  out.config_digest = sha256_digest(config);
  if (std::string named = digest_in_name(doc->config); !named.empty() && named != out.config_digest)
    return fail(Code::kInvalidArgument,
                "config " + doc->config + ": its content hashes to " + out.config_digest);
  for (size_t i = 0; i < doc->layers.size(); ++i) {
    const std::string& rel = doc->layers[i];
    auto f = open_below(dirfd, rel);
    if (!f) return fail(std::move(f.error()).wrap("layer " + std::to_string(i)));
    out.layers.push_back(Layer{digest_in_name(rel), "", f->size, "", dir / rel});
  }
  TRY_VOID(take_config(config, want, out));
  return out;
}

bool is_regular(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

Format sniff(const fs::path& dir) {
  if (is_regular(dir / "oci-layout") && is_regular(dir / "index.json")) return Format::kOciLayout;
  if (is_regular(dir / "manifest.json")) return Format::kDockerSave;
  return Format::kRootfs;
}

Result<Resolved> resolve(const fs::path& dir, const Platform& want) {
  UniqueFd dirfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dirfd) return fail_sys("open", "\"" + dir.string() + "\"");
  switch (sniff(dir)) {
    case Format::kOciLayout:
      return resolve_oci(dirfd.get(), dir, want);
    case Format::kDockerSave:
      return resolve_docker(dirfd.get(), dir, want);
    case Format::kRootfs:
      break;
  }
  return fail(Code::kInvalidArgument,
              "neither an OCI image layout (oci-layout, index.json) nor a docker-save archive "
              "(manifest.json)");
}

}  // namespace space::image
