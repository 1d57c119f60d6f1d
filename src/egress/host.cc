// Host names and addresses for the egress policy (policy.h): normalize_host, parse_authority,
// address classes, CIDR blocks and host patterns. The input is text an untrusted sandbox
// controls (CONNECT authorities, Host headers, SNI, DNS questions), so parsing is strict and
// refuses whatever another parser (a resolver, inet_aton, a browser) could read differently:
// names are normalized the way the WHATWG URL host parser does (TR46 via libidn2, then "a name
// whose last label is a number is an IPv4 address, or nothing"), and IP literals in every form
// inet_aton accepts are recognized and canonicalized, so a policy never compares spellings.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <idn2.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>

#include "egress/ascii.h"
#include "egress/policy.h"

namespace space::egress {
namespace {

constexpr size_t kMaxRawHost = 1024;  // longer input is refused before any IDNA work
constexpr size_t kMaxLabel = 63;
constexpr size_t kMaxName = 253;

}  // namespace

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == max) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

namespace {

std::unexpected<Error> bad_host(std::string_view raw, std::string_view why) {
  return fail(Code::kInvalidArgument, fmt::format("invalid host \"{}\": {}", printable(raw), why));
}

// ---- IP literals ----

IpAddress v4_from(uint32_t v) { return boost::asio::ip::address_v4(v); }

// Unwraps an IPv4-mapped IPv6 address (::ffff:a.b.c.d) to the IPv4 address it carries.
IpAddress unmap(const IpAddress& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    auto b = a.to_v6().to_bytes();
    return v4_from(uint32_t{b[12]} << 24 | uint32_t{b[13]} << 16 | uint32_t{b[14]} << 8 | b[15]);
  }
  return a;
}

// IPv6 text as inet_pton reads it: no zone id, no brackets.
std::optional<IpAddress> parse_ipv6(std::string_view text) {
  if (text.size() > 64) return std::nullopt;
  std::string s(text);
  std::array<unsigned char, 16> bytes{};
  if (inet_pton(AF_INET6, s.c_str(), bytes.data()) != 1) return std::nullopt;
  return IpAddress(boost::asio::ip::address_v6(bytes));
}

// The WHATWG "ends in a number" test: is the last label all digits, or 0x and hex digits?
bool ends_in_number(std::string_view name) {
  size_t dot = name.rfind('.');
  std::string_view last = dot == std::string_view::npos ? name : name.substr(dot + 1);
  if (last.empty()) return false;
  if (std::all_of(last.begin(), last.end(), is_digit)) return true;
  return last.size() >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') &&
         std::all_of(last.begin() + 2, last.end(), is_hex);
}

// One part of an inet_aton / WHATWG IPv4 literal: "0x.." hex, "0.." octal, else decimal.
std::optional<uint64_t> parse_ipv4_part(std::string_view part) {
  if (part.empty()) return std::nullopt;
  unsigned radix = 10;
  if (part.size() >= 2 && part[0] == '0' && (part[1] == 'x' || part[1] == 'X')) {
    radix = 16;
    part.remove_prefix(2);
  } else if (part.size() >= 2 && part[0] == '0') {
    radix = 8;
    part.remove_prefix(1);
  }
  uint64_t value = 0;
  for (char c : part) {
    unsigned d;
    if (radix == 16 && is_hex(c)) {
      d = static_cast<unsigned>(hex_value(c));
    } else if (is_digit(c) && static_cast<unsigned>(c - '0') < radix) {
      d = static_cast<unsigned>(c - '0');
    } else {
      return std::nullopt;
    }
    value = value * radix + d;
    if (value > 0xffffffffULL) return std::nullopt;
  }
  return value;
}

// Every IPv4 form inet_aton and browsers accept: 1 to 4 parts, the last filling the bytes left.
std::optional<uint32_t> parse_ipv4(std::string_view name) {
  std::array<uint64_t, 4> parts{};
  size_t n = 0;
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    std::string_view part = name.substr(start, dot == std::string_view::npos ? dot : dot - start);
    if (n == parts.size()) return std::nullopt;
    auto v = parse_ipv4_part(part);
    if (!v) return std::nullopt;
    parts[n++] = *v;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  for (size_t i = 0; i + 1 < n; ++i) {
    if (parts[i] > 255) return std::nullopt;
  }
  uint64_t limit = 1ULL << (8 * (5 - n));
  if (parts[n - 1] >= limit) return std::nullopt;
  uint64_t value = parts[n - 1];
  for (size_t i = 0; i + 1 < n; ++i) value += parts[i] << (8 * (3 - i));
  return static_cast<uint32_t>(value);
}

