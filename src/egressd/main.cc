// space-egress: the egress gateway as its own process (docs/egress.md, "The gateway process").
// spaced starts it as root with one end of a control socket pair; before it reads a single byte
// it confines itself (confine.cc): a private mount namespace with spaced's state hidden, its own
// unprivileged uid and gid, no capabilities (bounding set included), no_new_privs, not
// dumpable, and the seccomp role egress_policy(). Then it serves what spaced hands it over the
// control socket (egress/wire.h): each sandbox's listening sockets (bound by spaced inside the
// sandbox's network namespace), its policy, grants and CA, and, on request, the values of the
// secrets granted to that sandbox. It never opens spaced's state, never runs a program, and
// exits when spaced closes the channel.
#include <openssl/crypto.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "egress/ca.h"
#include "egress/gateway.h"
#include "egress/policy.h"
#include "egress/wire.h"
#include "egressd/confine.h"

using namespace space;
using nlohmann::json;
namespace wire = egress::wire;

namespace {

class Service {
 public:
  explicit Service(int ctl) : ctl_(ctl) {}

  int run() {
    auto first = wire::recv(ctl_);
    if (!first || first->body.value("op", "") != "init") {
      spdlog::error("space-egress: no init message from spaced");
      return 1;
    }
    if (auto r = init(first->body); !r) {
      spdlog::error("space-egress: {}", r.error().message());
      (void)wire::send(ctl_, {{"op", "ready"}, {"error", wire::error_json(r.error())}});
      return 1;
    }
    (void)send({{"op", "ready"}, {"pid", ::getpid()}});
    for (;;) {
      auto m = wire::recv(ctl_);
      if (!m) {
        if (m.error().code() == Code::kUnavailable) break;  // spaced closed the channel
        spdlog::warn("space-egress: {}", m.error().message());
        continue;
      }
      dispatch(std::move(*m));
    }
    // spaced is gone or stopping: every connection ends with the process, as it ended with
    // spaced's own threads before. Nothing is saved here, so nothing is lost.
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
    ::_exit(0);
  }

 private:
  Result<void> init(const json& m) {
    egress::Gateway::Options o;
    const json& opts = m.value("options", json::object());
    // (.items() of a temporary would outlive it in a range-for: each object is held first.)
    const json resolve = opts.value("resolve", json::object());
    for (auto& [k, v] : resolve.items())
      if (v.is_string()) o.resolve[k] = v.get<std::string>();
    for (auto& pem : opts.value("upstream_ca_pems", json::array()))
      if (pem.is_string()) o.upstream_ca_pems.push_back(pem.get<std::string>());
    if (auto t = opts.find("connect_timeout_ms"); t != opts.end() && t->is_number_unsigned())
      o.connect_timeout = std::chrono::milliseconds(t->get<uint64_t>());
    if (auto t = opts.find("idle_timeout_ms"); t != opts.end() && t->is_number_unsigned())
      o.idle_timeout = std::chrono::milliseconds(t->get<uint64_t>());
    o.audit = [this](const std::string& id, const std::string& kind, json data) {
      (void)send({{"op", "audit"}, {"id", id}, {"kind", kind}, {"data", std::move(data)}});
    };
    std::map<std::string, egress::SecretDef> defs;
    const json secrets = m.value("secrets", json::object());
    for (auto& [name, j] : secrets.items()) defs[name] = TRY(egress::SecretDef::from_wire(name, j));
    secrets_ = std::make_shared<egress::SecretStore>(
        std::move(defs), [this](const std::string& name, const std::string& sandbox) {
          return fetch(name, sandbox);
        });
    gateway_ = TRY(egress::Gateway::start(std::move(o), secrets_));
    warm_up();
    return {};
  }

  // A process's first attach would pay the first use of OpenSSL's key and certificate code
  // (page faults, lazily built tables: ~2 ms measured); a spare pays it here, before any sandbox
  // waits on it. A throwaway CA, made and read back as an attach reads a sandbox's.
  static void warm_up() {
    auto ca = egress::SandboxCa::create("warm-up", std::chrono::hours(1));
    if (!ca) return;
    std::string key = (*ca)->key_pem();
    (void)egress::SandboxCa::from_pem(key, (*ca)->cert_pem());
    OPENSSL_cleanse(key.data(), key.size());
    (void)egress::Policy::from_json(egress::Policy().to_json());
  }

  Result<void> send(const json& body, std::span<const int> fds = {}) {
    std::lock_guard lock(send_mu_);
    return wire::send(ctl_, body, fds);
  }

  void reply(const json& m, Result<json> r) {
    json out = {{"op", "reply"}, {"seq", m.value("seq", uint64_t{0})}};
    if (r) {
      out["ok"] = true;
      for (auto& [k, v] : r->items()) out[k] = v;
    } else {
      out["error"] = wire::error_json(r.error());
    }
    (void)send(out);
  }

