// The gateway process's control channel (wire.h): one JSON object per SOCK_SEQPACKET packet,
// and each message kind's encoder and validating parser. Every field of a received message is
// checked for presence, type and bound before it is read (nlohmann's get<T>() and at() throw on
// a mismatch, and spaced's reader thread must never throw on what the process sends).
#include "egress/wire.h"

#include <openssl/crypto.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#include "common/json_nesting.h"

namespace space::egress::wire {

using nlohmann::json;

namespace {

// The ops, both directions. "secret" is both: a request up, its answer down.
constexpr const char* kInit = "init";
constexpr const char* kAttach = "attach";
constexpr const char* kDetach = "detach";
constexpr const char* kStats = "stats";
constexpr const char* kSecret = "secret";
constexpr const char* kReady = "ready";
constexpr const char* kReply = "reply";
constexpr const char* kAudit = "audit";

// What the process may report into the audit log: the gateway's own kinds, nothing else.
constexpr std::array<std::string_view, 6> kAuditKinds = {"egress.request", "egress.denied",
                                                         "egress.error",   "egress.tunnel",
                                                         "credential.use", "credential.error"};

constexpr uint64_t kMaxTimeoutMs = 30ull * 24 * 3600 * 1000;
constexpr size_t kMaxSecretValue = 1 << 20;

Error refused(std::string_view op, std::string_view why) {
  return Error(Code::kProtocol, "control message " + std::string(op) + ": " + std::string(why));
}

// Reads the fields of one received message; the first problem is the message's refusal.
class Fields {
 public:
  Fields(const json& body, std::string_view op) : body_(body), op_(op) {}

  const json* find(const char* key) const {
    auto it = body_.find(key);
    return it == body_.end() ? nullptr : &*it;
  }
  Error missing(const char* key) const { return refused(op_, std::string("no \"") + key + "\""); }
  Error bad(const char* key, std::string_view what) const {
    return refused(op_, std::string("\"") + key + "\" " + std::string(what));
  }

  Result<std::string> text(const char* key, size_t max, bool nonempty = true) const {
    const json* v = find(key);
    if (!v) return fail(missing(key));
    return text_of(*v, key, max, nonempty);
  }
  Result<std::string> text_of(const json& v, const char* key, size_t max, bool nonempty) const {
    if (!v.is_string()) return fail(bad(key, "is not a string"));
    const auto& s = v.get_ref<const std::string&>();
    if (s.size() > max) return fail(bad(key, "is over " + std::to_string(max) + " bytes"));
    if (nonempty && s.empty()) return fail(bad(key, "is empty"));
    return s;
  }
  Result<uint64_t> number(const char* key, uint64_t max) const {
    const json* v = find(key);
    if (!v) return fail(missing(key));
    if (!v->is_number_unsigned()) return fail(bad(key, "is not an unsigned integer"));
    uint64_t n = v->get<uint64_t>();
    if (n > max) return fail(bad(key, "is over " + std::to_string(max)));
    return n;
  }
  Result<uint64_t> seq() const { return number("seq", kMaxSeq); }
  Result<const json*> object(const char* key) const {
    const json* v = find(key);
    if (!v) return fail(missing(key));
    if (!v->is_object()) return fail(bad(key, "is not an object"));
    return v;
  }
  Result<const json*> array(const char* key) const {
    const json* v = find(key);
    if (!v) return fail(missing(key));
    if (!v->is_array()) return fail(bad(key, "is not an array"));
    return v;
  }
  Result<Error> error(const char* key) const {
    const json& e = *TRY(object(key));
    Fields f(e, op_);
    const json* c = f.find("code");
    if (!c) return fail(bad(key, "has no code"));
    if (!c->is_number_unsigned() || c->get<uint64_t>() > static_cast<uint64_t>(Code::kInternal))
      return fail(bad(key, "has no valid code"));
    std::string message = TRY(f.text("message", kMaxErrorMessage, false));
    return Error(static_cast<Code>(c->get<uint64_t>()), std::move(message));
  }
  Result<std::vector<std::string>> texts(const json& arr, const char* key, size_t max) const {
    if (!arr.is_array()) return fail(bad(key, "is not an array"));
    std::vector<std::string> out;
    for (auto& v : arr) out.push_back(TRY(text_of(v, key, max, false)));
    return out;
  }

