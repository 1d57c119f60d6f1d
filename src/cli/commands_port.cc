// `space port ID PORT [--listen ADDR]`: forwards a loopback port of this host to PORT on
// 127.0.0.1 inside a sandbox, until Ctrl-C. Each accepted connection is its own API request,
// upgraded to a TCP tunnel (POST /v1/sandboxes/{id}/ports/{port}, Upgrade: tcp).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/signals.h"
#include "common/relay.h"
#include "common/tcp_listen.h"

namespace space::cli {
namespace {

using nlohmann::json;

Result<uint16_t> parse_port(std::string_view text, std::string_view what, bool zero_ok) {
  int v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < (zero_ok ? 0 : 1) || v > 65535)
    return fail(
        Code::kInvalidArgument,
        std::string(what) + " must be a port number, 1-65535, not \"" + std::string(text) + "\"");
  return static_cast<uint16_t>(v);
}

// "8080" (on 127.0.0.1), "127.0.0.1:8080", "[::1]:0" -> a listening loopback socket and its
// port.
Result<std::pair<UniqueFd, uint16_t>> listen_loopback(const std::string& spec,
                                                      uint16_t fallback_port) {
  std::string text = spec.empty() ? std::to_string(fallback_port) : spec;
  if (text.find(':') == std::string::npos) {
    TRY(parse_port(text, "--listen's port", true));
    text = "127.0.0.1:" + text;
  }
  auto a = parse_host_port(text);
  if (!a)
    return fail(
        Code::kInvalidArgument,
        "--listen takes PORT or HOST:PORT, e.g. 18080 or 127.0.0.1:18080, not \"" + spec + "\"");
  if (!a->loopback)
    return fail(Code::kInvalidArgument,
                "--listen must be a loopback address (127.0.0.1, ::1): a sandbox's port is not "
                "for the network");
  auto listening = listen_tcp(*a);
  if (!listening && listening.error().sys_errno() == EADDRINUSE)
    return fail(Code::kAlreadyExists, "port " + std::to_string(a->port) +
                                          " is taken on this host; pick another with --listen "
                                          "127.0.0.1:PORT (0: any free one)");
  return listening;
}

// One forwarded connection: a tunnel through spaced, relayed until either side ends.
void forward(UniqueFd client, const Client& c, std::string target) {
  auto conn = Connection::open(c.socket_path(), -1, c.token());
  if (!conn) {
    write_all(STDERR_FILENO, "space: " + escape_text(conn.error().message()) + "\n");
    return;
  }
  auto early = conn->upgrade(target, "tcp");
  if (!early) {
    write_all(STDERR_FILENO, "space: " + escape_text(early.error().message()) + "\n");
    return;  // closing the client's connection tells it
  }
  RelayOptions o;
  o.stop_fd = interrupt_fd();
  o.b_pending = std::move(*early);
  (void)relay(client.get(), conn->stream().fd(), std::move(o));
}

}  // namespace

Result<int> cmd_port(const Args& a, const Client& c) {
  uint16_t port = TRY(parse_port(a.pid, "PORT", false));
  // Is the sandbox there (and a linux one)? Ask before listening, for a clear error.
  json sb = TRY(c.call("GET", sandbox_target(a.id)));
  if (sb.value("state", "") != "running")
    return fail(Code::kConflict,
                "sandbox " + a.id + " is " + sb.value("state", "?") + ", not running");
  if (std::string rt = sb.value("runtime", ""); rt != "linux")
    return fail(Code::kUnimplemented, "ports are forwarded into linux sandboxes only; " + a.id +
                                          " is a " + rt +
                                          " microVM (reach its servers with "
                                          "space exec, e.g. curl)");
  auto [lfd, host_port] = TRY(listen_loopback(a.path, port));
  std::string target = sandbox_target(a.id, "/ports/" + std::to_string(port));
  write_all(STDOUT_FILENO, "forwarding 127.0.0.1:" + std::to_string(host_port) + " -> " + a.id +
                               " port " + std::to_string(port) + " (Ctrl-C stops)\n");
  for (;;) {
    pollfd fds[2] = {{lfd.get(), POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
    if (::poll(fds, interrupt_fd() >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return fail_sys("poll");
    }
    if (interrupt_fd() >= 0 && fds[1].revents != 0) return 128 + received_signal();
    UniqueFd client(::accept4(lfd.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client) continue;
    std::thread(forward, std::move(client), std::cref(c), target).detach();
  }
}

}  // namespace space::cli
