// Image handling: the host skeleton, imports (the upload unpacked by libarchive with the secure
// extraction flags, then taken as a root filesystem or, for an OCI layout or docker-save
// archive, resolved and its layers applied by src/image: every byte is untrusted input), the
// content store imported images share, and VM disks (build_vm: mke2fs -d + debugfs, no
// mounts).
#include "daemon/images.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/failpoint.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "daemon/archive_names.h"
#include "image/layer.h"
#include "tls/digest.h"

namespace space::daemon {
namespace fs = std::filesystem;
namespace {

Result<void> write_file(const fs::path& p, std::string_view content, mode_t mode) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return fail_sys("open", p.string());
  UniqueFd g(fd);
  if (::write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size()))
    return fail_sys("write", p.string());
  if (::fchmod(fd, mode) != 0) return fail_sys("fchmod", p.string());
  return {};
}

// Host directories bound read-only into the host image, when they exist: live (a package
// upgrade on the host shows at once), shared, and holding nothing secret. docs/linux-runtime.md
// ("The host image") says why each is there. Their mount points are made in the skeleton, so
// the bind adds nothing to the sandbox's writable layer.
const char* kHostBinds[] = {
    "/usr",
    "/etc/ssl",               // the CA store (ca-certificates)
    "/etc/alternatives",      // Debian's alternatives (/usr/bin/* links point here)
    "/etc/fonts",             // Fontconfig's configuration: Chromium, matplotlib, any text render
    "/var/cache/fontconfig",  // its prebuilt cache, so each sandbox need not rebuild it
    "/etc/chromium.d",        // sourced by Debian's /usr/bin/chromium launcher (exits 2 without)
};

// Small, non-secret host files copied into the skeleton (the sandbox sees them as of the
// skeleton's build). Left out on purpose, because they can hold secrets or host identity:
// shadow, gshadow, ssh/, sudoers, machine-id, gitconfig, npmrc, pip.conf, wgetrc, netrc,
// environment and profile.d (host variables, proxies with passwords), the host's
// hostname/hosts/resolv.conf (the sandbox gets its own).
const char* kHostFiles[] = {
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/mime.types",
    "/etc/profile",
    "/etc/bash.bashrc",
    "/etc/shells",
    "/etc/login.defs",
    "/etc/inputrc",
    "/etc/services",
    "/etc/protocols",
    "/etc/ethertypes",
    "/etc/locale.alias",
    "/etc/gai.conf",
    "/etc/host.conf",
    "/etc/magic",
    "/etc/magic.mime",
    "/etc/matplotlibrc",                 // Debian's python3-matplotlib has no built-in default
    "/etc/chromium/master_preferences",  // Chromium's first-run defaults
};

// Small host directories copied the same way.
const char* kHostDirs[] = {"/etc/ld.so.conf.d", "/etc/python3", "/etc/python3.11"};

// Where the daemon writes each sandbox's Chromium policy (the sandbox CA, no ECH): a plain
// directory of the skeleton, so the file lands in the sandbox's writable layer
// (daemon/egress.cc).
constexpr const char* kChromiumPolicyDir = "etc/chromium/policies/managed";

Result<std::string> sha256_file(const fs::path& p) {
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_sys("open", p.string());
  tls::Sha256 sha;
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_sys("read", p.string());
    if (n == 0) break;
    sha.update(buf, static_cast<size_t>(n));
  }
  return sha.hex();
}

}  // namespace

Result<void> Images::validate_name(const std::string& name) {
  // ^[a-z0-9][a-z0-9._-]{0,63}$, checked by hand (std::regex cost this file ~5 s to compile).
  auto lower_or_digit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  bool ok = !name.empty() && name.size() <= 64 && lower_or_digit(name[0]) &&
            std::all_of(name.begin() + 1, name.end(), [&](char c) {
              return lower_or_digit(c) || c == '.' || c == '_' || c == '-';
            });
  if (!ok)
    return fail(Code::kInvalidArgument,
                "invalid image name \"" + name.substr(0, 80) +
                    "\": use 1-64 characters of a-z, 0-9, '.', '_' and '-', starting with a "
                    "letter or digit");
  return {};
}

