// Sandbox lifecycle: start and shutdown of the daemon, destroy, pause/resume, inspect, the
// lifetime reaper, the state moves (sandbox_state.h). Creation lives in create.cc, recovery at
// start in reconcile.cc, rollback in rollback.cc, exec in exec.cc, file operations in files.cc,
// health, metrics and doctor in report.cc.
#include "daemon/daemon.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/failpoint.h"
#include "common/janitor.h"
#include "common/openat2.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "daemon/caller.h"
#include "runtime/kvm.h"

namespace space::daemon {
namespace fs = std::filesystem;
using nlohmann::json;

// The cluster's snapshot key (cluster.snapshot_key_file): 32 bytes every node shares, never
// made here (a node with a key of its own would seal snapshots no other node can open). A
// Kubernetes Secret volume presents it through a symlink, so one is followed.
static Result<std::string> load_cluster_key(const fs::path& file) {
  constexpr std::string_view kHow =
      "; make one with `head -c 32 /dev/urandom > FILE` and give every node the same file";
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(Error::sys("open", file.string()).wrap("cluster.snapshot_key_file"));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 0077) != 0)
    return fail(Code::kInvalidArgument,
                "cluster.snapshot_key_file " + file.string() +
                    " must be a regular file readable by its owner only (mode 0600 or 0400)");
  char buf[33];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n != 32)
    return fail(Code::kInvalidArgument, "cluster.snapshot_key_file " + file.string() +
                                            " must hold exactly 32 bytes" + std::string(kHow));
  return std::string(buf, 32);
}

Daemon::Daemon(Config cfg, Runtimes runtimes, std::unique_ptr<Store> store)
    : cfg_(std::move(cfg)),
      runtimes_(std::move(runtimes)),
      store_(std::move(store)),
      images_(cfg_.state_dir / "images", *store_, cfg_.images),
      started_at_(now_s()),
      snap_stores_(cfg_.state_dir / "snapshots"),
      pools_(cfg_.pools) {}

Result<std::unique_ptr<Daemon>> Daemon::start(Config cfg, Runtimes runtimes) {
  std::error_code ec;
  fs::create_directories(cfg.state_dir / "sandboxes", ec);
  if (ec)
    return fail(Code::kUnavailable,
                "creating state dir " + cfg.state_dir.string() + ": " + ec.message());
  // Image trees and sandbox directories may hold setuid files and secrets: root only.
  ::chmod(cfg.state_dir.c_str(), 0700);
  auto store = TRY_CTX(Store::open(cfg.state_dir / "space.db"), "opening the state database");
  auto audit_log =
      TRY_CTX(audit::AuditLog::open(cfg.state_dir / "space.db", cfg.state_dir / "audit.key"),
              "opening the audit log");
  std::unique_ptr<Daemon> d(new Daemon(std::move(cfg), std::move(runtimes), std::move(store)));
  d->audit_ = std::move(audit_log);
  TRY_VOID_CTX(d->images_.init(), "preparing images");
  {
    EgressProcess::Options eo;
    eo.binary = d->cfg_.gateway_binary;
    if (eo.binary.empty()) {
      std::error_code ec;
      eo.binary = fs::read_symlink("/proc/self/exe", ec).parent_path() / "space-egress";
    }
    eo.uid = d->cfg_.gateway_uid;
    eo.gid = d->cfg_.gateway_gid;
    // What the process must not see: spaced's state (keys, the database, every sandbox's
    // files) and the directory of its API socket.
    eo.hide = {d->cfg_.state_dir};
    if (auto sock_dir = d->cfg_.socket.parent_path();
        !sock_dir.empty() && sock_dir.has_relative_path() && sock_dir.parent_path() != "/")
      eo.hide.push_back(sock_dir);
    eo.gateway.resolve = d->cfg_.gateway_resolve;
    eo.gateway.upstream_ca_files = d->cfg_.upstream_ca_files;
    eo.gateway.audit = [p = d.get()](const std::string& id, const std::string& kind, json data) {
      p->audit(id, kind, std::move(data));
    };
    d->secrets_ = std::make_shared<egress::SecretStore>(d->cfg_.secrets);
    eo.secrets = d->secrets_;
    EgressPool::Options po;
    po.process = std::move(eo);
    po.sandboxes_per_process = d->cfg_.gateway_sandboxes_per_process;
    d->gateway_ = TRY_CTX(EgressPool::start(std::move(po)), "starting the egress gateway process");
  }
  // The snapshot key before reconcile: finishing an interrupted rollback opens snapshots.
  if (!d->cfg_.cluster.snapshot_key_file.empty()) {
    d->snap_stores_.set_key(TRY(load_cluster_key(d->cfg_.cluster.snapshot_key_file)));
  } else {
    d->snap_stores_.set_key(TRY_CTX(audit::load_or_create_key(d->cfg_.state_dir / "snapshot.key"),
                                    "opening the snapshot key"));
  }
  TRY_VOID_CTX(d->reconcile(), "reconciling sandboxes from the previous run");
  (void)d->store_->prune_destroyed(now_s() - d->cfg_.destroyed_retention_s);
  if (auto r = d->audit_->prune_destroyed(now_s() - d->cfg_.audit_retention_s); r && *r > 0)
    spdlog::info("audit log: removed {} events of sandboxes destroyed over the retention", *r);
  d->reconcile_snapshots();
  d->sweep_build_sandboxes();
  TRY_VOID(d->start_cluster());
  d->reaper_ = std::thread([p = d.get()] { p->reaper(); });
  d->snapshotter_ = std::thread([p = d.get()] { p->snapshot_loop(); });
  d->pools_.start([p = d.get()](const Template& t) { return p->make_pooled(t); },
                  [p = d.get()](Prepared& prepared, const std::string& why) {
                    p->discard_prepared(prepared, why);
                  });
  return d;
}

