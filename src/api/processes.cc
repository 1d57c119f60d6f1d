// Handlers for the processes of a sandbox: list them, signal one, and read what spaced kept of
// a detached command (its output and its end).
#include <poll.h>
#include <sys/eventfd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "api/handlers.h"
#include "api/views.h"
#include "common/base64.h"

namespace space::api::handlers {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

std::string log_line(const json& j) { return json_text(j) + "\n"; }

// Watches the connection of a long-held response (logs?follow, wait) for the client hanging
// up, so that the handler stops waiting for a command that may run for hours.
class HangupWatch {
 public:
  explicit HangupWatch(Exchange& ex) : ex_(ex), stop_(::eventfd(0, EFD_CLOEXEC)) {
    if (!stop_) return;  // without it, the handler notices at its next write
    ex_.set_read_interrupt_fd(stop_.get());
    thread_ = std::thread([this] {
      if (ex_.wait_client_hangup()) gone_ = true;
    });
  }
  ~HangupWatch() {
    if (!thread_.joinable()) return;
    uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof one);
    thread_.join();
    ex_.set_read_interrupt_fd(-1);
  }
  bool gone() const { return gone_; }

 private:
  Exchange& ex_;
  UniqueFd stop_;
  std::atomic<bool> gone_{false};
  std::thread thread_;
};

// ?timeout= of wait: seconds (a number) or a duration ("30s", "5m"); none = until it ends.
Result<std::optional<double>> timeout_param(const Target& t) {
  auto it = t.query.find("timeout");
  if (it == t.query.end()) return std::optional<double>();
  const std::string& v = it->second;
  char* end = nullptr;
  double s = std::strtod(v.c_str(), &end);
  if (!v.empty() && end && *end == '\0') {
    if (!(s >= 0) || s > 86400 * 7)
      return fail(Code::kInvalidArgument,
                  "query parameter timeout must be 0 to 604800 seconds, got " + v);
    return std::optional<double>(s);
  }
  auto d = parse_duration_value(json(v), "query parameter timeout");
  if (!d) return fail(std::move(d.error()));
  return std::optional<double>(*d);
}

}  // namespace

Result<void> list_processes(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  std::vector<daemon::ProcessInfo> procs = TRY(ctx.service.processes(id));
  return ex.respond_json(http::status::ok, {{"processes", to_json(procs)}});
}

Result<void> kill_process(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  int pid = TRY(parse_pid(ex.param("pid")));
  int sig = TRY(parse_signal_param(ex.target(), "signal", SIGTERM));
  TRY_VOID(ctx.service.kill(id, pid, sig));
  return ex.respond_no_content();
}

// GET /v1/sandboxes/{id}/processes/{pid}/logs[?follow=true]: the kept output of a detached
// command as exec events ("started" with "dropped", the bytes no longer kept; "stdout"/
// "stderr"; "exit" or "error" once it ended). With follow, new output is streamed until it ends.
Result<void> process_logs(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  int pid = TRY(parse_pid(ex.param("pid")));
  bool follow = TRY(parse_bool_param(ex.target(), "follow", false));
  std::shared_ptr<daemon::ExecLog> log = TRY(ctx.service.exec_log(id, pid));

  uint64_t cursor = 0;
  auto first = log->read(cursor, SteadyClock::now());
  TRY_VOID(
      ex.begin_chunked(http::status::ok, "application/x-ndjson", {{"Cache-Control", "no-store"}}));
  std::optional<HangupWatch> watch;
  StreamAuth auth(ctx.principal, ctx.tokens);
  if (follow) watch.emplace(ex);
  bool started = false;
  auto write_read = [&](daemon::ExecLog::Read& r) -> Result<bool> {
    if (!started) {
      started = true;
      TRY_VOID(
          ex.write_chunk(log_line({{"type", "started"}, {"pid", pid}, {"dropped", r.dropped}})));
    } else if (r.dropped > 0) {
      // A follower slower than the command lost output in between: say how much.
      TRY_VOID(ex.write_chunk(log_line({{"type", "dropped"}, {"bytes", r.dropped}})));
    }
    for (auto& c : r.chunks)
      TRY_VOID(ex.write_chunk(log_line(
          {{"type", c.is_stderr ? "stderr" : "stdout"}, {"data", base64_encode(c.data)}})));
    if (!r.ended) return false;
    if (r.exit)
      TRY_VOID(ex.write_chunk(log_line(exit_event_json(*r.exit))));
    else
      TRY_VOID(ex.write_chunk(log_line(
          {{"type", "error"},
           {"error",
            error_body(r.error ? *r.error : Error(Code::kUnavailable, "lost"))["error"]}})));
    return true;
  };
  auto cut = [&](Error e) -> Result<void> {
    json err = {{"type", "error"}, {"error", error_body(e)["error"]}};
    TRY_VOID(ex.write_chunk(log_line(err)));
    return ex.end_chunked();
  };
  auto streamed = [&]() -> Result<void> {
    bool ended = TRY(write_read(first));
    bool more = first.more;  // a read returns at most kExecLogReadBytes: read on
    while (!ended && (follow || more)) {
      if (watch && watch->gone()) return fail(Code::kUnavailable, "the client went away");
      if (auto valid = auth.check(); !valid) return cut(std::move(valid.error()));
      auto r = log->read(
          cursor, SteadyClock::now() + (more ? std::chrono::seconds(0) : std::chrono::seconds(1)));
      more = r.more;
      ended = TRY(write_read(r));
    }
    return ex.end_chunked();
  };
  if (auto r = streamed(); !r) ex.mark_broken();
  return {};
}

// GET /v1/sandboxes/{id}/processes/{pid}/wait[?timeout=S]: waits until the detached command
// ends (or S seconds pass) and answers {"pid", "running", "exit"}.
Result<void> wait_process(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  int pid = TRY(parse_pid(ex.param("pid")));
  std::optional<double> timeout = TRY(timeout_param(ex.target()));
  std::shared_ptr<daemon::ExecLog> log = TRY(ctx.service.exec_log(id, pid));
  auto until = timeout ? SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                                  std::chrono::duration<double>(*timeout))
                       : SteadyClock::time_point::max();
  {
    HangupWatch watch(ex);
    StreamAuth auth(ctx.principal, ctx.tokens);
    while (!log->wait(std::min(until, SteadyClock::now() + std::chrono::seconds(1)))) {
      if (SteadyClock::now() >= until) break;
      if (watch.gone()) {
        ex.mark_broken();
        return {};
      }
      TRY_VOID(auth.check());
    }
  }
  uint64_t end = UINT64_MAX;
  auto r = log->read(end, SteadyClock::now());
  if (!r.ended)
    return ex.respond_json(http::status::ok, {{"pid", pid}, {"running", true}, {"exit", nullptr}});
  if (!r.exit)
    return fail(r.error ? *r.error : Error(Code::kUnavailable, "the command's end is unknown"));
  json exit = exit_event_json(*r.exit);
  exit.erase("type");
  return ex.respond_json(http::status::ok, {{"pid", pid}, {"running", false}, {"exit", exit}});
}

}  // namespace space::api::handlers