Result<void> Images::build_host_skeleton(const fs::path& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return fail(Code::kInternal, "creating " + root.string() + ": " + ec.message());
  // The host's top-level symlinks (merged /usr: /bin -> usr/bin ...), so paths resolve as on
  // the host.
  for (const auto& e : fs::directory_iterator("/")) {
    if (!e.is_symlink()) continue;
    auto target = fs::read_symlink(e.path(), ec);
    if (ec) continue;
    std::string t = target.string();
    if (t.rfind("usr/", 0) != 0 && t.rfind("/usr/", 0) != 0) continue;  // only into /usr
    fs::create_symlink(target, root / e.path().filename(), ec);
  }
  for (const char* d :
       {"usr", "etc", "root", "home", "tmp", "var", "var/tmp", "var/lib", "var/cache", "var/log",
        "run", "proc", "dev", "sys", "mnt", "opt", "srv", "workspace", kChromiumPolicyDir}) {
    fs::create_directories(root / d, ec);
    if (ec)
      return fail(Code::kInternal, "creating skeleton dir " + std::string(d) + ": " + ec.message());
  }
  for (const char* b : kHostBinds) {  // mount points
    fs::create_directories(root / fs::path(b).relative_path(), ec);
    if (ec)
      return fail(Code::kInternal, std::string("creating mount point ") + b + ": " + ec.message());
  }
  ::chmod((root / "tmp").c_str(), 01777);
  ::chmod((root / "var/tmp").c_str(), 01777);
  ::chmod((root / "root").c_str(), 0700);
  TRY_VOID(write_file(root / "etc/passwd",
                      "root:x:0:0:root:/root:/bin/sh\n"
                      "user:x:1000:1000:user:/home/user:/bin/sh\n"
                      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
                      0644));
  TRY_VOID(write_file(root / "etc/group", "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n", 0644));
  TRY_VOID(write_file(root / "etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n", 0644));
  TRY_VOID(write_file(root / "etc/resolv.conf", "nameserver 127.0.0.53\noptions edns0\n", 0644));
  TRY_VOID(write_file(root / "etc/nsswitch.conf",
                      "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n", 0644));
  fs::create_directories(root / "home/user", ec);
  ::chown((root / "home/user").c_str(), 1000, 1000);
  // Small host files that programs expect; copied, not bound, so the sandbox sees a snapshot.
  for (const char* f : kHostFiles) {
    fs::path src(f);
    if (!fs::exists(src, ec)) continue;
    fs::create_directories(root / src.relative_path().parent_path(), ec);
    fs::copy(src, root / src.relative_path(),
             fs::copy_options::overwrite_existing | fs::copy_options::copy_symlinks, ec);
  }
  for (const char* d : kHostDirs) {
    if (!fs::is_directory(d, ec)) continue;
    fs::copy(d, root / fs::path(d).relative_path(),
             fs::copy_options::recursive | fs::copy_options::overwrite_existing |
                 fs::copy_options::copy_symlinks,
             ec);
  }
  return {};
}

Result<void> Images::init() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return fail(Code::kInternal, "creating " + dir_.string() + ": " + ec.message());
  // Versioned so a newer spaced can change the skeleton without touching one that running
  // sandboxes still use as their lower layer.
  // v2: the host's /etc for fonts, Chromium, matplotlib (kHostBinds, kHostFiles).
  fs::path root = dir_ / "host" / "rootfs.v2";
  if (!fs::exists(root / "etc/passwd", ec)) {
    fs::path tmp = dir_ / "host" / ("rootfs.v2.tmp" + std::to_string(::getpid()));
    fs::remove_all(tmp, ec);
    TRY_VOID_CTX(build_host_skeleton(tmp), "building the host image skeleton");
    fs::remove_all(root, ec);
    fs::rename(tmp, root, ec);
    if (ec) return fail(Code::kInternal, "installing the host skeleton: " + ec.message());
  }
  ImageRecord r{"host", "host", root.string(), now_s(), 0, 0};
  TRY_VOID(store_.put_image(r));
  sweep();
  return {};
}

void Images::sweep() {
  // What an import, a removal or a VM disk build cut short by a kill left: staging directories,
  // image directories without a record, temporary disk files. The record is the truth.
  std::set<std::string> known;
  std::map<std::string, std::string> built_paths;
  if (auto all = store_.images(); all) {
    for (auto& rec : *all) {
      known.insert(rec.name);
      if (rec.kind == "built") built_paths[rec.name] = rec.path;
    }
  } else {
    spdlog::warn("images: not sweeping leftovers: {}", all.error().message());
    return;
  }
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir_, ec)) {
    std::string n = e.path().filename().string();
    // .build-: a build's staging area; .install-: a built image not yet in place; .cache-: a
    // build step's tree (kept while its record is).
    bool staging = n.starts_with(".import-") || n.starts_with(".build-") ||
                   n.starts_with(".install-") || (n.starts_with(".cache-") && !known.count(n));
    if (!staging && (!e.is_directory(ec) || known.count(n))) {
      for (auto& f : fs::directory_iterator(e.path(), ec)) {
        std::string fn = f.path().filename().string();
        // A built image's trees other than the one its record names (a rebuild cut short).
        bool stale_tree = fn.starts_with("rootfs-") && built_paths.count(n) &&
                          fs::path(built_paths[n]).filename() != fn;
        if (fn.starts_with(".vm.ext4.tmp") || fn.starts_with(".vm.debugfs") ||
            fn.starts_with("rootfs.v2.tmp") || stale_tree) {
          std::error_code rm;
          fs::remove_all(f.path(), rm);
        }
      }
      continue;
    }
    if (!staging && !validate_name(n)) continue;  // not a directory spaced makes
    spdlog::info("images: removing {}, left by an import or removal spaced did not finish",
                 e.path().string());
    std::error_code rm;
    fs::remove_all(e.path(), rm);
  }
  // Entries of the content store that only an image removed above (or a cut-short removal)
  // linked.
  std::lock_guard lock(content_mu_);
  collect_content();
}