Daemon::~Daemon() { shutdown(); }

void Daemon::shutdown() {
  if (!stop_.stop()) return;
  if (reaper_.joinable()) reaper_.join();
  if (snapshotter_.joinable()) snapshotter_.join();
  // Pool sandboxes are nobody's state: removed, not left for the next spaced to reattach.
  pools_.stop();
  shutting_down_ = true;  // read by exec streams the closing channels cut (exec.cc)
  for (auto& sb : registry_.all()) close_agent(*sb);
  // Their streams ended with the channels; the detached processes run on in their sandboxes.
  pumps_.wait();
  if (gateway_) gateway_->stop();
  stop_cluster();
  Janitor::instance().drain();
  if (audit_) (void)audit_->flush();
}

void Daemon::audit(const std::string& id, const std::string& kind, json data) {
  if (!audit_) return;
  // An API request made with a token: name the token (its id, never its secret).
  if (const Caller* c = current_caller(); c && !c->token_id.empty() && data.is_object())
    data["token"] = c->token_id;
  if (auto r = audit_->append(id, kind, std::move(data)); !r)
    spdlog::error("audit log: {} event of sandbox {} not recorded: {}", kind, id,
                  r.error().message());
}

Result<std::vector<AuditEvent>> Daemon::audit_events(const std::string& id, int64_t after,
                                                     size_t limit) {
  TRY_VOID(audit_->flush(kAuditReadWait));
  auto events = TRY(audit_->read(id, after, limit));
  if (events.empty() && after == 0) {
    auto rec = TRY(store_->get_sandbox(id));
    if (!rec && !TRY(audit_->has_events(id)))
      return fail(Code::kNotFound, "no sandbox " + id + " (and no audit log for it)");
  }
  std::vector<AuditEvent> out;
  out.reserve(events.size());
  for (auto& e : events)
    out.push_back({.sandbox_id = std::move(e.sandbox_id),
                   .seq = e.seq,
                   .ts = e.ts,
                   .kind = std::move(e.kind),
                   // Invalid UTF-8 (a path, an argv) becomes U+FFFD, as json_text would.
                   .data_json = e.data.dump(-1, ' ', false, json::error_handler_t::replace),
                   .hash = std::move(e.hash)});
  return out;
}

