// Exec: starting a process in a sandbox through its agent, streaming its output with flow
// control, enforcing the exec's timeout, and reporting how it ended (exit code, signal, OOM,
// timeout). Also ps and kill.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <mutex>

#include "common/guard.h"
#include "daemon/daemon.h"

namespace space::daemon {
using nlohmann::json;
using proto::FrameType;

namespace {

// Limits on what a client may ask for, so a request cannot make the daemon build huge frames.
constexpr size_t kMaxArgs = 4096;
constexpr size_t kMaxArgBytes = 256 * 1024;

class ExecSessionImpl : public ExecSession {
 public:
  ExecSessionImpl(Daemon* d, std::shared_ptr<Daemon::Sandbox> sb, std::shared_ptr<Stream> stream,
                  std::optional<double> timeout_s, uint64_t oom_base)
      : d_(d),
        sb_(std::move(sb)),
        stream_(std::move(stream)),
        start_(Clock::now()),
        oom_base_(oom_base) {
    sb_->open_execs++;
    if (timeout_s)
      deadline_ = start_ + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(*timeout_s));
  }

  // The snapshot taken before this exec (`exec --snapshot`), reported with kStarted.
  void set_snapshot(std::string id) { snapshot_ = std::move(id); }

  ~ExecSessionImpl() override {
    if (!done_) {
      // The client went away before the exec ended: kill its tree, leave nothing running.
      (void)sb_->conn->send_json(FrameType::kSignal, stream_->id(), {{"signal", SIGKILL}});
      audit_end(nullptr, "the client went away; the process tree was killed");
    }
    sb_->conn->close_stream(stream_->id());
    release();
  }

  Result<Event> next() override {
    if (done_) return Event{Event::Kind::kExit, {}, 0, exit_};
    for (;;) {
      std::optional<Clock::time_point> dl;
      if (deadline_ && !timed_out_) dl = deadline_;
      auto f = stream_->pop(dl);
      if (!f) {
        if (f.error().code() == Code::kTimeout && deadline_ && !timed_out_) {
          timed_out_ = true;
          (void)sb_->conn->send_json(FrameType::kSignal, stream_->id(), {{"signal", SIGKILL}});
          continue;
        }
        done_ = true;
        release();
        audit_end(nullptr, d_->shutting_down()
                               ? "spaced stopped while the command ran: it may run on in its "
                                 "sandbox, but its end is not recorded"
                               : f.error().message());
        if (sb_->destroyed) {
          // Cut short by the sandbox's end: say which (its lifetime, a DELETE, ...).
          std::string why = sb_->doom_reason();
          return fail(Code::kConflict, "sandbox " + sb_->rec.id +
                                           " was destroyed while the command ran: " +
                                           (why.empty() ? "removed" : why));
        }
        return fail(std::move(f.error()).wrap("exec in sandbox " + sb_->rec.id));
      }
      switch (f->type) {
        case FrameType::kStarted: {
          auto j = json::parse(f->payload, nullptr, false);
          int pid = j.is_object() && j.contains("pid") && j["pid"].is_number_integer()
                        ? j["pid"].get<int>()
                        : 0;
          pid_ = pid;
          Event started{Event::Kind::kStarted, {}, pid, {}};
          started.snapshot = snapshot_;
          return started;
        }
        case FrameType::kStdout:
          stdout_.add(f->payload);
          return Event{Event::Kind::kStdout, std::move(f->payload), 0, {}};
        case FrameType::kStderr:
          stderr_.add(f->payload);
          return Event{Event::Kind::kStderr, std::move(f->payload), 0, {}};
        case FrameType::kExit: {
          done_ = true;
          release();
          auto j = json::parse(f->payload, nullptr, false);
          if (!j.is_object()) return fail(Code::kProtocol, "the agent sent a malformed exit");
          if (j.contains("exit_code") && j["exit_code"].is_number_integer())
            exit_.exit_code = std::clamp(j["exit_code"].get<int>(), 0, 255);
          else if (j.contains("signal") && j["signal"].is_number_integer())
            exit_.signal = std::clamp(j["signal"].get<int>(), 1, 64);
          else
            return fail(Code::kProtocol, "the agent sent an exit without a status");
          exit_.core_dumped = agent_field(j, "core_dumped", false);
          if (j.contains("error") && j["error"].is_object())
            exit_.error = agent_field(j["error"], "message", std::string("could not start"));
          else if (j.contains("error") && j["error"].is_string())
            exit_.error = j["error"].get<std::string>();
          if (exit_.error.size() > 4096) exit_.error.resize(4096);
          exit_.timed_out = timed_out_;
          if (auto k = sb_->inst->oom_kills(); k && *k > oom_base_) exit_.oom_killed = true;
          exit_.duration_s = std::chrono::duration<double>(Clock::now() - start_).count();
          audit_end(&exit_, "");
          return Event{Event::Kind::kExit, {}, 0, exit_};
        }
        default:
          continue;  // nothing else belongs on an exec stream; ignore
      }
    }
  }