Host ip_host(const IpAddress& raw) {
  IpAddress a = unmap(raw);
  return Host{a.to_string(), a};
}

// ---- DNS names ----

// Checks a lower-case ASCII name (trailing dot already gone) label by label: LDH, no hyphen at
// either end, lengths, and A-labels ("xn--") that libidn2 accepts and that are already in the
// form it would produce.
Result<void> check_ascii_name(std::string_view raw, std::string_view name) {
  if (name.empty()) return bad_host(raw, "empty name");
  if (name.size() > kMaxName) return bad_host(raw, "name longer than 253 characters");
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    std::string_view label = name.substr(start, dot - start);
    if (label.empty()) return bad_host(raw, "empty label");
    if (label.size() > kMaxLabel) return bad_host(raw, "label longer than 63 characters");
    for (char c : label) {
      if (!(is_digit(c) || (c >= 'a' && c <= 'z') || c == '-')) {
        return bad_host(raw, fmt::format("'{}' is not allowed in a host name", printable({&c, 1})));
      }
    }
    if (label.front() == '-' || label.back() == '-') {
      return bad_host(raw, "a label may not start or end with '-'");
    }
    if (label.starts_with("xn--")) {
      std::string l(label);
      char* out = nullptr;
      int rc = idn2_to_ascii_8z(l.c_str(), &out, IDN2_NONTRANSITIONAL | IDN2_NFC_INPUT);
      std::unique_ptr<char, decltype(&std::free)> guard(out, &std::free);
      if (rc != IDN2_OK) {
        return bad_host(
            raw, fmt::format("invalid A-label \"{}\": {}", printable(label), idn2_strerror(rc)));
      }
      if (l != out) return bad_host(raw, fmt::format("A-label \"{}\" is not canonical", l));
    }
    start = dot + 1;
  }
  return {};
}

// Why a byte may not appear in a host, or nullptr. ':' '[' ']' are handled by the caller.
const char* forbidden_host_byte(unsigned char c) {
  if (c >= 0x80) return nullptr;  // non-ASCII: for IDNA
  if (is_digit(static_cast<char>(c)) || is_alpha(static_cast<char>(c)) || c == '-' || c == '.') {
    return nullptr;
  }
  switch (c) {
    case '@':
      return "userinfo (\"user@\") is not allowed";
    case '%':
      return "percent-encoding is not allowed";
    case '/':
    case '?':
    case '#':
    case '\\':
      return "a path, query or fragment is not allowed";
    case ':':
      return "':' is allowed only in a bracketed IPv6 address";
    case '*':
      return "'*' is not allowed in a host";
    case ' ':
      return "spaces are not allowed";
    default:
      break;
  }
  if (c < 0x20 || c == 0x7f) return "control characters are not allowed";
  return "only letters, digits, '-' and '.' are allowed";
}

}  // namespace

