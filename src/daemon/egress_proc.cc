// spaced's side of the gateway process: spawning, handing over, answering, supervising
// (egress_proc.h; the process itself is src/egressd/).
#include "daemon/egress_proc.h"

#include <openssl/crypto.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <variant>

#include "common/subprocess.h"
#include "egress/wire.h"

namespace space::daemon {

namespace wire = egress::wire;

namespace {

// A compromised process could flood the audit log: at most this many events per second (with a
// burst) are taken from it; the rest are counted and logged.
constexpr double kAuditRate = 2000, kAuditBurst = 20000;
constexpr size_t kMaxSecretThreads = 32;

// Refused messages are logged at most this often (each is counted: refused_messages()).
constexpr double kRefusedLogRate = 1, kRefusedLogBurst = 10;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

EgressProcess::EgressProcess(Options options) : o_(std::move(options)) {}

Result<std::unique_ptr<EgressProcess>> EgressProcess::start(Options options) {
  if (options.uid == 0 || options.gid == 0)
    return fail(Code::kInvalidArgument, "the gateway process needs a uid and gid other than 0");
  if (::access(options.binary.c_str(), X_OK) != 0)
    return fail(Code::kUnavailable, "the gateway process's binary " + options.binary.string() +
                                        " is missing or not executable (it is built and "
                                        "installed next to spaced)");
  for (auto& f : options.gateway.upstream_ca_files) {
    std::string pem = read_file(f);
    if (pem.empty()) return fail(Code::kInvalidArgument, "upstream_ca_files: cannot read " + f);
    options.gateway.upstream_ca_pems.push_back(std::move(pem));
  }
  std::unique_ptr<EgressProcess> p(new EgressProcess(std::move(options)));
  TRY_VOID_CTX(p->spawn(), "starting the gateway process");
  p->ready_ = true;
  p->supervisor_ = std::thread([raw = p.get()] { raw->supervise(); });
  return p;
}

EgressProcess::~EgressProcess() { stop(); }

Result<void> EgressProcess::spawn() {
  std::vector<std::string> args = {
      o_.binary.string(),     "--control-fd", std::to_string(kChannelFd), "--uid",
      std::to_string(o_.uid), "--gid",        std::to_string(o_.gid)};
  for (auto& h : o_.hide) {
    args.push_back("--hide");
    args.push_back(h.string());
  }
  ChannelOptions co;
  co.type = ChannelType::kSeqPacket;
  // Nothing of spaced's environment: secrets may come from its variables.
  co.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"};
  SpawnedHelper spawned = TRY(spawn_with_channel(o_.binary.string(), args, co));
  ChildProcess& child = spawned.child;
  UniqueFd& mine = spawned.channel;
  int big = static_cast<int>(wire::kMaxMessage * 2);
  (void)::setsockopt(mine.get(), SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);

  auto failed = [&](Error e) -> Result<void> {
    int status = child.kill_and_wait(SIGKILL);
    return fail(
        Error(e.code(), e.message() + " (the process " + describe_wait_status(status) + ")"));
  };
  wire::Init init{.options = o_.gateway, .secrets = {}};
  init.options.audit = nullptr;
  if (o_.secrets)
    for (auto& [name, def] : o_.secrets->defs()) init.secrets[name] = def.to_wire();
  if (auto r = wire::send(mine.get(), init); !r) return failed(std::move(r.error()));
  pollfd pfd{mine.get(), POLLIN, 0};
  int n;
  do {
    n = ::poll(&pfd, 1, 10'000);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return failed(Error(Code::kTimeout, "the gateway process did not get ready in 10 s"));
  auto got = wire::recv(mine.get());
  if (!got)
    return failed(Error(Code::kUnavailable,
                        "the gateway process ended before it was ready (its reason is on "
                        "spaced's standard error, lines starting space-egress)"));
  auto parsed = wire::parse_to_daemon(std::move(*got));
  if (!parsed) return failed(std::move(parsed.error()));
  auto* ready = std::get_if<wire::Ready>(&*parsed);
  if (!ready)
    return failed(Error(Code::kProtocol, "the gateway process's first message is not ready"));
  if (!ready->pid) return failed(std::move(ready->pid.error()));
  pid_t pid = child.release();
  {
    std::lock_guard send(send_mu_);
    ctl_ = std::move(mine);
  }
  pid_ = pid;
  spdlog::info("egress: gateway process {} started (uid {}, gid {})", pid, o_.uid, o_.gid);
  return {};
}

void EgressProcess::refuse(const Error& e) {
  uint64_t n = ++refused_;
  std::lock_guard lock(refused_log_mu_);
  if (refused_log_.take(kRefusedLogRate, kRefusedLogBurst))
    spdlog::warn("egress: refused a message from the gateway process ({} so far): {}", n,
                 e.message());
}

void EgressProcess::supervise() {
  std::chrono::milliseconds pause{0};
  auto started = std::chrono::steady_clock::now();
  TokenBucket audit_bucket;
  uint64_t audit_dropped = 0;
  for (;;) {
    int fd;
    {
      std::lock_guard send(send_mu_);
      fd = ctl_.get();
    }
    for (;;) {
      auto m = wire::recv(fd);
      if (!m) {
        if (m.error().code() == Code::kUnavailable || m.error().sys_errno() == EBADF) break;
        if (m.error().code() == Code::kInvalidArgument)
          refuse(m.error());
        else
          spdlog::warn("egress: gateway process: {}", m.error().message());
        continue;
      }
      auto parsed = wire::parse_to_daemon(std::move(*m));
      if (!parsed) {
        refuse(parsed.error());
        continue;
      }
      if (std::holds_alternative<wire::Audit>(*parsed)) {
        if (!audit_bucket.take(kAuditRate, kAuditBurst)) {
          if (++audit_dropped % 1000 == 1)
            spdlog::warn("egress: the gateway process reports too many events; {} left out",
                         audit_dropped);
          continue;
        }
      }
      on_message(std::move(*parsed));
    }
    // The process ended or closed the channel.
    pid_t pid = pid_.exchange(0);
    std::vector<std::string> ids;
    bool stopping;
    {
      std::lock_guard lock(mu_);
      ready_ = false;
      stopping = stopping_;
      fail_waiters_locked(Error(Code::kUnavailable, "the gateway process ended"));
      for (auto& [id, e] : entries_) ids.push_back(id);
    }
    cv_.notify_all();
    int status = 0;
    if (pid > 0) {
      if (stopping) {
        // It exits when it sees the channel close; a moment's grace, then it is killed.
        for (int i = 0; i < 100 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ::kill(pid, SIGKILL);  // harmless if already reaped: the pid is ours until waited for
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (stopping) return;
    std::string why = "the egress gateway process (pid " + std::to_string(pid) + ") " +
                      describe_wait_status(status) +
                      "; connections in flight were cut, a new process serves new ones";
    spdlog::error("egress: {}", why);
    restarts_++;
    for (auto& id : ids)
      if (o_.gateway.audit) o_.gateway.audit(id, "egress.interrupted", {{"reason", why}});
    // Dying again soon after a start: wait longer each time (up to 5 s), so a process that
    // cannot run does not spin.
    for (;;) {
      using std::chrono::milliseconds;
      if (std::chrono::steady_clock::now() - started >= std::chrono::seconds(10))
        pause = milliseconds(0);
      else
        pause = std::clamp<milliseconds>(pause * 2, milliseconds(100), milliseconds(5000));
      {
        std::unique_lock lock(mu_);
        if (cv_.wait_for(lock, pause, [&] { return stopping_; })) return;
      }
      started = std::chrono::steady_clock::now();
      auto r = spawn();
      if (r) break;
      spdlog::error("egress: restarting the gateway process: {}", r.error().message());
    }
    std::lock_guard lock(mu_);
    if (stopping_) {
      // stop() came while it started: let the loop above see the channel close.
      ::shutdown(ctl_.get(), SHUT_RDWR);
      continue;
    }
    for (auto& [id, e] : entries_)
      if (auto r = send_attach_locked(e, 0); !r)
        spdlog::error("egress: handing {} to the new gateway process: {}", id, r.error().message());
    ready_ = true;
  }
}

void EgressProcess::on_message(wire::ToDaemon m) {
  if (auto* reply = std::get_if<wire::Reply>(&m)) {
    std::lock_guard lock(mu_);
    auto it = waiters_.find(reply->seq);
    if (it == waiters_.end()) {
      if (!reply->result)
        spdlog::error("egress: the gateway process refused a sandbox: {}",
                      reply->result.error().message());
      return;
    }
    it->second->result = std::move(reply->result);
    it->second->stats = reply->stats.value_or(egress::Gateway::Stats{});
    cv_.notify_all();
  } else if (auto* audit = std::get_if<wire::Audit>(&m)) {
    {
      std::lock_guard lock(mu_);
      if (!entries_.count(audit->id)) return;  // only sandboxes it serves
    }
    if (o_.gateway.audit) o_.gateway.audit(audit->id, audit->kind, std::move(audit->data));
  } else if (auto* ask = std::get_if<wire::SecretRequest>(&m)) {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    if (secret_threads_ >= kMaxSecretThreads) {
      std::lock_guard send(send_mu_);
      (void)wire::send(ctl_.get(),
                       wire::SecretAnswer{ask->seq, fail(Code::kResourceExhausted,
                                                         "too many secret requests at once")});
      return;
    }
    ++secret_threads_;
    std::thread([this, s = ask->seq, id = std::move(ask->id), name = std::move(ask->name)] {
      answer_secret(s, id, name);
    }).detach();
  } else {
    refuse(Error(Code::kProtocol, "a ready message after the start"));
  }
}

void EgressProcess::answer_secret(uint64_t seq, std::string id, std::string name) {
  Result<std::string> v = fail(Code::kInternal, "no value");
  bool granted = false;
  {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (it != entries_.end())
      for (auto& g : it->second.eg.grants) granted = granted || g.name == name;
  }
  if (!granted) {
    // The gateway only asks for a sandbox's own secrets: this is a bug or a compromised process.
    spdlog::error(
        "egress: the gateway process asked for secret {} for {}, which holds no such "
        "grant; refused",
        name.substr(0, 64), id.substr(0, 64));
    v = fail(Code::kPermissionDenied,
             "secret " + name.substr(0, 64) + " is not granted to " + id.substr(0, 64));
  } else {
    egress::SecretStore::MintPermit permit = [this, id] {
      std::lock_guard lock(mu_);
      auto it = entries_.find(id);
      return it != entries_.end() && it->second.mint.take(1, 5);
    };
    v = o_.secrets->value(name, permit);
  }
  wire::ToGateway out = wire::SecretAnswer{seq, std::move(v)};
  std::lock_guard lock(mu_);
  if (ready_ && !stopping_) {
    std::lock_guard send(send_mu_);
    (void)wire::send(ctl_.get(), out);
  }
  if (auto& value = std::get<wire::SecretAnswer>(out).value; value)
    OPENSSL_cleanse(value->data(), value->size());
  // Last: once the count drops, stop() may return and this object go away.
  --secret_threads_;
  cv_.notify_all();
}

Result<void> EgressProcess::send_attach_locked(const Entry& e, uint64_t seq) {
  wire::Attach a;
  a.seq = seq;
  a.id = e.eg.id;
  a.policy = e.eg.policy.to_json();
  a.grants = e.eg.grants;
  for (auto& g : e.eg.grants)
    if (o_.secrets) a.known[g.name] = o_.secrets->remembered(g.name);
  std::vector<int> fds;
  for (auto& [fd, kind] : e.listeners.fds) {
    fds.push_back(fd.get());
    a.kinds.push_back(kind);
  }
  a.ca_key = e.eg.ca->key_pem();
  a.ca_cert = e.eg.ca->cert_pem();
  wire::ToGateway m = std::move(a);
  Result<void> r;
  {
    std::lock_guard send(send_mu_);
    r = wire::send(ctl_.get(), m, fds);
  }
  auto& key = std::get<wire::Attach>(m).ca_key;
  OPENSSL_cleanse(key.data(), key.size());
  return r;
}

void EgressProcess::fail_waiters_locked(const Error& e) {
  for (auto& [seq, w] : waiters_) {
    if (w->result) continue;
    w->result = fail(Error(e.code(), e.message()));
    w->ended = true;
  }
}

Result<egress::Gateway::Stats> EgressProcess::request(wire::ToGateway m,
                                                      std::chrono::milliseconds timeout) {
  auto w = std::make_shared<Waiter>();
  std::unique_lock lock(mu_);
  if (!ready_) return fail(Code::kUnavailable, "the gateway process is restarting");
  uint64_t seq = ++next_seq_;
  std::visit(
      [&](auto& k) {
        if constexpr (requires { k.seq; }) k.seq = seq;
      },
      m);
  {
    std::lock_guard send(send_mu_);
    TRY_VOID(wire::send(ctl_.get(), m));
  }
  waiters_[seq] = w;
  cv_.wait_for(lock, timeout, [&] { return w->result.has_value(); });
  waiters_.erase(seq);
  if (!w->result) return fail(Code::kTimeout, "the gateway process did not answer");
  TRY_VOID(std::move(*w->result));
  return w->stats;
}

Result<void> EgressProcess::attach(egress::SandboxEgress sandbox, int netns_fd) {
  std::string id = sandbox.id;
  auto bound = TRY_CTX(egress::Gateway::bind(netns_fd),
                       "binding the egress gateway's listeners in " + id + "'s network namespace");
  return attach(std::move(sandbox), std::move(bound));
}

Result<void> EgressProcess::attach(egress::SandboxEgress sandbox,
                                   egress::BoundListeners listeners) {
  std::string id = sandbox.id;
  if (!sandbox.ca) return fail(Code::kInternal, "egress for " + id + ": no CA");
  if (listeners.empty()) return fail(Code::kInternal, "egress for " + id + ": no listeners");
  auto w = std::make_shared<Waiter>();
  std::unique_lock lock(mu_);
  if (stopping_) return fail(Code::kUnavailable, "the egress gateway is stopping");
  if (entries_.count(id)) return fail(Code::kAlreadyExists, id + " is already attached");
  Entry& e = entries_[id];
  e.eg = std::move(sandbox);
  e.listeners = std::move(listeners);
  // While the process restarts the entry waits: the new process is handed every entry, and
  // connections wait in the listeners' backlog until then.
  if (!ready_) return {};
  uint64_t seq = ++next_seq_;
  if (auto r = send_attach_locked(e, seq); !r) {
    // The process is going away; the supervisor hands this entry to the next one.
    spdlog::warn("egress: {}: {}", id, r.error().message());
    return {};
  }
  waiters_[seq] = w;
  cv_.wait_for(lock, std::chrono::seconds(10), [&] { return w->result.has_value(); });
  waiters_.erase(seq);
  if (!w->result) {
    entries_.erase(id);
    return fail(Code::kTimeout, "the gateway process did not take " + id + " within 10 s");
  }
  if (!*w->result) {
    if (w->ended) return {};  // the supervisor hands it to the next process
    entries_.erase(id);
    return fail(std::move(w->result->error()));
  }
  return {};
}

void EgressProcess::detach(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    if (!entries_.erase(id)) return;  // spaced's copies of its listeners close here
  }
  // The process closes its copies and cuts the sandbox's connections.
  (void)request(wire::Detach{.seq = 0, .id = id}, std::chrono::seconds(5));
}

egress::Gateway::Stats EgressProcess::stats() {
  auto r = request(wire::StatsRequest{}, std::chrono::seconds(2));
  return r ? *r : egress::Gateway::Stats{};
}

void EgressProcess::begin_stop() {
  {
    std::unique_lock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    std::lock_guard send(send_mu_);
    if (ctl_) ::shutdown(ctl_.get(), SHUT_RDWR);  // the supervisor's read ends; the process exits
  }
  cv_.notify_all();
}

void EgressProcess::stop() {
  begin_stop();
  if (supervisor_.joinable()) supervisor_.join();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return secret_threads_ == 0; });
  entries_.clear();
}

}  // namespace space::daemon