Result<runtime::Image> Images::resolve(const std::string& name) {
  auto rec = TRY(store_.get_image(name));
  if (!rec)
    return fail(Code::kNotFound, "unknown image \"" + name.substr(0, 80) +
                                     "\"; `space image ls` lists images, `space image import "
                                     "NAME PATH` adds one");
  runtime::Image img;
  img.name = rec->name;
  img.rootfs = rec->path;
  if (rec->kind == "host") {
    std::error_code ec;
    for (const char* b : kHostBinds)
      if (fs::is_directory(b, ec)) img.ro_binds.emplace_back(b);
  } else {
    img.vm_disk = current_vm_disk(*rec);
  }
  return img;
}

Images::Images(fs::path dir, Store& store, const ImageImportConfig& import)
    : dir_(std::move(dir)),
      store_(store),
      limits_(image::kDefaultLimits),
      keep_setuid_(import.keep_setuid) {
  if (import.max_layer_bytes) limits_.max_layer_bytes = import.max_layer_bytes;
  if (import.max_total_bytes) limits_.max_total_bytes = import.max_total_bytes;
  if (import.max_entries) limits_.max_entries = import.max_entries;
  if (import.max_ratio) limits_.max_ratio = import.max_ratio;
}

Result<Images::Unpacked> Images::unpack_upload(const ChunkSource& source, const fs::path& into) {
  auto upload = TRY(UploadArchive::open(source, "image archive"));
  archive* in = upload->get();
  archive* out = archive_write_disk_new();
  archive_write_disk_set_options(out, ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                          ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_PERM |
                                          ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_TIME |
                                          ARCHIVE_EXTRACT_XATTR);
  struct FreeOut {
    archive* out;
    ~FreeOut() { archive_write_free(out); }
  } free_out{out};
  Unpacked u;
  for (;;) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(in, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return fail(upload->error());
    if (++u.entries > limits_.max_entries)
      return fail(Code::kPayloadTooLarge, "the image archive has more than " +
                                              std::to_string(limits_.max_entries) +
                                              " entries (images.max_entries in spaced's config)");
    auto type = archive_entry_filetype(e);
    if (type == AE_IFCHR || type == AE_IFBLK) continue;  // no device nodes in images
    // Names are cleaned here (no "..", leading "/" dropped) and re-rooted under the staging
    // directory; libarchive's SECURE_SYMLINKS then refuses writes through symlinks.
    std::string rel = TRY(clean_archive_name(archive_entry_pathname(e)));
    if (rel.empty()) continue;  // the root itself
    std::string path = (into / rel).string();
    archive_entry_set_pathname(e, path.c_str());
    if (const char* hl = archive_entry_hardlink(e)) {
      std::string h = (into / TRY(clean_archive_name(hl))).string();
      archive_entry_set_hardlink(e, h.c_str());
    }
    if (archive_write_header(out, e) < ARCHIVE_WARN)
      return fail(Code::kInvalidArgument,
                  "extracting \"" + rel.substr(0, 200) + "\": " + archive_error_string(out));
    const void* blk;
    size_t sz;
    la_int64_t off;
    while ((r = archive_read_data_block(in, &blk, &sz, &off)) == ARCHIVE_OK) {
      u.bytes += sz;
      if (u.bytes > limits_.max_total_bytes)
        return fail(Code::kPayloadTooLarge, "the image archive unpacks to more than " +
                                                format_size(limits_.max_total_bytes) +
                                                " (images.max_total in spaced's config)");
      if (archive_write_data_block(out, blk, sz, off) < ARCHIVE_WARN)
        return fail(Code::kInternal,
                    std::string("writing image data: ") + archive_error_string(out));
    }
    if (r != ARCHIVE_EOF) return fail(upload->error());
  }
  if (archive_write_finish_entry(out) < ARCHIVE_WARN || archive_write_close(out) != ARCHIVE_OK)
    return fail(Code::kInternal, std::string("finishing extraction: ") + archive_error_string(out));
  if (u.entries == 0) return fail(Code::kInvalidArgument, "the image archive is empty");
  return u;
}

