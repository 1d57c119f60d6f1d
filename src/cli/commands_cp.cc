// `space cp SRC DST`: copies a file or a directory tree between the host and a sandbox; the
// sandbox side is written ID:/path. Files travel as raw bytes, directories as tar archives
// (built and extracted with libarchive, see tar.h: what comes out of a sandbox is untrusted).
// Like cp and docker cp: copying onto an existing directory puts SRC inside it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/tar.h"

namespace space::cli {
namespace fs = std::filesystem;
namespace {

using nlohmann::json;

std::string files_target(const Endpoint& e, std::string_view extra = "") {
  return sandbox_target(e.id, "/files?path=" + url_encode(e.path) + std::string(extra));
}

// The last path component ("" for "/").
std::string base_name(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return base == "/" ? "" : std::string(base);
}

std::string join(const std::string& dir, const std::string& name) {
  if (name.empty()) return dir;
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// Remote stat: the FileStat, or nullopt if the path does not exist (in a sandbox that does).
Result<std::optional<json>> remote_stat(const Client& c, const Endpoint& e) {
  TRY(c.call("GET", sandbox_target(e.id)));  // an unknown sandbox is an error, not "no file"
  auto r = c.call("GET", files_target(e, "&stat=true"));
  if (!r) {
    if (r.error().code() == Code::kNotFound) return std::optional<json>();
    return fail(std::move(r.error()));
  }
  return std::optional<json>(std::move(*r));
}

Result<void> finish_upload(Connection& conn) {
  TRY_VOID(conn.end_chunks());
  int status = TRY(conn.read_head());
  std::string body = TRY(conn.read_body(1 << 20));
  if (status >= 400) return fail(api_error(status, body));
  return {};
}

Result<int> upload(const Client& c, const std::string& local, Endpoint dst) {
  struct stat st;
  if (::stat(local.c_str(), &st) != 0) return fail_sys("stat", "\"" + local + "\"");
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return fail(Code::kInvalidArgument, local + " is neither a regular file nor a directory");
  }
  // Onto an existing directory (or a path ending in '/'): copy into it.
  auto existing = TRY(remote_stat(c, dst));
  bool into = (existing && existing->value("type", "") == "dir") || dst.path.back() == '/';
  if (into) dst.path = join(dst.path, base_name(local));

  Connection conn = TRY(c.connect());
  if (S_ISREG(st.st_mode)) {
    char mode[16];
    std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
    UniqueFd fd(::open(local.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return fail_sys("open", "\"" + local + "\"");
    TRY_VOID(conn.start_chunked("PUT", files_target(dst, std::string("&mode=") + mode),
                                "application/octet-stream"));
    char buf[64 * 1024];
    for (;;) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail_sys("read", "\"" + local + "\"");
      if (n == 0) break;
      TRY_VOID(conn.write_chunk(std::string_view(buf, static_cast<size_t>(n))));
    }
  } else {
    TRY_VOID(conn.start_chunked("PUT", files_target(dst), "application/x-tar"));
    TRY_VOID(write_tar(local, [&](std::string_view bytes) { return conn.write_chunk(bytes); }));
  }
  TRY_VOID(finish_upload(conn));
  return 0;
}

Result<int> download(const Client& c, const Endpoint& src, const std::string& local) {
  Connection conn = TRY(c.connect());
  TRY_VOID(conn.send("GET", files_target(src), ""));
  int status = TRY(conn.read_head());
  if (status != 200) {
    std::string body = conn.read_body(1 << 20).value_or("");
    return fail(api_error(status, body));
  }
  std::string type = conn.header("X-Space-File-Type");
  std::error_code ec;
  bool local_is_dir = fs::is_directory(local, ec);
  std::string target = local;
  if (local_is_dir) target = join(local, base_name(src.path));

  if (type == "file") {
    unsigned mode = 0644;
    std::string m = conn.header("X-Space-File-Mode");
    if (!m.empty()) mode = static_cast<unsigned>(std::strtoul(m.c_str(), nullptr, 8)) & 0777;
    // O_NOFOLLOW: a symlink at the target (say, one an earlier copy brought out of a sandbox)
    // must not redirect the write to somewhere else on the host.
    UniqueFd fd(
        ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode));
    if (!fd && errno == ELOOP)
      return fail(Code::kInvalidArgument,
                  "\"" + target +
                      "\" is a symlink; refusing to write "
                      "through it (remove it or choose another destination)");
    if (!fd) return fail_sys("open", "\"" + target + "\"");
    char buf[64 * 1024];
    for (;;) {
      size_t n = TRY(conn.read_some(buf, sizeof buf));
      if (n == 0) break;
      if (!write_all(fd.get(), std::string_view(buf, n))) {
        return fail_sys("write", "\"" + target + "\"");
      }
    }
    return 0;
  }
  if (type == "dir") {
    if (::mkdir(target.c_str(), 0755) != 0 && errno != EEXIST) {
      return fail_sys("mkdir", "\"" + target + "\"");
    }
    TRY(extract_tar(target, [&](char* out, size_t n) { return conn.read_some(out, n); }));
    return 0;
  }
  return fail(Code::kProtocol, "the daemon sent neither a file nor a directory for " + src.path);
}

}  // namespace

Result<Endpoint> parse_endpoint(std::string_view text) {
  if (text.empty()) return fail(Code::kInvalidArgument, "empty path in `space cp`");
  size_t colon = text.find(':');
  if (colon != std::string_view::npos && colon > 0) {
    std::string_view id = text.substr(0, colon);
    bool is_id = std::isalnum(static_cast<unsigned char>(id[0]));
    for (char ch : id) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' && ch != '.') {
        is_id = false;
      }
    }
    if (is_id) {
      std::string path(text.substr(colon + 1));
      if (path.empty() || path[0] != '/') {
        return fail(Code::kInvalidArgument, "sandbox paths must be absolute: " + std::string(id) +
                                                ":/path, not \"" + std::string(text) +
                                                "\" (use ./" + std::string(text) +
                                                " for a local file whose name contains ':')");
      }
      return Endpoint{true, std::string(id), path};
    }
  }
  return Endpoint{false, "", std::string(text)};
}

Result<int> cmd_cp(const Args& a, const Client& c) {
  Endpoint src = TRY(parse_endpoint(a.src));
  Endpoint dst = TRY(parse_endpoint(a.dst));
  if (src.remote && dst.remote) {
    return fail(Code::kInvalidArgument,
                "both sides are in a sandbox; copy to the host first, then into the other one");
  }
  if (!src.remote && !dst.remote) {
    return fail(Code::kInvalidArgument,
                "neither side is in a sandbox; write one side as ID:/path (`space ls` lists ids)");
  }
  if (dst.remote) return upload(c, src.path, dst);
  return download(c, src, dst.path);
}

}  // namespace space::cli
