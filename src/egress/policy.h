// Egress policy: what a sandbox may reach. A profile (from spaced's config) lists allowed hosts
// (exact names or "*.suffix"), ports, and optionally HTTP methods and path prefixes; anything
// not listed is refused. `--allow` at creation narrows a profile, never widens it. Names are
// compared only after normalization (case, trailing dot, IDNA to A-labels), and after
// resolution every address is classified: loopback, link-local (cloud metadata), private,
// CGNAT, unique-local, multicast and other special ranges are refused unless the profile lists
// them in `allow_networks`. Pure functions and values: no I/O, no threads.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::egress {

using IpAddress = boost::asio::ip::address;

// Untrusted text for a message or a log line: printable ASCII kept, '"', '\\' and every other
// byte as \xHH, cut after `max` bytes with "...".
std::string printable(std::string_view text, size_t max = 120);

// A destination host as the policy sees it: a normalized DNS name, or an IP address.
struct Host {
  std::string name;             // lower-case A-label name without trailing dot, or the
                                // address in canonical text form ("127.0.0.1", "::1")
  std::optional<IpAddress> ip;  // set when the host is an IP literal
  bool is_ip() const { return ip.has_value(); }
  bool operator==(const Host&) const = default;
};

// Normalizes a host as a client wrote it (CONNECT authority host, absolute-URI host, Host
// header, TLS SNI): IDNA (libidn2, non-transitional, TR46) to lower-case A-labels; strips one
// trailing dot; refuses userinfo ("user@host"), empty or over-long labels (63) and names (253),
// characters outside LDH after IDNA, and percent-encoding. IP literals in every form a resolver
// or browser accepts are recognized as IPs, not names: dotted quad, inet_aton forms (octal
// "0177.0.0.1", hex "0x7f.1", a single integer "2130706433", 2 and 3 part forms), IPv6 (bracketed
// or bare, with zone ids refused), and IPv4-mapped IPv6 (reported as the IPv4 address).
Result<Host> normalize_host(std::string_view raw);

// Splits an authority "host[:port]" / "[v6]:port" and normalizes the host. A missing port is
// `default_port`; a port must be 1..65535 in decimal without sign or leading '+'.
struct Authority {
  Host host;
  uint16_t port = 0;
};
Result<Authority> parse_authority(std::string_view authority, uint16_t default_port);

// What kind of address a destination resolved to. IPv4-mapped/compatible IPv6 addresses are
// classified as the IPv4 address they carry; NAT64 (64:ff9b::/96) likewise.
enum class AddressClass {
  kPublic,
  kUnspecified,  // 0.0.0.0/8, ::
  kLoopback,     // 127.0.0.0/8, ::1
  kPrivate,      // 10/8, 172.16/12, 192.168/16
  kLinkLocal,    // 169.254/16 (cloud metadata lives here), fe80::/10
  kCgnat,        // 100.64/10
  kUniqueLocal,  // fc00::/7
  kMulticast,    // 224/4, ff00::/8
  kReserved,     // 240/4, 255.255.255.255, 192.0.0/24, 198.18/15, 2001:db8::/32 and the like
};
AddressClass classify(const IpAddress& addr);
std::string_view address_class_name(AddressClass c);  // "public", "loopback", ...

// An address block, "10.0.0.0/8", "fd00::/8", or a single address (as /32 or /128).
struct Cidr {
  IpAddress base;
  unsigned prefix = 0;
  bool contains(const IpAddress& addr) const;  // v4-mapped v6 matches v4 blocks
};
Result<Cidr> parse_cidr(std::string_view text);

// "example.com" matches only example.com; "*.example.com" matches any name below it
// (a.example.com, a.b.example.com) but not example.com itself. IP-literal patterns ("10.1.2.3")
// match exactly that address. Patterns are normalized like hosts.
struct HostPattern {
  std::string suffix;  // normalized name (or address text) without the "*."
  bool wildcard = false;
  bool matches(const Host& host) const;
  // Every host this pattern matches is matched by `outer` too.
  bool within(const HostPattern& outer) const;
  std::string text() const;  // "*.example.com"
};
Result<HostPattern> parse_host_pattern(std::string_view text);

// "HOST[:PORT]" as a profile's string entry or an `--allow` entry writes it: HOST a pattern
// (a name, "*.suffix", an IPv4 address, "[v6]" or a bare IPv6 address without port).
struct HostPortPattern {
  HostPattern host;
  std::optional<uint16_t> port;  // none given
};
Result<HostPortPattern> parse_host_port_pattern(std::string_view text);

// One allow rule of a profile.
struct Rule {
  HostPattern host;
  std::vector<uint16_t> ports;             // empty = {80, 443}
  std::vector<std::string> methods;        // upper-case; empty = any method
  std::vector<std::string> path_prefixes;  // each starts with '/'; empty = any path
  bool allows_port(uint16_t port) const;
};

