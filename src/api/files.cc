// Handlers for files inside a sandbox. GET streams a regular file's bytes or a directory as a
// tar archive (the X-Space-File-Type header says which); PUT writes a file or extracts a tar
// into a directory; DELETE removes. Bodies stream in both directions without a size limit: the
// sandbox's disk quota bounds uploads. Paths are resolved inside the sandbox by the daemon.
// A transfer made with a token stops once the token is revoked or expires (StreamAuth, checked
// before each chunk): a download is cut short, an upload fails with 401.
#include <boost/beast/core/string.hpp>
#include <cctype>
#include <cstdio>

#include "api/handlers.h"

namespace space::api::handlers {
namespace {

Result<std::string> path_param(const Exchange& ex) {
  auto it = ex.target().query.find("path");
  if (it == ex.target().query.end()) {
    return fail(Code::kInvalidArgument, "missing query parameter path, e.g. ?path=/etc/hostname");
  }
  TRY_VOID(check_sandbox_path(it->second));
  return it->second;
}

std::string octal_mode(uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

// The Content-Type's media type, lower-case, without parameters.
std::string media_type(std::string_view content_type) {
  std::string out(content_type.substr(0, content_type.find(';')));
  while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

daemon::ChunkSource guarded_body(Exchange& ex, StreamAuth& auth, std::optional<Error>& refused) {
  return [source = ex.body_source(), &auth, &refused](std::string& out) -> Result<void> {
    if (auto valid = auth.check(); !valid) {
      refused = valid.error();
      return valid;
    }
    return source(out);
  };
}

Result<void> get_file(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  std::string path = TRY(path_param(ex));
  bool stat_only = TRY(parse_bool_param(ex.target(), "stat", false));
  bool list = TRY(parse_bool_param(ex.target(), "list", false));
  if (list && stat_only) return fail(Code::kInvalidArgument, "use either stat=true or list=true");
  if (list) {
    auto entries = TRY(ctx.service.list_dir(id, path));
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries) {
      nlohmann::json j = {{"name", e.name},
                          {"type", e.stat.type},
                          {"mode", e.stat.mode},
                          {"size", e.stat.size},
                          {"mtime", e.mtime}};
      if (e.stat.type == "symlink") j["target"] = e.stat.target;
      out.push_back(std::move(j));
    }
    return ex.respond_json(http::status::ok, {{"path", path}, {"entries", std::move(out)}});
  }
  daemon::FileStat st = TRY(ctx.service.stat(id, path));
  if (stat_only) {
    nlohmann::json j = {{"path", path}, {"type", st.type}, {"mode", st.mode}, {"size", st.size}};
    if (st.type == "symlink") j["target"] = st.target;
    return ex.respond_json(http::status::ok, j);
  }

  const bool is_file = st.type == "file";
  if (!is_file && st.type != "dir") {
    std::string what = st.type == "symlink" ? "a symlink to " + st.target : "not a regular file";
    return fail(Code::kInvalidArgument, path + " is " + what +
                                            "; only regular files and directories can be "
                                            "downloaded (?stat=true describes it)");
  }
  Headers headers = {{"X-Space-File-Type", is_file ? "file" : "dir"}};
  if (is_file) headers.emplace_back("X-Space-File-Mode", octal_mode(st.mode));
  const char* content_type = is_file ? "application/octet-stream" : "application/x-tar";

  // Headers go out with the first chunk, so an error before any data (the file vanished, the
  // sandbox died) is still a proper JSON error response.
  bool started = false;
  bool write_failed = false;
  StreamAuth auth(ctx.principal, ctx.tokens);
  std::optional<Error> refused;  // the caller's token went bad during the transfer
  daemon::ChunkSink sink = [&](std::string_view chunk) {
    if (auto valid = auth.check(); !valid) {
      refused = std::move(valid.error());
      return false;
    }
    if (!started) {
      if (!ex.begin_chunked(http::status::ok, content_type, headers)) {
        write_failed = true;
        return false;
      }
      started = true;
    }
    if (!ex.write_chunk(chunk)) {
      write_failed = true;
      return false;
    }
    return true;
  };
  auto r = is_file ? ctx.service.read_file(id, path, sink) : ctx.service.read_tar(id, path, sink);
  if (refused) {
    // Before the first chunk this is a plain 401; after it, all we can do is cut the body.
    if (!started) return fail(std::move(*refused).wrap("downloading " + path + " from " + id));
    ex.mark_broken();
    return {};
  }
  if (!r) return fail(std::move(r.error()).wrap("reading " + path + " in " + id));
  if (write_failed) {
    ex.mark_broken();
    return {};
  }
  if (!started) TRY_VOID(ex.begin_chunked(http::status::ok, content_type, headers));
  return ex.end_chunked();
}

Result<void> put_file(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  std::string path = TRY(path_param(ex));
  TRY_VOID(check_utf8(ex.header(http::field::content_type), "header Content-Type"));
  std::string type = media_type(ex.header(http::field::content_type));
  StreamAuth auth(ctx.principal, ctx.tokens);
  std::optional<Error> refused;
  Result<void> written;
  if (type.empty() || type == "application/octet-stream") {
    uint32_t mode = TRY(parse_mode_param(ex.target(), "mode", 0644));
    bool parents = TRY(parse_bool_param(ex.target(), "parents", false));
    written = ctx.service.write_file(id, path, mode, guarded_body(ex, auth, refused), parents);
  } else if (type == "application/x-tar") {
    written = ctx.service.write_tar(id, path, guarded_body(ex, auth, refused));
  } else {
    return fail(Code::kInvalidArgument,
                "Content-Type must be application/octet-stream (a file) or application/x-tar "
                "(a directory tree to extract), got " +
                    type);
  }
  // A refusal is reported as itself (401), whatever the service made of the source's error.
  if (refused) return fail(std::move(*refused).wrap("uploading " + path + " to " + id));
  if (!written) return fail(std::move(written.error()));
  return ex.respond_no_content();
}

Result<void> delete_file(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  std::string path = TRY(path_param(ex));
  bool recursive = TRY(parse_bool_param(ex.target(), "recursive", false));
  TRY_VOID(ctx.service.remove(id, path, recursive));
  return ex.respond_no_content();
}

}  // namespace space::api::handlers
