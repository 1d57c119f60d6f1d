// The control channel between spaced and space-egress (egress/wire.h): messages with fds over a
// SOCK_SEQPACKET pair; every message kind through its encoder and its parser and back; and what
// the parsers refuse (each field of each kind missing or mistyped, seq out of range, strings
// over their bound, fds where none belong, unknown ops, forged audit kinds, deep nesting),
// never throwing.
#include "egress/wire.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace space::egress {
namespace {

using nlohmann::json;

// `n` fds to go with a message (/dev/null).
std::vector<UniqueFd> some_fds(size_t n) {
  std::vector<UniqueFd> fds;
  for (size_t i = 0; i < n; ++i) fds.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  return fds;
}

// A body as it arrives: dumped and parsed again, with `fds` fds.
wire::Message arrived(const json& body, size_t fds = 0) {
  return {json::parse(body.dump()), some_fds(fds)};
}

Result<wire::ToGateway> to_gateway(const json& body, size_t fds = 0) {
  return wire::parse_to_gateway(arrived(body, fds));
}
Result<wire::ToDaemon> to_daemon(const json& body, size_t fds = 0) {
  return wire::parse_to_daemon(arrived(body, fds));
}

wire::Attach sample_attach() {
  wire::Attach a;
  a.seq = 7;
  a.id = "sb_0123";
  a.policy = {{"allow", json::array({"api.example.test"})}};
  a.grants = {{"API_TOKEN", "space-placeholder-1"}, {"OTHER", "space-placeholder-2"}};
  a.ca_key = "-----BEGIN PRIVATE KEY-----\nk\n-----END PRIVATE KEY-----\n";
  a.ca_cert = "-----BEGIN CERTIFICATE-----\nc\n-----END CERTIFICATE-----\n";
  a.known = {{"API_TOKEN", {"v1", "v2"}}};
  a.kinds = {0, 1, 2, 3};
  return a;
}

wire::Init sample_init() {
  wire::Init m;
  m.options.resolve = {{"api.example.test", "127.0.0.2"}};
  m.options.upstream_ca_pems = {"-----BEGIN CERTIFICATE-----\nx\n"};
  m.options.connect_timeout = std::chrono::milliseconds(1234);
  m.options.idle_timeout = std::chrono::milliseconds(5678);
  m.secrets = {{"API_TOKEN", {{"kind", "remote"}}}};
  return m;
}

Gateway::Stats sample_stats() {
  Gateway::Stats s;
  s.connections = 1;
  s.requests = 2;
  s.denied = 3;
  s.bytes_up = 4;
  s.bytes_down = 5;
  s.credential_uses = 6;
  s.dns_queries = 7;
  s.active_connections = 8;
  s.sandboxes = 9;
  return s;
}

// One of each kind, each direction, as its encoder writes it, with the fds it goes with.
struct Sample {
  std::string what;
  json body;
  size_t fds = 0;
  bool to_gateway = true;
};

std::vector<Sample> samples() {
  std::vector<Sample> out;
  out.push_back({"init", wire::encode(wire::ToGateway(sample_init()))});
  out.push_back({"attach", wire::encode(wire::ToGateway(sample_attach())), 4});
  out.push_back({"detach", wire::encode(wire::ToGateway(wire::Detach{3, "sb_1"}))});
  out.push_back({"stats", wire::encode(wire::ToGateway(wire::StatsRequest{4}))});
  out.push_back({"secret value", wire::encode(wire::ToGateway(wire::SecretAnswer{5, "s3cret"}))});
  out.push_back({"secret error", wire::encode(wire::ToGateway(wire::SecretAnswer{
                                     6, fail(Code::kPermissionDenied, "not granted")}))});
  out.push_back({"ready", wire::encode(wire::ToDaemon(wire::Ready{int64_t{42}})), 0, false});
  out.push_back({"ready error",
                 wire::encode(wire::ToDaemon(wire::Ready{fail(Code::kInternal, "no")})), 0, false});
  out.push_back({"reply", wire::encode(wire::ToDaemon(wire::Reply{8, {}, {}})), 0, false});
  out.push_back(
      {"reply stats", wire::encode(wire::ToDaemon(wire::Reply{9, {}, sample_stats()})), 0, false});
  out.push_back(
      {"reply error",
       wire::encode(wire::ToDaemon(wire::Reply{10, fail(Code::kInvalidArgument, "bad"), {}})), 0,
       false});
  out.push_back({"audit",
                 wire::encode(wire::ToDaemon(wire::Audit{"sb_1", "egress.denied", {{"h", 1}}})), 0,
                 false});
  out.push_back({"secret request",
                 wire::encode(wire::ToDaemon(wire::SecretRequest{11, "sb_1", "API_TOKEN"})), 0,
                 false});
  return out;
}

// Parses a sample's body with its direction's parser; whether it was accepted.
bool accepted(const Sample& s, const json& body, size_t fds) {
  if (s.to_gateway) return to_gateway(body, fds).has_value();
  return to_daemon(body, fds).has_value();
}

TEST(Wire, MessageWithFdsAndPeerGone) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  UniqueFd r(p[0]), w(p[1]);
  int fds[] = {w.get()};
  ASSERT_TRUE(wire::send_json(a.get(), {{"op", "x"}, {"bad", std::string("\xff")}}, fds));
  auto m = wire::recv(b.get());
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(m->body["op"], "x");
  ASSERT_EQ(m->fds.size(), 1u);
  ASSERT_EQ(::write(m->fds[0].get(), "z", 1), 1);  // the passed fd is the pipe's write end
  char c = 0;
  ASSERT_EQ(::read(r.get(), &c, 1), 1);
  EXPECT_EQ(c, 'z');
  a.reset();
  auto gone = wire::recv(b.get());
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code(), Code::kUnavailable);
}