Result<image::Resolved> Images::build_from_layers(const fs::path& upload, const fs::path& rootfs) {
  image::Resolved img = TRY(image::resolve(upload, image::Platform::host()));
  if (::mkdir(rootfs.c_str(), 0755) != 0) return fail_sys("mkdir", rootfs.string());
  UniqueFd root(::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) return fail_sys("open", rootfs.string());
  image::Totals totals;
  for (size_t i = 0; i < img.layers.size(); ++i) {
    const image::Layer& layer = img.layers[i];
    // Its errors name the layer by digest; the context says where it is in the stack.
    TRY_VOID_CTX(image::apply_layer(layer.path, layer, root.get(), limits_, totals, keep_setuid_),
                 "layer " + std::to_string(i + 1) + " of " + std::to_string(img.layers.size()));
  }
  // The root directory is the image's "/": a layer cannot change it (an entry "./" is the root
  // itself), so it is always root's, 0755.
  if (::fchmod(root.get(), 0755) != 0) return fail_sys("fchmod", rootfs.string());
  return img;
}

// --- The content store ----------------------------------------------------------------------
//
// Why sharing files between images by hard links is safe:
// - Nothing writes an installed image's tree: the linux runtime mounts it as the read-only
//   lower layer of each sandbox's overlay (a write copies the file up into the sandbox's own
//   layer; overlayfs in a user namespace runs with userxattr, which turns its inode index off,
//   so a copy-up never reaches other names of the same inode), and build_vm copies the tree
//   into an ext4 file. spaced itself only links and unlinks names.
// - An entry is keyed by its content's SHA-256 and by the mode and owner, the metadata a
//   shared inode has once for all its names: two files share an inode only where nothing but
//   their times and xattrs could tell them apart, and files with xattrs (capabilities, ACLs)
//   are never shared. The times an image sees are those of the first image that added it.
// - Entries are made by linking a file of a tree that is complete and checked (every digest
//   verified), so a store entry's content always matches its name.
// Removal and sweep drop entries whose link count fell to 1 (only the store names them).

namespace {

constexpr const char* kContentDir = ".content";

// Whether a file has extended attributes (they stay private to its image).
bool has_xattrs(const fs::path& p) { return ::llistxattr(p.c_str(), nullptr, 0) > 0; }

}  // namespace

Result<Images::TreeStats> Images::share_content(const fs::path& rootfs,
                                                const std::set<ino_t>* in_store) {
  TreeStats t;
  fs::path store = dir_ / kContentDir;
  std::error_code ec;
  fs::create_directories(store, ec);
  if (ec) return fail(Code::kInternal, "creating " + store.string() + ": " + ec.message());
  ::chmod(store.c_str(), 0700);
  // Names of one inode in the tree (hard links of the image itself) go to the same entry.
  std::map<ino_t, fs::path> linked;
  uint64_t tmp_seq = 0;
  // Replaces `file` by a hard link to `entry`; false (and nothing changed) if it cannot be.
  auto link_over = [&](const fs::path& entry, const fs::path& file) {
    // Already that inode (rename would then do nothing and leave the temporary name).
    struct stat a, b;
    if (::lstat(entry.c_str(), &a) != 0 || ::lstat(file.c_str(), &b) != 0) return false;
    if (a.st_ino == b.st_ino && a.st_dev == b.st_dev) return true;
    fs::path tmp = file.parent_path() / (".space-share." + std::to_string(++tmp_seq));
    if (::link(entry.c_str(), tmp.c_str()) != 0) return false;
    if (::rename(tmp.c_str(), file.c_str()) != 0) {
      ::unlink(tmp.c_str());
      return false;
    }
    return true;
  };
  auto it = fs::recursive_directory_iterator(rootfs, fs::directory_options::none, ec);
  if (ec) return fail(Code::kInternal, "reading " + rootfs.string() + ": " + ec.message());
  for (auto end = fs::recursive_directory_iterator(); it != end; it.increment(ec)) {
    if (ec) return fail(Code::kInternal, "reading " + rootfs.string() + ": " + ec.message());
    const fs::path& p = it->path();
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) return fail_sys("lstat", p.string());
    ++t.files;
    if (!S_ISREG(st.st_mode)) continue;
    t.bytes += static_cast<uint64_t>(st.st_size);
    if (st.st_size == 0) continue;  // no data blocks to save
    if (in_store && st.st_nlink > 1 && in_store->contains(st.st_ino)) continue;
    if (auto l = linked.find(st.st_ino); l != linked.end()) {
      (void)link_over(l->second, p);
      continue;
    }
    if (has_xattrs(p)) continue;
    std::string hex = TRY(sha256_file(p));
    char key[160];
    std::snprintf(key, sizeof key, "%s-%o-%u-%u", hex.c_str(),
                  static_cast<unsigned>(st.st_mode & 07777), static_cast<unsigned>(st.st_uid),
                  static_cast<unsigned>(st.st_gid));
    fs::path shard = store / hex.substr(0, 2);
    if (::mkdir(shard.c_str(), 0700) != 0 && errno != EEXIST)
      return fail_sys("mkdir", shard.string());
    fs::path entry = shard / key;
    struct stat es;
    if (::lstat(entry.c_str(), &es) == 0) {
      // Another image has it: link to its inode (if this one cannot take another link, e.g.
      // EMLINK, the file stays this image's own).
      if (S_ISREG(es.st_mode) && es.st_size == st.st_size && link_over(entry, p)) {
        ++t.shared;
        t.shared_bytes += static_cast<uint64_t>(st.st_size);
        linked.emplace(st.st_ino, entry);
      }
      continue;
    }
    // New content: the store names this file's inode.
    if (::link(p.c_str(), entry.c_str()) == 0) linked.emplace(st.st_ino, entry);
  }
  return t;
}