Result<Host> normalize_host(std::string_view raw) {
  if (raw.empty()) return bad_host(raw, "empty");
  if (raw.size() > kMaxRawHost) return bad_host(raw, "too long");

  // Bracketed IPv6, as in a URL or an authority: "[::1]". No zone ids: they name an interface
  // of this host, and '%' is refused anyway.
  if (raw.front() == '[') {
    size_t close = raw.find(']');
    if (close == std::string_view::npos || raw.size() < 3) {
      return bad_host(raw, "unterminated '['");
    }
    if (close != raw.size() - 1) {
      return bad_host(raw, "nothing may follow ']' in a host (a port is not part of it)");
    }
    std::string_view inner = raw.substr(1, raw.size() - 2);
    if (inner.find('%') != std::string_view::npos) {
      return bad_host(raw, "IPv6 zone ids are not allowed");
    }
    auto a = parse_ipv6(inner);
    if (!a) return bad_host(raw, "not a valid IPv6 address");
    return ip_host(*a);
  }

  bool ascii = true;
  bool colon = false;
  for (char ch : raw) {
    auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) ascii = false;
    if (c == ':') {
      colon = true;
      continue;
    }
    if (const char* why = forbidden_host_byte(c)) return bad_host(raw, why);
  }
  if (colon) {  // a bare IPv6 address, or nothing
    if (!ascii) return bad_host(raw, "':' is allowed only in an IPv6 address");
    auto a = parse_ipv6(raw);
    if (!a) return bad_host(raw, "':' is allowed only in an IPv6 address");
    return ip_host(*a);
  }

  // To lower-case ASCII. Pure ASCII needs no IDNA: UTS #46 maps ASCII only by case (we refuse
  // the STD3 ones), and calling libidn2 would refuse real names such as "r3---sn-x.example"
  // (hyphens in positions 3-4) that browsers accept. Anything else goes through libidn2 and an
  // error there is final: the name must be a valid IDN.
  std::string name;
  if (ascii) {
    name.reserve(raw.size());
    for (char c : raw) name += ascii_lower(c);
  } else {
    std::string in(raw);
    char* out = nullptr;
    int rc = idn2_to_ascii_8z(in.c_str(), &out, IDN2_NONTRANSITIONAL | IDN2_NFC_INPUT);
    std::unique_ptr<char, decltype(&std::free)> guard(out, &std::free);
    if (rc != IDN2_OK) {
      return bad_host(raw,
                      fmt::format("not a valid internationalized name ({})", idn2_strerror(rc)));
    }
    name = out;
    for (char& ch : name) {
      // TR46 maps fullwidth and compatibility forms to ASCII, some to characters a host may
      // not hold ("／" -> '/'): check again.
      auto c = static_cast<unsigned char>(ch);
      if (c >= 0x80 || c == ':' || forbidden_host_byte(c)) {
        return bad_host(raw,
                        fmt::format("maps to \"{}\", which is not a valid host", printable(name)));
      }
      ch = ascii_lower(ch);
    }
  }

  if (!name.empty() && name.back() == '.') name.pop_back();  // one trailing dot: the root
  if (name.empty()) return bad_host(raw, "empty name");
  if (name.back() == '.') return bad_host(raw, "empty label");

  // WHATWG URL: a host whose last label is a number is an IPv4 address or an error. So
  // "0x7f.1" is 127.0.0.1 and "1.2.3.4.5" is refused, never handed to a resolver.
  if (ends_in_number(name)) {
    auto v4 = parse_ipv4(name);
    if (!v4) {
      return bad_host(raw,
                      "not a valid IPv4 address (a name whose last label is numeric "
                      "must be one)");
    }
    return ip_host(v4_from(*v4));
  }
  TRY_VOID(check_ascii_name(raw, name));
  return Host{std::move(name), std::nullopt};
}

namespace {

// "443" -> 443. Decimal, 1..65535, no sign, no leading zero.
Result<uint16_t> parse_port(std::string_view text, std::string_view whole) {
  auto bad = [&] {
    return fail(Code::kInvalidArgument,
                fmt::format("invalid port \"{}\" in \"{}\": a port is 1..65535 in decimal",
                            printable(text), printable(whole)));
  };
  if (text.empty() || text.size() > 5 || text[0] == '0') return bad();
  unsigned v = 0;
  for (char c : text) {
    if (!is_digit(c)) return bad();
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v < 1 || v > 65535) return bad();
  return static_cast<uint16_t>(v);
}

// Splits "host[:port]" / "[v6][:port]" without interpreting the host. `bare_v6` lets a host
// with several ':' (and no brackets) stand for an IPv6 address without a port.
struct HostPort {
  std::string_view host;
  std::optional<std::string_view> port;
};
Result<HostPort> split_host_port(std::string_view text, bool bare_v6) {
  if (text.empty()) return fail(Code::kInvalidArgument, "empty host");
  if (text.find('@') != std::string_view::npos) {
    return fail(Code::kInvalidArgument,
                fmt::format("\"{}\": userinfo (\"user@\") is not allowed", printable(text)));
  }
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return fail(Code::kInvalidArgument, fmt::format("\"{}\": unterminated '['", printable(text)));
    }
    std::string_view rest = text.substr(close + 1);
    if (rest.empty()) return HostPort{text.substr(0, close + 1), std::nullopt};
    if (rest.front() != ':') {
      return fail(Code::kInvalidArgument,
                  fmt::format("\"{}\": expected ':' after ']'", printable(text)));
    }
    return HostPort{text.substr(0, close + 1), rest.substr(1)};
  }
  size_t colon = text.find(':');
  if (colon == std::string_view::npos) return HostPort{text, std::nullopt};
  if (text.find(':', colon + 1) != std::string_view::npos) {
    if (bare_v6) return HostPort{text, std::nullopt};
    return fail(Code::kInvalidArgument,
                fmt::format("\"{}\": an IPv6 address must be in brackets", printable(text)));
  }
  return HostPort{text.substr(0, colon), text.substr(colon + 1)};
}

}  // namespace

