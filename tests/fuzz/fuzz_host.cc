// libFuzzer target: host names and addresses as the egress policy reads them from a sandbox
// (src/egress/host.cc): normalize_host (IDNA via libidn2, case, trailing dot, every IPv4 form
// inet_aton accepts, IPv6 with or without brackets), parse_authority, parse_cidr and the allow
// patterns (parse_host_pattern, parse_host_port_pattern, matches, within). The input is one
// text, or "pattern\0host" for the matching checks. Properties checked besides "no crash":
//  - a normalized name holds only [a-z0-9.-], at most 253 bytes in labels of 1..63 that neither
//    start nor end with '-', and never ends in a numeric label (that would be an address); an
//    address is its canonical text (never an IPv4-mapped IPv6 one);
//  - normalizing is idempotent: the normalized text (bracketed too, for IPv6) normalizes to
//    the same host; an accepted authority, written back as host:port, parses to the same;
//  - a pattern's text() parses to the same pattern, is within() itself, and matches what it
//    says: its own name (not for "*."), a name one label below it (only for "*.");
//  - a host a pattern matches is that name, or a name strictly below it for "*.";
//  - a block contains its own base address.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "egress/policy.h"

namespace eg = space::egress;

namespace {

bool ends_in_digits(std::string_view name) {
  size_t dot = name.rfind('.');
  std::string_view last = dot == std::string_view::npos ? name : name.substr(dot + 1);
  if (last.empty()) return false;
  auto all = [](std::string_view s, bool hex) {
    for (char c : s)
      if (!((c >= '0' && c <= '9') || (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))))
        return false;
    return true;
  };
  if (all(last, false)) return true;
  return last.size() >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') &&
         all(last.substr(2), true);
}

void check_host(const eg::Host& h) {
  if (h.is_ip()) {
    if (h.name != h.ip->to_string()) std::abort();
    if (h.ip->is_v6() && h.ip->to_v6().is_v4_mapped()) std::abort();
    (void)eg::classify(*h.ip);
  } else {
    const std::string& n = h.name;
    if (n.empty() || n.size() > 253 || ends_in_digits(n)) std::abort();
    for (char c : n)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) std::abort();
    size_t start = 0;
    for (;;) {
      size_t dot = n.find('.', start);
      std::string_view label =
          std::string_view(n).substr(start, (dot == std::string::npos ? n.size() : dot) - start);
      if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
        std::abort();
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  }
  auto again = eg::normalize_host(h.name);
  if (!again || !(*again == h)) std::abort();
  if (h.is_ip() && h.ip->is_v6()) {
    auto bracketed = eg::normalize_host("[" + h.name + "]");
    if (!bracketed || !(*bracketed == h)) std::abort();
  }
}

std::string authority_text(const eg::Host& h, uint16_t port) {
  std::string host = h.is_ip() && h.ip->is_v6() ? "[" + h.name + "]" : h.name;
  return host + ":" + std::to_string(port);
}

void check_pattern(const eg::HostPattern& p) {
  auto again = eg::parse_host_pattern(p.text());
  if (!again || again->suffix != p.suffix || again->wildcard != p.wildcard) std::abort();
  if (!p.within(p)) std::abort();
  auto self = eg::normalize_host(p.suffix);
  if (!self) std::abort();
  if (p.matches(*self) == p.wildcard) std::abort();
  if (p.wildcard) {
    auto below = eg::normalize_host("a." + p.suffix);
    if (below && !p.matches(*below)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (auto h = eg::normalize_host(in)) check_host(*h);
  if (auto a = eg::parse_authority(in, 443)) {
    check_host(a->host);
    if (a->port == 0) std::abort();
    auto again = eg::parse_authority(authority_text(a->host, a->port), 0);
    if (!again || !(again->host == a->host) || again->port != a->port) std::abort();
  }
  if (auto p = eg::parse_host_pattern(in)) check_pattern(*p);
  if (auto hp = eg::parse_host_port_pattern(in)) {
    check_pattern(hp->host);
    if (hp->port && *hp->port == 0) std::abort();
  }
  if (auto c = eg::parse_cidr(in)) {
    if (!c->contains(c->base)) std::abort();
    if (c->prefix > (c->base.is_v4() ? 32u : 128u)) std::abort();
  }
  // "pattern\0host": what a pattern matches.
  if (size_t nul = in.find('\0'); nul != std::string_view::npos) {
    auto p = eg::parse_host_pattern(in.substr(0, nul));
    auto h = eg::normalize_host(in.substr(nul + 1));
    if (p && h) {
      check_pattern(*p);
      if (p->matches(*h)) {
        const std::string& n = h->name;
        bool ok = p->wildcard ? n.size() > p->suffix.size() + 1 && n.ends_with(p->suffix) &&
                                    n[n.size() - p->suffix.size() - 1] == '.'
                              : n == p->suffix;
        if (!ok) std::abort();
      }
    }
  }
  return 0;
}
