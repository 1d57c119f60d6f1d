// TCP listening addresses and sockets, for the listeners SPACE opens on loopback: spaced's API
// listener (api_listen) and `space port`'s forwards. Each caller words its own refusals.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "common/fd.h"

namespace space {

struct ListenAddress {
  int family = 0;    // AF_INET or AF_INET6
  std::string host;  // numeric: "127.0.0.1", "::1" (or the text given, if not an address)
  uint16_t port = 0;
  bool loopback = false;  // 127.0.0.0/8 or ::1
};

// "127.0.0.1:7070", "[::1]:7070", "localhost:7070" (= 127.0.0.1); a host that is not a numeric
// address parses with loopback false. nullopt: not HOST:PORT (no port, a port over 65535, an
// unclosed bracket, ...).
std::optional<ListenAddress> parse_host_port(std::string_view text);

// Binds and listens (non-blocking, close-on-exec, SO_REUSEADDR); the socket and the port it
// got (useful with port 0). A failing bind keeps its errno (EADDRINUSE: the port is taken).
Result<std::pair<UniqueFd, uint16_t>> listen_tcp(const ListenAddress& a);

}  // namespace space