Result<Authority> parse_authority(std::string_view authority, uint16_t default_port) {
  auto parts = TRY_CTX(split_host_port(authority, false), "invalid authority");
  Authority a;
  a.host = TRY(normalize_host(parts.host));
  if (parts.port) {
    a.port = TRY(parse_port(*parts.port, authority));
  } else if (default_port == 0) {
    return fail(Code::kInvalidArgument,
                fmt::format("authority \"{}\" has no port", printable(authority)));
  } else {
    a.port = default_port;
  }
  return a;
}

// ---- Address classes ----

namespace {

bool in_v4(uint32_t a, uint32_t base, unsigned prefix) {
  uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  return (a & mask) == (base & mask);
}
constexpr uint32_t v4(unsigned a, unsigned b, unsigned c, unsigned d) {
  return uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d;
}

AddressClass classify_v4(uint32_t a) {
  struct Block {
    uint32_t base;
    unsigned prefix;
    AddressClass cls;
  };
  static constexpr Block kBlocks[] = {
      {v4(0, 0, 0, 0), 8, AddressClass::kUnspecified},
      {v4(10, 0, 0, 0), 8, AddressClass::kPrivate},
      {v4(100, 64, 0, 0), 10, AddressClass::kCgnat},
      {v4(127, 0, 0, 0), 8, AddressClass::kLoopback},
      {v4(169, 254, 0, 0), 16, AddressClass::kLinkLocal},
      {v4(172, 16, 0, 0), 12, AddressClass::kPrivate},
      {v4(192, 0, 0, 0), 24, AddressClass::kReserved},    // IETF protocol assignments
      {v4(192, 0, 2, 0), 24, AddressClass::kReserved},    // TEST-NET-1
      {v4(192, 88, 99, 0), 24, AddressClass::kReserved},  // 6to4 relay anycast (deprecated)
      {v4(192, 168, 0, 0), 16, AddressClass::kPrivate},
      {v4(198, 18, 0, 0), 15, AddressClass::kReserved},    // benchmarking
      {v4(198, 51, 100, 0), 24, AddressClass::kReserved},  // TEST-NET-2
      {v4(203, 0, 113, 0), 24, AddressClass::kReserved},   // TEST-NET-3
      {v4(224, 0, 0, 0), 4, AddressClass::kMulticast},
      {v4(240, 0, 0, 0), 4, AddressClass::kReserved},  // and 255.255.255.255
  };
  for (const Block& b : kBlocks) {
    if (in_v4(a, b.base, b.prefix)) return b.cls;
  }
  return AddressClass::kPublic;
}

uint32_t v4_at(const std::array<unsigned char, 16>& b, size_t i) {
  return uint32_t{b[i]} << 24 | uint32_t{b[i + 1]} << 16 | uint32_t{b[i + 2]} << 8 | b[i + 3];
}

// Do the first `prefix` bits of `b` equal those of `base`?
bool in_v6(const std::array<unsigned char, 16>& b, const std::array<unsigned char, 16>& base,
           unsigned prefix) {
  for (unsigned i = 0; i < 16 && prefix > 0; ++i) {
    unsigned bits = std::min(prefix, 8u);
    auto mask = static_cast<unsigned char>(0xff << (8 - bits));
    if ((b[i] & mask) != (base[i] & mask)) return false;
    prefix -= bits;
  }
  return true;
}

AddressClass classify_v6(const std::array<unsigned char, 16>& b) {
  using Bytes = std::array<unsigned char, 16>;
  auto zero_through = [&](size_t n) {
    return std::all_of(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n),
                       [](unsigned char c) { return c == 0; });
  };
  if (zero_through(15) && b[15] == 0) return AddressClass::kUnspecified;  // ::
  if (zero_through(15) && b[15] == 1) return AddressClass::kLoopback;     // ::1
  if (zero_through(10) && b[10] == 0xff && b[11] == 0xff) {
    return classify_v4(v4_at(b, 12));  // ::ffff:a.b.c.d, mapped
  }
  if (zero_through(12)) return classify_v4(v4_at(b, 12));  // ::a.b.c.d, compatible
  static constexpr Bytes kNat64 = {0x00, 0x64, 0xff, 0x9b};
  if (in_v6(b, kNat64, 96)) return classify_v4(v4_at(b, 12));  // 64:ff9b::a.b.c.d
  static constexpr Bytes k6to4 = {0x20, 0x02};
  if (in_v6(b, k6to4, 16)) return classify_v4(v4_at(b, 2));                    // 2002:aabb:ccdd::
  if (b[0] == 0xff) return AddressClass::kMulticast;                           // ff00::/8
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return AddressClass::kLinkLocal;  // fe80::/10
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return AddressClass::kPrivate;    // fec0::/10
  if ((b[0] & 0xfe) == 0xfc) return AddressClass::kUniqueLocal;                // fc00::/7
  struct Block {
    Bytes base;
    unsigned prefix;
  };
  static constexpr Block kReserved[] = {
      {{0x20, 0x01, 0x00, 0x00}, 23},  // IETF protocol assignments: Teredo, ORCHID, ...
      {{0x20, 0x01, 0x0d, 0xb8}, 32},  // documentation
      {{0x3f, 0xff}, 20},              // documentation (RFC 9637)
      {{0x5f, 0x00}, 16},              // SRv6 SIDs
  };
  for (const Block& r : kReserved) {
    if (in_v6(b, r.base, r.prefix)) return AddressClass::kReserved;
  }
  // Global unicast is 2000::/3; everything else (64:ff9b:1::/48, 100::/64, unassigned space)
  // is not somewhere a gateway should dial.
  if ((b[0] & 0xe0) == 0x20) return AddressClass::kPublic;
  return AddressClass::kReserved;
}

}  // namespace

