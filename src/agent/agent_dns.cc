// DNS for microVMs: a guest has no network device, so the agent receives the guest's DNS
// queries on the gateway stub's own address inside the guest (--dns-listen 127.0.0.53:53, where
// /etc/resolv.conf points) and carries each datagram to the daemon over the channel, which
// hands it to the sandbox's DNS stub (src/daemon/dns_relay.h). The stub's answer comes back on
// the same stream and is sent to the guest socket that asked.
//
// Per query: the agent opens an agent stream (kAgentStreamBit | n) and sends one `dns` frame
// with the datagram as it came (12..kMaxDnsDatagram bytes; anything else is dropped here); the
// daemon answers with one `dns` frame on that stream: the answer datagram, or empty when it has
// none. Then both forget the stream. The agent keeps at most kMaxDnsInFlight queries
// unanswered and forgets one after kDnsTimeout; guest queries beyond the bound are dropped (the
// guest's resolver retries), so a flood costs neither side more than the bound.
// See docs/agent-protocol.md, "DNS".
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "agent/agent.h"

namespace space::agent {
namespace {

// A query the daemon has not answered within this long is forgotten (its slot freed, a late
// answer ignored). Longer than the daemon's own timeout (it answers empty after 2 s), so that
// normally the daemon's answer frees the slot; this only covers a daemon that never answers.
constexpr std::chrono::seconds kDnsTimeout{5};
// Datagrams read per wake-up; the socket stays readable (level-triggered) for the rest.
constexpr int kDnsReadsPerWake = 64;

}  // namespace

Result<void> Agent::start_dns_listener() {
  const auto& addr = *opts_.dns_listen;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail_sys("socket", "AF_INET for --dns-listen");
  UniqueFd sock(fd);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = addr.ip;
  sa.sin_port = htons(addr.port);
  if ((ntohl(addr.ip) >> 24) == 127) bring_up_loopback();
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) < 0)
    return fail_sys("bind", "--dns-listen " + addr.text +
                                " (is the address configured in the guest and the port free?)");
  TRY_VOID(epoll_add(fd, EPOLLIN, key(kDnsListen, 0)));
  dns_sock_ = std::move(sock);
  return {};
}

void Agent::on_dns_readable() {
  // One byte over the bound, so that an oversized datagram is seen as such (with MSG_TRUNC
  // recvfrom returns a UDP datagram's real length even when the buffer is smaller).
  static char buf[proto::kMaxDnsDatagram + 1];
  for (int i = 0; i < kDnsReadsPerWake; ++i) {
    sockaddr_in from{};
    socklen_t flen = sizeof from;
    ssize_t n = ::recvfrom(dns_sock_.get(), buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC,
                           reinterpret_cast<sockaddr*>(&from), &flen);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        log_line(Error::sys("recvfrom", "DNS listener").message());
      return;
    }
    const size_t len = static_cast<size_t>(n);
    if (len < proto::kDnsHeaderSize || len > proto::kMaxDnsDatagram || from.sin_family != AF_INET) {
      log_line("dns: dropped a " + std::to_string(len) + "-byte datagram (a query is " +
               std::to_string(proto::kDnsHeaderSize) + " to " +
               std::to_string(proto::kMaxDnsDatagram) + " bytes)");
      continue;
    }
    if (!channel_) continue;  // no daemon to ask; the guest's resolver retries
    const auto now = Clock::now();
    if (dns_queries_.size() >= proto::kMaxDnsInFlight)
      std::erase_if(dns_queries_, [&](const auto& q) { return q.second.deadline <= now; });
    if (dns_queries_.size() >= proto::kMaxDnsInFlight) {
      log_line("dns: " + std::to_string(proto::kMaxDnsInFlight) +
               " queries are unanswered; dropping another");
      continue;
    }
    const uint32_t stream = new_agent_stream();
    dns_queries_[stream] = DnsQuery{from, now + kDnsTimeout};
    send(proto::FrameType::kDns, stream, std::string_view(buf, len));
  }
}

void Agent::on_dns_answer(const proto::Frame& f) {
  auto it = dns_queries_.find(f.stream);
  if (it == dns_queries_.end()) return;  // timed out, or the channel changed: late
  const sockaddr_in to = it->second.from;
  dns_queries_.erase(it);
  if (f.payload.empty()) return;  // the daemon has no answer
  if (f.payload.size() > proto::kMaxDnsDatagram) {
    log_line("dns: dropped a " + std::to_string(f.payload.size()) + "-byte answer");
    return;
  }
  // A guest socket that is gone or full just misses it, as with any lost datagram.
  (void)::sendto(dns_sock_.get(), f.payload.data(), f.payload.size(), MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&to), sizeof to);
}

void Agent::drop_dns() {
  // The daemon that was asked is gone: its answers will never come.
  dns_queries_.clear();
}

}  // namespace space::agent