Result<AuditVerdict> Daemon::audit_verify(const std::string& id) {
  TRY_VOID(audit_->flush(kAuditReadWait));
  if (!TRY(audit_->has_events(id)) && !TRY(store_->get_sandbox(id)))
    return fail(Code::kNotFound, "no sandbox " + id + " (and no audit log for it)");
  auto rep = TRY(audit_->verify(id));
  AuditVerdict v{.ok = rep.ok, .events = rep.events, .first_bad_seq = rep.first_bad_seq};
  if (!rep.problem.empty()) v.problem = rep.problem;
  return v;
}

Result<runtime::SandboxSpec> Daemon::spec_for(const SandboxRecord& rec) {
  runtime::SandboxSpec spec;
  spec.id = rec.id;
  spec.image = TRY(images_.resolve(rec.image));
  const json& s = rec.spec;
  spec.limits.memory_bytes = s.value("memory", cfg_.default_limits.memory_bytes);
  spec.limits.cpus = s.value("cpus", cfg_.default_limits.cpus);
  spec.limits.pids = s.value("pids", cfg_.default_limits.pids);
  spec.limits.disk_bytes = s.value("disk", cfg_.default_limits.disk_bytes);
  spec.dir = cfg_.state_dir / "sandboxes" / rec.id;
  spec.uid_base = rec.uid_base;
  if (auto it = cfg_.profile_vm.find(rec.profile); it != cfg_.profile_vm.end())
    spec.vm = it->second;
  if (cfg_.audit_execs) spec.exec_events = exec_sink(rec.id);
  return spec;
}

std::function<void(json)> Daemon::exec_sink(const std::string& id) {
  return [this, id](json ev) { audit(id, "proc.exec", std::move(ev)); };
}

Result<uint32_t> Daemon::allocate_uid_base() {
  // 32768 slots of 65536 ids from 2^30 up: far above any real user. Random so that several
  // daemons on one host (tests) rarely meet; the store guarantees uniqueness within a daemon.
  for (int attempt = 0; attempt < 64; ++attempt) {
    uint32_t r;
    if (getrandom(&r, sizeof r, 0) != sizeof r) return fail_sys("getrandom");
    uint32_t base = (1u << 30) + (r % 32768u) * runtime::SandboxSpec::kIdRange;
    if (!TRY(store_->uid_base_in_use(base))) return base;
  }
  return fail(Code::kResourceExhausted, "no free uid range for a new sandbox");
}

void Daemon::watch(const std::shared_ptr<Sandbox>& sb) {
  std::weak_ptr<Sandbox> weak = sb;
  sb->conn->set_on_lost([this, weak](const Error& e) {
    if (auto s = weak.lock(); s && !s->destroyed) {
      spdlog::warn("sandbox {}: agent lost: {}", s->rec.id, e.message());
      metrics_.agents_lost++;
      stop_.wake();  // the reaper destroys sandboxes whose agent is gone
    }
  });
}

void Daemon::move(SandboxRecord& rec, SandboxState to) {
  if (!can_move(rec.state, to)) {
    metrics_.state_errors++;
    spdlog::error("sandbox {}: moved from {} to {}, which the lifecycle does not allow (a bug)",
                  rec.id, to_string(rec.state), to_string(to));
  }
  rec.state = to;
}

void Daemon::record_destroyed(SandboxRecord& rec, const std::string& reason,
                              const char* audit_kind) {
  move(rec, SandboxState::kDestroyed);
  rec.destroyed_at = now_s();
  rec.reason = reason;
  store_->put_sandbox_eventually(rec);  // a full disk: written once there is room
  audit(rec.id, audit_kind, {{"reason", reason}});
}

