// `space exec -t ID -- CMD`: CMD on a terminal inside the sandbox. The exec request is upgraded
// (POST .../exec, Upgrade: space-terminal) and the connection carries JSON lines both ways
// (api/openapi.yaml, "exec"): this terminal's keys, its size (again on every SIGWINCH) and
// end of input go up; the command's output and its exit come down. With a terminal on stdin it
// is put in raw mode for the session (Ctrl-C, Ctrl-D, arrows go to the command) and restored
// however the session ends. The CLI exits with the command's exit code.
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <thread>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/signals.h"
#include "common/base64.h"

namespace space::cli {
namespace {

using nlohmann::json;

int g_winch_fd = -1;  // made readable by SIGWINCH

void on_winch(int) {
  int saved = errno;
  uint64_t one = 1;
  (void)!::write(g_winch_fd, &one, sizeof one);
  errno = saved;
}

// This terminal in raw mode while the session lasts.
class RawMode {
 public:
  explicit RawMode(int fd) : fd_(fd) {
    if (!::isatty(fd_) || ::tcgetattr(fd_, &saved_) < 0) return;
    termios raw = saved_;
    ::cfmakeraw(&raw);
    active_ = ::tcsetattr(fd_, TCSADRAIN, &raw) == 0;
  }
  ~RawMode() { restore(); }
  void restore() {
    if (active_) ::tcsetattr(fd_, TCSADRAIN, &saved_);
    active_ = false;
  }

 private:
  int fd_;
  termios saved_{};
  bool active_ = false;
};

std::optional<std::pair<int, int>> window_size() {
  winsize ws{};
  for (int fd : {STDIN_FILENO, STDOUT_FILENO})
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0)
      return std::pair<int, int>(ws.ws_row, ws.ws_col);
  return std::nullopt;
}

}  // namespace

Result<int> cmd_exec_terminal(const Args& a, const Client& c) {
  if (a.detach)
    return fail(Code::kInvalidArgument,
                "--tty and --detach do not go together: a terminal needs this CLI attached");
  json body = TRY(exec_body(a));
  const std::string& id = a.id;
  if (auto size = window_size()) {
    body["rows"] = size->first;
    body["cols"] = size->second;
  }
  Connection conn = TRY(c.connect());
  auto early = conn.upgrade(sandbox_target(id, "/exec"), "space-terminal", body.dump());
  if (!early) {
    if (int sig = received_signal(); sig != 0) return 128 + sig;
    return fail(std::move(early.error()));
  }

  UniqueFd winch(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  UniqueFd done(::eventfd(0, EFD_CLOEXEC));
  if (!winch || !done) return fail_sys("eventfd");
  g_winch_fd = winch.get();
  struct sigaction sa {};
  sa.sa_handler = on_winch;
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGWINCH, &sa, nullptr);

  RawMode raw(STDIN_FILENO);
  FdStream& stream = conn.stream();
  auto send = [&stream](const json& j) { return !stream.write_all(j.dump() + "\n"); };
  std::thread input([&] {
    char buf[16 * 1024];
    bool open = true;
    for (;;) {
      pollfd fds[3] = {
          {open ? STDIN_FILENO : -1, POLLIN, 0}, {winch.get(), POLLIN, 0}, {done.get(), POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[2].revents != 0) return;
      if (fds[1].revents != 0) {
        uint64_t n;
        (void)!::read(winch.get(), &n, sizeof n);
        if (auto size = window_size())
          if (!send({{"type", "resize"}, {"rows", size->first}, {"cols", size->second}})) return;
      }
      if (fds[0].revents != 0) {
        ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
          open = false;
          if (!send({{"type", "eof"}})) return;
          continue;
        }
        std::string_view data(buf, static_cast<size_t>(n));
        if (!send({{"type", "stdin"}, {"data", base64_encode(data)}})) return;
      }
    }
  });
  auto stop_input = [&] {
    uint64_t one = 1;
    (void)!::write(done.get(), &one, sizeof one);
    input.join();
    raw.restore();
  };

  std::string pending = std::move(*early);
  std::optional<json> exit;
  std::optional<Error> failure;
  char buf[64 * 1024];
  while (!exit && !failure) {
    size_t nl;
    while (!exit && !failure && (nl = pending.find('\n')) != std::string::npos) {
      json ev = json::parse(std::string_view(pending).substr(0, nl), nullptr, false);
      pending.erase(0, nl + 1);
      std::string type = ev.is_object() ? ev.value("type", "") : "";
      if (type == "stdout" || type == "stderr") {
        auto data = exec_event_data(ev);
        if (!data)
          failure = data.error();
        else
          (void)write_all(type == "stdout" ? STDOUT_FILENO : STDERR_FILENO, *data);
      } else if (type == "exit") {
        exit = ev;
      } else if (type == "error") {
        failure = api_error(500, json{{"error", ev.value("error", json::object())}}.dump());
      } else if (!ev.is_object()) {
        failure = Error(Code::kProtocol, "the daemon sent a malformed terminal event");
      }
    }
    if (exit || failure) break;
    boost::system::error_code ec;
    size_t n = stream.read_some(boost::asio::mutable_buffer(buf, sizeof buf), ec);
    if (ec) {
      stop_input();
      if (int sig = received_signal(); sig != 0) return 128 + sig;
      return fail(Code::kUnavailable,
                  "the terminal's connection to spaced ended before the "
                  "command exited; `space ps " +
                      id + "` shows what still runs");
    }
    pending.append(buf, n);
  }
  stop_input();
  if (failure) return fail(std::move(*failure));
  return exit_code_of(*exit);
}

}  // namespace space::cli
