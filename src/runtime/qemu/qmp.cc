// QMP over a Unix socket: the greeting and capabilities negotiation, then one command at a
// time with its answer read in bounded lines, and fds passed with SCM_RIGHTS; see qmp.h.
#include "runtime/qemu/qmp.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace space::runtime::qemu {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// QMP answers are small; a migration status is the largest we ask for. More than this on one
// line means QEMU (or whatever holds the socket) is misbehaving.
constexpr size_t kMaxLine = 1 << 20;

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

Result<Qmp> Qmp::connect(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.native().size() >= sizeof addr.sun_path)
    return fail(Code::kInvalidArgument, "QMP socket path too long: " + path.string());
  std::memcpy(addr.sun_path, path.c_str(), path.native().size());
  auto deadline = Clock::now() + timeout;
  for (;;) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return fail_sys("socket", "AF_UNIX");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      Qmp q(std::move(fd));
      json greeting = TRY_CTX(q.read_message(deadline), "reading QEMU's QMP greeting");
      if (!greeting.contains("QMP"))
        return fail(Code::kProtocol, "QMP: the first message is not a greeting");
      TRY_VOID_CTX(q.execute("qmp_capabilities", json::object(),
                             std::chrono::milliseconds(std::max(ms_left(deadline), 1000))),
                   "QMP capabilities negotiation");
      return q;
    }
    int err = errno;
    if ((err != ENOENT && err != ECONNREFUSED) || Clock::now() >= deadline)
      return fail_sys("connect", path.string(), err);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Result<void> Qmp::send_line(const std::string& line, int pass_fd) {
  size_t off = 0;
  while (off < line.size()) {
    iovec iov{const_cast<char*>(line.data() + off), line.size() - off};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (pass_fd >= 0 && off == 0) {
      std::memset(control, 0, sizeof control);
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_sys("sendmsg", "QMP socket");
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

Result<json> Qmp::read_message(Clock::time_point deadline) {
  for (;;) {
    if (auto nl = buf_.find('\n'); nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        return fail(Code::kProtocol, "QMP: QEMU sent something that is not a JSON object");
      return j;
    }
    if (buf_.size() > kMaxLine) return fail(Code::kProtocol, "QMP: line longer than 1 MiB");
    pollfd p{fd_.get(), POLLIN, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail_sys("poll", "QMP socket");
    if (r == 0) return fail(Code::kTimeout, "QMP: QEMU did not answer in time");
    char chunk[4096];
    ssize_t n = ::read(fd_.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_sys("read", "QMP socket");
    if (n == 0) return fail(Code::kUnavailable, "QMP: QEMU closed the connection (it exited?)");
    buf_.append(chunk, static_cast<size_t>(n));
  }
}

Result<json> Qmp::await_answer(Clock::time_point deadline, const std::string& what) {
  for (;;) {
    json m = TRY(read_message(deadline));
    if (m.contains("event")) continue;  // asynchronous: STOP, RESUME, MIGRATION, ...
    if (auto it = m.find("return"); it != m.end()) return *it;
    if (auto it = m.find("error"); it != m.end() && it->is_object()) {
      // Typed reads: json::value() throws type_error on a non-string, out of a Result API.
      auto text = [&](const char* key, const char* absent) {
        auto f = it->find(key);
        return f != it->end() && f->is_string() ? f->get<std::string>() : std::string(absent);
      };
      std::string cls = text("class", "GenericError");
      std::string desc = text("desc", "(no description)");
      return fail(Code::kInternal, "QEMU refused " + what + ": " + desc + " (" + cls + ")");
    }
    return fail(Code::kProtocol, "QMP: an answer without \"return\" or \"error\"");
  }
}

Result<json> Qmp::execute(const std::string& command, const json& args,
                          std::chrono::milliseconds timeout) {
  json cmd = {{"execute", command}};
  if (!args.empty()) cmd["arguments"] = args;
  TRY_VOID(send_line(cmd.dump() + "\n", -1));
  return await_answer(Clock::now() + timeout, "\"" + command + "\"");
}

Result<void> Qmp::send_fd(const std::string& name, int fd, std::chrono::milliseconds timeout) {
  json cmd = {{"execute", "getfd"}, {"arguments", {{"fdname", name}}}};
  TRY_VOID(send_line(cmd.dump() + "\n", fd));
  TRY_VOID(await_answer(Clock::now() + timeout, "getfd"));
  return {};
}

}  // namespace space::runtime::qemu
