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
#include <variant>
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
    Result<wire::ToGateway> init_msg =
        first ? wire::parse_to_gateway(std::move(*first)) : fail(std::move(first.error()));
    auto* init_m = init_msg ? std::get_if<wire::Init>(&*init_msg) : nullptr;
    if (!init_m) {
      spdlog::error("space-egress: no init message from spaced{}",
                    init_msg ? "" : ": " + init_msg.error().message());
      return 1;
    }
    if (auto r = init(std::move(*init_m)); !r) {
      spdlog::error("space-egress: {}", r.error().message());
      (void)wire::send(ctl_, wire::Ready{fail(std::move(r.error()))});
      return 1;
    }
    (void)send(wire::Ready{int64_t{::getpid()}});
    for (;;) {
      auto m = wire::recv(ctl_);
      if (!m) {
        if (m.error().code() == Code::kUnavailable) break;  // spaced closed the channel
        spdlog::warn("space-egress: {}", m.error().message());
        continue;
      }
      auto parsed = wire::parse_to_gateway(std::move(*m));
      if (!parsed) {
        spdlog::warn("space-egress: refused: {}", parsed.error().message());
        continue;
      }
      std::visit([this](auto& k) { handle(k); }, *parsed);
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
  Result<void> init(wire::Init m) {
    egress::Gateway::Options o = std::move(m.options);
    o.audit = [this](const std::string& id, const std::string& kind, json data) {
      (void)send(wire::Audit{id, kind, std::move(data)});
    };
    std::map<std::string, egress::SecretDef> defs;
    for (auto& [name, j] : m.secrets) defs[name] = TRY(egress::SecretDef::from_wire(name, j));
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

  Result<void> send(const wire::ToDaemon& m) {
    std::lock_guard lock(send_mu_);
    return wire::send(ctl_, m);
  }

  void reply(uint64_t seq, Result<void> r, std::optional<egress::Gateway::Stats> stats = {}) {
    (void)send(wire::Reply{seq, std::move(r), stats});
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
    if (auto r = send(wire::SecretRequest{seq, sandbox, name}); !r) {
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

  void handle(wire::Init&) { spdlog::warn("space-egress: a second init message, ignored"); }

  void handle(wire::SecretAnswer& m) {
    {
      std::lock_guard lock(mu_);
      auto it = secret_replies_.find(m.seq);
      if (it == secret_replies_.end()) return;  // asked too long ago
      it->second = std::move(m.value);
    }
    cv_.notify_all();
  }

  void handle(wire::Attach& m) { reply(m.seq, attach(m)); }

  void handle(wire::Detach& m) {
    gateway_->detach(m.id);
    reply(m.seq, {});
  }

  void handle(wire::StatsRequest& m) { reply(m.seq, {}, gateway_->stats()); }

  Result<void> attach(wire::Attach& m) {
    egress::SandboxEgress sb;
    sb.id = m.id;
    sb.policy = TRY(egress::Policy::from_json(m.policy));
    sb.grants = std::move(m.grants);
    sb.ca = TRY(egress::SandboxCa::from_pem(m.ca_key, m.ca_cert));
    OPENSSL_cleanse(m.ca_key.data(), m.ca_key.size());
    for (auto& [name, values] : m.known) secrets_->remember_values(name, values);
    egress::BoundListeners bound;
    for (size_t i = 0; i < m.fds.size(); ++i)
      bound.fds.emplace_back(std::move(m.fds[i]), m.kinds[i]);
    return gateway_->attach(std::move(sb), std::move(bound));
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