void Daemon::start_relay(Sandbox& sb) {
  if (!sb.inst || !sb.conn || !sb.inst->egress_over_channel() || sb.inst->netns_fd() < 0) return;
  int ns = sb.inst->netns_fd();  // the instance outlives the relay (close_agent comes first)
  // The gateway holds the sandbox to max_connections and answers the extra ones (429, with why);
  // the slack lets it, and covers streams the relay is still closing when a client reconnects.
  sb.conn->set_agent_stream_limit(egress_profile(sb.rec.profile).max_connections +
                                  kAgentStreamSlack);
  // The guest's listeners mirror the gateway's TCP ones (docs/egress.md): the proxy, and the
  // transparent HTTP and TLS listeners; the port names which.
  auto dial = [ns](uint16_t port) -> Result<UniqueFd> {
    if (port != egress::kProxyPort && port != egress::kTransparentTlsPort &&
        port != egress::kTransparentHttpPort)
      return fail(Code::kPermissionDenied,
                  "guest port " + std::to_string(port) + " is not one of the gateway's listeners");
    return connect_in_netns(ns, "127.0.0.1", port);
  };
  sb.egress_relay = std::make_unique<EgressRelay>(*sb.conn, dial, sb.rec.id);
  sb.egress_relay->start();
  // And the guest's DNS queries, to the stub only (docs/agent-protocol.md, "DNS").
  sb.dns_relay = std::make_unique<DnsRelay>(*sb.conn, sb.rec.id);
  if (auto r = sb.dns_relay->start(
          [ns] { return connect_udp_in_netns(ns, egress::kDnsStubAddress, egress::kDnsStubPort); });
      !r)
    spdlog::warn("sandbox {}: names will not resolve in the guest: {}", sb.rec.id,
                 r.error().message());
}

Result<void> Daemon::open_agent(Sandbox& sb, bool resumed) {
  // A resumed machine's agent goes on with its old state: the ping makes it let that go.
  auto conn = AgentConn::open(sb.inst->channel_fd(), sb.rec.id, resumed, std::chrono::seconds(10));
  if (!conn) return fail(std::move(conn.error()).wrap("waiting for the sandbox's agent"));
  sb.conn = std::move(*conn);
  start_relay(sb);
  start_guest_exec_audit(sb);
  if (!resumed) return {};
  // Its hostname, clock and random state are those of the machine that was saved: the
  // sandbox's own, the host's time, and fresh entropy (no two restores of one snapshot share
  // their random numbers).
  // 64 random bytes in hex (random_id draws at most 32 at a time).
  std::string hex = random_id("", 32) + random_id("", 32);
  auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  TRY_VOID_CTX(sb.conn->request({{"op", "resync"},
                                 {"hostname", sb.rec.id},
                                 {"time_ns", static_cast<int64_t>(now)},
                                 {"seed", hex}}),
               "setting the restored machine's hostname, clock and entropy");
  return {};
}

void Daemon::close_agent(Sandbox& sb) {
  if (sb.egress_relay) sb.egress_relay->stop();
  if (sb.dns_relay) sb.dns_relay->stop();
  if (sb.conn) sb.conn->close();
  if (sb.guest_exec_audit) sb.guest_exec_audit->finish();  // its last drop count
}

Result<std::shared_ptr<Daemon::Sandbox>> Daemon::live(const std::string& id) {
  if (auto sb = registry_.find(id)) {
    if (!sb->destroyed) {
      sb->touch();
      return sb;
    }
    if (sb->replacing)
      return fail(Code::kUnavailable,
                  "sandbox " + id + " is being rolled back to a snapshot; try again in a moment");
  }
  auto rec = TRY(store_->get_sandbox(id));
  if (rec && rec->state == SandboxState::kDestroyed)
    return fail(Code::kConflict, "sandbox " + id + " was destroyed (" + rec->reason +
                                     "); create a new one with `space create`");
  return fail(Code::kNotFound,
              "unknown sandbox " + id.substr(0, 80) + "; `space ls` lists sandboxes");
}

Result<std::shared_ptr<Daemon::Sandbox>> Daemon::running(const std::string& id) {
  auto sb = TRY(live(id));
  if (sb->paused)
    return fail(Code::kConflict, "sandbox " + id + " is paused; `space resume " + id + "` first");
  if (!sb->conn->alive())
    return fail(Code::kUnavailable, "sandbox " + id + " lost its agent and is being removed");
  return sb;
}

