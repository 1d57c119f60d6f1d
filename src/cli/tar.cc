// libarchive-backed tar writing and (untrusted) extraction; see tar.h.
#include "cli/tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/output.h"
#include "common/fd.h"

namespace space::cli {
namespace fs = std::filesystem;
namespace {

struct WriteFree {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct ReadFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
using WriteArchive = std::unique_ptr<archive, WriteFree>;
using ReadArchive = std::unique_ptr<archive, ReadFree>;
using Entry = std::unique_ptr<archive_entry, EntryFree>;

std::string archive_message(archive* a) {
  const char* s = archive_error_string(a);
  return s != nullptr ? s : "unknown libarchive error";
}

struct WriteContext {
  const TarSink* sink;
  std::optional<Error> error;
};

la_ssize_t write_callback(archive* a, void* ctx, const void* buf, size_t n) {
  auto* c = static_cast<WriteContext*>(ctx);
  auto r = (*c->sink)(std::string_view(static_cast<const char*>(buf), n));
  if (!r) {
    c->error = std::move(r.error());
    archive_set_error(a, EIO, "the upload failed");
    return -1;
  }
  return static_cast<la_ssize_t>(n);
}

struct ReadContext {
  const TarSource* source;
  std::vector<char> buf = std::vector<char>(64 * 1024);
  std::optional<Error> error;
};

la_ssize_t read_callback(archive* a, void* ctx, const void** out) {
  auto* c = static_cast<ReadContext*>(ctx);
  auto r = (*c->source)(c->buf.data(), c->buf.size());
  if (!r) {
    c->error = std::move(r.error());
    archive_set_error(a, EIO, "the download failed");
    return -1;
  }
  *out = c->buf.data();
  return static_cast<la_ssize_t>(*r);
}

bool has_dotdot(std::string_view path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (path.substr(start, slash - start) == "..") return true;
    start = slash + 1;
  }
  return false;
}

Result<void> write_entry(archive* a, const fs::path& path, const std::string& name,
                         const TarWriteOptions& options, WriteContext& ctx) {
  auto fail_archive = [&](std::string_view what) {
    if (ctx.error) return fail(std::move(*ctx.error));
    return fail(Code::kInternal,
                std::string(what) + " " + path.native() + ": " + archive_message(a));
  };
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return fail_sys("lstat", "\"" + path.native() + "\"");
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
    write_all(STDERR_FILENO, "space: skipping " + escape_text(path.native()) +
                                 " (only files, directories and symlinks are copied)\n");
    return {};
  }
  Entry e(archive_entry_new());
  archive_entry_copy_stat(e.get(), &st);
  archive_entry_set_pathname(e.get(), name.c_str());
  if (!options.keep_owners) {
    archive_entry_set_uid(e.get(), 0);
    archive_entry_set_gid(e.get(), 0);
  }
  archive_entry_set_nlink(e.get(), 1);
  UniqueFd fd;
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    fs::path target = fs::read_symlink(path, ec);
    if (ec) return fail(Code::kInternal, "readlink " + path.native() + ": " + ec.message());
    archive_entry_set_symlink(e.get(), target.c_str());
    archive_entry_set_size(e.get(), 0);
  } else if (S_ISREG(st.st_mode)) {
    fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) return fail_sys("open", "\"" + path.native() + "\"");
  } else {
    archive_entry_set_size(e.get(), 0);
  }
  if (archive_write_header(a, e.get()) < ARCHIVE_WARN) return fail_archive("archiving");
  if (fd) {
    char buf[64 * 1024];
    for (;;) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail_sys("read", "\"" + path.native() + "\"");
      }
      if (n == 0) break;
      if (archive_write_data(a, buf, static_cast<size_t>(n)) < 0) return fail_archive("archiving");
    }
  }
  return {};
}

}  // namespace

Result<void> write_tar(const fs::path& dir, const TarSink& sink, TarWriteOptions options) {
  WriteArchive a(archive_write_new());
  if (!a) return fail(Code::kInternal, "archive_write_new failed");
  archive_write_set_format_pax_restricted(a.get());
  archive_write_set_bytes_in_last_block(a.get(), 1);
  WriteContext ctx{&sink, std::nullopt};
  if (archive_write_open(a.get(), &ctx, nullptr, write_callback, nullptr) != ARCHIVE_OK) {
    return fail(Code::kInternal, "starting the archive: " + archive_message(a.get()));
  }
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return fail(Code::kNotFound, "reading directory " + dir.native() + ": " + ec.message());
  // Directories left out for now but looked inside (kSkipButLookInside), outermost first, with
  // their depth: written before the first entry under them that is included.
  struct Pending {
    int depth;
    fs::path path;
    std::string name;
  };
  std::vector<Pending> pending;
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::string name = it->path().lexically_relative(dir).generic_string();
    if (options.filter) {
      while (!pending.empty() && pending.back().depth >= it.depth()) pending.pop_back();
      std::error_code type_ec;
      bool is_dir = it->symlink_status(type_ec).type() == fs::file_type::directory;
      TarFilter what = options.filter(name, is_dir);
      if (what == TarFilter::kSkip || (what == TarFilter::kSkipButLookInside && !is_dir)) {
        if (is_dir) it.disable_recursion_pending();
        continue;
      }
      if (what == TarFilter::kSkipButLookInside) {
        pending.push_back({it.depth(), it->path(), name});
        continue;
      }
      for (const auto& p : pending) TRY_VOID(write_entry(a.get(), p.path, p.name, options, ctx));
      pending.clear();
    }
    TRY_VOID(write_entry(a.get(), it->path(), name, options, ctx));
  }
  if (ec) return fail(Code::kInternal, "walking " + dir.native() + ": " + ec.message());
  for (const auto& [name, path] : options.extra_files) {
    TRY_VOID(write_entry(a.get(), path, name, options, ctx));
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    if (ctx.error) return fail(std::move(*ctx.error));
    return fail(Code::kInternal, "finishing the archive: " + archive_message(a.get()));
  }
  return {};
}

