// POST /v1/sandboxes/{id}/exec: runs a command and streams its events as NDJSON.
//
// The request body is a JSON object; with "stdin": true it is followed by "\n" and then the
// raw stdin bytes until the (chunked) body ends. The response starts as soon as the process
// does, long before the request body ends: this thread writes events while a helper thread
// pumps the rest of the body into the process's stdin (full duplex over one HTTP/1.1
// exchange). The helper then watches the connection: if the client goes away, the exec's
// process tree is killed. Flow control: ExecSession::consumed() is called only after an
// output event reached the socket, so a client that reads slowly slows the process down
// instead of filling the daemon's memory. A stream opened with a token lasts only as long as
// the token: a watcher thread checks it once a second (the process may be quiet for hours) and
// kills the exec's process tree once it is revoked or expired; the stream then ends with an
// "error" event saying so.
#include <poll.h>
#include <sys/eventfd.h>

#include <atomic>
#include <csignal>
#include <functional>
#include <thread>

#include "api/handlers.h"
#include "common/base64.h"

namespace space::api::handlers {
namespace {

using nlohmann::json;

std::string line(const json& j) { return json_text(j) + "\n"; }

struct ExecBody {
  daemon::ExecRequest req;
  std::string stdin_head;  // stdin bytes that arrived with the JSON object
};

// Reads the JSON object at the start of the body (and, without stdin, checks nothing follows).
Result<ExecBody> read_exec_body(Exchange& ex) {
  std::string buf;
  JsonValueScanner scanner;
  char tmp[64 * 1024];
  bool ended = false;
  // The JSON part must arrive within one body timeout in total (stdin may then idle freely).
  if (ex.body_timeout().count() > 0) {
    ex.set_body_deadline(FdStream::Clock::now() + ex.body_timeout());
  }
  for (;;) {
    auto state = scanner.feed(buf);
    if (state == JsonValueScanner::State::kComplete) break;
    if (state == JsonValueScanner::State::kTooDeep) {
      return fail(Code::kInvalidArgument, "the exec request is nested more than " +
                                              std::to_string(kMaxJsonDepth) + " levels deep");
    }
    if (state == JsonValueScanner::State::kNotAnObject) {
      return fail(Code::kInvalidArgument,
                  "the exec body must start with a JSON object, e.g. {\"cmd\": [\"ls\"]}");
    }
    if (buf.size() > kMaxJsonBody) {
      ex.close_after();
      return fail(Code::kPayloadTooLarge, "the exec request's JSON object is larger than 1 MiB");
    }
    size_t n = TRY(ex.read_some(tmp, sizeof tmp));
    if (n == 0) {
      ended = true;
      break;
    }
    buf.append(tmp, n);
  }
  if (buf.find_first_not_of(" \t\r\n") == std::string::npos) {
    return fail(Code::kInvalidArgument,
                "the exec request needs a JSON body, e.g. {\"cmd\": [\"ls\", \"-l\"]}");
  }
  size_t end = ended ? buf.size() : scanner.end();
  json j = TRY(parse_json(std::string_view(buf).substr(0, end)));
  ExecBody body{TRY(parse_exec_request(j)), buf.substr(end)};

  if (!body.req.stdin) {
    // Nothing but whitespace may follow the object.
    std::string rest = std::move(body.stdin_head);
    body.stdin_head.clear();
    std::string more = TRY(ex.read_body(kMaxJsonBody));
    rest += more;
    if (rest.find_first_not_of(" \t\r\n") != std::string::npos) {
      return fail(Code::kInvalidArgument,
                  "unexpected data after the exec request's JSON object; to send stdin set "
                  "\"stdin\": true and put the bytes after a newline");
    }
    return body;
  }
  // stdin: the object is followed by exactly one "\n" (or the end of the body).
  while (body.stdin_head.empty() && !ex.body_done()) {
    size_t n = TRY(ex.read_some(tmp, sizeof tmp));
    body.stdin_head.append(tmp, n);
  }
  if (!body.stdin_head.empty()) {
    if (body.stdin_head[0] != '\n') {
      return fail(Code::kInvalidArgument,
                  "with \"stdin\": true the JSON object must be followed by \"\\n\" and then "
                  "the stdin bytes");
    }
    body.stdin_head.erase(0, 1);
  }
  return body;
}

// The "started" event; with "snapshot" when one was taken before the exec (exec --snapshot).
json started_event(const daemon::ExecSession::Event& ev) {
  json j = {{"type", "started"}, {"pid", ev.pid}};
  if (!ev.snapshot.empty()) j["snapshot"] = ev.snapshot;
  return j;
}

// Starts a detached exec and answers 202 {"pid": N} (plus "snapshot" if one was taken), or
// {"pid": null, "exit": {...}} if it ended (or could not start) before it was reported running.
Result<void> exec_detached(Exchange& ex, daemon::ExecSession& session) {
  for (;;) {
    auto ev = TRY(session.next());
    if (ev.kind == daemon::ExecSession::Event::Kind::kStarted) {
      json body = started_event(ev);
      body.erase("type");
      return ex.respond_json(http::status::accepted, body);
    }
    if (ev.kind == daemon::ExecSession::Event::Kind::kExit) {
      json exit = exit_event_json(ev.exit);
      exit.erase("type");
      return ex.respond_json(http::status::accepted, {{"pid", nullptr}, {"exit", exit}});
    }
    session.consumed(ev.data.size());  // output of a detached exec is discarded
  }
}

// The watcher (tokens only): an exec's next() may block for as long as its process is quiet,
// so the token is checked from another thread once a second, until `done` fires; killing the
// process tree unblocks next().
std::thread watch_token(StreamAuth& auth, daemon::ExecSession& session, int done) {
  if (!auth.watching()) return {};
  return std::thread([&auth, &session, done] {
    for (;;) {
      pollfd p{done, POLLIN, 0};
      int rc = ::poll(&p, 1, 1000);
      if (rc > 0 || (rc < 0 && errno != EINTR)) return;  // the exec's stream is over
      if (!auth.check()) {
        session.signal(SIGKILL);
        return;
      }
    }
  });
}

// Ends an attached exec whose client is gone or whose connection is being cut: when spaced is
// stopping (SIGTERM), the stop is recorded as such (audit "stopped", and the client reads an
// error naming the shutdown instead of a signal 9 that looks like an OOM kill).
void end_for_connection(Exchange& ex, daemon::ExecSession& s, std::atomic<bool>& stopping) {
  if (ex.server_stopping()) {
    stopping = true;
    s.stop("spaced is shutting down");
  } else {
    s.signal(SIGKILL);
  }
}

Error shutdown_error() {
  return Error(Code::kUnavailable,
               "spaced is shutting down (SIGTERM: a restart or an upgrade), so the command was "
               "stopped; run it again once spaced is back, or start long commands detached "
               "(`space exec --detach`, \"detach\": true), which outlive a restart");
}

// Writes the exec's events as JSON lines through `emit` until it ends. `finished` is set once
// its exit is known: from then on a client that hangs up (the CLI does as soon as it reads the
// exit event) must not make the caller kill what the command left running in the background.
// `stopping`: its process tree was killed because spaced is stopping; its end is then told as
// an error event saying so. True when the stream's last line ("exit" or "error") was written.
bool stream_events(daemon::ExecSession& session, StreamAuth& auth, const std::string& what,
                   std::atomic<bool>& finished, const std::atomic<bool>& stopping,
                   const std::function<Result<void>(std::string_view)>& emit) {
  using Kind = daemon::ExecSession::Event::Kind;
  for (;;) {
    auto ev = session.next();
    if (auto valid = auth.check(); !valid) {
      // Nothing more for this caller. The process tree is killed and its end awaited (output
      // meanwhile is dropped), so that when the client reads why, nothing of it runs on.
      session.signal(SIGKILL);
      while (ev && ev->kind != Kind::kExit) {
        session.consumed(ev->data.size());
        ev = session.next();
      }
      Error e = std::move(valid.error()).wrap(what + " (its process tree was killed)");
      return emit(line({{"type", "error"}, {"error", error_body(e)["error"]}})).has_value();
    }
    if (!ev)
      return emit(line({{"type", "error"}, {"error", error_body(ev.error())["error"]}}))
          .has_value();
    if (ev->kind == Kind::kStarted) {
      if (!emit(line(started_event(*ev)))) return false;
    } else if (ev->kind == Kind::kStdout || ev->kind == Kind::kStderr) {
      json j = {{"type", ev->kind == Kind::kStdout ? "stdout" : "stderr"},
                {"data", base64_encode(ev->data)}};
      if (!emit(line(j))) return false;
      session.consumed(ev->data.size());
    } else {
      finished = true;
      if (stopping) {
        // "reason": "shutdown" is the stable field the SDKs match (DaemonRestartError); the
        // message is for people and may change.
        json err = error_body(shutdown_error())["error"];
        err["reason"] = "shutdown";
        return emit(line({{"type", "error"}, {"error", err}})).has_value();
      }
      return emit(line(exit_event_json(ev->exit))).has_value();
    }
  }
}

// POST .../exec with "Upgrade: space-terminal": the command runs on a terminal, and the
// connection carries JSON lines both ways: the exec's events from spaced ("started", "stdout",
// then "exit" or "error"), and from the client {"type": "stdin", "data": base64},
// {"type": "resize", "rows", "cols"}, {"type": "signal", "signal": N} and {"type": "eof"}. A
// client that hangs up kills the command's process tree; once the command ended, spaced closes
// the connection.
constexpr std::string_view kTerminalProtocol = "space-terminal";
constexpr size_t kMaxTerminalLine = 1 << 20;

// One line from the terminal's client; false when the line is malformed (the session ends).
bool terminal_input(daemon::ExecSession& s, std::string_view text, bool& stdin_open) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return false;
  const std::string& type = j["type"].get_ref<const std::string&>();
  if (type == "stdin") {
    if (!j.contains("data") || !j["data"].is_string()) return false;
    auto data = base64_decode(j["data"].get<std::string>());
    if (!data) return false;
    if (stdin_open && !data->empty()) stdin_open = s.write_stdin(*data).has_value();
    return true;
  }
  if (type == "resize") {
    auto dim = [&](const char* k) -> int64_t {
      return j.contains(k) && j[k].is_number_integer() ? j[k].get<int64_t>() : 0;
    };
    int64_t rows = dim("rows"), cols = dim("cols");
    if (rows < 1 || rows > 4096 || cols < 1 || cols > 4096) return false;
    s.resize(static_cast<uint16_t>(rows), static_cast<uint16_t>(cols));
    return true;
  }
  if (type == "signal") {
    if (!j.contains("signal") || !j["signal"].is_number_integer()) return false;
    int64_t sig = j["signal"].get<int64_t>();
    if (sig < 1 || sig > 64) return false;
    s.signal(static_cast<int>(sig));
    return true;
  }
  if (type == "eof") {
    // A terminal's end of input is its EOF character (Ctrl-D), which a reader in canonical
    // mode takes as end of file; closing the master side would hang the terminal up instead.
    if (stdin_open) stdin_open = s.write_stdin("\x04").has_value();
    return true;
  }
  return false;
}

Result<void> exec_terminal(Exchange& ex, ApiContext& ctx, const std::string& id,
                           std::unique_ptr<daemon::ExecSession>& session) {
  UniqueFd done(::eventfd(0, EFD_CLOEXEC));
  if (!done) return fail_sys("eventfd");
  std::string early = TRY(ex.switch_protocols(kTerminalProtocol));
  ex.set_read_interrupt_fd(done.get());
  std::atomic<bool> finished{false}, stopping{false};
  std::thread reader([&ex, &session, &finished, &stopping, early = std::move(early)]() mutable {
    daemon::ExecSession& s = *session;
    std::string pending = std::move(early);
    bool stdin_open = true;
    char buf[64 * 1024];
    for (;;) {
      size_t start = 0, nl;
      while ((nl = pending.find('\n', start)) != std::string::npos) {
        std::string_view l(pending.data() + start, nl - start);
        start = nl + 1;
        if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        if (!terminal_input(s, l, stdin_open)) {
          if (!finished) s.signal(SIGKILL);  // a client that speaks nonsense ends its session
          return;
        }
      }
      pending.erase(0, start);
      if (pending.size() > kMaxTerminalLine) {
        if (!finished) s.signal(SIGKILL);
        return;
      }
      auto n = ex.raw_read(buf, sizeof buf);
      if (!n || *n == 0) {
        if (!finished) end_for_connection(ex, s, stopping);  // the client hung up, or spaced stops
        return;
      }
      pending.append(buf, *n);
    }
  });
  StreamAuth auth(ctx.principal, ctx.tokens);
  std::thread watcher = watch_token(auth, *session, done.get());
  (void)stream_events(*session, auth, "terminal in " + id, finished, stopping,
                      [&ex](std::string_view l) { return ex.raw_write(l); });
  finished = true;
  ex.raw_shutdown_write();
  uint64_t one = 1;
  (void)!::write(done.get(), &one, sizeof one);
  reader.join();
  if (watcher.joinable()) watcher.join();
  ex.set_read_interrupt_fd(-1);
  session.reset();  // kills its tree if it has not ended (the client went away)
  return {};
}

}  // namespace

