// Egress policy (src/egress/policy.cc), tested mostly from the attacker's side: profiles that
// must be refused (each message naming the key), --allow entries that try to widen a profile,
// hosts and ports outside the rules, request-targets that try to walk out of a path prefix
// (dot segments, "..;", encoded dots and slashes, backslashes), methods outside the rules, and
// resolved addresses in every non-public class. An invariant check runs over thousands of
// mutated request-targets: none that is accepted resolves, as a lenient server would read it,
// outside its prefix.
#include "egress/policy.h"

#include <gtest/gtest.h>

#include <cctype>
#include <random>

#include "mutate.h"

namespace space::egress {
namespace {

using json = nlohmann::json;

IpAddress ip(const char* text) { return boost::asio::ip::make_address(text); }

std::string error_of(const Result<Host>& r) { return r ? "(accepted)" : r.error().message(); }

struct RefuseCase {
  std::string in;
  std::string why;  // a substring of the error message
};

Host host(std::string_view text) {
  auto h = normalize_host(text);
  EXPECT_TRUE(h) << text << ": " << error_of(h);
  return h ? *h : Host{};
}

// ---------------------------------------------------------------------------------------------
// EgressProfile::from_json

const char* kProfile = R"({
  "allow": ["pypi.org", "*.pythonhosted.org:443", "10.1.2.3:8080", "[fd00::5]:443",
            {"host": "api.github.com", "ports": [443], "methods": ["get", "HEAD"],
             "paths": ["/repos/", "/user"]},
            {"host": "*.example.com", "ports": [443, 8443]},
            {"host": "upload.example.com", "methods": ["POST"]},
            {"host": "mixed.test", "paths": ["/public/"]},
            {"host": "mixed.test", "methods": ["GET"]}],
  "allow_networks": ["10.1.0.0/16", "fd00::/8"],
  "max_connections": 8,
  "bandwidth": "10M"})";

EgressProfile profile() {
  auto p = EgressProfile::from_json(json::parse(kProfile));
  EXPECT_TRUE(p) << p.error().message();
  return p ? *p : EgressProfile{};
}

TEST(EgressProfile, FromJson) {
  EgressProfile p = profile();
  ASSERT_EQ(p.allow.size(), 9u);
  EXPECT_EQ(p.allow[0].host.text(), "pypi.org");
  EXPECT_TRUE(p.allow[0].ports.empty());
  EXPECT_TRUE(p.allow[0].allows_port(80));
  EXPECT_TRUE(p.allow[0].allows_port(443));
  EXPECT_FALSE(p.allow[0].allows_port(8080));
  EXPECT_EQ(p.allow[1].host.text(), "*.pythonhosted.org");
  EXPECT_EQ(p.allow[1].ports, std::vector<uint16_t>{443});
  EXPECT_FALSE(p.allow[1].allows_port(80));
  EXPECT_EQ(p.allow[2].host.text(), "10.1.2.3");
  EXPECT_EQ(p.allow[2].ports, std::vector<uint16_t>{8080});
  EXPECT_EQ(p.allow[3].host.text(), "fd00::5");
  EXPECT_EQ(p.allow[4].methods, (std::vector<std::string>{"GET", "HEAD"}));
  EXPECT_EQ(p.allow[4].path_prefixes, (std::vector<std::string>{"/repos/", "/user"}));
  EXPECT_EQ(p.allow[5].ports, (std::vector<uint16_t>{443, 8443}));
  ASSERT_EQ(p.allow_networks.size(), 2u);
  EXPECT_TRUE(p.allow_networks[0].contains(ip("10.1.9.9")));
  EXPECT_EQ(p.max_connections, 8u);
  EXPECT_EQ(p.bandwidth_bytes_per_s, 10u * 1024 * 1024);

  auto empty = EgressProfile::from_json(json::object());
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->allow.empty());
  EXPECT_EQ(empty->max_connections, 64u);
  EXPECT_EQ(empty->bandwidth_bytes_per_s, 0u);
  auto numeric_bw = EgressProfile::from_json(json{{"bandwidth", 1000}});
  ASSERT_TRUE(numeric_bw);
  EXPECT_EQ(numeric_bw->bandwidth_bytes_per_s, 1000u);
}

