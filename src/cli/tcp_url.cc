// SPACE_API's http(s)://HOST:PORT (see tcp_url.h).
#include "cli/tcp_url.h"

#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <string_view>

namespace space::cli {

// "http://HOST:PORT" or "https://HOST:PORT" (HOST a name, an IPv4 address or [IPv6]).
Result<TcpUrl> parse_url(const std::string& url) {
  TcpUrl u;
  u.https = url.starts_with("https://");
  std::string_view rest = std::string_view(url).substr(u.https ? 8 : 7);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size() ||
      rest.find('/') != std::string_view::npos)
    return fail(Code::kInvalidArgument,
                "SPACE_API=" + url +
                    " is not http://HOST:PORT or https://HOST:PORT; set SPACE_API to the "
                    "daemon's api_listen address, e.g. http://127.0.0.1:7070 or "
                    "https://myhost.example:7443");
  u.host = std::string(rest.substr(0, colon));
  u.port = std::string(rest.substr(colon + 1));
  if (u.host.size() > 2 && u.host.front() == '[' && u.host.back() == ']') {
    u.host = u.host.substr(1, u.host.size() - 2);
  }
  return u;
}

// A connected TCP socket to the URL's host and port.
Result<UniqueFd> connect_tcp(const std::string& url, const TcpUrl& u) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &res);
  if (rc != 0)
    return fail(Code::kInvalidArgument,
                "SPACE_API=" + url + ": cannot resolve " + u.host + ": " + ::gai_strerror(rc));
  int err = ECONNREFUSED;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      err = errno;
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    err = errno;
  }
  ::freeaddrinfo(res);
  if (err == ECONNREFUSED)
    return fail(Code::kUnavailable,
                "no daemon answers at " + url +
                    " (SPACE_API); is spaced running with api_listen "
                    "set to that address?",
                err);
  return fail(Error::sys("connect", "\"" + url + "\"", err));
}

}  // namespace space::cli