 private:
  const json& body_;
  std::string_view op_;
};

json error_json(const Error& e) {
  return {{"code", static_cast<uint64_t>(e.code())}, {"message", e.message()}};
}

// Each counter with its field name, for both directions.
template <class Stats, class Fn>
void each_counter(Stats& s, Fn fn) {
  fn("connections", s.connections);
  fn("requests", s.requests);
  fn("denied", s.denied);
  fn("bytes_up", s.bytes_up);
  fn("bytes_down", s.bytes_down);
  fn("credential_uses", s.credential_uses);
  fn("dns_queries", s.dns_queries);
  fn("active_connections", s.active_connections);
  fn("sandboxes", s.sandboxes);
}

// --- encoders ---

json encode_one(const Init& m) {
  const auto& o = m.options;
  json opts = {{"resolve", o.resolve},
               {"upstream_ca_pems", o.upstream_ca_pems},
               {"connect_timeout_ms", uint64_t(o.connect_timeout.count())},
               {"idle_timeout_ms", uint64_t(o.idle_timeout.count())}};
  json secrets = json::object();
  for (auto& [name, def] : m.secrets) secrets[name] = def;
  return {{"op", kInit}, {"options", std::move(opts)}, {"secrets", std::move(secrets)}};
}

json encode_one(const Attach& m) {
  json grants = json::array(), known = json::object();
  for (auto& g : m.grants) grants.push_back({{"name", g.name}, {"placeholder", g.placeholder}});
  for (auto& [name, values] : m.known) known[name] = values;
  return {{"op", kAttach},        {"seq", m.seq},     {"id", m.id},
          {"policy", m.policy},   {"grants", grants}, {"ca_key", m.ca_key},
          {"ca_cert", m.ca_cert}, {"kinds", m.kinds}, {"known", known}};
}

json encode_one(const Detach& m) { return {{"op", kDetach}, {"seq", m.seq}, {"id", m.id}}; }
json encode_one(const StatsRequest& m) { return {{"op", kStats}, {"seq", m.seq}}; }

json encode_one(const SecretAnswer& m) {
  json out = {{"op", kSecret}, {"seq", m.seq}};
  if (m.value)
    out["value"] = *m.value;
  else
    out["error"] = error_json(m.value.error());
  return out;
}

json encode_one(const Ready& m) {
  if (!m.pid) return {{"op", kReady}, {"error", error_json(m.pid.error())}};
  return {{"op", kReady}, {"pid", static_cast<uint64_t>(*m.pid)}};
}

json encode_one(const Reply& m) {
  json out = {{"op", kReply}, {"seq", m.seq}};
  if (!m.result) {
    out["error"] = error_json(m.result.error());
    return out;
  }
  out["ok"] = true;
  if (m.stats) each_counter(*m.stats, [&](const char* k, const auto& v) { out[k] = v; });
  return out;
}

json encode_one(const Audit& m) {
  return {{"op", kAudit}, {"id", m.id}, {"kind", m.kind}, {"data", m.data}};
}

json encode_one(const SecretRequest& m) {
  return {{"op", kSecret}, {"seq", m.seq}, {"id", m.id}, {"name", m.name}};
}

// --- parsers, one per kind ---

Result<Init> parse_init(const json& b) {
  Fields f(b, kInit);
  Init m;
  const json& opts = *TRY(f.object("options"));
  Fields o(opts, "init options");
  const json& resolve = *TRY(o.object("resolve"));
  for (auto& [k, v] : resolve.items()) {
    if (k.empty() || k.size() > kMaxName) return fail(o.bad("resolve", "has a bad host"));
    m.options.resolve[k] = TRY(o.text_of(v, "resolve", kMaxName, true));
  }
  m.options.upstream_ca_pems =
      TRY(o.texts(*TRY(o.array("upstream_ca_pems")), "upstream_ca_pems", kMaxPem));
  m.options.connect_timeout =
      std::chrono::milliseconds(TRY(o.number("connect_timeout_ms", kMaxTimeoutMs)));
  m.options.idle_timeout =
      std::chrono::milliseconds(TRY(o.number("idle_timeout_ms", kMaxTimeoutMs)));
  const json& secrets = *TRY(f.object("secrets"));
  for (auto& [name, def] : secrets.items()) {
    if (name.empty() || name.size() > kMaxName) return fail(f.bad("secrets", "has a bad name"));
    if (!def.is_object()) return fail(f.bad("secrets", "holds a definition that is not an object"));
    m.secrets[name] = def;
  }
  return m;
}

Result<Attach> parse_attach(const json& b, std::vector<UniqueFd> fds) {
  Fields f(b, kAttach);
  Attach m;
  m.seq = TRY(f.seq());
  m.id = TRY(f.text("id", kMaxName));
  m.policy = *TRY(f.object("policy"));
  const json& grants = *TRY(f.array("grants"));
  for (auto& g : grants) {
    if (!g.is_object()) return fail(f.bad("grants", "holds a grant that is not an object"));
    Fields gf(g, "attach grant");
    // (One TRY per statement: GCC does not destroy the parts of an aggregate built before a
    // statement expression returns from inside it.)
    std::string name = TRY(gf.text("name", kMaxName));
    std::string placeholder = TRY(gf.text("placeholder", kMaxName));
    m.grants.push_back({std::move(name), std::move(placeholder)});
  }
  m.ca_key = TRY(f.text("ca_key", kMaxPem));
  m.ca_cert = TRY(f.text("ca_cert", kMaxPem));
  const json& kinds = *TRY(f.array("kinds"));
  for (auto& k : kinds) {
    if (!k.is_number_unsigned() || k.get<uint64_t>() >= uint64_t(kListenerKinds))
      return fail(f.bad("kinds", "holds an unknown listener kind"));
    m.kinds.push_back(static_cast<int>(k.get<uint64_t>()));
  }
  if (m.kinds.empty()) return fail(f.bad("kinds", "is empty"));
  if (m.kinds.size() != fds.size())
    return fail(refused(kAttach, std::to_string(m.kinds.size()) + " listener kinds but " +
                                     std::to_string(fds.size()) + " fds"));
  const json& known = *TRY(f.object("known"));
  for (auto& [name, values] : known.items()) {
    if (name.empty() || name.size() > kMaxName) return fail(f.bad("known", "has a bad name"));
    m.known[name] = TRY(f.texts(values, "known", kMaxSecretValue));
  }
  m.fds = std::move(fds);
  return m;
}

Result<Detach> parse_detach(const json& b) {
  Fields f(b, kDetach);
  uint64_t seq = TRY(f.seq());
  return Detach{seq, TRY(f.text("id", kMaxName))};
}

Result<StatsRequest> parse_stats(const json& b) {
  return StatsRequest{TRY(Fields(b, kStats).seq())};
}

Result<SecretAnswer> parse_secret_answer(const json& b) {
  Fields f(b, kSecret);
  SecretAnswer m;
  m.seq = TRY(f.seq());
  bool has_value = f.find("value"), has_error = f.find("error");
  if (has_value == has_error) return fail(refused(kSecret, "needs one of \"value\" and \"error\""));
  if (has_value)
    m.value = TRY(f.text("value", kMaxSecretValue, false));
  else
    m.value = fail(TRY(f.error("error")));
  return m;
}

Result<Ready> parse_ready(const json& b) {
  Fields f(b, kReady);
  Ready m;
  if (f.find("error")) {
    m.pid = fail(TRY(f.error("error")));
    return m;
  }
  uint64_t pid = TRY(f.number("pid", std::numeric_limits<int32_t>::max()));
  if (pid == 0) return fail(f.bad("pid", "is 0"));
  m.pid = static_cast<int64_t>(pid);
  return m;
}

Result<Reply> parse_reply(const json& b) {
  Fields f(b, kReply);
  Reply m;
  m.seq = TRY(f.seq());
  if (f.find("error")) {
    m.result = fail(TRY(f.error("error")));
    return m;
  }
  const json* ok = f.find("ok");
  if (!ok || !ok->is_boolean() || !ok->get<bool>())
    return fail(refused(kReply, "neither \"ok\": true nor an error"));
  bool any = false;
  Gateway::Stats s;
  Result<void> bad;
  each_counter(s, [&](const char* k, auto& v) {
    const json* c = f.find(k);
    if (!c || !bad) return;
    any = true;
    if (!c->is_number_unsigned()) {
      bad = fail(f.bad(k, "is not an unsigned integer"));
      return;
    }
    v = c->template get<std::decay_t<decltype(v)>>();
  });
  TRY_VOID(bad);
  if (any) m.stats = s;
  return m;
}

Result<Audit> parse_audit(const json& b) {
  Fields f(b, kAudit);
  Audit m;
  m.id = TRY(f.text("id", kMaxName));
  m.kind = TRY(f.text("kind", kMaxName));
  if (std::find(kAuditKinds.begin(), kAuditKinds.end(), m.kind) == kAuditKinds.end())
    return fail(f.bad("kind", "is not one of the gateway's own (" + m.kind.substr(0, 64) + ")"));
  m.data = *TRY(f.object("data"));
  return m;
}

Result<SecretRequest> parse_secret_request(const json& b) {
  Fields f(b, kSecret);
  SecretRequest m;
  m.seq = TRY(f.seq());
  m.id = TRY(f.text("id", kMaxName));
  m.name = TRY(f.text("name", kMaxName));
  return m;
}

// The message's op, checked.
Result<std::string> op_of(const Message& m) {
  auto it = m.body.find("op");
  if (it == m.body.end()) return fail(refused("(none)", "no \"op\""));
  if (!it->is_string()) return fail(refused("(none)", "\"op\" is not a string"));
  return it->get<std::string>();
}

Error unknown_op(const std::string& op) {
  // The name is untrusted: cut, and only printable ASCII kept.
  std::string shown;
  for (char c : op.substr(0, 32)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
  return refused(shown, "unknown op");
}

template <class T>
Result<T> no_fds(const Message& m, std::string_view op, Result<T> r) {
  if (r && !m.fds.empty()) return fail(refused(op, "fds attached to a message that takes none"));
  return r;
}

}  // namespace

Result<ToGateway> parse_to_gateway(Message m) {
  std::string op = TRY(op_of(m));
  const json& b = m.body;
  if (op == kAttach) return TRY(parse_attach(b, std::move(m.fds)));
  if (op == kInit) return TRY(no_fds(m, op, parse_init(b)));
  if (op == kDetach) return TRY(no_fds(m, op, parse_detach(b)));
  if (op == kStats) return TRY(no_fds(m, op, parse_stats(b)));
  if (op == kSecret) return TRY(no_fds(m, op, parse_secret_answer(b)));
  return fail(unknown_op(op));
}

Result<ToDaemon> parse_to_daemon(Message m) {
  std::string op = TRY(op_of(m));
  const json& b = m.body;
  if (op == kReady) return TRY(no_fds(m, op, parse_ready(b)));
  if (op == kReply) return TRY(no_fds(m, op, parse_reply(b)));
  if (op == kAudit) return TRY(no_fds(m, op, parse_audit(b)));
  if (op == kSecret) return TRY(no_fds(m, op, parse_secret_request(b)));
  return fail(unknown_op(op));
}

json encode(const ToGateway& m) {
  return std::visit([](const auto& k) { return encode_one(k); }, m);
}

json encode(const ToDaemon& m) {
  return std::visit([](const auto& k) { return encode_one(k); }, m);
}

Result<void> send(int sock, const ToGateway& m, std::span<const int> fds) {
  const auto* attach = std::get_if<Attach>(&m);
  if (attach ? attach->kinds.size() != fds.size() : !fds.empty())
    return fail(Code::kInternal, "control message: fds do not match the message's kind");
  json body = encode(m);
  auto r = send_json(sock, body, fds);
  // The copies of secret material in the encoded message.
  for (const char* k : {"ca_key", "value"})
    if (auto it = body.find(k); it != body.end() && it->is_string()) {
      auto& s = it->get_ref<std::string&>();
      OPENSSL_cleanse(s.data(), s.size());
    }
  return r;
}

Result<void> send(int sock, const ToDaemon& m) { return send_json(sock, encode(m)); }

Result<void> send_json(int sock, const json& body, std::span<const int> fds) {
  std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
  struct Wipe {
    std::string& s;
    ~Wipe() { OPENSSL_cleanse(s.data(), s.size()); }
  } wipe{text};
  if (text.size() > kMaxMessage)
    return fail(Code::kInvalidArgument,
                "control message of " + std::to_string(text.size()) + " bytes is over the limit");
  if (fds.size() > kMaxFds) return fail(Code::kInvalidArgument, "too many fds for one message");
  iovec iov{text.data(), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return {};
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET)
      return fail(Code::kUnavailable, "the other end of the control channel is gone");
    return fail_sys("sendmsg", "control channel");
  }
}

Result<Message> recv(int sock) {
  // The packet's size first (MSG_PEEK|MSG_TRUNC returns it whole), then the packet.
  char probe;
  ssize_t size;
  do {
    size = ::recv(sock, &probe, 1, MSG_PEEK | MSG_TRUNC);
  } while (size < 0 && errno == EINTR);
  if (size < 0) {
    if (errno == ECONNRESET) return fail(Code::kUnavailable, "control channel reset");
    return fail_sys("recv", "control channel");
  }
  if (size == 0) return fail(Code::kUnavailable, "control channel closed");
  std::string text(static_cast<size_t>(size), '\0');
  iovec iov{text.data(), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return fail_sys("recvmsg", "control channel");
  if (n == 0) return fail(Code::kUnavailable, "control channel closed");
  Message out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      out.fds.emplace_back(fd);
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
    return fail(Code::kInvalidArgument, "a truncated control message");
  text.resize(static_cast<size_t>(n));
  if (!json_nesting_within(text, kMaxDepth))
    return fail(Code::kInvalidArgument, "a control message nested too deep");
  out.body = json::parse(text, nullptr, false);
  OPENSSL_cleanse(text.data(), text.size());
  if (out.body.is_discarded() || !out.body.is_object())
    return fail(Code::kInvalidArgument, "a control message that is not a JSON object");
  return out;
}

}  // namespace space::egress::wire
