// Validation of exec specs and the messages for processes that could not be started.
#include "agent/exec_spec.h"

#include <optional>

#include "agent/path_resolver.h"
#include "agent/response.h"

namespace space::agent {
namespace {

Result<std::vector<std::string>> string_array(const json& o, const char* key, bool required) {
  std::vector<std::string> out;
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    if (required) return fail(Code::kInvalidArgument, std::string("\"") + key + "\" is required");
    return out;
  }
  if (!it->is_array())
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must be an array");
  if (it->size() > kMaxExecArgs)
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" has too many entries");
  for (const json& v : *it) {
    if (!v.is_string())
      return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must hold strings");
    const std::string& s = v.get_ref<const std::string&>();
    if (s.find('\0') != std::string::npos)
      return fail(Code::kInvalidArgument, std::string("\"") + key + "\" holds a NUL byte");
    out.push_back(s);
  }
  return out;
}

}  // namespace

Result<ExecSpec> parse_exec_spec(std::string_view payload) {
  json o = TRY(parse_object(payload));
  ExecSpec s;
  s.argv = TRY(string_array(o, "argv", true));
  if (s.argv.empty()) return fail(Code::kInvalidArgument, "\"argv\" must not be empty");
  s.env = TRY(string_array(o, "env", false));
  for (const std::string& e : s.env)
    if (e.find('=') == std::string::npos || e.front() == '=')
      return fail(Code::kInvalidArgument, "env entry \"" + e + "\" is not K=V");
  if (auto cwd = TRY(opt_string(o, "cwd"))) {
    s.cwd = std::move(*cwd);
    s.cwd_given = true;
  }
  TRY_VOID_CTX(check_sandbox_path(s.cwd), "cwd");
  s.uid = static_cast<uint32_t>(TRY(opt_int(o, "uid", 0, 0xfffffffe)).value_or(0));
  s.gid = static_cast<uint32_t>(TRY(opt_int(o, "gid", 0, 0xfffffffe)).value_or(0));
  if (auto user = TRY(opt_string(o, "user"))) {
    if (user->empty() || user->size() > 64 || user->find('\0') != std::string::npos)
      return fail(Code::kInvalidArgument, "\"user\" must be 1-64 characters");
    s.user = std::move(*user);
  }
  s.stdin_pipe = TRY(opt_bool(o, "stdin", false));
  s.detach = TRY(opt_bool(o, "detach", false));
  s.stdin_credit = TRY(opt_bool(o, "stdin_credit", false));
  if (s.detach) s.stdin_pipe = false;
  s.tty = TRY(opt_bool(o, "tty", false));
  if (s.tty && s.detach) return fail(Code::kInvalidArgument, "a detached exec has no terminal");
  s.rows = static_cast<uint16_t>(TRY(opt_int(o, "rows", 1, 4096)).value_or(24));
  s.cols = static_cast<uint16_t>(TRY(opt_int(o, "cols", 1, 4096)).value_or(80));
  return s;
}

namespace {

std::optional<uint32_t> parse_id(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > 0xfffffffe) return std::nullopt;
  return static_cast<uint32_t>(v);
}

bool has_env(const ExecSpec& spec, std::string_view key) {
  for (const std::string& e : spec.env)
    if (e.size() > key.size() && e.compare(0, key.size(), key) == 0 && e[key.size()] == '=')
      return true;
  return false;
}

}  // namespace