// A profile's egress section, as written in spaced's config (docs/configuration.md):
//   {"allow": ["pypi.org", "*.pythonhosted.org:443",
//              {"host": "api.github.com", "ports": [443], "methods": ["GET"],
//               "paths": ["/repos/"]}],
//    "allow_networks": ["10.20.0.0/16"],
//    "max_connections": 64, "bandwidth": "10M"}
// A string entry is "HOST[:PORT]". `bandwidth` is bytes per second (units as in "10M"), per
// sandbox, each direction; absent = unlimited.
struct EgressProfile {
  std::vector<Rule> allow;
  std::vector<Cidr> allow_networks;
  size_t max_connections = 64;         // concurrent gateway connections per sandbox
  uint64_t bandwidth_bytes_per_s = 0;  // 0 = unlimited
  static Result<EgressProfile> from_json(const nlohmann::json& j);
};

struct Decision {
  bool allowed = false;
  std::string reason;  // why refused: "host not in profile test", "port 22 not allowed for
                       // example.com", "method DELETE not allowed", "path /admin not allowed",
                       // "address 127.0.0.1 is loopback"; empty when allowed
};

// Method and path rules, shared by profile rules and secret bindings (credentials.h).
// A method as a rule lists it: an HTTP token (RFC 9110), returned upper-case.
Result<std::string> parse_method(std::string_view text);
// A path prefix as a rule lists it: starts with '/', visible ASCII, no query or fragment, no
// dot segments, no backslash, no encoded dot, slash, backslash or percent sign.
Result<std::string> parse_path_prefix(std::string_view text);
// Does request-target `target` (origin-form path and query) fall under one of `prefixes`?
// Empty `prefixes` = any path (only the form is checked: origin-form or "*", no control
// bytes). Otherwise the target is refused if it holds dot segments ("/a/../b", "..;", "%2e"),
// encoded slashes, backslashes or percent signs ("%2f", "%5c", "%25"), raw backslashes or
// encoded control bytes; then its path (the query ignored) must start with a prefix, byte for
// byte. "*" (OPTIONS) matches no prefix.
Decision check_path(const std::vector<std::string>& prefixes, std::string_view target);

// A sandbox's effective policy: its profile narrowed by the `--allow` entries it was created
// with. Immutable once made; safe to share between threads.
class Policy {
 public:
  Policy() = default;  // refuses everything
  // `narrow` holds "HOST[:PORT]" entries (HOST may be "*.suffix"). Each must fall within what
  // the profile allows (same or narrower host pattern, an allowed port), otherwise
  // kInvalidArgument naming the entry. Empty `narrow` = the whole profile.
  static Result<Policy> make(std::string profile_name, const EgressProfile& profile,
                             const std::vector<std::string>& narrow);

  // May a connection to host:port be opened at all (CONNECT, transparent TLS by SNI)?
  Decision check_host(const Host& host, uint16_t port) const;
  // May this HTTP request be sent? (absolute-form requests, and each request inside an
  // intercepted TLS connection). `target` is the request-target's path and query; it is
  // checked against path prefixes after refusing dot segments ("/a/../b", "%2e%2e"), encoded
  // slashes and backslashes ("%2f", "%5c", "\\"), so a prefix cannot be sidestepped.
  Decision check_request(const Host& host, uint16_t port, std::string_view method,
                         std::string_view target) const;
  // Must connections to host:port be intercepted (TLS terminated) so that method and path
  // rules can be enforced? True when the rules that allow it restrict methods or paths (and,
  // failing safe, for a host:port that check_host refuses).
  bool needs_inspection(const Host& host, uint16_t port) const;
  // May the gateway dial this resolved address? Public addresses yes; any other class only
  // inside an `allow_networks` block; the unspecified address (0.0.0.0, ::, which dial this
  // host) never. A policy without rules refuses every address.
  Decision check_address(const IpAddress& addr) const;

  const std::string& profile() const { return profile_; }
  size_t max_connections() const { return max_connections_; }
  uint64_t bandwidth_bytes_per_s() const { return bandwidth_; }
  std::vector<uint16_t> ports() const;  // every port some rule allows, sorted, unique

  // The policy as data and back, for the gateway process (egress/wire.h): the profile's rules
  // in its config form, the --allow entries as written. from_json(to_json()) decides every
  // check exactly as the original does.
  nlohmann::json to_json() const;
  static Result<Policy> from_json(const nlohmann::json& j);

 private:
  std::string profile_;
  std::vector<Rule> rules_;   // profile rules
  std::vector<Rule> narrow_;  // --allow entries (host + optional single port)
  std::vector<Cidr> networks_;
  size_t max_connections_ = 0;
  uint64_t bandwidth_ = 0;
};

}  // namespace space::egress