TEST(Wire, AttachWithListenersOverASocket) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  auto listeners = some_fds(4);
  std::vector<int> raw;
  for (auto& f : listeners) raw.push_back(f.get());
  ASSERT_TRUE(wire::send(a.get(), sample_attach(), raw));
  // The wrong number of fds for the kind is the sender's bug, refused before sending.
  EXPECT_FALSE(wire::send(a.get(), sample_attach(), std::span(raw).first(2)));
  EXPECT_FALSE(wire::send(a.get(), wire::StatsRequest{1}, std::span(raw).first(1)));
  auto m = wire::recv(b.get());
  ASSERT_TRUE(m) << m.error().message();
  auto parsed = wire::parse_to_gateway(std::move(*m));
  ASSERT_TRUE(parsed) << parsed.error().message();
  auto& at = std::get<wire::Attach>(*parsed);
  EXPECT_EQ(at.fds.size(), 4u);
  EXPECT_EQ(at.kinds, (std::vector<int>{0, 1, 2, 3}));
  for (auto& f : at.fds) EXPECT_TRUE(f.valid());
}

TEST(Wire, EveryKindRoundTrips) {
  auto init = to_gateway(wire::encode(wire::ToGateway(sample_init())));
  ASSERT_TRUE(init) << init.error().message();
  auto& i = std::get<wire::Init>(*init);
  EXPECT_EQ(i.options.resolve, sample_init().options.resolve);
  EXPECT_EQ(i.options.upstream_ca_pems, sample_init().options.upstream_ca_pems);
  EXPECT_EQ(i.options.connect_timeout.count(), 1234);
  EXPECT_EQ(i.options.idle_timeout.count(), 5678);
  EXPECT_EQ(i.secrets, sample_init().secrets);

  auto attach = to_gateway(wire::encode(wire::ToGateway(sample_attach())), 4);
  ASSERT_TRUE(attach) << attach.error().message();
  auto& a = std::get<wire::Attach>(*attach);
  wire::Attach want = sample_attach();
  EXPECT_EQ(a.seq, want.seq);
  EXPECT_EQ(a.id, want.id);
  EXPECT_EQ(a.policy, want.policy);
  ASSERT_EQ(a.grants.size(), 2u);
  EXPECT_EQ(a.grants[1].name, "OTHER");
  EXPECT_EQ(a.grants[1].placeholder, "space-placeholder-2");
  EXPECT_EQ(a.ca_key, want.ca_key);
  EXPECT_EQ(a.ca_cert, want.ca_cert);
  EXPECT_EQ(a.known, want.known);
  EXPECT_EQ(a.kinds, want.kinds);
  EXPECT_EQ(a.fds.size(), 4u);

  auto detach = to_gateway(wire::encode(wire::ToGateway(wire::Detach{3, "sb_1"})));
  ASSERT_TRUE(detach);
  EXPECT_EQ(std::get<wire::Detach>(*detach).seq, 3u);
  EXPECT_EQ(std::get<wire::Detach>(*detach).id, "sb_1");

  auto stats = to_gateway(wire::encode(wire::ToGateway(wire::StatsRequest{4})));
  ASSERT_TRUE(stats);
  EXPECT_EQ(std::get<wire::StatsRequest>(*stats).seq, 4u);

  auto value = to_gateway(wire::encode(wire::ToGateway(wire::SecretAnswer{5, "s3cret"})));
  ASSERT_TRUE(value);
  EXPECT_EQ(std::get<wire::SecretAnswer>(*value).seq, 5u);
  EXPECT_EQ(std::get<wire::SecretAnswer>(*value).value, "s3cret");
  auto refused = to_gateway(wire::encode(
      wire::ToGateway(wire::SecretAnswer{6, fail(Code::kPermissionDenied, "not granted")})));
  ASSERT_TRUE(refused);
  auto& rv = std::get<wire::SecretAnswer>(*refused).value;
  ASSERT_FALSE(rv);
  EXPECT_EQ(rv.error().code(), Code::kPermissionDenied);
  EXPECT_EQ(rv.error().message(), "not granted");

  auto ready = to_daemon(wire::encode(wire::ToDaemon(wire::Ready{int64_t{42}})));
  ASSERT_TRUE(ready);
  EXPECT_EQ(std::get<wire::Ready>(*ready).pid, 42);
  auto not_ready = to_daemon(wire::encode(wire::ToDaemon(wire::Ready{fail(Code::kInternal, "x")})));
  ASSERT_TRUE(not_ready);
  EXPECT_EQ(std::get<wire::Ready>(*not_ready).pid.error().message(), "x");

  auto reply = to_daemon(wire::encode(wire::ToDaemon(wire::Reply{8, {}, {}})));
  ASSERT_TRUE(reply);
  EXPECT_EQ(std::get<wire::Reply>(*reply).seq, 8u);
  EXPECT_TRUE(std::get<wire::Reply>(*reply).result);
  EXPECT_FALSE(std::get<wire::Reply>(*reply).stats);
  auto bad = to_daemon(
      wire::encode(wire::ToDaemon(wire::Reply{10, fail(Code::kInvalidArgument, "bad"), {}})));
  ASSERT_TRUE(bad);
  ASSERT_FALSE(std::get<wire::Reply>(*bad).result);
  EXPECT_EQ(std::get<wire::Reply>(*bad).result.error().code(), Code::kInvalidArgument);

  auto audit =
      to_daemon(wire::encode(wire::ToDaemon(wire::Audit{"sb_1", "egress.denied", {{"h", 1}}})));
  ASSERT_TRUE(audit);
  EXPECT_EQ(std::get<wire::Audit>(*audit).id, "sb_1");
  EXPECT_EQ(std::get<wire::Audit>(*audit).kind, "egress.denied");
  EXPECT_EQ(std::get<wire::Audit>(*audit).data, (json{{"h", 1}}));

  auto ask = to_daemon(wire::encode(wire::ToDaemon(wire::SecretRequest{11, "sb_1", "API"})));
  ASSERT_TRUE(ask);
  EXPECT_EQ(std::get<wire::SecretRequest>(*ask).seq, 11u);
  EXPECT_EQ(std::get<wire::SecretRequest>(*ask).id, "sb_1");
  EXPECT_EQ(std::get<wire::SecretRequest>(*ask).name, "API");
}

