// DnsRelay: carries the agent's `dns` frames to the sandbox's DNS stub and the stub's answers
// back (see dns_relay.h), and connect_udp_in_netns.
//
// The loop, one pass per wake-up: take the queued queries and send each to the stub under a
// fresh id (a failed send is answered empty at once); read the stub's answers, match each by
// its id, put the guest's id back and send it to the agent on the query's stream (an answer
// that matches nothing waiting, i.e. late, is dropped); answer empty whatever has waited past
// its deadline. The poll timeout is the nearest deadline.
#include "daemon/dns_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "daemon/egress_relay.h"

namespace space::daemon {

using proto::FrameType;

namespace {

// Answers read per pass; the socket stays readable for the next pass.
constexpr int kReadsPerPass = 256;

uint16_t dns_id(std::string_view d) {
  return static_cast<uint16_t>(static_cast<uint8_t>(d[0]) << 8 | static_cast<uint8_t>(d[1]));
}
void set_dns_id(std::string& d, uint16_t id) {
  d[0] = static_cast<char>(id >> 8);
  d[1] = static_cast<char>(id & 0xff);
}

// Logging that stays bounded under a flood: the 1st, 2nd, 4th, 8th ... occurrence.
bool worth_logging(uint64_t count) { return std::has_single_bit(count); }

}  // namespace

Result<UniqueFd> connect_udp_in_netns(int netns_fd, const std::string& ip, uint16_t port) {
  // UDP: connect() sends nothing, only fixes the peer (and filters what is received to it).
  return std::move(TRY(start_connect_in_netns(netns_fd, SOCK_DGRAM, ip, port)).fd);
}

DnsRelay::DnsRelay(AgentConn& conn, std::string name, std::chrono::milliseconds timeout)
    : conn_(conn), name_(std::move(name)), timeout_(timeout) {
  if (getrandom(&next_id_, sizeof next_id_, 0) != sizeof next_id_)
    next_id_ = static_cast<uint16_t>(::getpid());
}

DnsRelay::~DnsRelay() { stop(); }

Result<void> DnsRelay::start(const Open& open) {
  {
    std::lock_guard lock(mu_);
    if (started_ || stopping_) return fail(Code::kInternal, "the DNS relay was started before");
    started_ = true;
  }
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) return fail_sys("eventfd", "DNS relay");
  sock_ = TRY_CTX(open(), "opening the DNS relay's socket to the stub");
  thread_ = std::thread([this] { loop(); });
  conn_.set_on_dns([this](uint32_t stream, std::string q) { on_query(stream, std::move(q)); });
  return {};
}

void DnsRelay::stop() {
  conn_.set_on_dns(nullptr);  // returns once no on_query() call is running
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (wake_) {
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
}

DnsRelay::Stats DnsRelay::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.in_flight = in_flight_;
  return s;
}

// On AgentConn's reader thread: must not block. AgentConn checked the frame (an agent stream,
// kDnsHeaderSize..kMaxDnsDatagram bytes).
void DnsRelay::on_query(uint32_t stream, std::string datagram) {
  uint64_t dropped = 0;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    if (in_flight_ >= proto::kMaxDnsInFlight) {
      dropped = ++stats_.dropped;
    } else {
      queue_.push_back(Query{stream, std::move(datagram)});
      ++in_flight_;
    }
  }
  if (dropped) {
    if (worth_logging(dropped))
      spdlog::warn("{}: the agent has {} DNS queries in flight; dropped one ({} so far)", name_,
                   proto::kMaxDnsInFlight, dropped);
    return;
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void DnsRelay::loop() {
  std::string buf(proto::kMaxDnsDatagram + 1, '\0');
  for (;;) {
    int timeout_ms = -1;
    if (!waiting_.empty()) {
      auto next = std::min_element(waiting_.begin(), waiting_.end(), [](auto& a, auto& b) {
                    return a.second.deadline < b.second.deadline;
                  })->second.deadline;
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
    }
    pollfd p[2] = {{sock_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(p, 2, timeout_ms) < 0 && errno != EINTR) {
      spdlog::error("{}: DNS relay: poll: {}", name_, std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // never spin
    }
    if (p[1].revents & POLLIN) {
      uint64_t v;
      (void)!::read(wake_.get(), &v, sizeof v);
    }
    std::deque<Query> taken;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      taken.swap(queue_);  // they stay counted in in_flight_ until answered
    }
    for (auto& q : taken) forward(q);
    if (p[0].revents) receive(buf);
    expire();
  }
}

void DnsRelay::forward(Query& q) {
  const uint16_t guest_id = dns_id(q.datagram);
  uint16_t id;
  do {
    id = next_id_++;
  } while (waiting_.contains(id));  // at most kMaxDnsInFlight of 65536 are taken
  set_dns_id(q.datagram, id);
  ssize_t n =
      ::send(sock_.get(), q.datagram.data(), q.datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n != static_cast<ssize_t>(q.datagram.size())) {
    // The stub's socket is gone or full (loopback UDP does not block): no answer.
    uint64_t count;
    {
      std::lock_guard lock(mu_);
      count = ++stats_.timed_out;
    }
    if (worth_logging(count))
      spdlog::info("{}: DNS relay: sending to the stub: {}", name_,
                   n < 0 ? std::strerror(errno) : "short send");
    answer(q.stream, "");
    return;
  }
  waiting_[id] = Waiting{q.stream, guest_id, Clock::now() + timeout_};
  std::lock_guard lock(mu_);
  ++stats_.relayed;
}

void DnsRelay::receive(std::string& buf) {
  for (int i = 0; i < kReadsPerPass; ++i) {
    ssize_t n = ::recv(sock_.get(), buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      // An ICMP error from an earlier send (no stub bound yet): reported once, then EAGAIN.
      if (errno == ECONNREFUSED) continue;
      return;
    }
    // The stub answers at most 512 bytes; anything else is not its answer.
    if (n < 2 || static_cast<size_t>(n) > proto::kMaxDnsDatagram) continue;
    auto it = waiting_.find(dns_id(buf));
    if (it == waiting_.end()) continue;  // late: answered empty already
    std::string out = buf.substr(0, static_cast<size_t>(n));
    set_dns_id(out, it->second.guest_id);
    const uint32_t stream = it->second.stream;
    waiting_.erase(it);
    {
      // Counted before it goes out: whoever has the answer sees it counted.
      std::lock_guard lock(mu_);
      ++stats_.answered;
    }
    answer(stream, out);
  }
}

void DnsRelay::expire() {
  const auto now = Clock::now();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    uint64_t count;
    {
      std::lock_guard lock(mu_);
      count = ++stats_.timed_out;
    }
    if (worth_logging(count))
      spdlog::info("{}: the DNS stub did not answer within {} ms ({} so far)", name_,
                   timeout_.count(), count);
    answer(it->second.stream, "");
    it = waiting_.erase(it);
  }
}

void DnsRelay::answer(uint32_t stream, std::string_view datagram) {
  {
    // Before the answer goes out: the agent may send its next query as soon as it has it.
    std::lock_guard lock(mu_);
    --in_flight_;
  }
  // Bounded wait inside send (the agent must keep reading its channel); a lost channel ends
  // the relay's usefulness, and stop() comes from close_agent.
  (void)conn_.send(FrameType::kDns, stream, datagram);
}

}  // namespace space::daemon