TEST(EgressProfile, Refusals) {
  const RefuseCase cases[] = {
      {R"([])", "must be an object"},
      {R"({"alow": []})", "unknown key \"alow\""},
      {R"({"allow": "pypi.org"})", "must be an array"},
      {R"({"allow": [42]})", "egress.allow[0]"},
      {R"({"allow": ["ok.com", "*"]})", "egress.allow[1]"},
      {R"({"allow": ["evil.com:0"]})", "port"},
      {R"({"allow": ["evil.com:http"]})", "port"},
      {R"({"allow": ["a*.b"]})", "'*'"},
      {R"({"allow": ["*.*.x"]})", "'*'"},
      {R"({"allow": ["user@x.com"]})", "userinfo"},
      {R"({"allow": [{"ports": [443]}]})", "\"host\" is required"},
      {R"({"allow": [{"host": "x.com", "pathz": ["/"]}]})", "unknown key \"pathz\""},
      {R"({"allow": [{"host": 5}]})", "must be a string"},
      {R"({"allow": [{"host": "x.com", "ports": []}]})", "non-empty"},
      {R"({"allow": [{"host": "x.com", "ports": [0]}]})", "invalid port 0"},
      {R"({"allow": [{"host": "x.com", "ports": [65536]}]})", "invalid port"},
      {R"({"allow": [{"host": "x.com", "ports": ["443"]}]})", "invalid port"},
      {R"({"allow": [{"host": "x.com", "ports": [443.5]}]})", "invalid port"},
      {R"({"allow": [{"host": "x.com", "ports": [true]}]})", "invalid port"},
      {R"({"allow": [{"host": "x.com", "methods": []}]})", "non-empty"},
      {R"({"allow": [{"host": "x.com", "methods": ["GET POST"]}]})", "invalid HTTP method"},
      {R"({"allow": [{"host": "x.com", "methods": ["G(ET"]}]})", "invalid HTTP method"},
      {R"({"allow": [{"host": "x.com", "methods": [""]}]})", "invalid HTTP method"},
      {R"({"allow": [{"host": "x.com", "methods": [1]}]})", "array of strings"},
      {R"({"allow": [{"host": "x.com", "paths": ["repos/"]}]})", "must start with '/'"},
      {R"({"allow": [{"host": "x.com", "paths": ["/a/../b"]}]})", "dot segment"},
      {R"({"allow": [{"host": "x.com", "paths": ["/a?x"]}]})", "query"},
      {R"({"allow": [{"host": "x.com", "paths": ["/a%2fb"]}]})", "encoded slash"},
      {R"({"allow": [{"host": "x.com", "paths": ["/a b"]}]})", "space"},
      {R"({"allow": [{"host": "x.com", "paths": []}]})", "non-empty"},
      {R"({"allow_networks": ["10.0.0.0/33"]})", "egress.allow_networks[0]"},
      {R"({"allow_networks": [10]})", "must be a string"},
      {R"({"max_connections": 0})", "max_connections"},
      {R"({"max_connections": -1})", "max_connections"},
      {R"({"max_connections": "8"})", "max_connections"},
      {R"({"bandwidth": "fast"})", "bandwidth"},
      {R"({"bandwidth": -5})", "bandwidth"},
  };
  for (const auto& c : cases) {
    auto p = EgressProfile::from_json(json::parse(c.in));
    ASSERT_FALSE(p) << "accepted " << c.in;
    EXPECT_EQ(p.error().code(), Code::kInvalidArgument);
    EXPECT_NE(p.error().message().find(c.why), std::string::npos)
        << c.in << ": " << p.error().message();
  }
}

TEST(ParseMethodAndPath, Direct) {
  EXPECT_EQ(*parse_method("get"), "GET");
  EXPECT_EQ(*parse_method("M-SEARCH"), "M-SEARCH");
  EXPECT_FALSE(parse_method("GET\r\n"));
  EXPECT_FALSE(parse_method(std::string(33, 'A')));
  EXPECT_EQ(*parse_path_prefix("/"), "/");
  EXPECT_EQ(*parse_path_prefix("/a%20b/"), "/a%20b/");
  for (const char* bad : {"", "*", "/a\\b", "/a#b", "/a/./b", "/a/..", "/a/..;x/", "/%2e", "/%5c",
                          "/%25", "/%0a", "/%zz", "/%2", "/\xc3\xa9"}) {
    EXPECT_FALSE(parse_path_prefix(bad)) << "accepted " << bad;
  }
}

// ---------------------------------------------------------------------------------------------
// Policy

Policy policy(const std::vector<std::string>& narrow = {}) {
  auto p = Policy::make("test", profile(), narrow);
  EXPECT_TRUE(p) << p.error().message();
  return p ? *p : Policy{};
}

TEST(Policy, DefaultRefusesEverything) {
  Policy p;
  EXPECT_FALSE(p.check_host(host("example.com"), 443).allowed);
  EXPECT_FALSE(p.check_request(host("example.com"), 443, "GET", "/").allowed);
  EXPECT_FALSE(p.check_address(ip("8.8.8.8")).allowed);
  EXPECT_TRUE(p.ports().empty());
}

TEST(Policy, MakeCopiesLimits) {
  Policy p = policy();
  EXPECT_EQ(p.profile(), "test");
  EXPECT_EQ(p.max_connections(), 8u);
  EXPECT_EQ(p.bandwidth_bytes_per_s(), 10u * 1024 * 1024);
  EXPECT_EQ(p.ports(), (std::vector<uint16_t>{80, 443, 8080, 8443}));
}

TEST(Policy, NarrowingMustStayWithinTheProfile) {
  const char* ok[] = {"pypi.org",           "pypi.org:443",
                      "PyPI.org.",          "files.pythonhosted.org",
                      "*.pythonhosted.org", "*.a.pythonhosted.org:443",
                      "a.example.com:8443", "*.example.com",
                      "10.1.2.3:8080",      "0x0a010203",
                      "[fd00::5]:443",      "fd00::5",
                      "api.github.com:443"};
  for (const char* e : ok) {
    auto p = Policy::make("test", profile(), {e});
    EXPECT_TRUE(p) << e << ": " << p.error().message();
  }
  const RefuseCase bad[] = {
      {"evil.com", "--allow evil.com: profile test does not allow it"},
      {"pypi.org:8080", "--allow pypi.org:8080: profile test does not allow it"},
      {"*.pythonhosted.org:80", "does not allow it"},
      {"pythonhosted.org", "does not allow it"},
      {"*.org", "does not allow it"},
      {"example.com", "does not allow it"},
      {"a.example.com:80", "does not allow it"},
      {"pypi.org.evil.com", "does not allow it"},
      {"10.1.2.4", "does not allow it"},
      {"10.1.2.3:443", "does not allow it"},
      {"*", "--allow *: "},
      {"pypi.org:0", "port"},
      {"user@pypi.org", "userinfo"},
      {"", "empty"},
  };
  for (const auto& c : bad) {
    auto p = Policy::make("test", profile(), {"pypi.org", c.in});
    ASSERT_FALSE(p) << "accepted --allow " << c.in;
    EXPECT_EQ(p.error().code(), Code::kInvalidArgument);
    EXPECT_NE(p.error().message().find(c.why), std::string::npos)
        << c.in << ": " << p.error().message();
  }
}

struct HostCheck {
  const char* host;
  uint16_t port;
  bool allowed;
  const char* reason;  // substring when refused
};

void expect_hosts(const Policy& p, const std::vector<HostCheck>& cases) {
  for (const auto& c : cases) {
    Decision d = p.check_host(host(c.host), c.port);
    EXPECT_EQ(d.allowed, c.allowed) << c.host << ":" << c.port << " " << d.reason;
    if (c.allowed) {
      EXPECT_TRUE(d.reason.empty()) << d.reason;
    } else {
      EXPECT_NE(d.reason.find(c.reason), std::string::npos) << c.host << ": " << d.reason;
    }
  }
}

TEST(Policy, CheckHost) {
  expect_hosts(policy(),
               {
                   {"pypi.org", 443, true, ""},
                   {"PYPI.ORG.", 80, true, ""},
                   {"pypi.org", 22, false, "port 22 not allowed for pypi.org"},
                   {"evil.com", 443, false, "host evil.com not in profile test"},
                   {"pypi.org.evil.com", 443, false, "not in profile test"},
                   {"files.pythonhosted.org", 443, true, ""},
                   {"files.pythonhosted.org", 80, false, "port 80 not allowed"},
                   {"pythonhosted.org", 443, false, "not in profile"},
                   {"a.example.com", 8443, true, ""},
                   {"example.com", 443, false, "not in profile"},
                   {"upload.example.com", 80, true, ""},  // its own rule (default ports)
                   {"10.1.2.3", 8080, true, ""},
                   {"0x0a010203", 8080, true, ""},
                   {"[::ffff:10.1.2.3]", 8080, true, ""},
                   {"10.1.2.3", 443, false, "port 443 not allowed for 10.1.2.3"},
                   {"10.1.2.4", 8080, false, "not in profile"},
                   {"[fd00::5]", 443, true, ""},
                   {"169.254.169.254", 80, false, "host 169.254.169.254 not in profile test"},
               });
  // Hosts built by hand must be normalized.
  Policy p = policy();
  Decision d = p.check_host(Host{"PYPI.org", std::nullopt}, 443);
  EXPECT_FALSE(d.allowed);
  EXPECT_NE(d.reason.find("not normalized"), std::string::npos);
  EXPECT_FALSE(p.check_host(Host{"10.1.2.3", std::nullopt}, 8080).allowed);
  EXPECT_FALSE(p.check_host(Host{"pypi.org\n", std::nullopt}, 443).allowed);
}

TEST(Policy, CheckHostNarrowed) {
  Policy p = policy({"pypi.org:443", "a.example.com", "*.b.example.com:8443"});
  EXPECT_EQ(p.ports(), (std::vector<uint16_t>{443, 8443}));
  expect_hosts(
      p, {
             {"pypi.org", 443, true, ""},
             {"pypi.org", 80, false, "port 80 not allowed for pypi.org by this sandbox's --allow"},
             {"a.example.com", 443, true, ""},
             {"a.example.com", 8443, true, ""},
             {"a.example.com", 80, false, "port 80 not allowed for a.example.com"},  // profile says
             {"x.b.example.com", 8443, true, ""},
             {"x.b.example.com", 443, false, "--allow"},
             {"b.example.com", 8443, false, "not in this sandbox's --allow list"},
             {"c.example.com", 443, false, "host c.example.com not in this sandbox's --allow list"},
             {"files.pythonhosted.org", 443, false, "--allow list"},
             {"evil.com", 443, false, "not in profile test"},
         });
}

struct RequestCheck {
  const char* host;
  uint16_t port;
  const char* method;
  const char* target;
  bool allowed;
  const char* reason;
};

TEST(Policy, CheckRequest) {
  Policy p = policy();
  const RequestCheck cases[] = {
      // api.github.com: GET/HEAD under /repos/ or /user.
      {"api.github.com", 443, "GET", "/repos/x/y", true, ""},
      {"api.github.com", 443, "HEAD", "/repos/", true, ""},
      {"api.github.com", 443, "GET", "/repos/x?ref=../../admin", true, ""},  // query ignored
      {"api.github.com", 443, "GET", "/user", true, ""},
      {"api.github.com", 443, "GET", "/users/evil", true, ""},  // prefix, not segment, match
      {"api.github.com", 443, "GET", "/repos/x/%20y", true, ""},
      {"api.github.com", 443, "GET", "/repos/a%2Fb", false, "encoded slash"},
      {"api.github.com", 443, "GET", "/admin", false, "path /admin not allowed for api.github"},
      {"api.github.com", 443, "GET", "/admin?/repos/", false, "path /admin not allowed"},
      {"api.github.com", 443, "DELETE", "/repos/x", false,
       "method DELETE not allowed for api.github.com"},
      {"api.github.com", 443, "get", "/repos/x", false, "method get not allowed"},
      {"api.github.com", 443, "GET ", "/repos/x", false, "invalid method"},
      {"api.github.com", 443, "", "/repos/x", false, "invalid method"},
      {"api.github.com", 80, "GET", "/repos/x", false, "port 80 not allowed"},
      // Walking out of the prefix.
      {"api.github.com", 443, "GET", "/repos/../admin", false, "dot segment"},
      {"api.github.com", 443, "GET", "/repos/x/..", false, "dot segment"},
      {"api.github.com", 443, "GET", "/repos/./x", false, "dot segment"},
      {"api.github.com", 443, "GET", "/repos/..;/admin", false, "dot segment"},
      {"api.github.com", 443, "GET", "/repos/..%3b/admin", false, "dot segment"},
      {"api.github.com", 443, "GET", "/repos/..%3Bx/admin", false, "dot segment"},
      {"api.github.com", 443, "GET", "/repos/.;x/%3b", false, "dot segment"},
      {"api.github.com", 443, "GET", "/repos/.../admin", false, "dot segment"},
      {"api.github.com", 443, "GET", "/repos/%2e%2e/admin", false, "encoded dot"},
      {"api.github.com", 443, "GET", "/repos/%2E%2E/admin", false, "encoded dot"},
      {"api.github.com", 443, "GET", "/repos/.%2e/admin", false, "encoded dot"},
      {"api.github.com", 443, "GET", "/repos/%252e%252e/admin", false, "encoded percent"},
      {"api.github.com", 443, "GET", "/repos/..%2fadmin", false, "encoded slash"},
      {"api.github.com", 443, "GET", "/repos/..%2Fadmin", false, "encoded slash"},
      {"api.github.com", 443, "GET", "/repos/..%5cadmin", false, "encoded backslash"},
      {"api.github.com", 443, "GET", "/repos/..\\admin", false, "backslash"},
      {"api.github.com", 443, "GET", "/repos/%00", false, "control"},
      {"api.github.com", 443, "GET", "/repos/%0d%0aX: y", false, "control"},
      {"api.github.com", 443, "GET", "/repos/%zz", false, "malformed"},
      {"api.github.com", 443, "GET", "/repos/%2", false, "malformed"},
      {"api.github.com", 443, "GET", "/repos/%u002e%u002e/admin", false, "malformed"},
      {"api.github.com", 443, "GET", "/repos/x#frag", false, "fragment"},
      {"api.github.com", 443, "GET", "/repos/\xc3\xa9", false, "non-ASCII"},
      {"api.github.com", 443, "GET", "/repos/x y", false, "space"},
      {"api.github.com", 443, "GET", "repos/x", false, "origin-form"},
      {"api.github.com", 443, "GET", "https://api.github.com/repos/x", false, "origin-form"},
      {"api.github.com", 443, "GET", "", false, "empty"},
      {"api.github.com", 443, "GET", "*", false, "only with OPTIONS"},
      {"api.github.com", 443, "OPTIONS", "*", false, "method OPTIONS not allowed"},
      // pypi.org: any method, any path; only the form is checked.
      {"pypi.org", 443, "DELETE", "/anything", true, ""},
      {"pypi.org", 443, "PATCH", "/a/../b", true, ""},
      {"pypi.org", 443, "GET", "/@types%2fnode", true, ""},  // npm-style scoped names
      {"pypi.org", 443, "OPTIONS", "*", true, ""},
      {"pypi.org", 443, "GET", "*", false, "only with OPTIONS"},
      {"pypi.org", 443, "GET", "simple/", false, "origin-form"},
      {"pypi.org", 443, "GET", "/a\nb", false, "control"},
      {"evil.com", 443, "GET", "/", false, "host evil.com not in profile test"},
      // upload.example.com: its own rule (POST only) and *.example.com's (any method, 443).
      {"upload.example.com", 80, "POST", "/x", true, ""},
      {"upload.example.com", 80, "GET", "/x", false, "method GET not allowed"},
      {"upload.example.com", 443, "GET", "/x", true, ""},
      // mixed.test: GET anywhere, or any method under /public/.
      {"mixed.test", 443, "GET", "/private", true, ""},
      {"mixed.test", 443, "PUT", "/public/x", true, ""},
      {"mixed.test", 443, "PUT", "/private", false, "path /private not allowed"},
      {"mixed.test", 443, "PUT", "/public/../private", false, "dot segment"},
      {"mixed.test", 443, "GET", "/public/../private", true, ""},
  };
  for (const auto& c : cases) {
    Decision d = p.check_request(host(c.host), c.port, c.method, c.target);
    EXPECT_EQ(d.allowed, c.allowed) << c.method << " " << c.host << c.target << ": " << d.reason;
    if (c.allowed) {
      EXPECT_TRUE(d.reason.empty()) << d.reason;
    } else {
      EXPECT_NE(d.reason.find(c.reason), std::string::npos)
          << c.method << " " << c.target << ": " << d.reason;
    }
  }
}

TEST(Policy, CheckRequestNarrowed) {
  Policy p = policy({"api.github.com"});
  EXPECT_TRUE(p.check_request(host("api.github.com"), 443, "GET", "/repos/x").allowed);
  EXPECT_FALSE(p.check_request(host("api.github.com"), 443, "GET", "/admin").allowed);
  EXPECT_FALSE(p.check_request(host("pypi.org"), 443, "GET", "/").allowed);
}

TEST(Policy, ReasonsEscapeUntrustedText) {
  Policy p = policy();
  Decision d = p.check_request(host("api.github.com"), 443, "GET",
                               "/admin\"<script>" + std::string(1000, 'x'));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason.find('"'), std::string::npos) << d.reason;
  EXPECT_LT(d.reason.size(), 300u);
  d = p.check_request(host("api.github.com"), 443, "G\x1b[0mET", "/repos/");
  EXPECT_EQ(d.reason.find('\x1b'), std::string::npos) << d.reason;
}

