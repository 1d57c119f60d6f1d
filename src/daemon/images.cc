// Image handling: the host skeleton and tar imports (libarchive, with the secure extraction
// flags: archives are untrusted input).
#include "daemon/images.h"

#include "daemon/archive_names.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <regex>

#include <spdlog/spdlog.h>

namespace space::daemon {
namespace fs = std::filesystem;
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<void> write_file(const fs::path& p, std::string_view content, mode_t mode) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return fail_sys("open", p.string());
  UniqueFd g(fd);
  if (::write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size()))
    return fail_sys("write", p.string());
  if (::fchmod(fd, mode) != 0) return fail_sys("fchmod", p.string());
  return {};
}

// Host directories bound read-only into the host image, when they exist.
const char* kHostBinds[] = {"/usr", "/etc/ssl", "/etc/alternatives"};

}  // namespace

Result<void> Images::validate_name(const std::string& name) {
  static const std::regex re("^[a-z0-9][a-z0-9._-]{0,63}$");
  if (!std::regex_match(name, re))
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
  for (const char* d : {"usr", "etc", "etc/ssl", "etc/alternatives", "root", "home", "tmp",
                        "var", "var/tmp", "var/lib", "var/cache", "var/log", "run", "proc", "dev",
                        "sys", "mnt", "opt", "srv", "workspace"}) {
    fs::create_directories(root / d, ec);
    if (ec) return fail(Code::kInternal, "creating skeleton dir " + std::string(d) + ": " +
                                             ec.message());
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
  for (const char* f : {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/os-release",
                        "/etc/debian_version", "/etc/localtime", "/etc/mime.types",
                        "/etc/profile", "/etc/bash.bashrc", "/etc/shells", "/etc/login.defs"}) {
    fs::path src(f);
    if (!fs::exists(src, ec)) continue;
    fs::copy(src, root / src.relative_path(),
             fs::copy_options::overwrite_existing | fs::copy_options::copy_symlinks, ec);
  }
  if (fs::exists("/etc/ld.so.conf.d", ec))
    fs::copy("/etc/ld.so.conf.d", root / "etc/ld.so.conf.d",
             fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
  if (fs::exists("/etc/python3.11", ec))
    fs::copy("/etc/python3.11", root / "etc/python3.11",
             fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
  return {};
}

Result<void> Images::init() {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return fail(Code::kInternal, "creating " + dir_.string() + ": " + ec.message());
  // Versioned so a newer spaced can change the skeleton without touching one that running
  // sandboxes still use as their lower layer.
  fs::path root = dir_ / "host" / "rootfs.v1";
  if (!fs::exists(root / "etc/passwd", ec)) {
    fs::path tmp = dir_ / "host" / ("rootfs.v1.tmp" + std::to_string(::getpid()));
    fs::remove_all(tmp, ec);
    TRY_VOID_CTX(build_host_skeleton(tmp), "building the host image skeleton");
    fs::remove_all(root, ec);
    fs::rename(tmp, root, ec);
    if (ec) return fail(Code::kInternal, "installing the host skeleton: " + ec.message());
  }
  ImageRecord r{"host", "host", root.string(), now_s(), 0, 0};
  return store_.put_image(r);
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
  }
  return img;
}

Result<ImageRecord> Images::import(const std::string& name, const ChunkSource& source) {
  TRY_VOID(validate_name(name));
  if (name == "host")
    return fail(Code::kInvalidArgument, "\"host\" is the built-in image; choose another name");
  if (auto existing = TRY(store_.get_image(name)); existing)
    return fail(Code::kAlreadyExists, "image \"" + name + "\" exists; `space image rm " + name +
                                          "` first");
  std::random_device rd;
  fs::path base = dir_ / name;
  fs::path tmp = dir_ / (".import-" + name + "-" + std::to_string(rd()));
  std::error_code ec;
  fs::create_directories(tmp / "rootfs", ec);
  if (ec) return fail(Code::kInternal, "creating " + tmp.string() + ": " + ec.message());
  struct Cleanup {
    fs::path p;
    bool armed = true;
    ~Cleanup() {
      std::error_code e;
      if (armed) fs::remove_all(p, e);
    }
  } cleanup{tmp};

  auto upload = TRY(UploadArchive::open(source, "image archive"));
  archive* in = upload->get();
  archive* out = archive_write_disk_new();
  archive_write_disk_set_options(
      out, ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
               ARCHIVE_EXTRACT_PERM |
               ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_XATTR);
  struct FreeOut {
    archive* out;
    ~FreeOut() { archive_write_free(out); }
  } free_out{out};
  uint64_t files = 0, bytes = 0;
  for (;;) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(in, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return fail(upload->error());
    auto type = archive_entry_filetype(e);
    if (type == AE_IFCHR || type == AE_IFBLK) continue;  // no device nodes in images
    // Names are cleaned here (no "..", leading "/" dropped) and re-rooted under the staging
    // directory; libarchive's SECURE_SYMLINKS then refuses writes through symlinks.
    std::string rel = TRY(clean_archive_name(archive_entry_pathname(e)));
    if (rel.empty()) continue;  // the root itself
    std::string path = (tmp / "rootfs" / rel).string();
    archive_entry_set_pathname(e, path.c_str());
    if (const char* hl = archive_entry_hardlink(e)) {
      std::string h = (tmp / "rootfs" / TRY(clean_archive_name(hl))).string();
      archive_entry_set_hardlink(e, h.c_str());
    }
    if (archive_write_header(out, e) < ARCHIVE_WARN)
      return fail(Code::kInvalidArgument, std::string("extracting \"") +
                                              archive_entry_pathname(e) +
                                              "\": " + archive_error_string(out));
    const void* blk;
    size_t sz;
    la_int64_t off;
    while ((r = archive_read_data_block(in, &blk, &sz, &off)) == ARCHIVE_OK) {
      if (archive_write_data_block(out, blk, sz, off) < ARCHIVE_WARN)
        return fail(Code::kInternal, std::string("writing image data: ") +
                                         archive_error_string(out));
      bytes += sz;
    }
    if (r != ARCHIVE_EOF) return fail(upload->error());
    ++files;
  }
  if (archive_write_finish_entry(out) < ARCHIVE_WARN || archive_write_close(out) != ARCHIVE_OK)
    return fail(Code::kInternal, std::string("finishing extraction: ") +
                                     archive_error_string(out));
  if (files == 0) return fail(Code::kInvalidArgument, "the image archive is empty");
  if (auto existing = TRY(store_.get_image(name)); existing)
    return fail(Code::kAlreadyExists, "image \"" + name + "\" exists; `space image rm " + name +
                                          "` first");
  fs::remove_all(base, ec);
  fs::rename(tmp, base, ec);
  if (ec) return fail(Code::kInternal, "installing image " + name + ": " + ec.message());
  cleanup.armed = false;
  ImageRecord rec{name, "imported", (base / "rootfs").string(), now_s(), bytes, files};
  TRY_VOID(store_.put_image(rec));
  spdlog::info("imported image {}: {} entries, {} bytes", name, files, bytes);
  return rec;
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
  std::error_code ec;
  fs::remove_all(dir_ / name, ec);
  return {};
}

Result<std::vector<ImageRecord>> Images::list() { return store_.images(); }

}  // namespace space::daemon