void Images::collect_content() {
  fs::path store = dir_ / kContentDir;
  std::error_code ec;
  uint64_t dropped = 0;
  for (auto& shard : fs::directory_iterator(store, ec)) {
    std::error_code e2;
    for (auto& f : fs::directory_iterator(shard.path(), e2)) {
      struct stat st;
      if (::lstat(f.path().c_str(), &st) != 0) continue;
      if (!S_ISREG(st.st_mode) || st.st_nlink <= 1) {
        std::error_code rm;
        fs::remove_all(f.path(), rm);
        ++dropped;
      }
    }
    ::rmdir(shard.path().c_str());  // only if it is empty
  }
  ::rmdir(store.c_str());  // likewise: no image shares anything
  if (dropped) spdlog::info("images: dropped {} content store entries no image uses", dropped);
}

Result<ImageRecord> Images::import(const std::string& name, const ChunkSource& source) {
  TRY_VOID(validate_name(name));
  if (name == "host")
    return fail(Code::kInvalidArgument, "\"host\" is the built-in image; choose another name");
  if (auto existing = TRY(store_.get_image(name)); existing)
    return fail(Code::kAlreadyExists,
                "image \"" + name + "\" exists; `space image rm " + name + "` first");
  std::random_device rd;
  fs::path base = dir_ / name;
  fs::path tmp = dir_ / (".import-" + name + "-" + std::to_string(rd()));
  fs::path upload = tmp / "upload", rootfs = tmp / "rootfs";
  std::error_code ec;
  fs::create_directories(upload, ec);
  if (ec) return fail(Code::kInternal, "creating " + tmp.string() + ": " + ec.message());
  ::chmod(tmp.c_str(), 0700);
  // On any way out before the install: the staging directory goes, and with it whatever the
  // content store gained from it.
  struct Cleanup {
    Images* self;
    fs::path p;
    bool armed = true;
    bool shared = false;
    ~Cleanup() {
      if (!armed) return;
      std::error_code e;
      fs::remove_all(p, e);
      if (shared) {
        std::lock_guard lock(self->content_mu_);
        self->collect_content();
      }
    }
  } cleanup{this, tmp};

  const Unpacked unpacked = TRY(unpack_upload(source, upload));
  ImageRecord rec{name, "imported", (base / "rootfs").string(), 0, 0, 0};
  const image::Format format = image::sniff(upload);
  if (format == image::Format::kRootfs) {
    fs::rename(upload, rootfs, ec);
    if (ec) return fail(Code::kInternal, "staging image " + name + ": " + ec.message());
    rec.format = "rootfs";
  } else {
    image::Resolved img = TRY(build_from_layers(upload, rootfs));
    fs::remove_all(upload, ec);  // the blobs: the tree is what is kept
    rec.format = img.format;
    rec.config = img.config.to_json();
    if (!rec.config.is_object()) rec.config = nlohmann::json::object();
    rec.digest = img.manifest_digest.empty() ? img.config_digest : img.manifest_digest;
  }
  TreeStats stats;
  {
    std::lock_guard lock(content_mu_);
    cleanup.shared = true;
    stats = TRY(share_content(rootfs));
  }
  rec.files = stats.files;
  rec.size_bytes = stats.bytes;
  if (auto existing = TRY(store_.get_image(name)); existing)
    return fail(Code::kAlreadyExists,
                "image \"" + name + "\" exists; `space image rm " + name + "` first");
  failpoint("image.after_unpack");  // init() removes the staging directory
  fs::remove_all(base, ec);
  fs::rename(tmp, base, ec);
  if (ec) return fail(Code::kInternal, "installing image " + name + ": " + ec.message());
  cleanup.armed = false;
  failpoint("image.after_install");  // init() removes the directory: it has no record
  rec.created_at = now_s();
  if (auto r = store_.put_image(rec); !r) {
    fs::remove_all(base, ec);
    std::lock_guard lock(content_mu_);
    collect_content();
    return fail(std::move(r.error()).wrap("recording image " + name));
  }
  spdlog::info(
      "imported image {} ({}): {} entries, {} bytes of files ({} uploaded), {} files ({}) shared "
      "with other images",
      name, rec.format, stats.files, stats.bytes, unpacked.bytes, stats.shared,
      format_size(stats.shared_bytes));
  return rec;
}