json exit_event_json(const daemon::ExitStatus& s) {
  json j = {{"type", "exit"},
            {"exit_code", s.exit_code ? json(*s.exit_code) : json(nullptr)},
            {"signal", s.signal ? json(*s.signal) : json(nullptr)},
            {"core_dumped", s.core_dumped},
            {"timed_out", s.timed_out},
            {"oom_killed", s.oom_killed},
            {"duration_s", s.duration_s}};
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

Result<void> exec(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  bool terminal = ex.wants_upgrade(kTerminalProtocol);
  ExecBody body = TRY(read_exec_body(ex));
  if (terminal) {
    if (body.req.detach || body.req.stdin)
      return fail(Code::kInvalidArgument,
                  "a terminal (Upgrade: space-terminal) takes neither \"detach\" nor \"stdin\": "
                  "its input comes over the upgraded connection");
    body.req.tty = true;
    body.req.stdin = true;
  }
  std::unique_ptr<daemon::ExecSession> session = TRY(ctx.service.exec(id, body.req));
  if (terminal) return exec_terminal(ex, ctx, id, session);
  if (body.req.detach) return exec_detached(ex, *session);

  UniqueFd done(::eventfd(0, EFD_CLOEXEC));
  if (!done) return fail_sys("eventfd");
  TRY_VOID(
      ex.begin_chunked(http::status::ok, "application/x-ndjson", {{"Cache-Control", "no-store"}}));

  // The helper: pumps stdin (if any), then waits for the client to hang up. `done` stops it;
  // anything else that ends its wait (the client vanished, the server is stopping) kills the
  // exec's process tree so that next() below returns.
  ex.set_read_interrupt_fd(done.get());
  std::atomic<bool> finished{false}, stopping{false};
  std::thread helper([&ex, &session, &body, &finished, &stopping] {
    daemon::ExecSession& s = *session;
    if (body.req.stdin) {
      bool forward = true;  // false once the process no longer takes stdin: then drain
      if (!body.stdin_head.empty()) forward = s.write_stdin(body.stdin_head).has_value();
      // stdin may idle for as long as it likes.
      ex.set_body_deadline(FdStream::Clock::time_point::max());
      ex.set_body_timeout(std::chrono::milliseconds(0));
      char buf[64 * 1024];
      for (;;) {
        auto n = ex.read_some(buf, sizeof buf);
        if (!n) {
          if (!finished) end_for_connection(ex, s, stopping);
          return;
        }
        if (*n == 0) {
          if (forward) (void)s.close_stdin();
          break;
        }
        if (forward) forward = s.write_stdin(std::string_view(buf, *n)).has_value();
      }
    }
    ex.wait_client_hangup();
    if (!finished) end_for_connection(ex, s, stopping);
  });

  StreamAuth auth(ctx.principal, ctx.tokens);
  std::thread watcher = watch_token(auth, *session, done.get());
  bool complete = stream_events(*session, auth, "exec in " + id, finished, stopping,
                                [&ex](std::string_view l) { return ex.write_chunk(l); }) &&
                  ex.end_chunked().has_value();

  finished = true;
  uint64_t one = 1;
  (void)!::write(done.get(), &one, sizeof one);
  helper.join();
  if (watcher.joinable()) watcher.join();
  ex.set_read_interrupt_fd(-1);
  // Destroying a session whose exec has not ended kills its process tree (client gone).
  session.reset();
  if (!complete) ex.mark_broken();
  return {};
}

}  // namespace space::api::handlers