Result<uint64_t> extract_tar(const fs::path& dest, const TarSource& source) {
  // Extraction runs with the destination as the working directory so that entry names stay
  // relative and ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS can refuse every absolute one.
  UniqueFd old_cwd(::open(".", O_PATH | O_DIRECTORY | O_CLOEXEC));
  // O_NOFOLLOW: the destination itself must not be a symlink (one a sandbox planted earlier
  // would redirect the whole extraction).
  UniqueFd dest_fd(::open(dest.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!dest_fd && (errno == ELOOP || fs::is_symlink(dest)))
    return fail(Code::kInvalidArgument,
                "\"" + dest.native() +
                    "\" is a symlink; refusing to "
                    "extract through it (remove it or choose another destination)");
  if (!dest_fd) return fail_sys("open", "\"" + dest.native() + "\"");
  if (::fchdir(dest_fd.get()) != 0) return fail_sys("fchdir", "\"" + dest.native() + "\"");
  struct RestoreCwd {
    int fd;
    ~RestoreCwd() {
      if (fd >= 0) (void)!::fchdir(fd);
    }
  } restore{old_cwd.get()};

  ReadArchive in(archive_read_new());
  archive_read_support_filter_all(in.get());
  archive_read_support_format_tar(in.get());
  archive_read_support_format_gnutar(in.get());
  ReadContext ctx{&source};
  if (archive_read_open(in.get(), &ctx, nullptr, read_callback, nullptr) != ARCHIVE_OK) {
    if (ctx.error) return fail(std::move(*ctx.error));
    return fail(Code::kProtocol, "reading the archive: " + archive_message(in.get()));
  }
  WriteArchive out(archive_write_disk_new());
  archive_write_disk_set_options(
      out.get(), ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_UNLINK |
                     ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                     ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS);

  uint64_t entries = 0;
  for (;;) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(in.get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      if (ctx.error) return fail(std::move(*ctx.error));
      return fail(Code::kProtocol, "reading the archive: " + archive_message(in.get()));
    }
    const char* name = archive_entry_pathname(e);
    std::string shown = name != nullptr ? name : "?";
    auto type = archive_entry_filetype(e);
    const char* hardlink = archive_entry_hardlink(e);
    if (hardlink != nullptr && (hardlink[0] == '/' || has_dotdot(hardlink))) {
      return fail(Code::kProtocol, "refusing archive entry " + shown + ": hard link to " +
                                       hardlink + " points outside the destination");
    }
    if (hardlink == nullptr && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      write_all(STDERR_FILENO, "space: skipping " + escape_text(shown) +
                                   " (only files, directories and symlinks are copied)\n");
      continue;
    }
    // Never recreate setuid/setgid/sticky bits from an untrusted archive on the host.
    archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
    if (archive_write_header(out.get(), e) < ARCHIVE_WARN) {
      return fail(Code::kProtocol,
                  "refusing archive entry " + shown + ": " + archive_message(out.get()));
    }
    if (archive_entry_size(e) > 0 && hardlink == nullptr) {
      const void* block;
      size_t size;
      la_int64_t offset;
      for (;;) {
        r = archive_read_data_block(in.get(), &block, &size, &offset);
        if (r == ARCHIVE_EOF) break;
        if (r < ARCHIVE_WARN) {
          if (ctx.error) return fail(std::move(*ctx.error));
          return fail(Code::kProtocol,
                      "reading " + shown + " from the archive: " + archive_message(in.get()));
        }
        if (archive_write_data_block(out.get(), block, size, offset) < ARCHIVE_WARN) {
          return fail(Code::kInternal, "writing " + shown + ": " + archive_message(out.get()));
        }
      }
    }
    if (archive_write_finish_entry(out.get()) < ARCHIVE_WARN) {
      return fail(Code::kInternal, "writing " + shown + ": " + archive_message(out.get()));
    }
    ++entries;
  }
  if (archive_write_close(out.get()) < ARCHIVE_WARN) {
    return fail(Code::kInternal, "finishing extraction: " + archive_message(out.get()));
  }
  return entries;
}

}  // namespace space::cli
