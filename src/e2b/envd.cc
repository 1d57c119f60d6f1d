// envd, the sandbox side of E2B's protocol on port 49983: routes to the Connect services
// (envd_process.cc, envd_filesystem.cc) and the REST endpoints (envd_files.cc), and holds what
// they share: who a call runs as (envd_user), paths against that user's home, and running a
// helper command (mkdir, mv) to completion.
//
// The user rule (docs/e2b.md): E2B's SDKs name the user in "Authorization: Basic
// base64(name:)" (REST /files: ?username=); without one E2B's default is "user" (uid 1000,
// home /home/user), which the host image has (daemon/images.cc) and other images may lack. So:
//   - "root" runs as root, home /root;
//   - a name in the sandbox's /etc/passwd runs as that user (the agent resolves it), home from
//     its entry;
//   - "user" missing from /etc/passwd runs as root with HOME=/home/user, USER=user and cwd
//     /home/user (made on first use), so that E2B's default relative paths and `pwd` match;
//   - any other name is an invalid_argument error.
// Files are written, and directories made and moved, as that user (envd_write, envd_run: the
// user's ownership and the sandbox's permissions, as E2B's envd does); reads, listings and
// removals are the daemon's, as root.
#include <algorithm>
#include <mutex>
#include <set>

#include "common/base64.h"
#include "e2b/connect.h"
#include "e2b/handlers.h"

