// Host names and addresses (src/egress/host.cc), tested mostly from the attacker's side: host
// spellings that must normalize to the same name or address (IDNA, fullwidth forms, every
// inet_aton form of 127.0.0.1 and of the cloud metadata address), spellings that must be
// refused outright, each encoding of a non-public address that must be classified as what it
// carries, CIDR blocks, and patterns that must not match look-alike names. An invariant check
// runs over thousands of mutated hosts: every accepted name is stable under normalization, is
// LDH only, and is nothing glibc's inet_aton or inet_pton would read as an address.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <random>

#include "egress/policy.h"
#include "mutate.h"

namespace space::egress {
namespace {

IpAddress ip(const char* text) { return boost::asio::ip::make_address(text); }

std::string error_of(const Result<Host>& r) { return r ? "(accepted)" : r.error().message(); }

// ---------------------------------------------------------------------------------------------
// normalize_host: names

struct NameCase {
  std::string in;
  std::string out;
};

TEST(NormalizeHost, Names) {
  const NameCase cases[] = {
      {"example.com", "example.com"},
      {"Example.COM.", "example.com"},
      {"EXAMPLE.COM", "example.com"},
      {"a-b.c0.example", "a-b.c0.example"},
      {"localhost", "localhost"},
      {"123.example.com", "123.example.com"},  // numeric labels are fine before the last
      {"0x7f.example", "0x7f.example"},
      {"bücher.example", "xn--bcher-kva.example"},
      {"BÜCHER.example.", "xn--bcher-kva.example"},
      {"XN--BCHER-KVA.example", "xn--bcher-kva.example"},
      {"faß.de", "xn--fa-hia.de"},            // non-transitional: ß is kept
      {"e\xcc\x81.com", "xn--9ca.com"},       // NFC: e + combining acute = é
      {"ｅｘａｍｐｌｅ.com", "example.com"},  // fullwidth letters
      {"example\xef\xbc\x8e"
       "com",
       "example.com"},  // U+FF0E fullwidth full stop
      {"example\xe3\x80\x82"
       "com",
       "example.com"},  // U+3002 ideographic full stop
      {"ＥＸＡＭＰＬＥ.ＣＯＭ", "example.com"},
      {"r3---sn-abc.googlevideo.com", "r3---sn-abc.googlevideo.com"},  // real: '--' at 3-4
      {std::string(63, 'a') + ".com", std::string(63, 'a') + ".com"},
  };
  for (const auto& c : cases) {
    auto h = normalize_host(c.in);
    ASSERT_TRUE(h) << c.in << ": " << error_of(h);
    EXPECT_EQ(h->name, c.out) << c.in;
    EXPECT_FALSE(h->is_ip()) << c.in;
  }
}

TEST(NormalizeHost, LongestName) {
  std::string label(63, 'a');
  std::string name = label + "." + label + "." + label + "." + std::string(61, 'b');  // 253
  ASSERT_EQ(name.size(), 253u);
  EXPECT_TRUE(normalize_host(name));
  EXPECT_TRUE(normalize_host(name + "."));  // the root dot does not count
  EXPECT_FALSE(normalize_host(name + "b"));
}

struct RefuseCase {
  std::string in;
  std::string why;  // a substring of the error message
};

TEST(NormalizeHost, Refusals) {
  const RefuseCase cases[] = {
      {"", "empty"},
      {".", "empty"},
      {"example.com..", "empty label"},
      {"a..b", "empty label"},
      {".example.com", "empty label"},
      {"user@host", "userinfo"},
      {"allowed.com@evil.com", "userinfo"},
      {"host/path", "path"},
      {"host?x", "query"},
      {"host#x", "fragment"},
      {"host\\x", "path"},
      {"a b.com", "space"},
      {std::string("a\0b.com", 7), "control"},
      {std::string("example.com\0.evil.com", 21), "control"},
      {"a\tb.com", "control"},
      {"a\r\nb.com", "control"},
      {"ex%41mple.com", "percent"},
      {"%2e", "percent"},
      {"exa_mple.com", "only letters"},
      {"*.example.com", "'*'"},
      {"-foo.com", "'-'"},
      {"foo-.com", "'-'"},
      {std::string(64, 'a') + ".com", "longer than 63"},
      {std::string(300, 'a'), "longer"},
      {std::string(2000, 'a'), "too long"},
      {"xn--zz.com", "A-label"},
      {"xn--abc.com", "A-label"},
      {"xn--.com", "'-'"},
      {"xn--ls8h.la", "A-label"},                    // punycode of an emoji: not IDNA2008
      {"\xf0\x9f\x92\xa9.la", "internationalized"},  // the emoji itself
      {"a\xe2\x80\x8d"
       "b.com",
       "internationalized"},  // ZWJ outside its context
      {"a\xff"
       "b.com",
       "internationalized"},                  // not UTF-8
      {"\xc0\xae.com", "internationalized"},  // overlong '.'
      {"evil.com\xef\xbc\x8f"
       "x",
       "maps to"},  // U+FF0F fullwidth solidus -> '/'
      {"a\xef\xbc\xa0"
       "b.com",
       "maps to"},  // U+FF20 fullwidth @
      {"ex\xef\xbc\x85"
       "41mple.com",
       "maps to"},                                             // U+FF05 fullwidth %
      {"example.com\xe3\x80\x82\xe3\x80\x82", "empty label"},  // two ideographic stops
      {"\xef\xbc\xbb::1\xef\xbc\xbd", "IPv6"},                 // fullwidth brackets
      // A numeric last label makes it an IPv4 address or nothing.
      {"1.2.3.4.5", "IPv4"},
      {"08.1.1.1", "IPv4"},
      {"09", "IPv4"},
      {"256.1.1.1", "IPv4"},
      {"1.2.3.256", "IPv4"},
      {"1.2.65536", "IPv4"},
      {"1.16777216", "IPv4"},
      {"4294967296", "IPv4"},
      {"0x100000000", "IPv4"},
      {"99999999999999999999999", "IPv4"},
      {"example.123", "IPv4"},
      {"example.0x1f", "IPv4"},
      {"0xg.1", "IPv4"},
      {"1..2", "IPv4"},
      {"1.2.3.4..", "empty label"},
      // IPv6.
      {"[::1", "unterminated"},
      {"[]", "unterminated"},
      {"[fe80::1%25eth0]", "zone"},
      {"[fe80::1%eth0]", "zone"},
      {"fe80::1%eth0", "percent"},
      {"[127.0.0.1]", "IPv6"},
      {"[::1]:80", "follow ']'"},
      {"[example.com]", "IPv6"},
      {"::1::2", "IPv6"},
      {":", "IPv6"},
      {"example.com:443", "IPv6"},
      {"[::1]]", "follow ']'"},
  };
  for (const auto& c : cases) {
    auto h = normalize_host(c.in);
    ASSERT_FALSE(h) << c.in << " accepted as " << h->name;
    EXPECT_EQ(h.error().code(), Code::kInvalidArgument);
    EXPECT_NE(h.error().message().find(c.why), std::string::npos)
        << c.in << ": " << h.error().message();
  }
}

TEST(NormalizeHost, MessagesEscapeUntrustedBytes) {
  auto h = normalize_host(std::string("a\nb\x1b[31m\"x", 11));
  ASSERT_FALSE(h);
  const std::string& m = h.error().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m.find('\x1b'), std::string::npos) << m;
  EXPECT_NE(m.find("\\x0a"), std::string::npos) << m;
  auto long_host = normalize_host(std::string(5000, '/'));
  ASSERT_FALSE(long_host);
  EXPECT_LT(long_host.error().message().size(), 400u);
}

// ---------------------------------------------------------------------------------------------
// normalize_host: IP literals

struct IpCase {
  std::string in;
  std::string canonical;
};

TEST(NormalizeHost, IpLiterals) {
  const IpCase cases[] = {
      {"127.0.0.1", "127.0.0.1"},
      {"127.0.0.1.", "127.0.0.1"},
      {"0177.0.0.1", "127.0.0.1"},
      {"0x7f.0.0.1", "127.0.0.1"},
      {"0X7F.0.0.1", "127.0.0.1"},
      {"0x7f.1", "127.0.0.1"},
      {"127.1", "127.0.0.1"},
      {"2130706433", "127.0.0.1"},
      {"0x7f000001", "127.0.0.1"},
      {"017700000001", "127.0.0.1"},
      {"00000000000000000000177.1", "127.0.0.1"},
      {"\xef\xbc\x91\xef\xbc\x92\xef\xbc\x97\xef\xbc\x8e\xef\xbc\x90\xef\xbc\x8e\xef\xbc\x90"
       "\xef\xbc\x8e\xef\xbc\x91",
       "127.0.0.1"},  // fullwidth digits and dots
      {"127\xe3\x80\x82"
       "0\xe3\x80\x82"
       "0\xe3\x80\x82"
       "1",
       "127.0.0.1"},
      {"[::1]", "::1"},
      {"::1", "::1"},
      {"[::ffff:127.0.0.1]", "127.0.0.1"},
      {"::ffff:7f00:1", "127.0.0.1"},
      {"[::FFFF:7F00:1]", "127.0.0.1"},
      {"169.254.169.254", "169.254.169.254"},
      {"0xa9fea9fe", "169.254.169.254"},
      {"0xA9FEA9FE", "169.254.169.254"},
      {"2852039166", "169.254.169.254"},
      {"0251.0376.0251.0376", "169.254.169.254"},
      {"169.254.43518", "169.254.169.254"},
      {"169.16689662", "169.254.169.254"},
      {"[::ffff:169.254.169.254]", "169.254.169.254"},
      {"[fd00::1]", "fd00::1"},
      {"[FD00:0:0::1]", "fd00::1"},
      {"[2001:DB8::1]", "2001:db8::1"},
      {"[::169.254.169.254]", "::169.254.169.254"},  // v4-compatible stays IPv6
      {"1.2.3", "1.2.0.3"},
      {"0", "0.0.0.0"},
      {"0x", "0.0.0.0"},
      {"4294967295", "255.255.255.255"},
      {"0300.0250.0.1", "192.168.0.1"},
  };
  for (const auto& c : cases) {
    auto h = normalize_host(c.in);
    ASSERT_TRUE(h) << c.in << ": " << error_of(h);
    ASSERT_TRUE(h->is_ip()) << c.in;
    EXPECT_EQ(h->name, c.canonical) << c.in;
    EXPECT_EQ(h->ip->to_string(), c.canonical) << c.in;
    EXPECT_EQ(h->ip->is_v4(), c.canonical.find(':') == std::string::npos) << c.in;
    // Normalizing the canonical form gives the same Host.
    auto again = normalize_host(h->name);
    ASSERT_TRUE(again) << h->name;
    EXPECT_EQ(*again, *h);
  }
}

// Every ASCII IPv4 spelling we accept means what glibc's inet_aton says it means.
TEST(NormalizeHost, AgreesWithInetAton) {
  const char* cases[] = {
      "127.0.0.1",           "0177.0.0.1", "0x7f.0.0.1",   "0x7f.1",          "127.1",
      "2130706433",          "0x7f000001", "017700000001", "0xa9fea9fe",      "2852039166",
      "0251.0376.0251.0376", "1.2.3",      "10.0x10.0300", "255.255.255.255", "0"};
  for (const char* c : cases) {
    in_addr a{};
    ASSERT_EQ(inet_aton(c, &a), 1) << c;
    auto h = normalize_host(c);
    ASSERT_TRUE(h && h->is_ip()) << c;
    EXPECT_EQ(h->ip->to_v4().to_uint(), ntohl(a.s_addr)) << c;
  }
}

// ---------------------------------------------------------------------------------------------
// parse_authority

TEST(ParseAuthority, Accepts) {
  struct Case {
    std::string in;
    uint16_t def;
    std::string host;
    uint16_t port;
  };
  const Case cases[] = {
      {"host:443", 80, "host", 443},
      {"Example.COM:8443", 443, "example.com", 8443},
      {"example.com", 443, "example.com", 443},
      {"example.com.:1", 443, "example.com", 1},
      {"[::1]:8080", 443, "::1", 8080},
      {"[::1]", 443, "::1", 443},
      {"[::ffff:169.254.169.254]:80", 443, "169.254.169.254", 80},
      {"0x7f.1:65535", 443, "127.0.0.1", 65535},
      {"bücher.example:443", 80, "xn--bcher-kva.example", 443},
  };
  for (const auto& c : cases) {
    auto a = parse_authority(c.in, c.def);
    ASSERT_TRUE(a) << c.in << ": " << a.error().message();
    EXPECT_EQ(a->host.name, c.host) << c.in;
    EXPECT_EQ(a->port, c.port) << c.in;
  }
}

TEST(ParseAuthority, Refusals) {
  const RefuseCase cases[] = {
      {"", "empty"},
      {":443", "empty"},
      {"host:0", "port"},
      {"host:65536", "port"},
      {"host:99999999999", "port"},
      {"host:+443", "port"},
      {"host:-1", "port"},
      {"host:443a", "port"},
      {"host: 443", "port"},
      {"host:0443", "port"},
      {"host:", "port"},
      {"host:443:", "brackets"},
      {"allowed.com:443@evil.com", "userinfo"},
      {"user:pass@allowed.com:443", "userinfo"},
      {"::1", "brackets"},
      {"::1:443", "brackets"},
      {"[::1]443", "':' after ']'"},
      {"[::1]:", "port"},
      {"[::1", "unterminated"},
      {"[fe80::1%25eth0]:443", "zone"},
      {"evil.com/x:443", "path"},
      {"1.2.3.4.5:80", "IPv4"},
  };
  for (const auto& c : cases) {
    auto a = parse_authority(c.in, 443);
    ASSERT_FALSE(a) << c.in << " accepted";
    EXPECT_EQ(a.error().code(), Code::kInvalidArgument);
    EXPECT_NE(a.error().message().find(c.why), std::string::npos)
        << c.in << ": " << a.error().message();
  }
  auto no_default = parse_authority("example.com", 0);
  ASSERT_FALSE(no_default);
  EXPECT_NE(no_default.error().message().find("no port"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// classify

TEST(Classify, Ranges) {
  using C = AddressClass;
  const std::pair<const char*, AddressClass> cases[] = {
      {"8.8.8.8", C::kPublic},
      {"1.1.1.1", C::kPublic},
      {"0.0.0.0", C::kUnspecified},
      {"0.255.255.255", C::kUnspecified},
      {"127.0.0.1", C::kLoopback},
      {"127.255.255.254", C::kLoopback},
      {"10.0.0.1", C::kPrivate},
      {"10.255.255.255", C::kPrivate},
      {"172.16.0.1", C::kPrivate},
      {"172.31.255.255", C::kPrivate},
      {"172.15.255.255", C::kPublic},
      {"172.32.0.0", C::kPublic},
      {"192.168.1.1", C::kPrivate},
      {"192.169.0.1", C::kPublic},
      {"169.254.169.254", C::kLinkLocal},
      {"169.254.0.1", C::kLinkLocal},
      {"169.253.255.255", C::kPublic},
      {"100.64.0.1", C::kCgnat},
      {"100.127.255.255", C::kCgnat},
      {"100.63.255.255", C::kPublic},
      {"100.128.0.0", C::kPublic},
      {"224.0.0.1", C::kMulticast},
      {"239.255.255.250", C::kMulticast},
      {"240.0.0.1", C::kReserved},
      {"255.255.255.255", C::kReserved},
      {"192.0.0.1", C::kReserved},
      {"192.0.2.1", C::kReserved},
      {"198.18.0.1", C::kReserved},
      {"198.19.255.255", C::kReserved},
      {"198.51.100.1", C::kReserved},
      {"203.0.113.1", C::kReserved},
      {"192.88.99.1", C::kReserved},
      // IPv6.
      {"2606:4700::1111", C::kPublic},
      {"2001:4860:4860::8888", C::kPublic},
      {"::", C::kUnspecified},
      {"::1", C::kLoopback},
      {"fe80::1", C::kLinkLocal},
      {"febf::1", C::kLinkLocal},
      {"fec0::1", C::kPrivate},
      {"fc00::1", C::kUniqueLocal},
      {"fd00::1", C::kUniqueLocal},
      {"ff02::1", C::kMulticast},
      {"ff05::2", C::kMulticast},
      {"2001:db8::1", C::kReserved},
      {"2001::1", C::kReserved},  // Teredo
      {"2001:20::1", C::kReserved},
      {"3fff::1", C::kReserved},
      {"100::1", C::kReserved},
      {"5f00::1", C::kReserved},
      {"4000::1", C::kReserved},
      {"64:ff9b:1::1", C::kReserved},
      {"::ffff:0:7f00:1", C::kReserved},  // SIIT, not mapped
      // Embedded IPv4: mapped, compatible, NAT64, 6to4.
      {"::ffff:127.0.0.1", C::kLoopback},
      {"::ffff:8.8.8.8", C::kPublic},
      {"::ffff:10.1.2.3", C::kPrivate},
      {"::127.0.0.1", C::kLoopback},
      {"::10.0.0.1", C::kPrivate},
      {"::8.8.8.8", C::kPublic},
      {"::0.0.0.2", C::kUnspecified},
      {"64:ff9b::7f00:1", C::kLoopback},
      {"64:ff9b::8.8.8.8", C::kPublic},
      {"64:ff9b::c0a8:101", C::kPrivate},
      {"2002:7f00:1::1", C::kLoopback},
      {"2002:c0a8:101::", C::kPrivate},
      {"2002:808:808::1", C::kPublic},
  };
  for (const auto& [text, cls] : cases) {
    EXPECT_EQ(address_class_name(classify(ip(text))), address_class_name(cls)) << text;
  }
}

TEST(Classify, MetadataAddressInEveryEncoding) {
  const char* hosts[] = {"169.254.169.254",
                         "0xa9fea9fe",
                         "2852039166",
                         "0251.0376.0251.0376",
                         "169.254.43518",
                         "0xa9.0xfe.0xa9.0xfe",
                         "[::ffff:169.254.169.254]",
                         "[::ffff:a9fe:a9fe]",
                         "[::169.254.169.254]",
                         "[64:ff9b::169.254.169.254]",
                         "[64:ff9b::a9fe:a9fe]",
                         "[2002:a9fe:a9fe::]",
                         "[2002:a9fe:a9fe:1234::5]"};
  for (const char* h : hosts) {
    auto n = normalize_host(h);
    ASSERT_TRUE(n && n->is_ip()) << h << ": " << error_of(n);
    EXPECT_EQ(classify(*n->ip), AddressClass::kLinkLocal) << h;
  }
}

TEST(Classify, Names) {
  EXPECT_EQ(address_class_name(AddressClass::kPublic), "public");
  EXPECT_EQ(address_class_name(AddressClass::kLoopback), "loopback");
  EXPECT_EQ(address_class_name(AddressClass::kLinkLocal), "link-local");
  EXPECT_EQ(address_class_name(AddressClass::kUniqueLocal), "unique-local");
}

// ---------------------------------------------------------------------------------------------
// Cidr

TEST(Cidr, ParseAndContains) {
  struct Case {
    const char* cidr;
    const char* addr;
    bool in;
  };
  const Case cases[] = {
      {"10.0.0.0/8", "10.1.2.3", true},
      {"10.0.0.0/8", "11.0.0.0", false},
      {"10.20.0.0/16", "10.20.255.255", true},
      {"10.20.0.0/16", "10.21.0.0", false},
      {"10.0.0.0/8", "::ffff:10.1.2.3", true},  // mapped matches v4 blocks
      {"10.0.0.0/8", "::10.1.2.3", false},      // compatible does not
      {"10.0.0.0/8", "64:ff9b::a01:203", false},
      {"192.0.2.7", "192.0.2.7", true},
      {"192.0.2.7", "192.0.2.8", false},
      {"0.0.0.0/0", "8.8.8.8", true},
      {"0.0.0.0/0", "::1", false},
      {"fd00::/8", "fd12::1", true},
      {"fd00::/8", "fc00::1", false},
      {"fd00::/8", "10.0.0.1", false},
      {"::1", "::1", true},
      {"::ffff:10.0.0.0/104", "10.9.9.9", true},  // a mapped block is a v4 block
      {"2001:db8:1::/48", "2001:db8:1:ffff::1", true},
      {"2001:db8:1::/48", "2001:db8:2::1", false},
      {"fe80::/10", "febf::1", true},
      {"fe80::/10", "fec0::1", false},
  };
  for (const auto& c : cases) {
    auto cidr = parse_cidr(c.cidr);
    ASSERT_TRUE(cidr) << c.cidr << ": " << cidr.error().message();
    EXPECT_EQ(cidr->contains(ip(c.addr)), c.in) << c.cidr << " " << c.addr;
  }
  auto single = parse_cidr("192.0.2.7");
  ASSERT_TRUE(single);
  EXPECT_EQ(single->prefix, 32u);
  EXPECT_EQ(parse_cidr("fd00::1")->prefix, 128u);
}

TEST(Cidr, Refusals) {
  const char* cases[] = {"",
                         "10.0.0.0/",
                         "10.0.0.0/33",
                         "10.0.0.0/-1",
                         "10.0.0.0/+8",
                         "10.0.0.0/08",
                         "10.0.0.0/8/8",
                         "10.0.0.1/8",
                         "10/8",
                         "0x0a.0.0.0/8",
                         "010.0.0.0/8",
                         "example.com/8",
                         "fd00::/129",
                         "fd00::1/8",
                         "fe80::1%eth0/64",
                         "[fd00::]/8",
                         " 10.0.0.0/8",
                         "10.0.0.0/8 "};
  for (const char* c : cases) {
    auto r = parse_cidr(c);
    EXPECT_FALSE(r) << "accepted " << c;
    if (!r) {
      EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// HostPattern

HostPattern pattern(const char* text) {
  auto p = parse_host_pattern(text);
  EXPECT_TRUE(p) << text << ": " << p.error().message();
  return p ? *p : HostPattern{};
}
Host host(std::string_view text) {
  auto h = normalize_host(text);
  EXPECT_TRUE(h) << text << ": " << error_of(h);
  return h ? *h : Host{};
}

TEST(HostPattern, Parse) {
  EXPECT_EQ(pattern("*.Example.COM.").text(), "*.example.com");
  EXPECT_TRUE(pattern("*.example.com").wildcard);
  EXPECT_EQ(pattern("*.example.com").suffix, "example.com");
  EXPECT_EQ(pattern("bücher.example").text(), "xn--bcher-kva.example");
  EXPECT_EQ(pattern("*.com").text(), "*.com");
  EXPECT_EQ(pattern("10.1.2.3").text(), "10.1.2.3");
  EXPECT_EQ(pattern("0x0a.1.2.3").text(), "10.1.2.3");
  EXPECT_EQ(pattern("[fd00::5]").text(), "fd00::5");
  EXPECT_EQ(pattern("fd00::5").text(), "fd00::5");
  const char* bad[] = {"",       "*",          "*.",      "**.example.com", "a*.b",
                       "*a.b",   "*.*.x",      "a.*.b",   "example.*",      "*example.com",
                       ".*.x",   "*.10.1.2.3", "*.[::1]", "*..example.com", "user@x.com",
                       "x.com/", "1.2.3.4.5",  "*.1.2.3"};
  for (const char* b : bad) {
    auto p = parse_host_pattern(b);
    EXPECT_FALSE(p) << "accepted pattern " << b;
    if (!p) {
      EXPECT_EQ(p.error().code(), Code::kInvalidArgument);
    }
  }
  EXPECT_NE(parse_host_pattern("*").error().message().find("bare"), std::string::npos);
}

TEST(HostPattern, Matches) {
  struct Case {
    const char* pattern;
    const char* host;
    bool match;
  };
  const Case cases[] = {
      {"example.com", "example.com", true},
      {"example.com", "EXAMPLE.com.", true},
      {"example.com", "a.example.com", false},
      {"allowed.com", "allowed.com.evil.com", false},
      {"allowed.com", "evilallowed.com", false},
      {"*.example.com", "a.example.com", true},
      {"*.example.com", "a.b.example.com", true},
      {"*.example.com", "A.Example.Com.", true},
      {"*.example.com", "example.com", false},
      {"*.example.com", "badexample.com", false},
      {"*.example.com", "example.com.evil.com", false},
      {"*.example.com", "a.example.com.evil.com", false},
      {"*.example.com", "aexample.com", false},
      {"*.xn--bcher-kva.example", "www.bücher.example", true},
      {"*.com", "example.com", true},
      {"10.1.2.3", "10.1.2.3", true},
      {"10.1.2.3", "0x0a010203", true},
      {"10.1.2.3", "[::ffff:10.1.2.3]", true},
      {"10.1.2.3", "10.1.2.4", false},
      {"fd00::5", "[FD00:0::5]", true},
      {"fd00::5", "[fd00::6]", false},
      {"*.com", "10.1.2.3", false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(pattern(c.pattern).matches(host(c.host)), c.match) << c.pattern << " " << c.host;
  }
  // A name-host whose text equals an IP pattern (built by hand) does not match it.
  EXPECT_FALSE(pattern("10.1.2.3").matches(Host{"10.1.2.3", std::nullopt}));
}

TEST(HostPattern, Within) {
  struct Case {
    const char* inner;
    const char* outer;
    bool within;
  };
  const Case cases[] = {
      {"a.example.com", "*.example.com", true},
      {"a.b.example.com", "*.example.com", true},
      {"*.a.example.com", "*.example.com", true},
      {"*.example.com", "*.example.com", true},
      {"example.com", "example.com", true},
      {"*.example.com", "a.example.com", false},
      {"*.example.com", "example.com", false},
      {"example.com", "*.example.com", false},
      {"*.com", "*.example.com", false},
      {"badexample.com", "*.example.com", false},
      {"*.badexample.com", "*.example.com", false},
      {"example.com.evil.com", "*.example.com", false},
      {"10.1.2.3", "10.1.2.3", true},
      {"10.1.2.3", "*.com", false},
      {"10.1.2.3", "10.1.2.4", false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(pattern(c.inner).within(pattern(c.outer)), c.within) << c.inner << " " << c.outer;
  }
}

TEST(HostPortPattern, Parse) {
  struct Case {
    const char* in;
    const char* host;
    int port;  // -1: none
  };
  const Case cases[] = {
      {"pypi.org", "pypi.org", -1},        {"*.Example.com:8443", "*.example.com", 8443},
      {"10.1.2.3:8080", "10.1.2.3", 8080}, {"[fd00::5]:443", "fd00::5", 443},
      {"[fd00::5]", "fd00::5", -1},        {"fd00::5", "fd00::5", -1},
  };
  for (const auto& c : cases) {
    auto hp = parse_host_port_pattern(c.in);
    ASSERT_TRUE(hp) << c.in << ": " << hp.error().message();
    EXPECT_EQ(hp->host.text(), c.host) << c.in;
    EXPECT_EQ(hp->port ? int{*hp->port} : -1, c.port) << c.in;
  }
  for (const char* bad : {"", "x.com:", "x.com:0", "x.com:+1", "*:443", "user@x.com:443",
                          "[fd00::5]:", "[fd00::5]x", "x.com:443:1", "x.com:443/"}) {
    EXPECT_FALSE(parse_host_port_pattern(bad)) << "accepted " << bad;
  }
}

TEST(Printable, EscapesAndTruncates) {
  EXPECT_EQ(printable("GET /x"), "GET /x");
  EXPECT_EQ(printable(std::string("a\0\n\"\\\xff", 6)), "a\\x00\\x0a\\x22\\x5c\\xff");
  EXPECT_EQ(printable("abcdef", 3), "abc...");
}

// ---------------------------------------------------------------------------------------------
// Invariants over mutated inputs.

using test::mutate;

TEST(Invariants, AcceptedHostsAreStableAndNeverNumeric) {
  const std::vector<std::string> seeds = {
      "example.com",    "127.0.0.1",       "0x7f.1",  "[::1]",
      "bücher.example", "169.254.169.254", "a.b.c.d", "xn--bcher-kva.example",
      "::ffff:7f00:1"};
  const std::vector<std::string> pieces = {".",
                                           "0",
                                           "1",
                                           "x",
                                           "0x",
                                           "9",
                                           "8",
                                           "a",
                                           "-",
                                           ":",
                                           "[",
                                           "]",
                                           "%",
                                           "@",
                                           "F",
                                           "ü",
                                           "\xef\xbc\x8e",
                                           "\xef\xbd\x85",
                                           "\xe3\x80\x82",
                                           "xn--",
                                           "255",
                                           "07",
                                           "\xef\xbc\x91"};
  std::mt19937 rng(12345);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string in = mutate(rng, seeds[rng() % seeds.size()], pieces);
    auto h = normalize_host(in);
    if (!h) continue;
    ++accepted;
    auto again = normalize_host(h->name);
    ASSERT_TRUE(again) << in << " -> " << h->name << ": " << error_of(again);
    ASSERT_EQ(*again, *h) << in;
    if (h->is_ip()) {
      ASSERT_EQ(h->name, h->ip->to_string());
      continue;
    }
    for (char c : h->name) {
      ASSERT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')
          << in << " -> " << h->name;
    }
    in_addr a{};
    ASSERT_EQ(inet_aton(h->name.c_str(), &a), 0) << in << " -> " << h->name;
    std::array<unsigned char, 16> b6{};
    ASSERT_EQ(inet_pton(AF_INET6, h->name.c_str(), b6.data()), 0) << h->name;
  }
  EXPECT_GT(accepted, 1000);  // the mutations reach the interesting side too
}

// How a lenient server might read a path: decode every %XX (repeatedly), treat '\' as '/',
}  // namespace
}  // namespace space::egress