Result<UniqueFd> Daemon::connect_port(const std::string& id, uint16_t port) {
  if (port == 0) return fail(Code::kInvalidArgument, "port must be 1-65535");
  auto sb = TRY(running(id));
  int netns = sb->inst->netns_fd();
  if (netns < 0 || sb->inst->egress_over_channel())
    return fail(Code::kUnimplemented,
                "ports are forwarded into linux sandboxes only; " + id + " is a " +
                    sb->rec.runtime + " microVM (reach its servers with space exec, e.g. curl)");
  auto fd = connect_in_netns(netns, "127.0.0.1", port, std::chrono::seconds(5));
  audit(id, "port.connect", {{"port", port}, {"ok", static_cast<bool>(fd)}});
  if (!fd) {
    if (fd.error().sys_errno() == ECONNREFUSED)
      return fail(Code::kUnavailable, "nothing listens on port " + std::to_string(port) +
                                          " in sandbox " + id +
                                          " (start a server there on 127.0.0.1 or 0.0.0.0 first)");
    return fail(std::move(fd.error())
                    .wrap("connecting to port " + std::to_string(port) + " in sandbox " + id));
  }
  return std::move(*fd);
}

Result<SandboxInfo> Daemon::set_timeout(const std::string& id, double timeout_s) {
  constexpr double kMaxExtension = 365 * 86400.0;  // its gateway CA lives at least a year
  if (!(timeout_s > 0))
    return fail(Code::kInvalidArgument, "\"timeout\" must be positive, e.g. \"30m\"");
  const double limit =
      cfg_.max_timeout_s > 0 ? std::min(cfg_.max_timeout_s, kMaxExtension) : kMaxExtension;
  if (timeout_s > limit)
    return fail(Code::kInvalidArgument,
                "timeout " + format_duration(timeout_s) + " is more than a sandbox may live (" +
                    format_duration(limit) +
                    (cfg_.max_timeout_s > 0 ? ", defaults.max_timeout in the config)" : ")"));
  auto sb = TRY(live(id));
  std::lock_guard lock(sb->mu);
  if (sb->destroyed) return fail(Code::kConflict, "sandbox " + id + " is being destroyed");
  registry_.set_expiry(*sb, now_s() + timeout_s);
  TRY_VOID(store_->put_sandbox(sb->rec));
  audit(id, "sandbox.timeout",
        {{"timeout_s", timeout_s}, {"expires_at", rfc3339(*sb->rec.expires_at)}});
  return info(sb->rec, sb.get());
}

Result<std::vector<SandboxInfo>> Daemon::list() {
  std::vector<SandboxInfo> out;
  for (auto& sb : registry_.all()) {
    std::lock_guard lock(sb->mu);
    if (!sb->destroyed) out.push_back(info(sb->rec, sb.get()));
  }
  return out;
}

Result<SandboxInfo> Daemon::inspect(const std::string& id) {
  if (auto sb = registry_.find(id)) {
    if (!sb->destroyed) sb->touch();
    std::lock_guard lock(sb->mu);
    return info(sb->rec, sb.get());
  }
  auto rec = TRY(store_->get_sandbox(id));
  if (!rec || rec->state == SandboxState::kPooled)  // a warm pool's sandbox is nobody's yet
    return fail(Code::kNotFound,
                "unknown sandbox " + id.substr(0, 80) + "; `space ls` lists sandboxes");
  return info(*rec, nullptr);
}

SandboxInfo Daemon::info(const SandboxRecord& rec, const Sandbox* sb, bool usage) {
  SandboxInfo i;
  i.id = rec.id;
  i.state = rec.state;
  i.runtime = rec.runtime;
  i.image = rec.image;
  i.profile = rec.profile;
  i.created_at = rec.created_at;
  i.expires_at = rec.expires_at;
  i.limits = {.memory = rec.spec.value("memory", uint64_t{0}),
              .cpus = rec.spec.value("cpus", 0.0),
              .pids = rec.spec.value("pids", 0),
              .disk = rec.spec.value("disk", uint64_t{0})};
  i.workdir = rec.spec.value("workdir", std::string("/"));
  i.uid_base = rec.uid_base;
  for (auto& kv : rec.spec.value("env", std::vector<std::string>{})) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) i.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  i.egress.allow = rec.spec.value("allow", std::vector<std::string>{});
  i.egress.secrets = rec.spec.value("secrets", std::vector<std::string>{});
  if (auto m = rec.spec.find("metadata"); m != rec.spec.end() && m->is_object())
    for (auto& [k, v] : m->items())
      if (v.is_string()) i.metadata[k] = v.get<std::string>();
  i.pause_on_timeout = rec.spec.value("on_timeout", std::string()) == "pause";
  if (rec.destroyed_at) {
    i.destroyed_at = rec.destroyed_at;
    i.reason = rec.reason;
  }
  if (sb && sb->inst && !sb->destroyed) {
    i.host_pid = sb->inst->agent_pid();
    if (json d = sb->inst->details(); !d.is_null())
      i.vm_json = d.dump(-1, ' ', false, json::error_handler_t::replace);
    if (usage)
      if (auto u = sb->inst->usage(); u) i.usage = *u;
  }
  return i;
}