  void consumed(size_t bytes) override { sb_->conn->credit(*stream_, bytes); }

  Result<void> write_stdin(std::string_view bytes) override {
    while (!bytes.empty()) {
      size_t n = std::min(bytes.size(), size_t{256 * 1024});
      // Backpressure: wait for the agent's credit rather than overrun its stdin buffer.
      if (!stream_->reserve_stdin(n))
        return fail(Code::kConflict, "the process ended; its stdin is closed");
      TRY_VOID(sb_->conn->send(FrameType::kStdin, stream_->id(), bytes.substr(0, n)));
      bytes.remove_prefix(n);
    }
    return {};
  }
  Result<void> close_stdin() override {
    return sb_->conn->send(FrameType::kStdin, stream_->id(), {});
  }
  void signal(int sig) override {
    (void)sb_->conn->send_json(FrameType::kSignal, stream_->id(), {{"signal", sig}});
  }
  void stop(const std::string& why) override {
    {
      std::lock_guard l(stopped_mu_);
      stopped_ = why;
    }
    signal(SIGKILL);
  }
  void resize(uint16_t rows, uint16_t cols) override {
    (void)sb_->conn->send_json(FrameType::kSignal, stream_->id(), {{"rows", rows}, {"cols", cols}});
  }
  // Stops counting as an exec with its client attached (detached execs).
  void release_attached() { release(); }

 private:
  // No longer an open exec of its sandbox (idle timeout, DELETE without force): once its end is
  // known, before the client reads it, so `space exec ... && space rm ID` never races it.
  void release() {
    if (!counted_) return;
    counted_ = false;
    sb_->touch();
    sb_->open_execs--;
  }
  bool counted_ = true;

  // exec.end: how the exec ended (or why its end is unknown) and what it wrote.
  void audit_end(const ExitStatus* st, const std::string& lost) {
    if (audited_end_) return;
    audited_end_ = true;
    json j = {{"stream", stream_->id()}, {"pid", pid_}};
    double dur = std::chrono::duration<double>(Clock::now() - start_).count();
    if (st) {
      j["exit_code"] = st->exit_code ? json(*st->exit_code) : json(nullptr);
      j["signal"] = st->signal ? json(*st->signal) : json(nullptr);
      j["core_dumped"] = st->core_dumped;
      j["timed_out"] = st->timed_out;
      j["oom_killed"] = st->oom_killed;
      if (!st->error.empty()) j["error"] = st->error;
      dur = st->duration_s;
    } else {
      j["exit_code"] = nullptr;
      j["signal"] = nullptr;
      j["lost"] = lost;
    }
    j["duration_s"] = dur;
    {
      std::lock_guard l(stopped_mu_);
      if (!stopped_.empty()) j["stopped"] = stopped_;
    }
    j["stdout"] = stdout_.finish();
    j["stderr"] = stderr_.finish();
    d_->audit(sb_->rec.id, "exec.end", std::move(j));
  }

