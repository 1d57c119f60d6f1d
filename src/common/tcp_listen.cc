#include "common/tcp_listen.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <charconv>

namespace space {

std::optional<ListenAddress> parse_host_port(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  std::string_view port_text = text.substr(colon + 1);
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() ||
      port > 65535)
    return std::nullopt;
  ListenAddress a;
  a.port = static_cast<uint16_t>(port);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    a.family = AF_INET6;
    a.host = std::string(host.substr(1, host.size() - 2));
    in6_addr addr6{};
    if (::inet_pton(AF_INET6, a.host.c_str(), &addr6) != 1) return std::nullopt;
    a.loopback = IN6_IS_ADDR_LOOPBACK(&addr6);
  } else {
    a.family = AF_INET;
    a.host = host == "localhost" ? "127.0.0.1" : std::string(host);
    in_addr addr4{};
    if (::inet_pton(AF_INET, a.host.c_str(), &addr4) == 1)
      a.loopback = (ntohl(addr4.s_addr) >> 24) == 127;  // 127.0.0.0/8
  }
  return a;
}

Result<std::pair<UniqueFd, uint16_t>> listen_tcp(const ListenAddress& a) {
  const std::string where = "listening on " + a.host + ":" + std::to_string(a.port);
  UniqueFd fd(::socket(a.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) {
    return fail(Error::sys("socket", a.family == AF_INET ? "AF_INET" : "AF_INET6").wrap(where));
  }
  int one = 1;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len;
  if (a.family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(a.port);
    ::inet_pton(AF_INET, a.host.c_str(), &sin->sin_addr);
    len = sizeof *sin;
  } else {
    (void)::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(a.port);
    ::inet_pton(AF_INET6, a.host.c_str(), &sin6->sin6_addr);
    len = sizeof *sin6;
  }
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) != 0)
    return fail(Error::sys("bind").wrap(where));
  if (::listen(fd.get(), 512) != 0) return fail(Error::sys("listen").wrap(where));
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    return fail(Error::sys("getsockname").wrap(where));
  uint16_t port = ntohs(a.family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                            : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return std::pair<UniqueFd, uint16_t>(std::move(fd), port);
}

}  // namespace space