Result<void> apply_user(ExecSpec& spec, std::string_view passwd) {
  if (spec.user.empty()) return {};
  const std::string& u = spec.user;
  // "UID" or "UID:GID": no passwd entry needed.
  size_t colon = u.find(':');
  auto uid = parse_id(std::string_view(u).substr(0, colon));
  if (uid) {
    std::optional<uint32_t> gid = colon == std::string::npos ? uid : parse_id(u.substr(colon + 1));
    if (!gid) return fail(Code::kInvalidArgument, "\"user\" " + u + ": the group is not a number");
    spec.uid = *uid;
    spec.gid = *gid;
    if (!has_env(spec, "HOME")) spec.env.push_back("HOME=/");
    if (!spec.cwd_given) spec.cwd = "/";
    return {};
  }
  // A name: its line "name:x:uid:gid:gecos:home:shell".
  while (!passwd.empty()) {
    size_t nl = passwd.find('\n');
    std::string_view line = passwd.substr(0, nl);
    passwd = nl == std::string_view::npos ? std::string_view() : passwd.substr(nl + 1);
    std::vector<std::string_view> f;
    for (size_t start = 0;;) {
      size_t c = line.find(':', start);
      f.push_back(
          line.substr(start, c == std::string_view::npos ? std::string_view::npos : c - start));
      if (c == std::string_view::npos) break;
      start = c + 1;
    }
    if (f.size() < 7 || f[0] != u) continue;
    auto pu = parse_id(f[2]), pg = parse_id(f[3]);
    if (!pu || !pg)
      return fail(Code::kInvalidArgument, "the /etc/passwd entry of " + u + " is malformed");
    spec.uid = *pu;
    spec.gid = *pg;
    std::string home = f[5].empty() || f[5][0] != '/' ? "/" : std::string(f[5]);
    if (!has_env(spec, "HOME")) spec.env.push_back("HOME=" + home);
    if (!has_env(spec, "USER")) spec.env.push_back("USER=" + u);
    if (!has_env(spec, "LOGNAME")) spec.env.push_back("LOGNAME=" + u);
    if (!spec.cwd_given) spec.cwd = home;
    return {};
  }
  return fail(Code::kNotFound, "no user \"" + u +
                                   "\" in the sandbox's /etc/passwd; give a uid "
                                   "(\"1000\" or \"1000:1000\") or add the user");
}

std::vector<std::string> exec_candidates(const ExecSpec& spec) {
  const std::string& file = spec.argv[0];
  if (file.empty()) return {};
  if (file.find('/') != std::string::npos) return {file};
  std::string_view path = kDefaultPath;
  for (const std::string& e : spec.env)
    if (e.starts_with("PATH=")) path = std::string_view(e).substr(5);  // the last one wins
  std::vector<std::string> out;
  while (true) {
    size_t colon = path.find(':');
    std::string_view dir = path.substr(0, colon);
    if (dir.empty())
      out.push_back(file);  // an empty entry is the current directory
    else
      out.push_back(std::string(dir) + (dir.back() == '/' ? "" : "/") + file);
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  return out;
}

StartFailure describe_start_failure(const ExecSpec& spec, WorkerStep step, int err) {
  const std::string& file = spec.argv[0];
  auto q = [](std::string_view s) { return "\"" + std::string(s) + "\""; };
  switch (step) {
    case WorkerStep::kExec:
      if (err == ENOENT && (file.empty() || file.find('/') == std::string::npos))
        return {127, Error(Code::kNotFound, q(file) + ": command not found", ENOENT)};
      return {err == ENOENT ? 127 : 126, Error::sys("exec", q(file), err)};
    case WorkerStep::kChdir:
      return {126, Error::sys("chdir", q(spec.cwd), err)};
    case WorkerStep::kDevNull:
      return {126, Error::sys("open", "\"/dev/null\"", err)};
    case WorkerStep::kSetpgid:
      return {126, Error::sys("setpgid", "", err)};
    case WorkerStep::kStdio:
      return {126, Error::sys("dup2", "stdio", err)};
    case WorkerStep::kTty:
      return {126, Error::sys("setsid/TIOCSCTTY", "the exec's terminal", err)};
    case WorkerStep::kSetgroups:
      return {126, Error::sys("setgroups", std::to_string(spec.gid), err)};
    case WorkerStep::kSetgid:
      return {126, Error::sys("setgid", std::to_string(spec.gid), err)};
    case WorkerStep::kSetuid:
      return {126, Error::sys("setuid", std::to_string(spec.uid), err)};
    case WorkerStep::kNone:
      break;
  }
  return {126, Error(Code::kInternal, "the process could not be started", err)};
}

}  // namespace space::agent
