// Pieces shared by the gateway's files (gateway.cc: listeners, DNS stub, lifecycle; proxy.cc:
// HTTP and TLS connection handling; request_stage.cc: the decision on each request;
// upstream.cc: resolving, dialing and tunneling). Not part of the gateway's interface.
#pragma once

#include <atomic>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/fd.h"
#include "common/fd_stream.h"
#include "common/token_bucket.h"
#include "egress/gateway.h"
#include "egress/tls_stream.h"

namespace space::egress {

// Token bucket for one direction of a sandbox's traffic (0 = unlimited).
class RateLimiter {
 public:
  explicit RateLimiter(uint64_t bytes_per_s) : rate_(bytes_per_s) {}
  // Accounts for `n` bytes, sleeping as long as the rate requires (woken early by `cancel_fd`).
  void take(size_t n, int cancel_fd);
  // The largest chunk worth moving at once (so a slow rate is smooth).
  size_t chunk(size_t max) const;

 private:
  uint64_t rate_;
  std::mutex mu_;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

struct Gateway::State {
  explicit State(SandboxEgress s)
      : sb(std::move(s)),
        up(sb.policy.bandwidth_bytes_per_s()),
        down(sb.policy.bandwidth_bytes_per_s()) {}
  SandboxEgress sb;
  UniqueFd cancel;  // eventfd, written once on detach
  std::vector<UniqueFd> listeners;
  std::atomic<bool> detached{false};
  std::atomic<size_t> active{0};  // open connections
  RateLimiter up, down;
  // Refusals seen by the listener thread (DNS, the connection limit) are audited at most
  // kListenerAuditBurst at once and kListenerAuditRate per second per sandbox, so a flood of
  // queries cannot back up the audit log and stall the thread every sandbox shares. The
  // number left out goes into the next event that is recorded ("suppressed").
  static constexpr double kListenerAuditRate = 20, kListenerAuditBurst = 100;
  // True if an event may be recorded now; sets `suppressed` to the count left out before it.
  bool listener_audit_allowed(uint64_t* suppressed) {
    std::lock_guard lock(bucket_mu);
    if (!audit_bucket.take(kListenerAuditRate, kListenerAuditBurst)) {
      ++audit_suppressed;
      return false;
    }
    *suppressed = std::exchange(audit_suppressed, 0);
    return true;
  }
  // Runs of mint commands this sandbox may cause (SecretStore::MintPermit): kMintBurst at once,
  // then kMintRate per second, for all its secrets together.
  static constexpr double kMintRate = 1, kMintBurst = 5;
  bool mint_allowed() {
    std::lock_guard lock(bucket_mu);
    return mint_bucket.take(kMintRate, kMintBurst);
  }
  using Bucket = TokenBucket;
  std::mutex bucket_mu;  // guards the three fields below
  Bucket audit_bucket, mint_bucket;
  uint64_t audit_suppressed = 0;
  std::mutex ctx_mu;                                           // guards server_ctx
  std::map<std::string, std::shared_ptr<SSL_CTX>> server_ctx;  // per intercepted host
};

enum class ListenerKind { kProxy, kTransparentTls, kTransparentHttp, kDns };

// What connection handlers need from the gateway.
struct Shared {
  Gateway::Options options;
  std::shared_ptr<SecretStore> secrets;
  // The upstream client context, made at start with the extra CAs; the system trust store is
  // added on first use (upstream()): it takes tens of milliseconds to parse, which a gateway
  // process that never intercepts need not pay. No SSL object exists before that.
  Result<std::shared_ptr<SSL_CTX>> upstream() const {
    std::lock_guard lock(upstream_mu);
    if (!system_trust_added) {
      TRY_VOID_CTX(add_system_trust(upstream_ctx.get()), "the upstream TLS context");
      system_trust_added = true;
    }
    return upstream_ctx;
  }
  std::shared_ptr<SSL_CTX> upstream_ctx;  // set at start, never replaced
  mutable std::mutex upstream_mu;
  mutable bool system_trust_added = false;  // guarded by upstream_mu
  std::atomic<uint64_t> connections{0}, requests{0}, denied{0}, bytes_up{0}, bytes_down{0},
      credential_uses{0}, dns_queries{0};
  std::atomic<size_t> active{0};

  void audit(const Gateway::State& st, const std::string& kind, nlohmann::json data) const {
    if (options.audit) options.audit(st.sb.id, kind, std::move(data));
  }
};

// A byte stream as Beast wants it over either a plain socket or TLS, so one HTTP relay serves
// both (the throwing overloads and write_all: SyncStreamOps, common/fd_stream.h).
class AnyStream : public SyncStreamOps<AnyStream> {
 public:
  using error_code = boost::system::error_code;
  using SyncStreamOps::read_some;
  using SyncStreamOps::write_some;
  explicit AnyStream(FdStream* fd) : fd_(fd) {}
  explicit AnyStream(TlsStream* tls) : tls_(tls) {}

  template <class B>
  size_t read_some(const B& buffers, error_code& ec) {
    return tls_ ? tls_->read_some(buffers, ec) : fd_->read_some(buffers, ec);
  }
  template <class B>
  size_t write_some(const B& buffers, error_code& ec) {
    return tls_ ? tls_->write_some(buffers, ec) : fd_->write_some(buffers, ec);
  }
  TlsStream* tls() const { return tls_; }

 private:
  FdStream* fd_ = nullptr;
  TlsStream* tls_ = nullptr;
};

// upstream.cc
struct Dialed {
  UniqueFd fd;          // connected, non-blocking
  std::string address;  // "203.0.113.5:443", what was dialed
};
// Resolves `host` (overrides first), refuses addresses the policy does not allow, and connects
// to the first allowed one. kPermissionDenied when policy refused every address (the message
// says which and why), kUnavailable/kTimeout when the network failed.
Result<Dialed> dial(const Shared& g, const Gateway::State& st, const Host& host, uint16_t port);
// dial()'s address check without the connect: kPermissionDenied (saying why) when `host`
// resolves only to addresses the sandbox's policy refuses. A CONNECT that will be tunneled is
// checked so before its 200, so the refusal is an HTTP answer the client prints, not a reset.
Result<void> check_resolves(const Shared& g, const Gateway::State& st, const Host& host,
                            uint16_t port);
// Copies bytes both ways between `a` (the sandbox) and `b` (upstream) until both directions
// end, the sandbox is detached, or nothing moves for the idle timeout. Counts bytes.
struct TunnelBytes {
  uint64_t up = 0, down = 0;
};
TunnelBytes tunnel(Shared& g, Gateway::State& st, int a, int b);

// websocket.cc: relays an upgraded (101) WebSocket connection of an intercepted host until
// either side closes, the sandbox is detached or nothing moves for the idle timeout. Client
// bytes go up as they are; the upstream's frames come down parsed and masked
// (websocket::ServerFrames); a malformed one ends the relay with close code 1002 to the
// client (`error` says why). `*_first`: bytes already read past the handshake on each side.
struct WebSocketRelayed {
  uint64_t up = 0, down = 0;
  size_t redactions = 0;
  std::string error;
};
WebSocketRelayed relay_websocket(Shared& g, Gateway::State& st, AnyStream& client,
                                 AnyStream& upstream, std::string_view client_first,
                                 std::string_view upstream_first);

// proxy.cc: serves one accepted connection of the given kind to the end.
void serve_connection(Shared& g, std::shared_ptr<Gateway::State> st, UniqueFd fd,
                      ListenerKind kind);

}  // namespace space::egress