  Daemon* d_;
  audit::OutputDigest stdout_, stderr_;
  int pid_ = 0;
  bool audited_end_ = false;
  std::shared_ptr<Daemon::Sandbox> sb_;
  std::shared_ptr<Stream> stream_;
  Clock::time_point start_;
  std::optional<Clock::time_point> deadline_;
  uint64_t oom_base_;
  bool timed_out_ = false;
  bool done_ = false;
  ExitStatus exit_;
  std::string snapshot_;
  std::mutex stopped_mu_;
  std::string stopped_;  // why spaced stopped it (stop()), if it did
};

}  // namespace

Result<std::unique_ptr<ExecSession>> Daemon::exec(const std::string& id, const ExecRequest& asked) {
  // The image config's defaults (create.cc, apply_image_config): the command where none is
  // given, the user where none is asked for.
  ExecRequest req = asked;
  bool image_user = false;
  if (req.argv.empty() || (req.user.empty() && req.image_user)) {
    auto sb = TRY(running(id));
    const json& spec = sb->rec.spec;
    if (req.argv.empty()) {
      if (auto c = spec.find("command"); c != spec.end() && c->is_array())
        for (const auto& a : *c)
          if (a.is_string()) req.argv.push_back(a.get<std::string>());
      if (req.argv.empty())
        return fail(Code::kInvalidArgument,
                    "no command given, and image " + sb->rec.image +
                        " has no default command (no Entrypoint or Cmd in its config); name "
                        "one: `space run [OPTIONS] -- CMD [ARGS...]`, `space exec ID -- CMD`");
    }
    if (req.user.empty() && req.image_user) {
      if (auto u = spec.find("user"); u != spec.end() && u->is_string()) {
        req.user = u->get<std::string>();
        image_user = true;
      }
    }
  }
  if (req.argv.empty() || req.argv[0].empty())
    return fail(Code::kInvalidArgument, "exec needs a command: `space exec ID -- CMD [ARGS...]`");
  size_t bytes = 0;
  for (auto& a : req.argv) bytes += a.size() + 1;
  for (auto& e : req.env) bytes += e.size() + 1;
  if (req.argv.size() + req.env.size() > kMaxArgs || bytes > kMaxArgBytes)
    return fail(Code::kInvalidArgument, "the command line and environment are too large (max " +
                                            std::to_string(kMaxArgBytes) + " bytes)");
  auto sb = TRY(running(id));
  // A detached command's slot is taken now, atomically with the count, and given back on any
  // way out before its log is added: 64 concurrent requests cannot all pass a check of 63.
  if (req.detach) TRY_VOID(sb->exec_logs.reserve(id));
  Guard unreserve([&] {
    if (req.detach) sb->exec_logs.release();
  });
  std::string snapshot_id;
  if (req.snapshot) {
    std::lock_guard lock(sb->mu);
    if (sb->destroyed)
      return fail(Code::kConflict,
                  "sandbox " + id + " changed meanwhile (destroyed or rolled back); try again");
    auto snap = TRY_CTX(take_snapshot(*sb, "exec", ""), "taking the snapshot before the exec");
    snapshot_id = snap->id;
  }
  // Environment: defaults, then the sandbox's, then the exec's; later entries win.
  std::vector<std::string> env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "HOME=/root",
      "LANG=C.UTF-8",
      "HOSTNAME=" + sb->rec.id,
      "SPACE_SANDBOX_ID=" + sb->rec.id,
  };
  auto add = [&](const std::string& kv) {
    auto eq = kv.find('=');
    std::string key = kv.substr(0, eq);
    std::erase_if(
        env, [&](const std::string& e) { return e.compare(0, key.size() + 1, key + "=") == 0; });
    env.push_back(kv);
  };
  // Another user gets its own HOME and default cwd from the agent (its /etc/passwd entry).
  if (!req.user.empty()) std::erase(env, std::string("HOME=/root"));
  for (auto& kv : sb->rec.spec.value("env", std::vector<std::string>{})) add(kv);
  for (auto& kv : req.env) add(kv);
  std::string cwd = req.cwd.empty() ? sb->rec.spec.value("workdir", std::string("/")) : req.cwd;
  if (cwd.empty() || cwd[0] != '/')
    return fail(Code::kInvalidArgument, "cwd must be an absolute path inside the sandbox");

  uint64_t oom_base = 0;
  if (auto k = sb->inst->oom_kills(); k) oom_base = *k;
  auto stream = sb->conn->open_stream();
  json spec = {{"argv", req.argv}, {"env", env},         {"cwd", cwd},          {"uid", 0},
               {"gid", 0},         {"stdin", req.stdin}, {"stdin_credit", true}};
  if (req.tty) {
    spec["tty"] = true;
    spec["rows"] = req.rows;
    spec["cols"] = req.cols;
  }
  if (!req.user.empty()) {
    spec["user"] = req.user;
    // The user's home, unless the user is the image's (its WorkingDir, "/" if it names none,
    // is the sandbox's workdir).
    if (req.cwd.empty() && !image_user) spec.erase("cwd");
  }
  metrics_.execs++;
  json env_names = json::array();
  for (auto& kv : env) env_names.push_back(kv.substr(0, kv.find('=')));
  audit(id, "exec.start",
        {{"stream", stream->id()},
         {"argv", req.argv},
         {"cwd", cwd},
         {"env_names", env_names},
         {"uid", 0},
         {"gid", 0},
         {"user", req.user.empty() ? json(nullptr) : json(req.user)},
         {"detach", req.detach},
         {"stdin", req.stdin},
         {"tty", req.tty},
         {"timeout_s", req.timeout_s ? json(*req.timeout_s) : json(nullptr)}});
  if (auto r = sb->conn->send_json(FrameType::kExec, stream->id(), spec); !r) {
    sb->conn->close_stream(stream->id());
    metrics_.exec_failures++;
    audit(id, "exec.end",
          {{"stream", stream->id()},
           {"exit_code", nullptr},
           {"signal", nullptr},
           {"lost", r.error().message()}});
    return fail(std::move(r.error()).wrap("starting exec in sandbox " + id));
  }
  auto session = std::make_unique<ExecSessionImpl>(this, sb, stream, req.timeout_s, oom_base);
  session->set_snapshot(snapshot_id);
  if (req.detach) {
    // Wait for started (or an exit with an error) and hand back an already-finished session
    // whose first event is that; the process runs on, its output kept by a pump thread.
    auto ev = session->next();
    if (!ev) return fail(std::move(ev.error()));
    if (ev->kind == ExecSession::Event::Kind::kExit && !ev->exit.error.empty())
      metrics_.exec_failures++;
    struct Detached : ExecSession {
      Event ev;
      bool given = false;
      Result<Event> next() override {
        if (!given) {
          given = true;
          return ev;
        }
        Event e{Event::Kind::kExit, {}, 0, {}};
        e.exit.exit_code = 0;
        return e;
      }
      void consumed(size_t) override {}
      Result<void> write_stdin(std::string_view) override {
        return fail(Code::kInvalidArgument, "a detached exec has no stdin");
      }
      Result<void> close_stdin() override { return {}; }
      void signal(int) override {}
    };
    auto d = std::make_unique<Detached>();
    d->ev = *ev;
    if (ev->kind == ExecSession::Event::Kind::kStarted) {
      // A detached command never counts as attached (idle timeout, DELETE without force).
      session->release_attached();
      auto log = std::make_shared<KeptExecLog>(ev->pid);
      sb->exec_logs.add(log);
      unreserve.dismiss();
      start_pump(std::move(session), std::move(log));
    }
    return std::unique_ptr<ExecSession>(std::move(d));
  }
  return std::unique_ptr<ExecSession>(std::move(session));
}