TEST(Wire, StatsBothWays) {
  auto r = to_daemon(wire::encode(wire::ToDaemon(wire::Reply{9, {}, sample_stats()})));
  ASSERT_TRUE(r) << r.error().message();
  ASSERT_TRUE(std::get<wire::Reply>(*r).stats);
  auto t = *std::get<wire::Reply>(*r).stats;
  EXPECT_EQ(t.connections, 1u);
  EXPECT_EQ(t.requests, 2u);
  EXPECT_EQ(t.denied, 3u);
  EXPECT_EQ(t.bytes_up, 4u);
  EXPECT_EQ(t.bytes_down, 5u);
  EXPECT_EQ(t.credential_uses, 6u);
  EXPECT_EQ(t.dns_queries, 7u);
  EXPECT_EQ(t.active_connections, 8u);
  EXPECT_EQ(t.sandboxes, 9u);
  // Absent counters read 0; a mistyped one refuses the reply, never throws.
  auto some = to_daemon({{"op", "reply"}, {"seq", 1}, {"ok", true}, {"requests", 5}});
  ASSERT_TRUE(some);
  EXPECT_EQ(std::get<wire::Reply>(*some).stats->requests, 5u);
  EXPECT_EQ(std::get<wire::Reply>(*some).stats->denied, 0u);
  EXPECT_FALSE(to_daemon({{"op", "reply"}, {"seq", 1}, {"ok", true}, {"requests", "many"}}));
  EXPECT_FALSE(to_daemon({{"op", "reply"}, {"seq", 1}, {"ok", true}, {"denied", -1}}));
  EXPECT_FALSE(to_daemon({{"op", "reply"}, {"seq", 1}, {"ok", true}, {"denied", 1.5}}));
}

