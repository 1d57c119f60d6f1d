// Host-side vsock connections through Firecracker's Unix socket; see vsock.h.
#include "runtime/firecracker/vsock.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

namespace space::runtime::firecracker {
namespace {

using Clock = std::chrono::steady_clock;

bool exited(int pidfd) {
  if (pidfd < 0) return false;
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

int ms_left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

// One attempt at the handshake: "OK <digits>\n" within the deadline, else why not. Reads a byte
// at a time: nothing past the newline may be consumed, it is the guest's.
Result<void> handshake(int fd, uint32_t port, Clock::time_point deadline) {
  std::string req = "CONNECT " + std::to_string(port) + "\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    if (errno == EPIPE || errno == ECONNRESET)
      return fail(Code::kUnavailable, "Firecracker hung up before CONNECT");
    return fail_sys("send", "CONNECT");
  }
  std::string line;
  while (line.size() < 32) {
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return fail(Code::kTimeout, "no answer to CONNECT " + std::to_string(port));
    char c;
    ssize_t n = ::recv(fd, &c, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return fail(Code::kUnavailable,
                  "nothing listens on guest vsock port " + std::to_string(port) + " (yet)");
    if (c == '\n') break;
    line.push_back(c);
  }
  if (line.size() < 4 || line.compare(0, 3, "OK ") != 0 ||
      line.find_first_not_of("0123456789", 3) != std::string::npos)
    return fail(Code::kProtocol, "unexpected answer to CONNECT " + std::to_string(port));
  return {};
}

}  // namespace

Result<UniqueFd> connect_jailed(int dir_fd, const std::string& name, uid_t peer_uid,
                                Clock::time_point deadline, int pidfd) {
  if (name.empty() || name.find('/') != std::string::npos)
    return fail(Code::kInvalidArgument, "socket name \"" + name + "\" must be one path component");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string path = "/proc/self/fd/" + std::to_string(dir_fd) + "/" + name;
  if (path.size() >= sizeof addr.sun_path)
    return fail(Code::kInvalidArgument, "socket name too long: " + name);
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  for (;;) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return fail_sys("socket", "AF_UNIX");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      ucred cred{};
      socklen_t len = sizeof cred;
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return fail_sys("getsockopt", "SO_PEERCRED " + name);
      if (cred.uid != peer_uid)
        return fail(Code::kPermissionDenied, name + " is served by uid " +
                                                 std::to_string(cred.uid) + ", not the jail's " +
                                                 std::to_string(peer_uid) + ": refusing it");
      return fd;
    }
    int err = errno;
    if (err != ENOENT && err != ECONNREFUSED) return fail_sys("connect", name, err);
    if (exited(pidfd)) return fail(Code::kUnavailable, "Firecracker exited");
    if (Clock::now() >= deadline)
      return fail(Code::kTimeout, "Firecracker did not open " + name + " in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Result<UniqueFd> vsock_connect(int dir_fd, const std::string& name, uint32_t port, uid_t peer_uid,
                               Clock::time_point deadline, int pidfd) {
  // When time runs out in the middle of an attempt, the reason is better told by the attempt
  // before: "nothing listens" says more than "no answer".
  std::optional<Error> refused;
  for (;;) {
    auto fd = connect_jailed(dir_fd, name, peer_uid, deadline, pidfd);
    if (!fd) return fail(refused && fd.error().code() == Code::kTimeout ? *refused : fd.error());
    auto r = handshake(fd->get(), port, deadline);
    if (r) return std::move(*fd);
    if (r.error().code() == Code::kTimeout && refused) return fail(*refused);
    // Firecracker hangs up while the guest has no listener: the agent is still starting.
    if (r.error().code() != Code::kUnavailable || Clock::now() >= deadline)
      return fail(std::move(r.error()));
    refused = r.error();
    if (exited(pidfd)) return fail(Code::kUnavailable, "Firecracker exited");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace space::runtime::firecracker