  // A secret's value, asked of spaced, which hands out only what `sandbox` was granted.
  Result<std::string> fetch(const std::string& name, const std::string& sandbox) {
    uint64_t seq;
    {
      std::lock_guard lock(mu_);
      if (closed_) return fail(Code::kUnavailable, "spaced is gone");
      seq = ++next_seq_;
      secret_replies_[seq];
    }
    if (auto r = send({{"op", "secret"}, {"seq", seq}, {"id", sandbox}, {"name", name}}); !r) {
      std::lock_guard lock(mu_);
      secret_replies_.erase(seq);
      return fail(std::move(r.error()));
    }
    std::unique_lock lock(mu_);
    // spaced runs a token command for at most 10 s.
    bool done = cv_.wait_for(lock, std::chrono::seconds(20),
                             [&] { return closed_ || secret_replies_[seq].has_value(); });
    auto got = std::move(secret_replies_[seq]);
    secret_replies_.erase(seq);
    if (!done || !got)
      return fail(Code::kUnavailable, "secret " + name + ": spaced did not answer");
    return std::move(*got);
  }

  void dispatch(wire::Message m) {
    const json& b = m.body;
    std::string op = b.value("op", "");
    if (op == "secret") {
      uint64_t seq = b.value("seq", uint64_t{0});
      Result<std::string> v = fail(Code::kInternal, "no value");
      if (auto it = b.find("value"); it != b.end() && it->is_string())
        v = it->get<std::string>();
      else
        v = fail(wire::error_of(b.value("error", json::object())));
      {
        std::lock_guard lock(mu_);
        auto it = secret_replies_.find(seq);
        if (it == secret_replies_.end()) return;  // asked too long ago
        it->second = std::move(v);
      }
      cv_.notify_all();
    } else if (op == "attach") {
      reply(b, attach(b, std::move(m.fds)));
    } else if (op == "detach") {
      gateway_->detach(b.value("id", ""));
      reply(b, json::object());
    } else if (op == "stats") {
      reply(b, wire::stats_json(gateway_->stats()));
    } else {
      spdlog::warn("space-egress: unknown control message {}", op.substr(0, 32));
    }
  }

  Result<json> attach(const json& b, std::vector<UniqueFd> fds) {
    egress::SandboxEgress sb;
    sb.id = b.value("id", "");
    sb.policy = TRY(egress::Policy::from_json(b.value("policy", json())));
    for (auto& g : b.value("grants", json::array())) {
      if (!g.is_object() || !g.value("name", json()).is_string() ||
          !g.value("placeholder", json()).is_string())
        return fail(Code::kInvalidArgument, "attach: bad grant");
      sb.grants.push_back({g["name"].get<std::string>(), g["placeholder"].get<std::string>()});
    }
    sb.ca = TRY(egress::SandboxCa::from_pem(b.value("ca_key", ""), b.value("ca_cert", "")));
    const json known = b.value("known", json::object());
    for (auto& [name, values] : known.items()) {
      std::vector<std::string> vs;
      for (auto& v : values)
        if (v.is_string()) vs.push_back(v.get<std::string>());
      secrets_->remember_values(name, vs);
    }
    const json& kinds = b.value("kinds", json::array());
    if (!kinds.is_array() || kinds.size() != fds.size() || fds.empty())
      return fail(Code::kInvalidArgument, "attach: listener kinds and fds differ");
    egress::BoundListeners bound;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!kinds[i].is_number_integer()) return fail(Code::kInvalidArgument, "attach: bad kind");
      bound.fds.emplace_back(std::move(fds[i]), kinds[i].get<int>());
    }
    TRY_VOID(gateway_->attach(std::move(sb), std::move(bound)));
    return json::object();
  }

  int ctl_;
  std::mutex send_mu_;
  std::shared_ptr<egress::SecretStore> secrets_;
  std::unique_ptr<egress::Gateway> gateway_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  uint64_t next_seq_ = 0;
  std::map<uint64_t, std::optional<Result<std::string>>> secret_replies_;
};

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  // It ends when spaced closes the channel, not when a service manager signals the whole
  // group: spaced may still be handing out its last answers then.
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::signal(sig, SIG_IGN);
  spdlog::set_pattern("space-egress[%P] %l: %v");
  auto args = egressd::parse_args(argc, argv);
  if (!args) {
    spdlog::error("{}", args.error().message());
    return 2;
  }
  if (auto r = egressd::confine(*args); !r) {
    spdlog::error("confining the gateway process: {}", r.error().message());
    return 1;
  }
  return Service(args->control_fd).run();
}