// Every sample is accepted as written, and refused with each of its fields missing or of
// another JSON type, one field at a time (and one level down where a field has fixed fields).
TEST(Wire, EachFieldMissingOrMistypedIsRefused) {
  const std::vector<json> others = {nullptr,       true,          -1, 1.5, uint64_t{12}, "text",
                                    json::array(), json::object()};
  for (const auto& s : samples()) {
    SCOPED_TRACE(s.what);
    ASSERT_TRUE(accepted(s, s.body, s.fds)) << s.body.dump();
    // (path to an object with fixed fields, its keys)
    std::vector<json::json_pointer> parents = {json::json_pointer("")};
    for (const char* sub : {"/options", "/error", "/grants/0"})
      if (s.body.contains(json::json_pointer(sub))) parents.emplace_back(sub);
    for (const auto& parent : parents) {
      for (const auto& [key, value] : s.body.at(parent).items()) {
        json::json_pointer path = parent / key;
        SCOPED_TRACE(path.to_string());
        json missing = s.body;
        missing.at(parent).erase(key);
        // A reply's counters are the one optional group (absent ones read 0).
        bool optional = s.what == "reply stats" && key != "op" && key != "seq" && key != "ok";
        EXPECT_EQ(accepted(s, missing, s.fds), optional) << missing.dump();
        for (const auto& other : others) {
          if (other.type() == value.type()) continue;
          json mistyped = s.body;
          mistyped[path] = other;
          // An attach's kinds decide how many fds it takes: give it as many as before.
          EXPECT_FALSE(accepted(s, mistyped, s.fds)) << mistyped.dump();
        }
      }
    }
  }
}

TEST(Wire, ElementsOfTheWrongTypeAreRefused) {
  json a = wire::encode(wire::ToGateway(sample_attach()));
  for (const char* path : {"/grants/0", "/kinds/0", "/known/API_TOKEN/0", "/known/API_TOKEN"}) {
    SCOPED_TRACE(path);
    json bad = a;
    bad[json::json_pointer(path)] = json::object({{"x", 1}});
    EXPECT_FALSE(to_gateway(bad, 4));
  }
  json kinds = a;
  kinds["kinds"][0] = wire::kListenerKinds;  // no such listener
  EXPECT_FALSE(to_gateway(kinds, 4));
  json i = wire::encode(wire::ToGateway(sample_init()));
  for (const char* path :
       {"/options/resolve/api.example.test", "/options/upstream_ca_pems/0", "/secrets/API_TOKEN"}) {
    SCOPED_TRACE(path);
    json bad = i;
    bad[json::json_pointer(path)] = 5;
    EXPECT_FALSE(to_gateway(bad));
  }
}

TEST(Wire, SeqOutOfRangeIsRefused) {
  EXPECT_TRUE(to_daemon({{"op", "reply"}, {"seq", wire::kMaxSeq}, {"ok", true}}));
  EXPECT_FALSE(to_daemon({{"op", "reply"}, {"seq", wire::kMaxSeq + 1}, {"ok", true}}));
  EXPECT_FALSE(to_daemon({{"op", "reply"}, {"seq", -1}, {"ok", true}}));
  EXPECT_FALSE(to_daemon({{"op", "reply"}, {"seq", "x"}, {"error", "y"}}));
  EXPECT_FALSE(to_daemon({{"op", "secret"}, {"seq", UINT64_MAX}, {"id", "a"}, {"name", "b"}}));
  EXPECT_FALSE(to_gateway({{"op", "stats"}, {"seq", 1e30}}));
  // An error's code must be one of ours; a reply is ok or an error.
  EXPECT_FALSE(
      to_daemon({{"op", "reply"}, {"seq", 1}, {"error", {{"code", 99}, {"message", ""}}}}));
  EXPECT_FALSE(to_daemon({{"op", "reply"}, {"seq", 1}, {"ok", false}}));
  EXPECT_FALSE(to_daemon({{"op", "ready"}, {"pid", 0}}));
  EXPECT_FALSE(to_daemon({{"op", "ready"}, {"pid", uint64_t{1} << 40}}));
}