TEST(Policy, NeedsInspection) {
  Policy p = policy();
  EXPECT_TRUE(p.needs_inspection(host("api.github.com"), 443));       // methods and paths
  EXPECT_TRUE(p.needs_inspection(host("upload.example.com"), 80));    // methods only
  EXPECT_FALSE(p.needs_inspection(host("upload.example.com"), 443));  // *.example.com: any
  EXPECT_TRUE(p.needs_inspection(host("mixed.test"), 443));           // neither rule allows all
  EXPECT_FALSE(p.needs_inspection(host("pypi.org"), 443));
  EXPECT_FALSE(p.needs_inspection(host("a.example.com"), 8443));
  EXPECT_TRUE(p.needs_inspection(host("evil.com"), 443));  // fail safe: refused anyway
}

TEST(Policy, CheckAddress) {
  Policy p = policy();
  struct Case {
    const char* addr;
    bool allowed;
    const char* reason;
  };
  const Case cases[] = {
      {"8.8.8.8", true, ""},
      {"2606:4700::1111", true, ""},
      {"169.254.169.254", false, "address 169.254.169.254 is link-local"},
      {"::ffff:169.254.169.254", false, "is link-local"},
      {"64:ff9b::a9fe:a9fe", false, "address 64:ff9b::a9fe:a9fe is link-local"},
      {"2002:a9fe:a9fe::", false, "is link-local"},
      {"127.0.0.1", false, "address 127.0.0.1 is loopback"},
      {"::1", false, "is loopback"},
      {"10.2.0.1", false, "is private"},
      {"10.1.2.3", true, ""},                  // allow_networks 10.1.0.0/16
      {"::ffff:10.1.2.3", true, ""},           // mapped matches it too
      {"64:ff9b::a01:203", false, "private"},  // NAT64 does not
      {"fd00::5", true, ""},                   // allow_networks fd00::/8
      {"fc00::1", false, "is unique-local"},
      {"100.64.0.1", false, "carrier-grade NAT"},
      {"224.0.0.1", false, "multicast"},
      {"255.255.255.255", false, "reserved"},
      {"0.0.0.0", false, "is unspecified"},
      {"::", false, "is unspecified"},
  };
  for (const auto& c : cases) {
    Decision d = p.check_address(ip(c.addr));
    EXPECT_EQ(d.allowed, c.allowed) << c.addr << ": " << d.reason;
    if (!c.allowed) {
      EXPECT_NE(d.reason.find(c.reason), std::string::npos) << d.reason;
    }
  }
  // "0.0.0.0/0" cannot open the unspecified address (which dials this host).
  auto wide = EgressProfile::from_json(
      json::parse(R"({"allow": ["x.com"], "allow_networks": ["0.0.0.0/0", "::/0"]})"));
  ASSERT_TRUE(wide);
  Policy w = *Policy::make("wide", *wide, {});
  EXPECT_TRUE(w.check_address(ip("127.0.0.1")).allowed);
  EXPECT_FALSE(w.check_address(ip("0.0.0.0")).allowed);
  EXPECT_FALSE(w.check_address(ip("::")).allowed);
  EXPECT_FALSE(w.check_address(ip("::ffff:0.0.0.0")).allowed);
}

