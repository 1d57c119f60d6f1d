// HTTP/2 between a sandbox and the gateway, on intercepted TLS connections whose client chose
// ALPN "h2" (browsers, gRPC). Each stream is one request, authorized, credential-injected,
// masked and audited by the request stage an HTTP/1.1 request on such a connection goes
// through (request_stage.h), and forwarded upstream over HTTP/2 when the upstream offers it
// (trailers, so gRPC, carried) or translated to HTTP/1.1 otherwise (h2_upstream.h). One thread
// per connection, as for HTTP/1.1: a poll loop over the sandbox's socket, the upstream's, and a
// wake-up fd.
#pragma once

#include <openssl/ssl.h>

#include <memory>

#include "egress/internal.h"
#include "egress/policy.h"
#include "egress/tls_stream.h"

namespace space::egress {

// Makes a server context for intercepted hosts offer ALPN "h2" before "http/1.1" (the
// gateway's preference; a client that offers neither gets no ALPN, and HTTP/1.1).
void offer_h2(SSL_CTX* ctx);

// Serves the HTTP/2 connection on `tls` (handshake done, ALPN "h2"), intercepted for
// host:port, until the client ends it, it idles out, or the sandbox is detached.
void serve_h2(Shared& g, std::shared_ptr<Gateway::State> st, TlsStream& tls, int fd,
              const Host& host, uint16_t port);

}  // namespace space::egress