AddressClass classify(const IpAddress& addr) {
  if (addr.is_v4()) return classify_v4(addr.to_v4().to_uint());
  return classify_v6(addr.to_v6().to_bytes());
}

std::string_view address_class_name(AddressClass c) {
  switch (c) {
    case AddressClass::kPublic:
      return "public";
    case AddressClass::kUnspecified:
      return "unspecified";
    case AddressClass::kLoopback:
      return "loopback";
    case AddressClass::kPrivate:
      return "private";
    case AddressClass::kLinkLocal:
      return "link-local";
    case AddressClass::kCgnat:
      return "carrier-grade NAT";
    case AddressClass::kUniqueLocal:
      return "unique-local";
    case AddressClass::kMulticast:
      return "multicast";
    case AddressClass::kReserved:
      return "reserved";
  }
  return "unknown";
}

bool Cidr::contains(const IpAddress& raw) const {
  IpAddress addr = unmap(raw);
  if (base.is_v4() != addr.is_v4()) return false;
  if (base.is_v4()) return in_v4(addr.to_v4().to_uint(), base.to_v4().to_uint(), prefix);
  return in_v6(addr.to_v6().to_bytes(), base.to_v6().to_bytes(), prefix);
}

Result<Cidr> parse_cidr(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument,
                fmt::format("invalid network \"{}\": {} (examples: 10.20.0.0/16, fd00::/8, "
                            "192.0.2.7)",
                            printable(text), why));
  };
  size_t slash = text.find('/');
  std::string addr_text(text.substr(0, slash));
  Cidr c;
  std::array<unsigned char, 16> bytes{};
  unsigned bits;
  if (addr_text.size() <= 15 && inet_pton(AF_INET, addr_text.c_str(), bytes.data()) == 1) {
    c.base = v4_from(v4(bytes[0], bytes[1], bytes[2], bytes[3]));
    bits = 32;
  } else if (auto a = parse_ipv6(addr_text)) {
    c.base = *a;
    bits = 128;
  } else {
    return bad("not an IPv4 or IPv6 address");
  }
  c.prefix = bits;
  if (slash != std::string_view::npos) {
    std::string_view p = text.substr(slash + 1);
    if (p.empty() || p.size() > 3 || (p.size() > 1 && p[0] == '0') ||
        !std::all_of(p.begin(), p.end(), is_digit)) {
      return bad("the prefix length must be a decimal number");
    }
    c.prefix = static_cast<unsigned>(std::atoi(std::string(p).c_str()));
    if (c.prefix > bits) return bad(fmt::format("the prefix length is at most {}", bits));
  }
  // ::ffff:10.0.0.0/104 is 10.0.0.0/8: store mapped blocks as IPv4 so contains() agrees.
  if (c.base.is_v6() && c.base.to_v6().is_v4_mapped() && c.prefix >= 96) {
    c.base = unmap(c.base);
    c.prefix -= 96;
  }
  // Host bits set ("10.0.0.1/8") is almost always a typo for something else: refuse it.
  bool host_bits = false;
  if (c.base.is_v4()) {
    uint32_t v = c.base.to_v4().to_uint();
    uint32_t mask = c.prefix == 0 ? 0 : ~uint32_t{0} << (32 - c.prefix);
    host_bits = (v & ~mask) != 0;
  } else {
    auto b = c.base.to_v6().to_bytes();
    for (unsigned i = 0; i < 128; ++i) {
      if (i >= c.prefix && (b[i / 8] >> (7 - i % 8) & 1)) host_bits = true;
    }
  }
  if (host_bits) return bad("bits are set past the prefix length");
  return c;
}