Result<void> Daemon::destroy_sandbox(const std::shared_ptr<Sandbox>& sb,
                                     const std::string& reason) {
  std::lock_guard lock(sb->mu);
  if (sb->destroyed.exchange(true)) return {};
  sb->set_doom(reason);
  // The intent first: a spaced killed from here on finishes the teardown at its next start.
  // Where it cannot be written (a full disk) the teardown goes on all the same: a restart then
  // finds the agent gone and cleans up, or finds it alive and the sandbox still listed.
  move(sb->rec, SandboxState::kDestroying);
  sb->rec.reason = reason;
  if (auto w = store_->put_sandbox(sb->rec); !w)
    spdlog::warn("sandbox {}: recording its teardown: {}", sb->rec.id, w.error().message());
  failpoint("destroy.after_intent");
  stop_egress(sb->rec.id);
  close_agent(*sb);
  Result<void> r = sb->inst ? sb->inst->destroy() : Result<void>{};
  if (!r) {
    // Keep it registered so a later destroy (or the reaper) retries; nothing is forgotten. Its
    // record stays destroying: a restart finishes the teardown.
    sb->destroyed = false;
    spdlog::error("destroying sandbox {}: {}", sb->rec.id, r.error().message());
    return fail(std::move(r.error()).wrap("destroying sandbox " + sb->rec.id));
  }
  failpoint("destroy.after_teardown");
  // Its state directory (the CA, empty mount points) goes in the background; a spaced that
  // stops first removes it at its next start (reconcile).
  Janitor::instance().post([dir = cfg_.state_dir / "sandboxes" / sb->rec.id] {
    std::error_code ec;
    fs::remove_all(dir, ec);
  });
  record_destroyed(sb->rec, reason);
  registry_.remove(sb->rec.id, sb.get());
  metrics_.destroys++;
  spdlog::info("destroyed sandbox {} ({})", sb->rec.id, reason);
  return {};
}

Result<void> Daemon::destroy(const std::string& id, bool force, bool wait) {
  // A rollback may replace the sandbox object while we wait for its lock: then destroy the
  // new one.
  for (int attempt = 0;; ++attempt) {
    auto sb = TRY(live(id));
    if (int n = sb->open_execs.load(); !force && n > 0)
      return fail(Code::kConflict, "sandbox " + id + " has " + std::to_string(n) + " command" +
                                       (n > 1 ? "s" : "") +
                                       " running with a client attached; `space rm --force " + id +
                                       "` (DELETE ?force=true) kills them");
    // Background teardowns are bounded: past kMaxTeardowns waiting, a destroy waits for its
    // own, so that a burst of deletes cannot pile up dead sandboxes faster than they go.
    if (wait || teardowns_pending_.load() >= kMaxTeardowns)
      TRY_VOID(destroy_sandbox(sb, "removed by the API"));
    else
      TRY_VOID(destroy_in_background(sb, "removed by the API"));
    if (!sb->replaced || attempt >= 3) return {};
  }
}

