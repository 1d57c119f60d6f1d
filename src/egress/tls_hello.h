// Reading the server name (SNI) from a TLS ClientHello without terminating TLS: the gateway
// peeks at the first bytes of a tunneled or transparent connection to check that the name the
// client asks for is the one it was allowed to reach (a CONNECT to allowed.com whose SNI says
// evil.com is refused). Untrusted input: every length is checked against its container.
#pragma once

#include <string>
#include <string_view>

namespace space::egress {

struct ClientHelloInfo {
  enum class Status {
    kNeedMore,   // a valid prefix: read more bytes (up to kMaxClientHello) and call again
    kOk,         // a complete ClientHello; `sni` is set if it carried server_name
    kNotTls,     // not a TLS handshake record
    kMalformed,  // a TLS record that is not a well-formed ClientHello
  } status = Status::kNeedMore;
  std::string sni;  // host_name entry of server_name, as sent (not normalized)
  bool has_sni = false;
  bool ech = false;  // carries encrypted_client_hello (0xfe0d): the outer SNI is not
                     // the real target, so the gateway refuses it
};

// The ClientHello may span several TLS records (large post-quantum key shares do); the parser
// reassembles handshake fragments of consecutive handshake records. Bytes beyond the hello are
// ignored.
inline constexpr size_t kMaxClientHello = 16 * 1024 + 5 * 4;
ClientHelloInfo parse_client_hello(std::string_view bytes);

}  // namespace space::egress