void Daemon::start_pump(std::unique_ptr<ExecSession> session, std::shared_ptr<KeptExecLog> log) {
  pumps_.add();
  std::thread([this, s = std::move(session), log = std::move(log)]() mutable {
    for (;;) {
      auto ev = s->next();
      if (!ev) {
        log->fail(std::move(ev.error()));
        break;
      }
      if (ev->kind == ExecSession::Event::Kind::kStdout ||
          ev->kind == ExecSession::Event::Kind::kStderr) {
        size_t n = ev->data.size();
        log->append(ev->kind == ExecSession::Event::Kind::kStderr, std::move(ev->data));
        s->consumed(n);
      } else if (ev->kind == ExecSession::Event::Kind::kExit) {
        log->finish(ev->exit);
        break;
      }
    }
    s.reset();  // ended: nothing to kill
    log.reset();
    pumps_.done();
  }).detach();
}

Result<std::shared_ptr<ExecLog>> Daemon::exec_log(const std::string& id, int pid) {
  if (pid < 1) return fail(Code::kInvalidArgument, "pid must be >= 1");
  auto sb = TRY(live(id));
  auto log = sb->exec_logs.find(pid);
  if (!log && sb->reattached)
    return fail(Code::kNotFound,
                "sandbox " + id + " keeps no output of pid " + std::to_string(pid) +
                    ": spaced restarted since the sandbox was made, and the output and end of "
                    "detached commands started before the restart were kept in its memory only "
                    "(the command may still run: `space ps " +
                    id + "`; `space audit " + id + "` has what it ran)");
  if (!log)
    return fail(Code::kNotFound,
                "sandbox " + id + " keeps no output of pid " + std::to_string(pid) +
                    ": only commands started detached (`space exec --detach`) are kept, the " +
                    std::to_string(kExecLogsPerSandbox) + " most recent per sandbox");
  return std::shared_ptr<ExecLog>(std::move(log));
}