Result<void> Daemon::destroy_in_background(const std::shared_ptr<Sandbox>& sb,
                                           const std::string& reason) {
  {
    std::lock_guard lock(sb->mu);
    if (sb->destroyed.exchange(true)) return {};
    sb->set_doom(reason);
    // Unreachable from here on: no egress, no API operation (live() no longer finds it), and a
    // record that a restarted spaced tears down rather than reattaches.
    stop_egress(sb->rec.id);
    const SandboxState was = sb->rec.state;
    move(sb->rec, SandboxState::kDestroying);
    sb->rec.reason = reason;
    if (auto r = store_->put_sandbox(sb->rec); !r) {
      sb->rec.state = was;  // not saved: nothing moved
      sb->destroyed = false;
      return fail(std::move(r.error()).wrap("destroying sandbox " + sb->rec.id));
    }
  }
  registry_.remove(sb->rec.id, sb.get());
  teardowns_pending_++;
  Janitor::instance().post([this, sb, reason] { finish_teardown(sb, reason); });
  return {};
}

void Daemon::finish_teardown(const std::shared_ptr<Sandbox>& sb, const std::string& reason) {
  std::lock_guard lock(sb->mu);
  close_agent(*sb);
  Result<void> r = sb->inst ? sb->inst->destroy() : Result<void>{};
  teardowns_pending_--;
  if (r) failpoint("destroy.after_teardown");
  if (!r) {
    // The record stays "destroying": the next spaced's reconcile tears down what is left.
    metrics_.teardown_failures++;
    spdlog::error("destroying sandbox {} in the background: {} (spaced's next start retries)",
                  sb->rec.id, r.error().message());
    return;
  }
  std::error_code ec;
  fs::remove_all(cfg_.state_dir / "sandboxes" / sb->rec.id, ec);
  record_destroyed(sb->rec, reason);
  metrics_.destroys++;
  spdlog::info("destroyed sandbox {} ({}; in the background)", sb->rec.id, reason);
}

Result<void> Daemon::pause(const std::string& id) {
  auto sb = TRY(live(id));
  std::lock_guard lock(sb->mu);
  if (sb->destroyed) return fail(Code::kConflict, "sandbox " + id + " was destroyed");
  if (sb->paused) return {};
  return pause_locked(*sb, json::object());
}

Result<void> Daemon::pause_locked(Sandbox& sb, const nlohmann::json& audit_data) {
  TRY_VOID_CTX(sb.inst->pause(), "pausing sandbox " + sb.rec.id);
  failpoint("pause.after_freeze");  // reconcile thaws it: the record says running
  sb.paused = true;
  move(sb.rec, SandboxState::kPaused);
  audit(sb.rec.id, "sandbox.pause", audit_data);
  return store_->put_sandbox(sb.rec);
}

Result<void> Daemon::resume(const std::string& id) {
  auto sb = TRY(live(id));
  std::lock_guard lock(sb->mu);
  if (sb->destroyed) return fail(Code::kConflict, "sandbox " + id + " was destroyed");
  if (!sb->paused) return {};
  TRY_VOID_CTX(sb->inst->resume(), "resuming sandbox " + id);
  failpoint("resume.after_thaw");  // reconcile pauses it again: the record says paused
  sb->paused = false;
  move(sb->rec, SandboxState::kRunning);
  audit(id, "sandbox.resume", json::object());
  return store_->put_sandbox(sb->rec);
}

void Daemon::reaper() {
  auto next_checkpoint = std::chrono::steady_clock::now();
  while (!stop_.wait_for(std::chrono::milliseconds(200))) {
    if (auto now = std::chrono::steady_clock::now(); now >= next_checkpoint) {
      next_checkpoint = now + std::chrono::seconds(1);
      if (auto r = store_->checkpoint(); !r)
        spdlog::warn("database checkpoint: {}", r.error().message());
      store_->retry_unsaved();
    }
    std::vector<std::pair<std::shared_ptr<Sandbox>, std::string>> doomed;
    std::vector<std::shared_ptr<Sandbox>> expired;  // lifetime over: end_lifetime decides
    double now = now_s();
    registry_.sweep([&](const std::shared_ptr<Sandbox>& sb) {
      if (sb->destroyed) return;
      if (sb->rec.expires_at && *sb->rec.expires_at <= now)
        expired.push_back(sb);
      else if (sb->idle_timeout_s > 0 && sb->open_execs.load() == 0 &&
               now - sb->last_active.load() > sb->idle_timeout_s)
        doomed.emplace_back(sb, "idle timeout expired: no client used it for " +
                                    format_duration(sb->idle_timeout_s));
      else if (sb->conn && !sb->conn->alive())
        doomed.emplace_back(sb, "the sandbox's agent exited");
    });
    for (auto& sb : expired) end_lifetime(sb);
    for (auto& [sb, why] : doomed) {
      if (why.starts_with("idle")) metrics_.timeouts++;
      (void)destroy_sandbox(sb, why);
    }
  }
}