Result<image::ImageConfig> Images::config(const std::string& name) {
  auto rec = TRY(store_.get_image(name));
  if (!rec)
    return fail(Code::kNotFound, "unknown image \"" + name.substr(0, 80) +
                                     "\"; `space image ls` lists images, `space image import "
                                     "NAME PATH` adds one");
  image::ImageConfig c;
  if (!rec->config.empty())
    c = TRY_CTX(image::ImageConfig::from_json(rec->config), "the config of image " + name);
  // An OCI or docker image that names no WorkingDir runs in "/", as under Docker; a root
  // filesystem keeps SPACE's default (/root).
  if (c.working_dir.empty() &&
      (rec->format == "oci" || rec->format == "docker" || rec->format == "dockerfile"))
    c.working_dir = "/";
  return c;
}

Result<void> Images::remove(const std::string& name) {
  TRY_VOID(validate_name(name));
  if (name == "host") return fail(Code::kInvalidArgument, "the host image cannot be removed");
  auto rec = TRY(store_.get_image(name));
  if (!rec) return fail(Code::kNotFound, "unknown image \"" + name + "\"");
  for (const auto& s : TRY(store_.live_sandboxes()))
    if (s.image == name)
      return fail(Code::kConflict, "image \"" + name + "\" is used by sandbox " + s.id +
                                       "; remove the sandbox first");
  TRY_VOID(store_.delete_image(name));
  failpoint("image.remove_after_record");  // init() removes the directory: it has no record
  std::error_code ec;
  fs::remove_all(dir_ / name, ec);
  std::lock_guard lock(content_mu_);
  collect_content();
  return {};
}

Result<std::vector<ImageRecord>> Images::list() {
  auto all = TRY(store_.images());
  std::erase_if(all, [](const ImageRecord& r) { return r.kind == "cache"; });  // build steps
  return all;
}

// --- VM disks -------------------------------------------------------------------------------