Result<std::vector<ProcessInfo>> Daemon::processes(const std::string& id) {
  auto sb = TRY(running(id));
  auto r = TRY_CTX(sb->conn->request({{"op", "ps"}}), "listing processes of " + id);
  if (!r.contains("processes") || !r["processes"].is_array())
    return fail(Code::kProtocol, "the agent sent a malformed process list");
  // The agent's list is untrusted input: malformed entries are skipped, fields it got wrong
  // are null.
  auto integer = [](const json& p, const char* k) -> std::optional<int64_t> {
    if (!p.contains(k) || !p[k].is_number_integer()) return std::nullopt;
    return p[k].get<int64_t>();
  };
  std::vector<ProcessInfo> out;
  for (auto& p : r["processes"]) {
    if (!p.is_object() || !p.contains("pid") || !p["pid"].is_number_integer()) continue;
    ProcessInfo q{.pid = p["pid"].get<int64_t>(),
                  .ppid = integer(p, "ppid"),
                  .uid = integer(p, "uid"),
                  .state = p.contains("state") && p["state"].is_string()
                               ? p["state"].get<std::string>()
                               : "?",
                  .stream = integer(p, "stream")};
    if (p.contains("argv") && p["argv"].is_array())
      for (auto& a : p["argv"])
        if (a.is_string()) q.argv.push_back(a.get<std::string>().substr(0, 4096));
    out.push_back(std::move(q));
    if (out.size() >= 100000) break;
  }
  return out;
}

Result<void> Daemon::kill(const std::string& id, int pid, int sig) {
  if (pid <= 1)
    return fail(Code::kInvalidArgument,
                "pid must be > 1 (pid 1 is the sandbox's agent; use "
                "`space rm` to stop the whole sandbox)");
  if (sig < 1 || sig > 64) return fail(Code::kInvalidArgument, "signal must be 1..64");
  auto sb = TRY(running(id));
  TRY_VOID_CTX(sb->conn->request({{"op", "kill"}, {"pid", pid}, {"signal", sig}}),
               "signalling pid " + std::to_string(pid) + " in " + id);
  return {};
}

}  // namespace space::daemon