void Daemon::end_lifetime(const std::shared_ptr<Sandbox>& sb) {
  std::string why = "lifetime timeout expired";
  {
    // Under the sandbox's lock: its spec is not the sweep's to read (it changes under this lock).
    std::lock_guard lock(sb->mu);
    if (sb->destroyed) return;
    if (sb->rec.spec.value("on_timeout", std::string()) == "pause") {
      // E2B's autoPause: paused instead of destroyed, and kept so for at most kPausedKeepS (a
      // paused sandbox still holds its memory and disk); one already paused when its lifetime
      // ends (that week is over, or it was paused by hand) has nothing left to keep it for.
      if (sb->paused) {
        why = "lifetime timeout expired while paused";
      } else {
        // The new end goes into the record the pause writes: cut between the freeze and that
        // write, the record still says running with its lifetime over, reconcile thaws it and
        // the next sweep pauses it again.
        const auto ended = sb->rec.expires_at;
        registry_.set_expiry(*sb, now_s() + kPausedKeepS);
        auto paused =
            pause_locked(*sb, {{"reason", "lifetime timeout expired (on_timeout pause)"}});
        if (paused) return;
        if (sb->paused) {  // frozen, its record not written: the store retries nothing here
          spdlog::warn("sandbox {}: recording its pause: {}", sb->rec.id, paused.error().message());
          return;
        }
        // It cannot be kept: its lifetime is over all the same.
        registry_.set_expiry(*sb, *ended);
        spdlog::warn("sandbox {}: pausing it at the end of its lifetime: {}; destroying it",
                     sb->rec.id, paused.error().message());
        why = "lifetime timeout expired (pausing it failed)";
      }
    }
  }
  metrics_.timeouts++;
  (void)destroy_sandbox(sb, why);
}

namespace {

ImageInfo image_info(const ImageRecord& rec) {
  ImageInfo i{.name = rec.name,
              .kind = rec.kind,
              .created_at = rec.created_at,
              .size_bytes = rec.size_bytes,
              .files = rec.files,
              .format = rec.format,
              .digest = rec.digest};
  if (auto c = image::ImageConfig::from_json(rec.config); c) {
    i.config = {.env = std::move(c->env),
                .working_dir = std::move(c->working_dir),
                .user = std::move(c->user),
                .entrypoint = std::move(c->entrypoint),
                .cmd = std::move(c->cmd),
                .labels = std::move(c->labels)};
  }
  return i;
}

}  // namespace

Result<ImageInfo> Daemon::import_image(const std::string& name, const ChunkSource& source) {
  return image_info(TRY(images_.import(name, source)));
}

Result<std::vector<ImageInfo>> Daemon::list_images() {
  std::vector<ImageInfo> out;
  for (auto& rec : TRY(images_.list())) out.push_back(image_info(rec));
  return out;
}

Result<void> Daemon::remove_image(const std::string& name) {
  if (auto profile = pools_.using_image(name))
    return fail(Code::kConflict, "image \"" + name + "\" is used by the warm pool of profile " +
                                     *profile + "; remove that pool from spaced's config first");
  return images_.remove(name);
}

Result<VmDiskInfo> Daemon::build_image_vm(const std::string& name,
                                          const std::function<void(const std::string&)>& progress) {
  auto disk = TRY(images_.build_vm(name, cfg_.agent, progress));
  return VmDiskInfo{.name = name,
                    .path = disk.path.string(),
                    .size_bytes = disk.size_bytes,
                    .cached = disk.cached};
}

}  // namespace space::daemon