namespace {

constexpr int kVmDiskFormat = 1;  // bump when the disk's layout changes

struct ToolResult {
  int status = -1;     // exit code; -1 if killed by a signal
  std::string output;  // stdout + stderr, the last 8 KiB
};

// Runs a host tool (mke2fs, debugfs, e2fsck) with stdout+stderr captured; never through a
// shell (common/subprocess.h). The deadline only stops a tool that hangs: these finish in
// seconds even on large images.
Result<ToolResult> run_tool(const std::vector<std::string>& argv) {
  RunOptions o;
  o.timeout = std::chrono::minutes(15);
  o.stderr_mode = StderrMode::kMerge;
  o.max_output = 8192;
  o.keep_tail = true;
  auto r = run_program(argv, o);
  if (!r)
    return fail(std::move(r.error()).wrap("running " + argv[0] +
                                          " (e2fsprogs installed? scripts/install-deps.sh)"));
  if (r->timed_out)
    return fail(Code::kTimeout, argv[0] + " " + r->describe_status(o) + ": " + r->out);
  return ToolResult{r->exit_code, std::move(r->out)};
}

Result<void> run_checked(const std::vector<std::string>& argv, const std::string& what) {
  ToolResult r = TRY(run_tool(argv));
  if (r.status != 0) {
    std::string out = r.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return fail(Code::kInternal, what + ": " + argv[0] + " exited with " +
                                     std::to_string(r.status) + (out.empty() ? "" : ": " + out));
  }
  return {};
}

// The agent as the stamp records it: content hash for build_vm, size + mtime for resolve's
// cheap check.
struct AgentId {
  std::string sha256;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

Result<AgentId> agent_stat(const fs::path& agent) {
  struct stat st;
  if (::stat(agent.c_str(), &st) != 0)
    return fail_sys("stat", agent.string() + " (the space-agent binary)");
  if (!S_ISREG(st.st_mode))
    return fail(Code::kUnavailable,
                "the space-agent binary " + agent.string() + " is not a regular file");
  return AgentId{"", static_cast<uint64_t>(st.st_size),
                 st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec};
}

// Bytes and inodes the tree needs on an ext4 disk: allocated blocks (st_blocks) rounded up to
// 4 KiB, plus a block per directory and symlink target over 60 bytes.
struct TreeSize {
  uint64_t bytes = 0;
  uint64_t inodes = 0;
};
Result<TreeSize> measure_tree(const fs::path& root) {
  TreeSize t;
  std::error_code ec;
  auto it = fs::recursive_directory_iterator(root, fs::directory_options::none, ec);
  if (ec) return fail(Code::kInternal, "reading " + root.string() + ": " + ec.message());
  for (auto end = fs::recursive_directory_iterator(); it != end; it.increment(ec)) {
    if (ec) return fail(Code::kInternal, "reading " + root.string() + ": " + ec.message());
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    ++t.inodes;
    uint64_t b = static_cast<uint64_t>(st.st_size);
    if (S_ISREG(st.st_mode)) b = std::min<uint64_t>(b, static_cast<uint64_t>(st.st_blocks) * 512);
    t.bytes += (b + 4095) / 4096 * 4096 + (S_ISDIR(st.st_mode) ? 4096 : 0);
  }
  return t;
}

}  // namespace

std::string Images::vm_image_id(const ImageRecord& rec) {
  return "format " + std::to_string(kVmDiskFormat) + "\nimage " + rec.name + " " + rec.kind + " " +
         std::to_string(static_cast<int64_t>(rec.created_at * 1e6)) + " " +
         std::to_string(rec.files) + " " + std::to_string(rec.size_bytes) + "\n";
}

// Stamp file: vm_image_id(rec), then "agent PATH SIZE MTIME_NS SHA256".
fs::path Images::current_vm_disk(const ImageRecord& rec) {
  fs::path base = fs::path(rec.path).parent_path();
  fs::path disk = base / "vm.ext4";
  std::ifstream f(base / "vm.stamp");
  if (!f) return {};
  std::string stamp((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string id = vm_image_id(rec);
  if (stamp.rfind(id, 0) != 0) return {};
  std::istringstream rest(stamp.substr(id.size()));
  std::string word, agent, sha;
  uint64_t size = 0;
  int64_t mtime = 0;
  if (!(rest >> word >> agent >> size >> mtime >> sha) || word != "agent") return {};
  auto now = agent_stat(agent);
  if (!now || now->size != size || now->mtime_ns != mtime) return {};
  std::error_code ec;
  if (!fs::is_regular_file(disk, ec)) return {};
  return disk;
}

Result<Images::VmDisk> Images::build_vm(const std::string& name, const fs::path& agent,
                                        const Progress& progress) {
  TRY_VOID(validate_name(name));
  auto rec = TRY(store_.get_image(name));
  if (!rec)
    return fail(Code::kNotFound, "unknown image \"" + name +
                                     "\"; `space image ls` lists images, `space image import "
                                     "NAME PATH` adds one");
  if (rec->kind == "host")
    return fail(Code::kInvalidArgument,
                "the host image has no root filesystem of its own (it binds the host's /usr "
                "read-only), so it cannot become a VM disk; import a root filesystem instead "
                "(e.g. `debootstrap bookworm DIR` then `space image import NAME DIR`) and run "
                "`space image build-vm NAME`");
  std::lock_guard lock(vm_mu_);
  fs::path rootfs = rec->path;
  fs::path base = rootfs.parent_path();
  fs::path disk = base / "vm.ext4";
  AgentId aid = TRY_CTX(agent_stat(agent), "the VM disk needs the agent");
  aid.sha256 = TRY(sha256_file(agent));
  std::string stamp_text = vm_image_id(*rec) + "agent " + agent.string() + " " +
                           std::to_string(aid.size) + " " + std::to_string(aid.mtime_ns) + " " +
                           aid.sha256 + "\n";
  std::error_code ec;
  {
    // A disk built for this image with an agent of the same content is current, even if the
    // agent was rebuilt (new mtime) in between: refresh the stamp and reuse it.
    std::ifstream f(base / "vm.stamp");
    std::string old((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::string id = vm_image_id(*rec);
    if (!old.empty()) {
      bool same_image = old.rfind(id, 0) == 0;
      bool same_agent = old.size() > 65 && old.find(" " + aid.sha256 + "\n") != std::string::npos;
      if (same_image && same_agent && fs::is_regular_file(disk, ec)) {
        if (old != stamp_text) TRY_VOID(write_file(base / "vm.stamp", stamp_text, 0644));
        progress("VM disk of " + name + " is up to date");
        return VmDisk{disk, static_cast<uint64_t>(fs::file_size(disk, ec)), true};
      }
    }
  }

  progress("measuring " + name + "'s tree");
  TreeSize t = TRY(measure_tree(rootfs));
  // Slack: ext4 metadata (~5%), the agent, and room for debugfs; at least 64 MiB.
  uint64_t bytes = t.bytes + t.bytes / 8 + aid.size + (64ull << 20);
  bytes = (bytes + (1 << 20) - 1) / (1 << 20) * (1 << 20);
  uint64_t inodes = t.inodes + t.inodes / 4 + 1024;

  fs::path tmp = base / (".vm.ext4.tmp" + std::to_string(::getpid()));
  fs::remove(tmp, ec);
  struct Cleanup {
    fs::path p;
    bool armed = true;
    ~Cleanup() {
      std::error_code e;
      if (armed) fs::remove(p, e);
    }
  } cleanup{tmp};
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) return fail_sys("open", tmp.string());
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
      return fail_sys("ftruncate", tmp.string());
  }
  progress("formatting ext4 (" + std::to_string(bytes >> 20) + " MiB, " + std::to_string(t.inodes) +
           " files) from " + name + "'s tree");
  // -d copies the tree with its owners, modes, xattrs and hard links as they are on disk:
  // imported images keep the archive's ids there (the linux runtime shifts them with an
  // idmapped mount), which is what the VM's real root should see. No journal: the disk is
  // mounted read-only in the guest.
  TRY_VOID(run_checked(
      {"mke2fs", "-q", "-F", "-t", "ext4", "-L", "space-image", "-O", "^has_journal", "-m", "0",
       "-N", std::to_string(inodes), "-E", "root_owner=0:0", "-d", rootfs.string(), tmp.string()},
      "formatting the VM disk"));
  progress("adding the agent at /.space/space-agent");
  // debugfs keeps going after a failed command and exits 0, so its result is checked below.
  fs::path cmds = base / (".vm.debugfs" + std::to_string(::getpid()));
  TRY_VOID(write_file(cmds,
                      "mkdir /.space\n"
                      "set_inode_field /.space mode 040755\n"
                      "set_inode_field /.space uid 0\n"
                      "set_inode_field /.space gid 0\n"
                      "rm /.space/space-agent\n"
                      "write " +
                          agent.string() +
                          " /.space/space-agent\n"
                          "set_inode_field /.space/space-agent mode 0100755\n"
                          "set_inode_field /.space/space-agent uid 0\n"
                          "set_inode_field /.space/space-agent gid 0\n",
                      0600));
  auto wrote = run_tool({"debugfs", "-w", "-f", cmds.string(), tmp.string()});
  fs::remove(cmds, ec);
  if (!wrote) return fail(wrote.error());
  auto st = TRY(run_tool({"debugfs", "-R", "stat /.space/space-agent", tmp.string()}));
  std::string want_size = "Size: " + std::to_string(aid.size);
  if (st.status != 0 || st.output.find("Mode:  0755") == std::string::npos ||
      st.output.find(want_size) == std::string::npos)
    return fail(Code::kInternal, "adding the agent to the VM disk with debugfs failed: " +
                                     wrote->output.substr(0, 2000));
  progress("checking the filesystem (e2fsck -fn)");
  TRY_VOID(run_checked({"e2fsck", "-fn", tmp.string()}, "checking the VM disk"));
  if (::chmod(tmp.c_str(), 0644) != 0) return fail_sys("chmod", tmp.string());
  // Stamp last: a crash between the rename and the stamp leaves a disk that is rebuilt.
  fs::remove(base / "vm.stamp", ec);
  fs::rename(tmp, disk, ec);
  if (ec) return fail(Code::kInternal, "installing " + disk.string() + ": " + ec.message());
  cleanup.armed = false;
  TRY_VOID(write_file(base / "vm.stamp", stamp_text, 0644));
  progress("built " + disk.string());
  spdlog::info("built the VM disk of image {}: {} MiB", name, bytes >> 20);
  return VmDisk{disk, bytes, false};
}

}  // namespace space::daemon
