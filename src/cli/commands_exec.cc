// `space exec` and `space run`: stream a command's output as it arrives, forward stdin, and
// exit with the command's own code.
//
// The exec request is one HTTP exchange. Without stdin it is a plain POST. With stdin (the
// CLI's stdin is not a terminal) the body is chunked: the JSON request, "\n", then whatever
// arrives on stdin, sent by a helper thread while this thread reads the response; the exit
// event ends the CLI even if stdin is still open. Ctrl-C closes the connection, which makes
// the daemon kill the command's process tree.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "cli/commands.h"
#include "cli/daemon_start.h"
#include "cli/output.h"
#include "cli/signals.h"
#include "common/base64.h"
#include "common/units.h"

namespace space::cli {
namespace {

constexpr int kRunIdleTimeoutS = 30;  // space run's sandbox, once its client is gone

using nlohmann::json;

constexpr size_t kMaxEventLine = 64u << 20;

// Copies our stdin into the request body until EOF, or until `done` / Ctrl-C.
void pump_stdin(Connection& conn, int done) {
  char buf[64 * 1024];
  for (;;) {
    pollfd fds[3] = {{STDIN_FILENO, POLLIN, 0}, {done, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0 || fds[2].revents != 0) return;
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // EOF (or an unreadable stdin: treated as EOF)
    if (!conn.write_chunk(std::string_view(buf, static_cast<size_t>(n)))) return;
  }
  (void)conn.end_chunks();
}

// Owns the stdin thread: on destruction the connection is shut down (unblocking a write the
// daemon is not reading) and the thread is stopped and joined.
class StdinPump {
 public:
  StdinPump(Connection& conn) : conn_(conn), done_(::eventfd(0, EFD_CLOEXEC)) {
    thread_ = std::thread([this] { pump_stdin(conn_, done_.get()); });
  }
  ~StdinPump() {
    conn_.stream().shutdown(SHUT_RDWR);
    uint64_t one = 1;
    (void)!::write(done_.get(), &one, sizeof one);
    thread_.join();
  }

 private:
  Connection& conn_;
  UniqueFd done_;
  std::thread thread_;
};

// exec --snapshot: says which snapshot was taken, before any of the command's output.
void report_snapshot(const json& started) {
  if (started.contains("snapshot") && started["snapshot"].is_string()) {
    write_all(STDERR_FILENO, "space: snapshot " +
                                 escape_text(started["snapshot"].get<std::string>()) +
                                 " taken before this command\n");
  }
}

// Handles one event line; returns an exit code when the stream is over.
Result<std::optional<int>> handle_event(std::string_view line) {
  json ev = json::parse(line, nullptr, false);
  if (!ev.is_object()) {
    return fail(Code::kProtocol, "the daemon sent a malformed exec event");
  }
  std::string type = ev.value("type", "");
  if (type == "stdout" || type == "stderr") {
    auto data = TRY(exec_event_data(ev));
    if (type == "stdout") {
      if (!write_all(STDOUT_FILENO, data)) return std::optional<int>(128 + SIGPIPE);
    } else {
      (void)write_all(STDERR_FILENO, data);
    }
  } else if (type == "exit") {
    return std::optional<int>(exit_code_of(ev));
  } else if (type == "error") {
    const json& e = ev.value("error", json::object());
    return fail(api_error(500, json{{"error", e}}.dump()));
  } else if (type == "started") {
    report_snapshot(ev);
  }
  // Event types from newer daemons need nothing here.
  return std::optional<int>();
}

}  // namespace

Result<std::string> exec_event_data(const json& ev) {
  auto data = ev.contains("data") && ev["data"].is_string()
                  ? base64_decode(ev["data"].get<std::string>())
                  : std::nullopt;
  if (!data) return fail(Code::kProtocol, "the daemon sent an exec event with bad data");
  return std::move(*data);
}

int exit_code_of(const json& ev) {
  if (ev.contains("error") && ev["error"].is_string() && !ev["error"].get<std::string>().empty()) {
    write_all(STDERR_FILENO, "space: " + escape_text(ev["error"].get<std::string>()) + "\n");
  }
  if (ev.value("timed_out", false)) {
    write_all(STDERR_FILENO, "space: the command timed out and was killed (--timeout)\n");
  }
  if (ev.value("oom_killed", false)) {
    write_all(STDERR_FILENO,
              "space: the sandbox ran out of memory and the kernel killed a process; "
              "raise --memory\n");
  }
  if (ev.contains("exit_code") && ev["exit_code"].is_number_integer()) {
    return ev["exit_code"].get<int>();
  }
  if (ev.contains("signal") && ev["signal"].is_number_integer()) {
    return 128 + ev["signal"].get<int>();
  }
  return kExitSpaceFailed;
}

bool should_forward_stdin() {
  if (::isatty(STDIN_FILENO)) return false;
  struct stat st;
  return !(::fstat(STDIN_FILENO, &st) == 0 && S_ISCHR(st.st_mode) &&
           st.st_rdev == makedev(1, 3));  // /dev/null
}

Result<int> stream_exec(Connection conn, const std::string& id, json body, bool forward_stdin) {
  const std::string target = sandbox_target(id, "/exec");
  std::optional<StdinPump> pump;
  if (forward_stdin) {
    body["stdin"] = true;
    TRY_VOID(conn.start_chunked("POST", target, "application/octet-stream"));
    TRY_VOID(conn.write_chunk(body.dump() + "\n"));
    pump.emplace(conn);
  } else {
    TRY_VOID(conn.send("POST", target, body.dump()));
  }

  auto interrupted = [](Error e) -> Result<int> {
    if (int sig = received_signal(); sig != 0) return 128 + sig;
    return fail(std::move(e));
  };
  auto status = conn.read_head();
  if (!status) return interrupted(std::move(status.error()));
  if (*status != 200) {
    std::string text = conn.read_body(1 << 20).value_or("");
    return fail(api_error(*status, text));
  }

  std::string pending;
  size_t start = 0;
  char buf[64 * 1024];
  for (;;) {
    size_t nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      auto done = TRY(handle_event(std::string_view(pending).substr(start, nl - start)));
      start = nl + 1;
      if (done) return *done;
    }
    pending.erase(0, start);
    start = 0;
    if (pending.size() > kMaxEventLine) {
      return fail(Code::kProtocol, "the daemon sent an exec event larger than 64 MiB");
    }
    auto n = conn.read_some(buf, sizeof buf);
    if (!n) return interrupted(std::move(n.error()));
    if (*n == 0) {
      return fail(Code::kUnavailable,
                  "the daemon ended the exec stream before the command "
                  "exited; `space ps " +
                      id + "` shows what still runs");
    }
    pending.append(buf, *n);
  }
}

Result<int> cmd_exec(const Args& a, const Client& c) {
  json body = TRY(exec_body(a));
  if (a.detach) {
    json res = TRY(c.call("POST", sandbox_target(a.id, "/exec"), body));
    report_snapshot(res);
    if (res.contains("pid") && res["pid"].is_number_integer()) {
      write_all(STDOUT_FILENO, std::to_string(res["pid"].get<int>()) + "\n");
      return 0;
    }
    return exit_code_of(res.value("exit", json::object()));
  }
  return stream_exec(TRY(c.connect()), a.id, std::move(body),
                     a.interactive || should_forward_stdin());
}

// A pid argument: digits only, so it cannot change the request's path.
Result<std::string> pid_arg(const Args& a) {
  if (a.pid.empty() || a.pid.size() > 8 ||
      a.pid.find_first_not_of("0123456789") != std::string::npos)
    return fail(Code::kInvalidArgument,
                "bad pid \"" + escape_text(a.pid) + "\"; `space exec --detach` printed it");
  return a.pid;
}

Result<int> cmd_logs(const Args& a, const Client& c) {
  std::string pid = TRY(pid_arg(a));
  Connection conn = TRY(c.connect());
  TRY_VOID(conn.send(
      "GET", sandbox_target(a.id, "/processes/" + pid + "/logs" + (a.follow ? "?follow=true" : "")),
      ""));
  auto status = conn.read_head();
  if (!status) {
    if (int sig = received_signal(); sig != 0) return 128 + sig;
    return fail(std::move(status.error()));
  }
  if (*status != 200) return fail(api_error(*status, conn.read_body(1 << 20).value_or("")));
  auto dropped = [](const json& n) {
    if (n.is_number_unsigned() && n.get<uint64_t>() > 0)
      write_all(STDERR_FILENO,
                "space: " + std::to_string(n.get<uint64_t>()) +
                    " bytes of earlier output are no longer kept (spaced keeps the most recent "
                    "1 MiB of a detached command)\n");
  };
  int code = 0;
  auto r = conn.for_each_line([&](std::string_view line) -> Result<bool> {
    json ev = json::parse(line, nullptr, false);
    if (!ev.is_object()) return fail(Code::kProtocol, "the daemon sent a malformed log event");
    std::string type = ev.value("type", "");
    if (type == "started") {
      dropped(ev.value("dropped", json()));
    } else if (type == "dropped") {
      dropped(ev.value("bytes", json()));
    } else if (type == "stdout" || type == "stderr") {
      auto data = TRY(exec_event_data(ev));
      if (type == "stdout") {
        if (!write_all(STDOUT_FILENO, data)) {
          code = 128 + SIGPIPE;
          return false;
        }
      } else {
        (void)write_all(STDERR_FILENO, data);
      }
    } else if (type == "error") {
      return fail(api_error(500, json{{"error", ev.value("error", json::object())}}.dump()));
    }
    return true;
  });
  if (!r) {
    if (int sig = received_signal(); sig != 0) return 128 + sig;
    return fail(std::move(r.error()));
  }
  return code;
}

Result<int> cmd_wait(const Args& a, const Client& c) {
  std::string pid = TRY(pid_arg(a));
  std::string query;
  if (!a.timeout.empty()) {
    double s = TRY(parse_duration(a.timeout));
    query = "?timeout=" + std::to_string(s);
  }
  auto res = c.call("GET", sandbox_target(a.id, "/processes/" + pid + "/wait" + query));
  if (!res) {
    if (int sig = received_signal(); sig != 0) return 128 + sig;
    return fail(std::move(res.error()));
  }
  if (res->value("running", false)) {
    write_all(STDERR_FILENO, "space: pid " + pid + " still runs after " + a.timeout +
                                 "; wait again, or stop it with `space kill " + a.id + " " + pid +
                                 "`\n");
    return 124;  // as timeout(1)
  }
  return exit_code_of(res->value("exit", json::object()));
}

Result<int> cmd_run(const Args& a, const Client& c) {
  json create = TRY(create_body(a.sandbox));
  // While the command runs its exec stream keeps the sandbox; if this CLI dies in a way that
  // skips the DELETE below (SIGKILL), spaced removes the sandbox once it has been idle this long.
  create["idle_timeout"] = kRunIdleTimeoutS;
  // No command: the sandbox's default one, its image's Entrypoint + Cmd (the daemon decides).
  json exec = a.cmd.empty() ? json::object() : json{{"cmd", a.cmd}};
  if (create.contains("timeout")) exec["timeout"] = create["timeout"];  // the lifetime bounds it
  // One connection carries the create and then the exec (HTTP keep-alive); the destroy gets
  // its own, since an exec's connection is closed mid-stream when we stop early.
  Connection conn = TRY(ensure_daemon(c));

  // Creating and destroying are not interruptible, so a Ctrl-C never leaves a sandbox behind
  // that we created but do not know the id of.
  Client steady(c.socket_path(), -1, c.token());
  conn.stream().set_stop_fd(-1);
  json sandbox = TRY(conn.call("POST", "/v1/sandboxes", create));
  std::string id = sandbox.value("id", "");
  if (id.empty()) return fail(Code::kProtocol, "the daemon created a sandbox without an id");

  auto exec_stream = [&]() -> Result<int> {
    if (conn.reusable()) {
      conn.stream().set_stop_fd(c.stop_fd());
    } else {
      conn = TRY(c.connect());
    }
    return stream_exec(std::move(conn), id, std::move(exec), should_forward_stdin());
  };
  Result<int> result =
      received_signal() != 0 ? Result<int>(128 + received_signal()) : exec_stream();
  // The command's exit is known: the sandbox need only be unreachable before we answer; spaced
  // kills what is left in it and removes it in the background (docs/pools.md).
  auto destroyed = steady.call("DELETE", sandbox_target(id, "?force=true&wait=false"));
  if (!destroyed) {
    write_all(STDERR_FILENO, "space: could not destroy sandbox " + escape_text(id) + ": " +
                                 escape_text(destroyed.error().message()) +
                                 "; remove it with `space rm --force " + id + "`\n");
  }
  if (int sig = received_signal(); sig != 0) return 128 + sig;
  return result;
}

}  // namespace space::cli