TEST(Wire, OversizedStringsAreRefused) {
  std::string long_id(wire::kMaxName + 1, 'a');
  EXPECT_TRUE(to_daemon({{"op", "secret"}, {"seq", 1}, {"id", long_id.substr(1)}, {"name", "b"}}));
  EXPECT_FALSE(to_daemon({{"op", "secret"}, {"seq", 1}, {"id", long_id}, {"name", "b"}}));
  EXPECT_FALSE(to_daemon({{"op", "secret"}, {"seq", 1}, {"id", "a"}, {"name", long_id}}));
  EXPECT_FALSE(to_daemon({{"op", "secret"}, {"seq", 1}, {"id", ""}, {"name", "b"}}));
  EXPECT_FALSE(to_daemon(
      {{"op", "audit"}, {"id", long_id}, {"kind", "egress.denied"}, {"data", json::object()}}));
  std::string long_message(wire::kMaxErrorMessage + 1, 'm');
  EXPECT_FALSE(to_daemon(
      {{"op", "reply"}, {"seq", 1}, {"error", {{"code", 0}, {"message", long_message}}}}));
  json a = wire::encode(wire::ToGateway(sample_attach()));
  a["ca_cert"] = std::string(wire::kMaxPem + 1, 'c');
  EXPECT_FALSE(to_gateway(a, 4));
}

TEST(Wire, FdsOnlyWhereTheKindTakesThem) {
  json a = wire::encode(wire::ToGateway(sample_attach()));
  EXPECT_TRUE(to_gateway(a, 4));
  EXPECT_FALSE(to_gateway(a, 3));
  EXPECT_FALSE(to_gateway(a, 5));
  EXPECT_FALSE(to_gateway(a, 0));
  json none = a;
  none["kinds"] = json::array();
  EXPECT_FALSE(to_gateway(none, 0));
  for (const auto& s : samples()) {
    if (s.fds) continue;
    SCOPED_TRACE(s.what);
    EXPECT_FALSE(accepted(s, s.body, 1));
  }
}

TEST(Wire, UnknownOrForgedIsRefusedWithItsReason) {
  auto unknown = to_daemon({{"op", "launch"}});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message().find("unknown op"), std::string::npos);
  EXPECT_FALSE(to_daemon({{"op", 1}}));
  EXPECT_FALSE(to_daemon({{"seq", 1}}));
  EXPECT_FALSE(to_daemon(json::object()));
  // Each direction's ops only.
  EXPECT_FALSE(to_daemon(wire::encode(wire::ToGateway(wire::StatsRequest{1}))));
  EXPECT_FALSE(to_gateway(wire::encode(wire::ToDaemon(wire::Ready{int64_t{1}}))));
  // Only the gateway's own audit kinds.
  auto forged = to_daemon(
      {{"op", "audit"}, {"id", "sb_1"}, {"kind", "sandbox.destroy"}, {"data", json::object()}});
  ASSERT_FALSE(forged);
  EXPECT_NE(forged.error().message().find("\"kind\""), std::string::npos);
  auto missing = to_daemon({{"op", "secret"}, {"seq", 1}, {"id", "sb_1"}});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("no \"name\""), std::string::npos);
  // A secret answer is a value or an error, not both, not neither.
  EXPECT_FALSE(to_gateway({{"op", "secret"}, {"seq", 1}}));
  EXPECT_FALSE(to_gateway(
      {{"op", "secret"}, {"seq", 1}, {"value", "v"}, {"error", {{"code", 0}, {"message", ""}}}}));
}

TEST(Wire, DeepNestingIsRefusedOnReceipt) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  std::string deep =
      "{\"op\":\"audit\",\"data\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  ASSERT_EQ(::send(a.get(), deep.data(), deep.size(), 0), static_cast<ssize_t>(deep.size()));
  auto m = wire::recv(b.get());
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code(), Code::kInvalidArgument);
  ASSERT_TRUE(wire::send_json(a.get(), {{"op", "reply"}, {"seq", 1}, {"ok", true}}));
  auto next = wire::recv(b.get());  // the channel reads on
  ASSERT_TRUE(next);
  EXPECT_TRUE(wire::parse_to_daemon(std::move(*next)));
}

}  // namespace
}  // namespace space::egress