// ---- Host patterns ----

namespace {
// A normalized name never ends in a number and never holds ':', so this tells IP patterns apart.
bool is_ip_text(std::string_view s) {
  return s.find(':') != std::string_view::npos || ends_in_number(s);
}
// Is `name` strictly below `suffix` ("a.b.example.com" below "example.com")?
bool below(std::string_view name, std::string_view suffix) {
  return name.size() > suffix.size() + 1 && name.ends_with(suffix) &&
         name[name.size() - suffix.size() - 1] == '.';
}
}  // namespace

bool HostPattern::matches(const Host& host) const {
  if (host.is_ip() != is_ip_text(suffix)) return false;
  if (host.is_ip() || !wildcard) return host.name == suffix;
  return below(host.name, suffix);
}

bool HostPattern::within(const HostPattern& outer) const {
  if (is_ip_text(suffix) != is_ip_text(outer.suffix)) return false;
  if (!outer.wildcard) return !wildcard && suffix == outer.suffix;
  if (wildcard) return suffix == outer.suffix || below(suffix, outer.suffix);
  return below(suffix, outer.suffix);
}

std::string HostPattern::text() const { return wildcard ? "*." + suffix : suffix; }

Result<HostPattern> parse_host_pattern(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument,
                fmt::format("invalid host pattern \"{}\": {}", printable(text), why));
  };
  HostPattern p;
  std::string_view host = text;
  if (text.starts_with("*.")) {
    p.wildcard = true;
    host.remove_prefix(2);
  }
  if (host.find('*') != std::string_view::npos) {
    return bad(text == "*" ? "a bare \"*\" would allow every host; list hosts or \"*.suffix\""
                           : "'*' is allowed only as the whole first label (\"*.example.com\")");
  }
  auto h = normalize_host(host);
  if (!h) return fail(std::move(h.error()).wrap("invalid host pattern"));
  if (p.wildcard && h->is_ip()) return bad("\"*.\" cannot precede an IP address");
  p.suffix = std::move(h->name);
  return p;
}

Result<HostPortPattern> parse_host_port_pattern(std::string_view text) {
  auto parts = TRY(split_host_port(text, true));
  HostPortPattern hp;
  hp.host = TRY(parse_host_pattern(parts.host));
  if (parts.port) hp.port = TRY(parse_port(*parts.port, text));
  return hp;
}

}  // namespace space::egress