// ---------------------------------------------------------------------------------------------
// Invariants over mutated inputs.

using test::mutate;
// drop ";params", then remove dot segments (RFC 3986 5.2.4).
std::string lenient_resolve(std::string path) {
  for (int round = 0; round < 3; ++round) {
    std::string out;
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i] == '%' && i + 2 < path.size() &&
          isxdigit(static_cast<unsigned char>(path[i + 1])) &&
          isxdigit(static_cast<unsigned char>(path[i + 2]))) {
        out += static_cast<char>(std::stoi(path.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        out += path[i] == '\\' ? '/' : path[i];
      }
    }
    path = out;
  }
  std::vector<std::string> segs;
  size_t start = 1;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    std::string seg = path.substr(start, slash - start);
    seg = seg.substr(0, seg.find(';'));
    if (seg == "..") {
      if (!segs.empty()) segs.pop_back();
    } else if (seg != ".") {
      segs.push_back(seg);
    }
    start = slash + 1;
  }
  std::string out;
  for (const auto& s : segs) out += "/" + s;
  return out.empty() ? "/" : out;
}

TEST(Invariants, AcceptedTargetsStayUnderTheirPrefix) {
  const std::vector<std::string> prefixes = {"/repos/"};
  const std::vector<std::string> pieces = {"/", ".", "..", "%2e", "%2E", "%2f", "%5c", "%25", "\\",
                                           ";", "a", "%",  "2",   "e",   "?",   "%41", "x/"};
  std::mt19937 rng(777);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string target = mutate(rng, "/repos/a/b", pieces);
    Decision d = check_path(prefixes, target);
    if (!d.allowed) continue;
    ++accepted;
    std::string path = target.substr(0, target.find('?'));
    std::string resolved = lenient_resolve(path);
    ASSERT_TRUE(resolved.starts_with("/repos/") || resolved == "/repos")
        << target << " resolves to " << resolved;
  }
  EXPECT_GT(accepted, 1000);
}

}  // namespace
}  // namespace space::egress

