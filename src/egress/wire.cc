// The gateway process's control channel (wire.h): one JSON object per SOCK_SEQPACKET packet.
#include "egress/wire.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <type_traits>

namespace space::egress::wire {

Result<void> send(int sock, const nlohmann::json& body, std::span<const int> fds) {
  std::string text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxMessage)
    return fail(Code::kInvalidArgument,
                "control message of " + std::to_string(text.size()) + " bytes is over the limit");
  if (fds.size() > kMaxFds) return fail(Code::kInvalidArgument, "too many fds for one message");
  iovec iov{text.data(), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return {};
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET)
      return fail(Code::kUnavailable, "the other end of the control channel is gone");
    return fail_sys("sendmsg", "control channel");
  }
}

Result<Message> recv(int sock) {
  // The packet's size first (MSG_PEEK|MSG_TRUNC returns it whole), then the packet.
  char probe;
  ssize_t size;
  do {
    size = ::recv(sock, &probe, 1, MSG_PEEK | MSG_TRUNC);
  } while (size < 0 && errno == EINTR);
  if (size < 0) {
    if (errno == ECONNRESET) return fail(Code::kUnavailable, "control channel reset");
    return fail_sys("recv", "control channel");
  }
  if (size == 0) return fail(Code::kUnavailable, "control channel closed");
  std::string text(static_cast<size_t>(size), '\0');
  iovec iov{text.data(), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return fail_sys("recvmsg", "control channel");
  if (n == 0) return fail(Code::kUnavailable, "control channel closed");
  Message out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      out.fds.emplace_back(fd);
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
    return fail(Code::kInvalidArgument, "a truncated control message");
  text.resize(static_cast<size_t>(n));
  out.body = nlohmann::json::parse(text, nullptr, false);
  if (out.body.is_discarded() || !out.body.is_object())
    return fail(Code::kInvalidArgument, "a control message that is not a JSON object");
  return out;
}

namespace {

// Each counter with its field name, for both directions.
template <class Stats, class Fn>
void each_counter(Stats& s, Fn fn) {
  fn("connections", s.connections);
  fn("requests", s.requests);
  fn("denied", s.denied);
  fn("bytes_up", s.bytes_up);
  fn("bytes_down", s.bytes_down);
  fn("credential_uses", s.credential_uses);
  fn("dns_queries", s.dns_queries);
  fn("active_connections", s.active_connections);
  fn("sandboxes", s.sandboxes);
}

}  // namespace

nlohmann::json stats_json(const Gateway::Stats& s) {
  nlohmann::json j = nlohmann::json::object();
  each_counter(s, [&](const char* k, const auto& v) { j[k] = v; });
  return j;
}

Gateway::Stats stats_of(const nlohmann::json& j) {
  Gateway::Stats s;
  each_counter(s, [&](const char* k, auto& v) {
    auto it = j.find(k);
    if (it != j.end() && it->is_number_unsigned())
      v = it->template get<std::decay_t<decltype(v)>>();
  });
  return s;
}

nlohmann::json error_json(const Error& e) {
  return {{"code", static_cast<int>(e.code())}, {"message", e.message()}};
}

Error error_of(const nlohmann::json& j) {
  int code = static_cast<int>(Code::kInternal);
  std::string message = "the gateway process failed";
  if (j.is_object()) {
    if (auto c = j.find("code"); c != j.end() && c->is_number_integer()) {
      int v = c->get<int>();
      if (v >= 0 && v <= static_cast<int>(Code::kInternal)) code = v;
    }
    if (auto m = j.find("message"); m != j.end() && m->is_string())
      message = m->get<std::string>().substr(0, 4096);
  }
  return Error(static_cast<Code>(code), message);
}

}  // namespace space::egress::wire
