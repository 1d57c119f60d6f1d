// envd's process.Process Connect service over SandboxService::exec.
//
// Like E2B's envd, the door keeps a table of the processes it started (per sandbox, by pid):
// a process outlives the stream that started it (a background command, a client that
// disconnects) and any number of streams can follow it (Start's, then Connect's). Each process
// has a pump thread that reads its ExecSession's events and hands them to the streams following
// it at that moment (output with no stream following is dropped, as E2B's envd does); the pump
// waits while a follower has more than kFollowerBytes queued, which is the exec's flow control
// reaching a slow client. The entry goes once the process ended. Input (SendInput, CloseStdin),
// signals and resizes go to the ExecSession.
//
// A process table lives in spaced's memory: a restart of spaced ends the processes' streams
// (their ExecSessions end with the agent connection), unlike SPACE's own detached execs.
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "common/base64.h"
#include "e2b/connect.h"
#include "e2b/handlers.h"

namespace space::e2b {

namespace {

using nlohmann::json;
using EventKind = daemon::ExecSession::Event::Kind;

constexpr size_t kFollowerBytes = 4 << 20;
constexpr auto kLaggardWait = std::chrono::seconds(60);
constexpr size_t kMaxProcsPerSandbox = 256;

struct Follower {
  std::deque<json> events;  // null: the process's stream ended with `Proc::error`
  size_t bytes = 0;
  bool gone = false;
};

struct Proc {
  std::string sandbox;
  int pid = 0;
  json config;  // ProcessConfig as the client sent it
  std::string tag;
  bool pty = false;
  std::shared_ptr<daemon::ExecSession> session;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<Follower>> followers;
  bool ended = false;
  json end;                    // the end event, once ended (null with `error`)
  std::optional<Error> error;  // the sandbox went away
};

std::mutex g_mu;
std::map<std::string, std::map<int, std::shared_ptr<Proc>>> g_procs;
// Pump threads running (they use the daemon's ExecSessions: stop_envd_processes waits for
// them before the daemon goes), and whether spaced is stopping; guarded by g_mu.
std::condition_variable g_pumps_cv;
size_t g_pumps = 0;
bool g_stopping = false;

json event(json e) { return {{"event", std::move(e)}}; }

json end_event(const daemon::ExitStatus& x) {
  json end = json::object();
  if (x.exit_code) {
    end["exitCode"] = *x.exit_code;
    end["exited"] = true;
    end["status"] = "exit status " + std::to_string(*x.exit_code);
  } else {
    end["exitCode"] = -1;
    end["exited"] = false;
    std::string name = x.signal ? ::strsignal(*x.signal) : "unknown";
    for (auto& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    end["status"] = "signal: " + name;
  }
  if (!x.error.empty())
    end["error"] = x.error;
  else if (x.timed_out)
    end["error"] = "the command's timeout expired";
  else if (x.oom_killed)
    end["error"] = "the sandbox's memory limit killed a process (OOM)";
  return event({{"end", end}});
}

std::shared_ptr<Proc> find_proc(const std::string& sandbox, const json& selector) {
  std::lock_guard l(g_mu);
  auto it = g_procs.find(sandbox);
  if (it == g_procs.end() || !selector.is_object()) return nullptr;
  if (auto pid = selector.find("pid"); pid != selector.end()) {
    int64_t n = pid->is_number_integer() ? pid->get<int64_t>()
                : pid->is_string()       ? std::atoll(pid->get<std::string>().c_str())
                                         : 0;
    auto p = it->second.find(int(n));
    return p == it->second.end() ? nullptr : p->second;
  }
  if (auto tag = selector.find("tag"); tag != selector.end() && tag->is_string())
    for (auto& [pid, p] : it->second)
      if (p->tag == tag->get<std::string>()) return p;
  return nullptr;
}

Result<std::shared_ptr<Proc>> selected(Call& call, const json& msg) {
  auto sel = msg.find("process");
  if (sel == msg.end() || !sel->is_object() || (!sel->contains("pid") && !sel->contains("tag")))
    return fail(Code::kInvalidArgument, "process: a selector {\"pid\": N} or {\"tag\": \"...\"}");
  auto p = find_proc(call.sandbox_id, *sel);
  if (!p)
    return fail(Code::kNotFound, "process " + sel->dump() + " not found in sandbox " +
                                     call.sandbox_id +
                                     " (only running processes started through envd are kept)");
  return p;
}

void pump(std::shared_ptr<Proc> p) {
  std::shared_ptr<daemon::ExecSession> s = p->session;
  for (;;) {
    auto ev = s->next();
    json out;
    size_t n = 0;
    bool last = false;
    if (!ev) {
      last = true;
    } else if (ev->kind == EventKind::kStdout || ev->kind == EventKind::kStderr) {
      n = ev->data.size();
      const char* key = p->pty ? "pty" : ev->kind == EventKind::kStdout ? "stdout" : "stderr";
      out = event({{"data", {{key, base64_encode(ev->data)}}}});
    } else if (ev->kind == EventKind::kExit) {
      out = end_event(ev->exit);
      last = true;
    } else {
      continue;
    }
    {
      std::unique_lock l(p->mu);
      for (auto& f : p->followers) {
        if (f->gone) continue;
        f->events.push_back(out);
        f->bytes += n;
      }
      if (last) {
        p->ended = true;
        p->end = out;
        if (!ev)
          p->error = Error(Code::kUnavailable,
                           "sandbox " + p->sandbox +
                               " went away while the command ran: " + ev.error().message());
      }
      p->cv.notify_all();
      if (!last) {
        auto room = [&] {
          for (auto& f : p->followers)
            if (!f->gone && f->bytes > kFollowerBytes) return false;
          return true;
        };
        if (!p->cv.wait_for(l, kLaggardWait, room))
          for (auto& f : p->followers)
            if (f->bytes > kFollowerBytes) f->gone = true;  // it ends its stream
      }
    }
    if (n) s->consumed(n);
    if (last) break;
  }
  {
    std::lock_guard l(p->mu);
    p->session.reset();
  }
  s.reset();
  std::lock_guard l(g_mu);
  auto it = g_procs.find(p->sandbox);
  if (it != g_procs.end()) {
    it->second.erase(p->pid);
    if (it->second.empty()) g_procs.erase(it);
  }
  --g_pumps;
  g_pumps_cv.notify_all();
}

// Streams a process's events to one follower until it ends, the client leaves or spaced stops.
Result<void> follow(Call& call, std::shared_ptr<Proc> p, std::shared_ptr<Follower> f) {
  auto leave = [&] {
    std::lock_guard l(p->mu);
    f->gone = true;
    std::erase(p->followers, f);
    p->cv.notify_all();
  };
  connect::Stream st(call.ex);
  auto sent = st.begin();
  if (sent) sent = st.send(event({{"start", {{"pid", p->pid}}}}));
  if (!sent) {
    leave();
    return sent;
  }
  const auto keepalive = std::chrono::seconds(connect::keepalive_interval(call.ex).value_or(50));
  auto last_write = std::chrono::steady_clock::now();
  auto last_check = last_write;
  for (;;) {
    // The API token behind this stream's envd token: revoked or expired, the stream ends (the
    // process runs on, as when the client leaves).
    if (auto now = std::chrono::steady_clock::now();
        call.still_allowed && now - last_check >= std::chrono::seconds(1)) {
      last_check = now;
      if (auto allowed = call.still_allowed(); !allowed) {
        leave();
        return st.end(&allowed.error());
      }
    }
    std::deque<json> batch;
    bool gone = false;
    {
      std::unique_lock l(p->mu);
      p->cv.wait_for(l, std::chrono::seconds(1), [&] { return !f->events.empty() || f->gone; });
      batch.swap(f->events);
      f->bytes = 0;
      gone = f->gone;
      p->cv.notify_all();
    }
    Result<void> r;
    for (auto& e : batch) {
      if (e.is_null()) {
        std::optional<Error> err;
        {
          std::lock_guard l(p->mu);
          err = p->error;
        }
        leave();
        return st.end(&*err);
      }
      r = st.send(e);
      if (!r) break;
      if (e["event"].contains("end")) {
        leave();
        return st.end();
      }
    }
    if (r && gone) {
      leave();
      Error e(Code::kResourceExhausted,
              "the client read the process's output too slowly; reconnect with Connect");
      return st.end(&e);
    }
    if (r && call.ex.server_stopping()) {
      leave();
      Error e(Code::kUnavailable, "spaced is shutting down");
      return st.end(&e);
    }
    auto now = std::chrono::steady_clock::now();
    if (r && !batch.empty()) last_write = now;
    if (r && now - last_write >= keepalive) {
      r = st.send(event({{"keepalive", json::object()}}));
      last_write = now;
    }
    if (!r) {
      // The client went away (a background command's SDK disconnected): the process runs on,
      // nothing is wrong to report; the connection is not reused.
      leave();
      call.ex.mark_broken();
      return {};
    }
  }
}

Result<std::string> string_field(const json& o, const char* k, bool required = false) {
  auto it = o.find(k);
  if (it == o.end() || it->is_null()) {
    if (required) return fail(Code::kInvalidArgument, std::string(k) + " is required");
    return std::string();
  }
  if (!it->is_string()) return fail(Code::kInvalidArgument, std::string(k) + " must be a string");
  return it->get<std::string>();
}

Result<uint32_t> uint_field(const json& o, const char* k) {
  auto it = o.find(k);
  if (it == o.end() || it->is_null()) return 0u;
  if (it->is_number_unsigned()) return uint32_t(std::min<uint64_t>(it->get<uint64_t>(), 65535));
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    if (!s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos)
      return uint32_t(std::min<uint64_t>(std::stoull(s), 65535));
  }
  return fail(Code::kInvalidArgument, std::string(k) + " must be a non-negative integer");
}

Result<void> start(Call& call, const json& msg) {
  auto pc = msg.find("process");
  if (pc == msg.end() || !pc->is_object())
    return fail(Code::kInvalidArgument, "process: {\"cmd\": ..., \"args\": [...]} is required");
  daemon::ExecRequest req;
  std::string cmd = TRY_CTX(string_field(*pc, "cmd", true), "process");
  if (cmd.empty()) return fail(Code::kInvalidArgument, "process.cmd must not be empty");
  req.argv.push_back(cmd);
  if (auto a = pc->find("args"); a != pc->end() && !a->is_null()) {
    if (!a->is_array()) return fail(Code::kInvalidArgument, "process.args must be a list");
    for (auto& s : *a) {
      if (!s.is_string())
        return fail(Code::kInvalidArgument, "process.args must be a list of strings");
      req.argv.push_back(s.get<std::string>());
    }
  }
  EnvdUser user = TRY(envd_user(call, envd_username(call.ex)));
  req.env = user.env;
  if (auto e = pc->find("envs"); e != pc->end() && !e->is_null()) {
    if (!e->is_object()) return fail(Code::kInvalidArgument, "process.envs must be a map");
    for (auto& [k, v] : e->items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
        return fail(Code::kInvalidArgument,
                    "process.envs: \"" + k + "\" must be a name without '=' with a string value");
      req.env.push_back(k + "=" + v.get<std::string>());
    }
  }
  std::string cwd = TRY_CTX(string_field(*pc, "cwd"), "process");
  req.cwd = envd_path(user, cwd);
  req.user = user.exec_user;
  bool pty = false;
  if (auto t = msg.find("pty"); t != msg.end() && t->is_object()) {
    pty = true;
    json size = t->value("size", json::object());
    if (!size.is_object()) return fail(Code::kInvalidArgument, "pty.size must be an object");
    uint32_t cols = TRY_CTX(uint_field(size, "cols"), "pty.size");
    uint32_t rows = TRY_CTX(uint_field(size, "rows"), "pty.size");
    req.tty = true;
    req.cols = uint16_t(cols ? cols : 80);
    req.rows = uint16_t(rows ? rows : 24);
  }
  bool in = true;  // E2B: stdin stays open unless the request says false
  if (auto s = msg.find("stdin"); s != msg.end() && s->is_boolean()) in = s->get<bool>();
  req.stdin = pty || in;
  std::string tag = TRY(string_field(msg, "tag"));
  {
    std::lock_guard l(g_mu);
    auto it = g_procs.find(call.sandbox_id);
    if (it != g_procs.end() && it->second.size() >= kMaxProcsPerSandbox)
      return fail(Code::kResourceExhausted,
                  std::to_string(kMaxProcsPerSandbox) +
                      " processes started through envd already run in sandbox " + call.sandbox_id);
  }

  std::shared_ptr<daemon::ExecSession> session = TRY(call.service.exec(call.sandbox_id, req));
  auto first = TRY(session->next());
  if (first.kind == EventKind::kExit)
    return fail(
        Code::kInvalidArgument,
        "the process could not start: " +
            (first.exit.error.empty() ? std::string("it ended before it ran") : first.exit.error));
  if (first.kind != EventKind::kStarted)
    return fail(Code::kInternal, "the exec's first event was not its start");
  auto p = std::make_shared<Proc>();
  p->sandbox = call.sandbox_id;
  p->pid = first.pid;
  p->config = *pc;
  if (!req.cwd.empty()) p->config["cwd"] = req.cwd;
  p->tag = tag;
  p->pty = pty;
  p->session = session;
  auto f = std::make_shared<Follower>();
  p->followers.push_back(f);
  {
    std::lock_guard l(g_mu);
    if (g_stopping) {
      session->stop("spaced is stopping");
      return fail(Code::kUnavailable,
                  "spaced is stopping; start the command again once it is back");
    }
    g_procs[call.sandbox_id][p->pid] = p;
    ++g_pumps;
  }
  try {
    std::thread(pump, p).detach();
  } catch (const std::system_error& e) {
    std::lock_guard l(g_mu);
    g_procs[call.sandbox_id].erase(p->pid);
    --g_pumps;
    g_pumps_cv.notify_all();
    session->stop("no thread for its output");
    return fail(Code::kResourceExhausted,
                std::string("no thread for the process's output: ") + e.what());
  }
  return follow(call, p, f);
}

Result<void> connect_(Call& call, const json& msg) {
  auto p = TRY(selected(call, msg));
  auto f = std::make_shared<Follower>();
  {
    std::lock_guard l(p->mu);
    if (p->ended) {
      if (p->error) return fail(*p->error);
      f->events.push_back(p->end);
    }
    p->followers.push_back(f);
  }
  return follow(call, p, f);
}

Result<void> list(Call& call, const json&) {
  json procs = json::array();
  std::lock_guard l(g_mu);
  if (auto it = g_procs.find(call.sandbox_id); it != g_procs.end())
    for (auto& [pid, p] : it->second) {
      json info = {{"config", p->config}, {"pid", pid}};
      if (!p->tag.empty()) info["tag"] = p->tag;
      procs.push_back(std::move(info));
    }
  return connect::respond(call.ex, {{"processes", procs}});
}

std::shared_ptr<daemon::ExecSession> session_of(Proc& p) {
  std::lock_guard l(p.mu);
  return p.session;
}

Result<void> send_input(Call& call, const json& msg) {
  auto p = TRY(selected(call, msg));
  json input = msg.value("input", json::object());
  std::string b64;
  if (input.is_object() && input.contains("stdin") && input["stdin"].is_string())
    b64 = input["stdin"].get<std::string>();
  else if (input.is_object() && input.contains("pty") && input["pty"].is_string())
    b64 = input["pty"].get<std::string>();
  else
    return fail(Code::kInvalidArgument, "input: {\"stdin\": base64} or {\"pty\": base64}");
  auto data = base64_decode(b64);
  if (!data) {
    // proto3 JSON accepts unpadded and URL-safe base64 too.
    std::string fixed = b64;
    for (auto& c : fixed) c = c == '-' ? '+' : c == '_' ? '/' : c;
    while (fixed.size() % 4) fixed += '=';
    data = base64_decode(fixed);
  }
  if (!data) return fail(Code::kInvalidArgument, "input: the bytes must be base64");
  auto s = session_of(*p);
  if (!s) return fail(Code::kNotFound, "process " + std::to_string(p->pid) + " has ended");
  if (!data->empty())
    TRY_VOID_CTX(s->write_stdin(*data), "stdin of process " + std::to_string(p->pid));
  return connect::respond(call.ex, json::object());
}

Result<void> close_stdin(Call& call, const json& msg) {
  auto p = TRY(selected(call, msg));
  auto s = session_of(*p);
  if (!s) return fail(Code::kNotFound, "process " + std::to_string(p->pid) + " has ended");
  TRY_VOID_CTX(s->close_stdin(), "closing stdin of process " + std::to_string(p->pid));
  return connect::respond(call.ex, json::object());
}

Result<void> send_signal(Call& call, const json& msg) {
  auto p = TRY(selected(call, msg));
  auto sig = msg.find("signal");
  int n = 0;
  if (sig != msg.end() && sig->is_string()) {
    const std::string& s = sig->get_ref<const std::string&>();
    n = s == "SIGNAL_SIGKILL" ? SIGKILL : s == "SIGNAL_SIGTERM" ? SIGTERM : 0;
  } else if (sig != msg.end() && sig->is_number_integer()) {
    n = sig->get<int>();
    if (n != SIGKILL && n != SIGTERM) n = 0;
  }
  if (n == 0) return fail(Code::kInvalidArgument, "signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM");
  auto s = session_of(*p);
  if (!s) return fail(Code::kNotFound, "process " + std::to_string(p->pid) + " has ended");
  s->signal(n);
  return connect::respond(call.ex, json::object());
}

Result<void> update(Call& call, const json& msg) {
  auto p = TRY(selected(call, msg));
  auto t = msg.find("pty");
  if (t == msg.end() || !t->is_object()) return connect::respond(call.ex, json::object());
  if (!p->pty)
    return fail(Code::kInvalidArgument,
                "process " + std::to_string(p->pid) + " has no pty to resize");
  json size = t->value("size", json::object());
  if (!size.is_object()) return fail(Code::kInvalidArgument, "pty.size must be an object");
  uint32_t cols = TRY_CTX(uint_field(size, "cols"), "pty.size");
  uint32_t rows = TRY_CTX(uint_field(size, "rows"), "pty.size");
  if (!cols || !rows) return fail(Code::kInvalidArgument, "pty.size: cols and rows must be > 0");
  auto s = session_of(*p);
  if (!s) return fail(Code::kNotFound, "process " + std::to_string(p->pid) + " has ended");
  s->resize(uint16_t(rows), uint16_t(cols));
  return connect::respond(call.ex, json::object());
}

}  // namespace

Result<void> envd_process(Call& call, std::string_view method) {
  if (method == "StreamInput")
    return fail(Code::kUnimplemented,
                "process.Process/StreamInput (client streaming) is not served by SPACE's envd: "
                "send input with SendInput");
  static const std::vector<Rpc> kRpcs = {
      {"Start", start, true},
      {"Connect", connect_, true},
      {"List", list, false},
      {"SendInput", send_input, false},
      {"CloseStdin", close_stdin, false},
      {"SendSignal", send_signal, false},
      {"Update", update, false},
  };
  return serve_rpc(call, "process.Process", method, kRpcs);
}

void stop_envd_processes() {
  std::vector<std::shared_ptr<Proc>> all;
  {
    std::lock_guard l(g_mu);
    g_stopping = true;
    for (auto& [sandbox, procs] : g_procs)
      for (auto& [pid, p] : procs) all.push_back(p);
  }
  for (auto& p : all) {
    std::shared_ptr<daemon::ExecSession> s;
    {
      std::lock_guard l(p->mu);
      s = p->session;
      for (auto& f : p->followers) f->gone = true;  // no pump waits for a slow reader now
      p->cv.notify_all();
    }
    if (s) s->stop("spaced is stopping");
  }
  std::unique_lock l(g_mu);
  if (!g_pumps_cv.wait_for(l, std::chrono::seconds(20), [] { return g_pumps == 0; }))
    spdlog::warn("e2b: {} envd process pumps still running after 20 s of shutdown", g_pumps);
}

}  // namespace space::e2b
