// SPACE_API's http(s)://HOST:PORT: parsing it and connecting to it over TCP. Shared by the CLI
// (plain http://) and its https helper, space-https (src/cli/https_main.cc).
#pragma once

#include <string>

#include "common/error.h"
#include "common/fd.h"

namespace space::cli {

struct TcpUrl {
  bool https = false;
  std::string host;  // without brackets
  std::string port;
};

// "http://HOST:PORT" or "https://HOST:PORT" (HOST a name, an IPv4 address or [IPv6]); anything
// else is kInvalidArgument saying what SPACE_API should hold.
[[nodiscard]] Result<TcpUrl> parse_url(const std::string& url);

// A connected TCP socket (close-on-exec) to the URL's host and port; no listener is
// kUnavailable naming SPACE_API.
[[nodiscard]] Result<UniqueFd> connect_tcp(const std::string& url, const TcpUrl& u);

}  // namespace space::cli
