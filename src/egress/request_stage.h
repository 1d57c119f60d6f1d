// The gateway's one decision on a request and one treatment of what comes back, whatever the
// protocol the sandbox speaks: HTTP/1.1 on the proxy and transparent listeners and inside
// intercepted TLS (proxy.cc), HTTP/2 streams (h2_server.cc) and WebSocket handshakes (carried
// as HTTP/1.1 requests) all hand the stage a request head in one neutral form (Beast's header
// fields; HTTP/2's pseudo-headers become the method, target and Host) and do what its verdict
// says. The codecs keep only their framing (parsing, ambiguous framing, the upstream
// connection, relaying bodies and frames). Here, and nowhere else: whether a connection may
// reach a host and whether it is intercepted or tunneled, where a request goes and whether the
// policy allows it, the hop-by-hop strip, which granted secrets apply and their values (a
// failure is a 429 or 502), injection, the encoding rules on hosts a secret is bound to, the
// checks and masking of a response head, and the audit events of it all (egress.denied,
// credential.use, credential.error, egress.request, egress.tunnel, egress.error). Not part of
// the gateway's interface.
#pragma once

#include <boost/beast/http/message.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "egress/internal.h"
#include "egress/mask.h"

namespace space::egress {

// How a request reached the gateway, which says where it goes.
enum class RequestMode {
  kProxy,            // plain proxy: every request names its target (http://host/...)
  kTransparentHttp,  // port 80 listener: the Host header names the target
  kIntercepted,      // TLS terminated for a fixed host:port (CONNECT or transparent TLS)
};

// The connection a request came on.
struct Arrival {
  RequestMode mode = RequestMode::kProxy;
  bool http2 = false;                // a stream of an HTTP/2 connection (always intercepted)
  const Host* fixed_host = nullptr;  // kIntercepted: the TLS connection's host
  uint16_t default_port = 80;        // the listener's port, or the intercepted port
  std::string via;  // the audit "via"; empty: the mode's ("proxy", "transparent-http", ...)
};

// An answer the gateway gives itself instead of forwarding: `reason` is the standard phrase of
// `status`, `message` says why (the codec frames both its own way).
struct LocalReply {
  int status = 0;
  std::string reason;
  std::string message;
};

// A request to forward, the stage's edits applied to its head: hop-by-hop fields stripped,
// credentials injected, identity encoding asked for and ranges removed on bound hosts, a
// WebSocket handshake's Upgrade/Connection restored.
struct Forward {
  Host host;
  uint16_t port = 0;
  std::string method;
  std::string path;  // the origin-form target as received (before injection), for audit
  std::vector<std::string> secrets;  // the granted secrets injected
  // A granted secret is bound to the host: its response must come back whole and unencoded
  // (respond_head refuses it otherwise) and is masked.
  bool bound = false;
  bool websocket = false;  // a WebSocket opening handshake, carried as such
};

using Verdict = std::variant<LocalReply, Forward>;

// The standard reason phrase of the statuses the gateway answers with itself.
std::string_view standard_reason(int status);
// A request target without its query, cut to the length the audit log keeps.
std::string audit_path(std::string_view target);

class RequestStage {
 public:
  RequestStage(Shared& g, Gateway::State& st, Arrival arrival);

  // The request stage: decides on `req` (method, target, Host, fields as received; the codec
  // has checked framing and, for HTTP/2, turned :authority into Host) and, when it is to be
  // forwarded, rewrites it in place. Refusals are audited (egress.denied), as are credential
  // uses and failures.
  Verdict decide(boost::beast::http::request_header<>& req);

  // The connection stage, before any request: whether the policy lets the sandbox reach
  // host:port at all (a CONNECT target, a transparent TLS connection's SNI); the refusal is
  // audited. And whether such a connection must be intercepted (a path rule or a secret bound
  // to the host needs its requests) rather than tunneled.
  std::optional<LocalReply> admit(const Host& host, uint16_t port);
  bool must_intercept(const Host& host, uint16_t port) const;

  // A refusal the codec finds itself (framing, a CONNECT inside HTTP/2, a dial refused by
  // policy): audited as egress.denied with what is known of the request, then the reply.
  LocalReply refuse(int status, const std::string& message, std::string_view method = {},
                    std::string_view path = {});
  // The same refusal for a request already decided on (its host, method and path).
  LocalReply refuse(const Forward& f, int status, const std::string& message);
  // egress.denied for a connection-level refusal (no HTTP answer goes with it).
  void deny(const std::string& host, uint16_t port, const std::string& reason,
            std::string_view method = {}, std::string_view path = {});

  // The response stage: checks a response head from the upstream (after interim responses)
  // for what the request asked, then strips its hop-by-hop fields, drops its reason phrase and
  // masks secret values out of its fields with `redactor` (which then masks the body). A
  // response from a bound host in a form masking cannot read (206, a content coding), or a 101
  // that is not the WebSocket without extensions the handshake asked for, is refused: audited,
  // and the 502 to give instead.
  std::optional<LocalReply> respond_head(const Forward& f,
                                         boost::beast::http::response_header<>& res,
                                         Redactor& redactor);

  // egress.request for an exchange that reached the upstream (`extra`: codec-specific fields,
  // such as duration_ms); counts its bytes.
  void audit_request(const Forward& f, int status, uint64_t bytes_up, uint64_t bytes_down,
                     size_t redactions, nlohmann::json extra = nlohmann::json::object());
  // egress.tunnel: a connection passed through unread to `address` (tunnel() counted its
  // bytes).
  void audit_tunnel(const Host& host, uint16_t port, const std::string& address, uint64_t bytes_up,
                    uint64_t bytes_down, std::chrono::milliseconds duration);
  // egress.error: the upstream could not be reached or failed.
  void audit_error(const Host& host, uint16_t port, const std::string& error);

  // The audit "via" of this connection ("proxy", "transparent-http", "intercept").
  const std::string& via() const { return via_; }

 private:
  LocalReply reply(int status, std::string message) const;
  bool bound_secret(const Host& host) const;
  // Where an intercepted request's credentials go, or the refusal when a value is unavailable.
  std::optional<LocalReply> inject_credentials(boost::beast::http::request_header<>& req,
                                               Forward& f);

  Shared& g_;
  Gateway::State& st_;
  Arrival arrival_;
  std::string via_;
};

}  // namespace space::egress