namespace space::e2b {

namespace {

constexpr std::string_view kDefaultUser = "user";

Result<EnvdUser> resolve_user(Call& call, const std::string& name);
constexpr size_t kMaxPasswd = 1 << 20;

std::mutex g_homes_mu;
std::set<std::string> g_homes_made;  // sandbox ids whose /home/user exists

Result<void> envs(Call& call) {
  if (call.ex.method() != http::verb::get) return fail(Code::kInvalidArgument, "/envs takes GET");
  auto info = TRY(call.service.inspect(call.sandbox_id));
  nlohmann::json out = nlohmann::json::object();
  for (auto& [k, v] : info.env) out[k] = v;
  return call.ex.respond_json(http::status::ok, out);
}

// A Connect RPC: the handler's error (if it has not answered yet) in Connect's shape.
Result<void> rpc(Call& call, Result<void> (*handler)(Call&, std::string_view),
                 std::string_view method) {
  auto r = handler(call, method);
  if (r || call.ex.responded()) return r;
  return connect::respond_error(call.ex, connect::kind_of(call.ex), r.error());
}

}  // namespace

std::string envd_username(const api::Exchange& ex) {
  std::string_view auth = ex.header(http::field::authorization);
  if (auth.size() > 6 && (auth.substr(0, 6) == "Basic " || auth.substr(0, 6) == "basic ")) {
    if (auto dec = base64_decode(auth.substr(6))) {
      std::string name = dec->substr(0, dec->find(':'));
      if (!name.empty()) return name;
    }
  }
  return std::string(kDefaultUser);
}

Result<EnvdUser> envd_user(Call& call, const std::string& name) {
  EnvdUser u = TRY(resolve_user(call, name));
  // What E2B's sandboxes tell their processes (E2B_SANDBOX=true is in the sandbox's own
  // environment, set by the control plane's create).
  u.env.push_back("E2B_SANDBOX_ID=" + call.sandbox_id);
  return u;
}

namespace {

Result<EnvdUser> resolve_user(Call& call, const std::string& name) {
  EnvdUser u;
  u.name = name;
  if (name == "root") {
    u.home = "/root";
    u.env = {"HOME=/root", "USER=root"};
    return u;
  }
  if (name.empty() || name.size() > 64 || name.find_first_of(":/\n\0", 0, 4) != std::string::npos)
    return fail(Code::kInvalidArgument, "user \"" + name + "\" is not a user name");
  std::string passwd;
  auto r = call.service.read_file(call.sandbox_id, "/etc/passwd", [&](std::string_view c) {
    passwd.append(c);
    return passwd.size() <= kMaxPasswd;
  });
  if (!r && r.error().code() != Code::kNotFound) return fail(std::move(r.error()));
  size_t pos = 0;
  while (r && pos < passwd.size()) {
    size_t nl = passwd.find('\n', pos);
    if (nl == std::string::npos) nl = passwd.size();
    std::string_view line(passwd.data() + pos, nl - pos);
    pos = nl + 1;
    std::vector<std::string_view> f;
    size_t start = 0;
    for (size_t i = 0; i <= line.size(); ++i)
      if (i == line.size() || line[i] == ':') {
        f.push_back(line.substr(start, i - start));
        start = i + 1;
      }
    if (f.size() < 6 || f[0] != name) continue;
    u.exec_user = name;
    u.home = f[5].empty() ? "/" : std::string(f[5]);
    u.env = {"HOME=" + u.home, "USER=" + name};
    return u;
  }
  if (name != kDefaultUser)
    return fail(Code::kInvalidArgument,
                "user \"" + name +
                    "\" does not exist in the sandbox (its /etc/passwd); use \"root\", \"user\" "
                    "or an account of the image");
  u.home = "/home/user";
  u.env = {"HOME=/home/user", "USER=user"};
  {
    std::lock_guard l(g_homes_mu);
    if (g_homes_made.count(call.sandbox_id)) return u;
  }
  auto st = call.service.stat(call.sandbox_id, u.home);
  if (!st) TRY_VOID_CTX(envd_run(call, {"mkdir", "-p", u.home}), "making /home/user");
  std::lock_guard l(g_homes_mu);
  if (g_homes_made.size() > 4096) g_homes_made.clear();
  g_homes_made.insert(call.sandbox_id);
  return u;
}

}  // namespace

std::string envd_path(const EnvdUser& user, std::string_view path) {
  std::string full =
      path.empty() || path[0] != '/' ? user.home + "/" + std::string(path) : std::string(path);
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= full.size(); ++i) {
    if (i < full.size() && full[i] != '/') continue;
    std::string part = full.substr(start, i - start);
    start = i + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(std::move(part));
  }
  std::string out;
  for (auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

namespace {

// Reads a helper command's events to its exit: ok for exit 0; else its stderr (or `what` and
// the exit code) as the error, permission_denied when it says "Permission denied".
Result<void> finish(daemon::ExecSession& session, const std::string& what) {
  using Kind = daemon::ExecSession::Event::Kind;
  std::string err;
  for (;;) {
    auto ev = TRY(session.next());
    if (ev.kind == Kind::kStderr && err.size() < 4096) err += ev.data;
    if (ev.kind == Kind::kStdout || ev.kind == Kind::kStderr) session.consumed(ev.data.size());
    if (ev.kind != Kind::kExit) continue;
    if (!ev.exit.error.empty()) return fail(Code::kInternal, ev.exit.error);
    if (ev.exit.exit_code == 0) return {};
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    if (err.empty()) err = what + " failed (exit " + std::to_string(ev.exit.shell_code()) + ")";
    return fail(err.find("Permission denied") != std::string::npos ? Code::kPermissionDenied
                                                                   : Code::kInvalidArgument,
                err);
  }
}

}  // namespace

Result<void> envd_run(Call& call, std::vector<std::string> argv, const std::string& user) {
  daemon::ExecRequest req;
  req.argv = std::move(argv);
  req.user = user;
  req.cwd = "/";
  req.timeout_s = 60;
  auto session = TRY(call.service.exec(call.sandbox_id, req));
  return finish(*session, req.argv[0]);
}

Result<void> serve_rpc(Call& call, std::string_view service, std::string_view method,
                       const std::vector<Rpc>& rpcs) {
  auto it = std::find_if(rpcs.begin(), rpcs.end(), [&](const Rpc& r) { return r.name == method; });
  if (it == rpcs.end()) {
    std::string served;
    for (const auto& r : rpcs) served += (served.empty() ? "" : ", ") + std::string(r.name);
    return fail(Code::kUnimplemented, std::string(service) + "/" + std::string(method) +
                                          " is not served; SPACE's envd serves " + served);
  }
  auto req = TRY(connect::read_request(call.ex));
  if (it->streaming != (req.kind == connect::Kind::kServerStream))
    return fail(Code::kInvalidArgument,
                std::string(service) + "/" + std::string(method) + " is a " +
                    (it->streaming ? "server-streaming RPC: Content-Type application/connect+json"
                                   : "unary RPC: Content-Type application/json"));
  return it->handler(call, req.message);
}

Result<void> serve_envd(Call& call) {
  const std::string& path = call.ex.target().path;
  if (path == "/health") {
    // 204 while the sandbox lives; 502 once it is gone, as E2B's proxy answers.
    auto info = call.service.inspect(call.sandbox_id);
    if (!info || info->destroyed_at)
      return respond_error(call.ex, 502, "sandbox " + call.sandbox_id + " is not running");
    return call.ex.respond_no_content();
  }
  constexpr std::string_view kProcess = "/process.Process/";
  constexpr std::string_view kFilesystem = "/filesystem.Filesystem/";
  if (path.starts_with(kProcess))
    return rpc(call, envd_process, std::string_view(path).substr(kProcess.size()));
  if (path.starts_with(kFilesystem))
    return rpc(call, envd_filesystem, std::string_view(path).substr(kFilesystem.size()));
  if (path == "/files") return envd_files(call);
  if (path == "/envs") return envs(call);
  if (call.ex.target().segments.size() == 2 &&
      call.ex.target().segments[0].find('.') != std::string::npos)
    return connect::respond_error(
        call.ex, connect::kind_of(call.ex),
        Error(Code::kUnimplemented,
              "envd: " + path +
                  " is not served; SPACE's envd serves process.Process (Start, Connect, List, "
                  "SendInput, CloseStdin, SendSignal, Update) and filesystem.Filesystem (Stat, "
                  "MakeDir, Move, ListDir, Remove, WatchDir, CreateWatcher, GetWatcherEvents, "
                  "RemoveWatcher)"));
  return fail(Code::kNotFound, "envd: no route for " + std::string(call.ex.method_string()) + " " +
                                   path +
                                   " (SPACE's envd serves /health, /files, /envs and the "
                                   "process.Process and filesystem.Filesystem Connect services)");
}

}  // namespace space::e2b

namespace space::e2b {

Result<void> envd_write(Call& call, const EnvdUser& user, const std::string& path,
                        const daemon::ChunkSource& source) {
  if (user.exec_user.empty())
    return call.service.write_file(call.sandbox_id, path, 0644, source, /*parents=*/true);
  using Kind = daemon::ExecSession::Event::Kind;
  daemon::ExecRequest req;
  req.argv = {"/bin/sh", "-c",
              "umask 022; d=$(dirname -- \"$1\") && mkdir -p -- \"$d\" && cat > \"$1\"",
              "envd-write", path};
  req.user = user.exec_user;
  req.cwd = "/";
  req.stdin = true;
  auto session = TRY(call.service.exec(call.sandbox_id, req));
  auto first = TRY(session->next());
  if (first.kind == Kind::kExit)
    return fail(
        Code::kInvalidArgument,
        "writing " + path + " as " + user.name + ": " +
            (first.exit.error.empty() ? std::string("it did not start") : first.exit.error));
  // The content on the writer's stdin; a writer that stopped (it could not open the file)
  // refuses more, and its exit says why.
  bool open = true;
  for (std::string chunk;;) {
    TRY_VOID(source(chunk));
    if (chunk.empty()) break;
    if (open) open = session->write_stdin(chunk).has_value();
  }
  if (open) (void)session->close_stdin();
  const std::string what = "writing " + path + " as " + user.name;
  auto done = finish(*session, what);
  if (!done && !done.error().message().starts_with(what))
    return fail(done.error().code(), what + ": " + done.error().message());
  return done;
}

}  // namespace space::e2b