namespace space::egress {
namespace {

// The gateway process gets the policy as data (egress/wire.h): the copy must decide exactly as
// the original, for a profile with every kind of rule and a narrowed sandbox.
TEST(PolicyWire, RoundTripDecidesTheSame) {
  auto ep = EgressProfile::from_json(json::parse(kProfile));
  ASSERT_TRUE(ep) << ep.error().message();
  for (std::vector<std::string> narrow :
       {std::vector<std::string>{}, {"api.github.com:443", "*.example.com", "[fd00::5]:443"}}) {
    auto p = Policy::make("live", *ep, narrow);
    ASSERT_TRUE(p) << p.error().message();
    auto q = Policy::from_json(json::parse(p->to_json().dump()));
    ASSERT_TRUE(q) << q.error().message();
    EXPECT_EQ(q->profile(), "live");
    EXPECT_EQ(q->max_connections(), p->max_connections());
    EXPECT_EQ(q->bandwidth_bytes_per_s(), p->bandwidth_bytes_per_s());
    EXPECT_EQ(q->ports(), p->ports());
    for (const char* h : {"pypi.org", "files.pythonhosted.org", "api.github.com", "a.example.com",
                          "upload.example.com", "mixed.test", "10.1.2.3", "fd00::5", "evil.test"})
      for (uint16_t port : {80, 443, 8080, 8443}) {
        Host ho = host(h);
        EXPECT_EQ(q->check_host(ho, port).allowed, p->check_host(ho, port).allowed) << h << port;
        EXPECT_EQ(q->check_host(ho, port).reason, p->check_host(ho, port).reason);
        EXPECT_EQ(q->needs_inspection(ho, port), p->needs_inspection(ho, port));
        for (const char* m : {"GET", "POST", "DELETE"})
          for (const char* t : {"/repos/x", "/user", "/public/a", "/admin", "/a/../repos/"})
            EXPECT_EQ(q->check_request(ho, port, m, t).allowed,
                      p->check_request(ho, port, m, t).allowed)
                << h << ":" << port << " " << m << " " << t;
      }
    for (const char* a : {"10.1.9.9", "127.0.0.1", "fd00::1", "8.8.8.8"}) {
      auto addr = boost::asio::ip::make_address(a);
      EXPECT_EQ(q->check_address(addr).allowed, p->check_address(addr).allowed) << a;
    }
  }
  // Policy() refuses everything, and so does its copy.
  auto none = Policy::from_json(Policy().to_json());
  ASSERT_TRUE(none) << none.error().message();
  EXPECT_EQ(none->max_connections(), 0u);
  EXPECT_FALSE(none->check_host(host("pypi.org"), 443).allowed);
  EXPECT_FALSE(Policy::from_json(json::parse(R"({"profile": "x"})")));
}

}  // namespace
}  // namespace space::egress
