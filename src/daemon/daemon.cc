// Sandbox lifecycle: create, destroy, pause/resume, inspect, the lifetime reaper, and
// reconciliation of what a previous spaced left behind. Exec lives in exec.cc, file operations
// in files.cc.
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
#include "common/hex.h"
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

std::string random_id(std::string_view prefix, size_t bytes) {
  unsigned char b[32];
  bytes = std::min(bytes, sizeof b);
  if (getrandom(b, bytes, 0) != static_cast<ssize_t>(bytes)) abort();  // cannot happen
  return std::string(prefix) + to_hex(b, bytes);
}

namespace {

// Limits no sandbox on this host could ever use are a caller's mistake, not a quota.
Result<void> check_fits_host(const runtime::Limits& l) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (pages > 0 && page > 0) {
    const uint64_t total = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    if (l.memory_bytes > total)
      return fail(Code::kInvalidArgument,
                  "memory " + format_size(l.memory_bytes) + " is more than this host has (" +
                      format_size(total) + "); ask for at most that, e.g. \"memory\": \"" +
                      format_size(total / 2 / (1 << 20) * (1 << 20)) + "\"");
  }
  if (cpus > 0 && l.cpus > static_cast<double>(cpus))
    return fail(Code::kInvalidArgument,
                fmt::format("cpus {} is more than this host's {} online CPUs; ask for at most {}",
                            l.cpus, cpus, cpus));
  return {};
}

// Whether `path` is a directory in an image's rootfs, reached without any symlink.
bool image_has_dir(const fs::path& rootfs, const std::string& path) {
  UniqueFd root(::open(rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return false;
  std::string rel = path;
  while (!rel.empty() && rel.front() == '/') rel.erase(0, 1);
  if (rel.empty()) return true;
  UniqueFd fd(sys_openat2(root.get(), rel.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                          RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS));
  return fd.valid();
}

json limits_json(const runtime::Limits& l) {
  return {{"memory", l.memory_bytes}, {"cpus", l.cpus}, {"pids", l.pids}, {"disk", l.disk_bytes}};
}

}  // namespace

Daemon::Daemon(Config cfg, Runtimes runtimes, std::unique_ptr<Store> store)
    : cfg_(std::move(cfg)),
      runtimes_(std::move(runtimes)),
      store_(std::move(store)),
      images_(cfg_.state_dir / "images", *store_),
      started_at_(now_s()) {}

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
  TRY_VOID_CTX(d->reconcile(), "reconciling sandboxes from the previous run");
  (void)d->store_->prune_destroyed(now_s() - d->cfg_.destroyed_retention_s);
  if (auto r = d->audit_->prune_destroyed(now_s() - d->cfg_.audit_retention_s); r && *r > 0)
    spdlog::info("audit log: removed {} events of sandboxes destroyed over the retention", *r);
  if (!d->cfg_.cluster.snapshot_key_file.empty()) {
    d->snap_key_ = TRY(load_cluster_key(d->cfg_.cluster.snapshot_key_file));
  } else {
    d->snap_key_ = TRY_CTX(audit::load_or_create_key(d->cfg_.state_dir / "snapshot.key"),
                           "opening the snapshot key");
  }
  d->reconcile_snapshots();
  TRY_VOID(d->start_cluster());
  d->reaper_ = std::thread([p = d.get()] { p->reaper(); });
  d->snapshotter_ = std::thread([p = d.get()] { p->snapshot_loop(); });
  for (auto& pc : d->cfg_.pools) {
    Pool pool;
    pool.cfg = pc;
    pool.t = Template{pc.runtime, pc.image, pc.profile, pc.limits, pc.workdir};
    d->pools_.push_back(std::move(pool));
  }
  if (!d->pools_.empty()) d->pool_filler_ = std::thread([p = d.get()] { p->pool_loop(); });
  return d;
}

Daemon::~Daemon() { shutdown(); }

void Daemon::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  if (snapshotter_.joinable()) snapshotter_.join();
  // Pool sandboxes are nobody's state: removed, not left for the next spaced to reattach.
  drain_pools();
  std::map<std::string, std::shared_ptr<Sandbox>> all;
  {
    std::lock_guard lock(mu_);
    all = sandboxes_;
  }
  for (auto& [id, sb] : all) close_agent(*sb);
  {
    // Their streams ended with the channels; the detached processes run on in their sandboxes.
    std::unique_lock lock(pumps_mu_);
    pumps_cv_.wait(lock, [&] { return pumps_ == 0; });
  }
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

Result<json> Daemon::audit_events(const std::string& id, int64_t after, size_t limit) {
  TRY_VOID(audit_->flush());
  auto events = TRY(audit_->read(id, after, limit));
  if (events.empty() && after == 0) {
    auto rec = TRY(store_->get_sandbox(id));
    if (!rec && !TRY(audit_->has_events(id)))
      return fail(Code::kNotFound, "no sandbox " + id + " (and no audit log for it)");
  }
  json out = json::array();
  for (auto& e : events) {
    json j = e.to_json();
    j["time"] = rfc3339(e.ts);
    out.push_back(std::move(j));
  }
  return out;
}

Result<json> Daemon::audit_verify(const std::string& id) {
  TRY_VOID(audit_->flush());
  if (!TRY(audit_->has_events(id)) && !TRY(store_->get_sandbox(id)))
    return fail(Code::kNotFound, "no sandbox " + id + " (and no audit log for it)");
  auto rep = TRY(audit_->verify(id));
  json j = {{"ok", rep.ok}, {"events", rep.events}};
  j["first_bad_seq"] = rep.first_bad_seq ? json(*rep.first_bad_seq) : json(nullptr);
  if (!rep.problem.empty()) j["problem"] = rep.problem;
  return j;
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
      reaper_cv_.notify_all();  // the reaper destroys sandboxes whose agent is gone
    }
  });
}

Result<SandboxInfo> Daemon::create(const CreateRequest& req) {
  return create_sandbox(req, {}, json::object());
}

bool Daemon::Template::same_kind(const Template& o) const {
  return runtime == o.runtime && image == o.image && profile == o.profile &&
         limits.memory_bytes == o.limits.memory_bytes && limits.cpus == o.limits.cpus &&
         limits.pids == o.limits.pids && limits.disk_bytes == o.limits.disk_bytes &&
         limits.disk_inodes == o.limits.disk_inodes;
}

void Daemon::record_destroyed(SandboxRecord& rec, const std::string& reason,
                              const char* audit_kind) {
  rec.state = "destroyed";
  rec.destroyed_at = now_s();
  rec.reason = reason;
  (void)store_->put_sandbox(rec);
  audit(rec.id, audit_kind, {{"reason", reason}});
}

Error Daemon::abandon_create(Sandbox& sb, Error e) {
  SandboxRecord& rec = sb.rec;
  metrics_.create_failures++;
  stop_egress(rec.id);
  close_agent(sb);
  if (sb.inst) (void)sb.inst->destroy();
  std::error_code ec;
  fs::remove_all(cfg_.state_dir / "sandboxes" / rec.id, ec);
  record_destroyed(rec, "creation failed: " + e.message(), "sandbox.create_failed");
  spdlog::warn("creating sandbox {} failed: {}", rec.id, e.message());
  return std::move(e).wrap("creating sandbox " + rec.id);
}

Result<Daemon::Prepared> Daemon::prepare_sandbox(
    const Template& t, runtime::Runtime* rt,
    const std::function<Result<void>(int, uint32_t)>& populate, std::chrono::seconds ca_life,
    const std::string& state, StepTimes& times) {
  Prepared p;
  p.sb = std::make_shared<Sandbox>();
  Sandbox& sb = *p.sb;
  sb.rt = rt;
  SandboxRecord& rec = sb.rec;
  rec.id = node_id(random_id("sb_", 6));
  rec.profile = t.profile;
  rec.runtime = t.runtime;
  rec.image = t.image;
  rec.state = state;
  rec.uid_base = TRY(allocate_uid_base());
  rec.created_at = now_s();
  rec.spec = limits_json(t.limits);
  rec.spec["workdir"] = t.workdir;

  runtime::SandboxSpec spec;
  spec.id = rec.id;
  spec.image = TRY(images_.resolve(t.image));
  spec.limits = t.limits;
  if (auto it = cfg_.profile_vm.find(t.profile); it != cfg_.profile_vm.end()) spec.vm = it->second;
  spec.dir = cfg_.state_dir / "sandboxes" / rec.id;
  spec.uid_base = rec.uid_base;
  if (cfg_.audit_execs) spec.exec_events = exec_sink(rec.id);

  std::error_code ec;
  fs::create_directory(spec.dir, ec);
  if (ec) return fail(Code::kInternal, "creating " + spec.dir.string() + ": " + ec.message());
  ::chmod(spec.dir.c_str(), 0700);
  auto undo_dir = [&] {
    std::error_code e;
    fs::remove_all(spec.dir, e);
  };
  if (auto r = store_->put_sandbox(rec); !r) {
    undo_dir();
    return fail(std::move(r.error()));
  }
  times.mark("record");
  auto failed = [&](Error e) -> Result<Prepared> { return fail(abandon_create(sb, std::move(e))); };

  // The sandbox's own CA for the gateway's TLS interception, kept beside its state so that a
  // restarted spaced serves it again.
  auto ca = egress::SandboxCa::create(rec.id, ca_life);
  if (!ca) return failed(std::move(ca.error()));
  p.ca = std::move(*ca);
  if (auto r = p.ca->save(spec.dir / "egress"); !r) return failed(std::move(r.error()));
  times.mark("ca");

  // Its trust store (the host's CAs, sandbox_ca_files, its CA) goes straight into the writable
  // layer before anything runs there, after a snapshot's files if it is restored from one.
  std::string ca_pem;
  std::shared_ptr<const Daemon::TrustBase> trust;
  if (rt->has_writable_layer()) {
    auto base = trust_base();
    if (!base) return failed(std::move(base.error()));
    trust = std::move(*base);
    ca_pem = p.ca->cert_pem();
    spec.populate_upper = [&, base_uid = rec.uid_base](int fd) -> Result<void> {
      if (populate) TRY_VOID(populate(fd, base_uid));
      p.ca_installed = TRY_CTX(install_ca_files(fd, base_uid, spec.image.rootfs, ca_pem, *trust),
                               "installing the gateway CA");
      return {};
    };
  } else if (populate && rt->keeps_machine_state()) {
    // A VM's snapshot is its whole machine: the files it needs go into a directory of the
    // runtime's (no uid shift: they are the daemon's, and QEMU gets them as fds).
    spec.restore_machine = [&, base_uid = rec.uid_base](int fd) { return populate(fd, base_uid); };
  } else if (populate) {
    spec.populate_upper = [&, base_uid = rec.uid_base](int fd) { return populate(fd, base_uid); };
  }
  times.mark("trust store");

  spec.times = &times;
  auto inst = rt->create(spec);
  const bool resumed = static_cast<bool>(spec.restore_machine);
  spec.populate_upper = nullptr;  // used once; it may hold the snapshot's manifest
  spec.restore_machine = nullptr;
  spec.times = nullptr;
  if (!inst) return failed(std::move(inst.error()));
  sb.inst = std::move(*inst);
  if (auto r = open_agent(sb, resumed || sb.inst->resumed_from_template()); !r)
    return failed(std::move(r.error()));
  sb.spec = spec;
  times.mark("agent hello");
  // The default working directory must exist (imported images may lack /root); where the
  // image has it and nothing was restored over it, there is nothing to ask the agent.
  if (!t.workdir.empty() && !populate && image_has_dir(spec.image.rootfs, t.workdir)) {
    p.workdir = t.workdir;
  } else if (!t.workdir.empty()) {
    auto r =
        sb.conn->request({{"op", "mkdir"}, {"path", t.workdir}, {"mode", 0755}, {"parents", true}});
    if (!r && r.error().code() != Code::kAlreadyExists)
      return failed(std::move(r.error()).wrap("creating workdir " + t.workdir));
    p.workdir = t.workdir;
  }
  times.mark("workdir");
  if (int netns = sb.inst->netns_fd(); netns >= 0) {
    auto bound = egress::Gateway::bind(netns);
    if (!bound)
      return failed(std::move(bound.error())
                        .wrap("binding the egress gateway's listeners in its network namespace"));
    p.listeners = std::move(*bound);
  }
  times.mark("gateway bind");
  if (p.ca && !p.ca_installed && sb.inst->egress_over_channel()) {
    // A VM has no writable layer on the host: its agent writes the CA files now, before a pool
    // keeps it, so that a create from the pool does not wait for them.
    if (auto r = install_ca_via_agent(sb, *p.ca); !r) return failed(std::move(r.error()));
    p.ca_installed = true;
    // What `space diff` counts as part of the creation, asked of the agent now too.
    p.installed = installed_stats(sb, kInstalledFiles);
    times.mark("trust store via agent");
  }
  rec.runtime_state = sb.inst->persist();
  if (state != "creating") {
    // Recorded with its runtime state, so that a restarted spaced can remove it.
    if (auto r = store_->put_sandbox(rec); !r) return failed(std::move(r.error()));
  }
  return p;
}

void Daemon::discard_prepared(Prepared& p, const std::string& why) {
  if (!p.sb) return;
  Sandbox& sb = *p.sb;
  sb.destroyed = true;
  close_agent(sb);
  p.listeners = {};
  if (sb.inst) {
    if (auto r = sb.inst->destroy(); !r) {
      spdlog::error("removing unused sandbox {}: {}", sb.rec.id, r.error().message());
      return;  // its record stays "pooled": the next start cleans it up
    }
  }
  std::error_code ec;
  fs::remove_all(cfg_.state_dir / "sandboxes" / sb.rec.id, ec);
  record_destroyed(sb.rec, why);
  p.sb.reset();
}

void Daemon::start_relay(Sandbox& sb) {
  if (!sb.inst || !sb.conn || !sb.inst->egress_over_channel() || sb.inst->netns_fd() < 0) return;
  int ns = sb.inst->netns_fd();  // the instance outlives the relay (close_agent comes first)
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

Result<SandboxInfo> Daemon::create_sandbox(const CreateRequest& req_in,
                                           std::function<Result<void>(int, uint32_t)> populate,
                                           json audit_extra) {
  auto t0 = std::chrono::steady_clock::now();
  StepTimes times;
  CreateRequest req = req_in;
  if (!req.limits_given[0]) req.limits.memory_bytes = cfg_.default_limits.memory_bytes;
  if (!req.limits_given[1]) req.limits.cpus = cfg_.default_limits.cpus;
  if (!req.limits_given[2]) req.limits.pids = cfg_.default_limits.pids;
  if (!req.limits_given[3]) req.limits.disk_bytes = cfg_.default_limits.disk_bytes;
  TRY_VOID(check_fits_host(req.limits));
  if (!req.timeout_s && cfg_.default_timeout_s > 0) req.timeout_s = cfg_.default_timeout_s;
  if (cfg_.max_timeout_s > 0) {
    if (!req.timeout_s) {
      req.timeout_s = cfg_.max_timeout_s;
    } else if (*req.timeout_s > cfg_.max_timeout_s) {
      return fail(Code::kInvalidArgument,
                  "timeout " + format_duration(*req.timeout_s) + " is more than this daemon's " +
                      "maximum lifetime (" + format_duration(cfg_.max_timeout_s) +
                      ", defaults.max_timeout in its config)");
    }
  }
  auto rt_it = runtimes_.find(req.runtime);
  if (rt_it == runtimes_.end())
    return fail(
        Code::kUnavailable, "runtime \"" + req.runtime +
                                "\" is not available in this spaced; available: " +
                                [&] {
                                  std::string s;
                                  for (auto& [n, r] : runtimes_) s += (s.empty() ? "" : ", ") + n;
                                  return s;
                                }() +
                                " (`space doctor` explains what the host supports)");
  if (!cfg_.profiles.count(req.profile))
    return fail(
        Code::kInvalidArgument,
        "unknown profile \"" + req.profile.substr(0, 64) + "\"; configured profiles: " + [&] {
          std::string s;
          for (auto& p : cfg_.profiles) s += (s.empty() ? "" : ", ") + p;
          return s;
        }());
  {
    std::lock_guard lock(mu_);
    if (stopping_) return fail(Code::kUnavailable, "spaced is shutting down");
    if (draining_)
      return fail(Code::kUnavailable,
                  "node " + (cfg_.node.name.empty() ? std::string("(this host)") : cfg_.node.name) +
                      " is draining: it takes no new sandboxes; create it through a gateway "
                      "(another node) or on another host");
    if (sandboxes_.size() >= cfg_.max_sandboxes)
      return fail(Code::kResourceExhausted,
                  "this spaced already runs " + std::to_string(sandboxes_.size()) +
                      " sandboxes (max_sandboxes); remove some with `space rm`");
  }

  // Everything only this request decides is checked before a sandbox is taken or made.
  SandboxRecord personal;
  personal.spec = limits_json(req.limits);
  personal.spec["env"] = req.env;
  personal.spec["workdir"] = req.workdir;
  personal.spec["allow"] = req.allow;
  personal.spec["secrets"] = req.secrets;
  personal.spec["user_env"] = req.env;  // env as asked; "env" gains the gateway's variables
  {
    double every = req.snapshot_every_s.value_or(-1);
    if (every < 0) {
      auto it = cfg_.profile_snapshots.find(req.profile);
      every = it == cfg_.profile_snapshots.end() ? 0 : it->second.every_s;
    }
    if (every > 0 && every < 1)
      return fail(Code::kInvalidArgument, "snapshot_every: at least 1s (or 0 for none)");
    personal.spec["snapshot_every"] = every;
  }
  auto egress_plan = TRY(plan_egress(personal, req));
  times.mark("request");

  Template t{req.runtime, req.image, req.profile, req.limits, req.workdir};
  std::optional<Prepared> prepared;
  if (!populate) prepared = claim_pooled(t);
  const bool pooled = prepared.has_value();
  if (pooled) {
    times.mark("pool claim");
  } else {
    // The CA lives as long as the sandbox may: its lifetime, or a year.
    auto life = std::chrono::seconds(365 * 86400);
    if (req.timeout_s)
      life = std::max(life, std::chrono::seconds(static_cast<int64_t>(*req.timeout_s) + 86400));
    prepared = TRY(prepare_sandbox(t, rt_it->second.get(), populate, life, "creating", times));
  }
  std::shared_ptr<Sandbox> sb = prepared->sb;
  SandboxRecord& rec = sb->rec;

  // Personalize it.
  rec.created_at = now_s();
  if (req.timeout_s) rec.expires_at = rec.created_at + *req.timeout_s;
  if (req.idle_timeout_s) {
    sb->idle_timeout_s = *req.idle_timeout_s;
    rec.spec["idle_timeout"] = *req.idle_timeout_s;
  }
  sb->touch();
  for (auto& [k, v] : personal.spec.items()) rec.spec[k] = v;
  egress_plan.id = rec.id;
  egress_plan.ca = prepared->ca;
  auto failed = [&](Error e) -> Result<SandboxInfo> {
    prepared->listeners = {};
    return fail(abandon_create(*sb, std::move(e)));
  };
  if (req.workdir != prepared->workdir && !req.workdir.empty()) {
    auto r = sb->conn->request(
        {{"op", "mkdir"}, {"path", req.workdir}, {"mode", 0755}, {"parents", true}});
    if (!r && r.error().code() != Code::kAlreadyExists)
      return failed(std::move(r.error()).wrap("creating workdir " + req.workdir));
    times.mark("workdir");
  }
  if (sb->inst->netns_fd() >= 0) {
    if (!prepared->ca_installed) {
      // Its /etc is not a plain directory of the writable layer: the agent writes the files.
      if (auto r = install_ca_via_agent(*sb, *prepared->ca); !r)
        return failed(std::move(r.error()));
      times.mark("trust store via agent");
    }
    // `space diff` shows what changed since creation; these files are part of creation.
    rec.spec["installed"] = prepared->installed.is_object() ? prepared->installed
                                                            : installed_stats(*sb, kInstalledFiles);
    auto r = prepared->listeners.empty()
                 ? gateway_->attach(std::move(egress_plan), sb->inst->netns_fd())
                 : gateway_->attach(std::move(egress_plan), std::move(prepared->listeners));
    if (!r) return failed(std::move(r.error()).wrap("setting up egress"));
    times.mark("gateway attach");
  }
  rec.state = "running";
  if (auto r = store_->put_sandbox(rec); !r) return failed(std::move(r.error()));
  times.mark("record running");
  json create_event = {{"runtime", rec.runtime},
                       {"image", rec.image},
                       {"profile", rec.profile},
                       {"limits", limits_json(req.limits)},
                       {"workdir", req.workdir},
                       {"env_names",
                        [&] {
                          json names = json::array();
                          for (auto& kv : req.env) names.push_back(kv.substr(0, kv.find('=')));
                          return names;
                        }()},
                       {"allow", req.allow},
                       {"secrets", req.secrets},
                       {"agent_pid", sb->inst->agent_pid()}};
  if (pooled) create_event["warm_pool"] = true;
  create_event.update(audit_extra);
  audit(rec.id, "sandbox.create", std::move(create_event));
  schedule_snapshots(*sb);
  {
    std::lock_guard lock(mu_);
    sandboxes_[rec.id] = sb;
  }
  watch(sb);
  times.mark("audit and register");
  auto ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  metrics_.creates++;
  if (pooled) {
    pool_cv_.notify_all();  // its replacement
    metrics_.creates_pooled++;
    metrics_.pooled_ns_sum += ns;
  } else {
    metrics_.create_ns_sum += ns;
    metrics_.add_steps(times);
  }
  json details = sb->inst->details();
  spdlog::info("created sandbox {} (image {}, profile {}, agent pid {}{}{}) in {:.2f} ms: {}",
               rec.id, rec.image, rec.profile, sb->inst->agent_pid(), pooled ? ", warm pool" : "",
               details.is_null() ? std::string() : ", " + details.dump(),
               static_cast<double>(ns) / 1e6, times.summary());
  return info(rec, sb.get(), false);
}

Result<std::shared_ptr<Daemon::Sandbox>> Daemon::live(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    if (it != sandboxes_.end() && !it->second->destroyed) {
      it->second->touch();
      return it->second;
    }
    if (it != sandboxes_.end() && it->second->replacing)
      return fail(Code::kUnavailable,
                  "sandbox " + id + " is being rolled back to a snapshot; try again in a moment");
  }
  auto rec = TRY(store_->get_sandbox(id));
  if (rec && rec->state == "destroyed")
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
  {
    std::lock_guard l(mu_);  // the reaper reads expires_at under mu_
    sb->rec.expires_at = now_s() + timeout_s;
  }
  TRY_VOID(store_->put_sandbox(sb->rec));
  audit(id, "sandbox.timeout",
        {{"timeout_s", timeout_s}, {"expires_at", rfc3339(*sb->rec.expires_at)}});
  return info(sb->rec, sb.get());
}

Result<std::vector<SandboxInfo>> Daemon::list() {
  std::vector<SandboxInfo> out;
  std::map<std::string, std::shared_ptr<Sandbox>> all;
  {
    std::lock_guard lock(mu_);
    all = sandboxes_;
  }
  for (auto& [id, sb] : all) {
    std::lock_guard lock(sb->mu);
    if (!sb->destroyed) out.push_back(info(sb->rec, sb.get()));
  }
  return out;
}

Result<SandboxInfo> Daemon::inspect(const std::string& id) {
  std::shared_ptr<Sandbox> sb;
  {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    if (it != sandboxes_.end()) sb = it->second;
  }
  if (sb) {
    if (!sb->destroyed) sb->touch();
    std::lock_guard lock(sb->mu);
    return info(sb->rec, sb.get());
  }
  auto rec = TRY(store_->get_sandbox(id));
  if (!rec || rec->state == "pooled")  // a warm pool's sandbox is nobody's yet
    return fail(Code::kNotFound,
                "unknown sandbox " + id.substr(0, 80) + "; `space ls` lists sandboxes");
  return info(*rec, nullptr);
}

SandboxInfo Daemon::info(const SandboxRecord& rec, const Sandbox* sb, bool usage) {
  json j = {{"id", rec.id},
            {"state", rec.state},
            {"runtime", rec.runtime},
            {"image", rec.image},
            {"profile", rec.profile},
            {"created_at", rfc3339(rec.created_at)},
            {"expires_at", rec.expires_at ? json(rfc3339(*rec.expires_at)) : json(nullptr)},
            {"limits",
             {{"memory", rec.spec.value("memory", uint64_t{0})},
              {"cpus", rec.spec.value("cpus", 0.0)},
              {"pids", rec.spec.value("pids", 0)},
              {"disk", rec.spec.value("disk", uint64_t{0})}}},
            {"workdir", rec.spec.value("workdir", std::string("/"))},
            {"uid_base", rec.uid_base}};
  json env = json::object();
  for (auto& kv : rec.spec.value("env", std::vector<std::string>{})) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  j["env"] = env;
  j["egress"] = {{"allow", rec.spec.value("allow", std::vector<std::string>{})},
                 {"secrets", rec.spec.value("secrets", std::vector<std::string>{})}};
  if (rec.destroyed_at) {
    j["destroyed_at"] = rfc3339(*rec.destroyed_at);
    j["reason"] = rec.reason;
  }
  if (sb && sb->inst && !sb->destroyed) {
    j["host_pid"] = sb->inst->agent_pid();
    if (json d = sb->inst->details(); !d.is_null()) j["vm"] = std::move(d);
    if (auto u = usage ? sb->inst->usage() : Result<runtime::Usage>(fail(Code::kUnavailable, ""));
        u) {
      j["usage"] = {{"memory_bytes", u->memory_bytes},
                    {"memory_limit", u->memory_limit},
                    {"oom_kills", u->oom_kills},
                    {"pids", u->pids},
                    {"cpu_usage_ns", u->cpu_usage_ns}};
    }
  }
  return j;
}

Result<void> Daemon::destroy_sandbox(const std::shared_ptr<Sandbox>& sb,
                                     const std::string& reason) {
  std::lock_guard lock(sb->mu);
  if (sb->destroyed.exchange(true)) return {};
  sb->set_doom(reason);
  stop_egress(sb->rec.id);
  close_agent(*sb);
  Result<void> r = sb->inst ? sb->inst->destroy() : Result<void>{};
  if (!r) {
    // Keep it registered so a later destroy (or the reaper) retries; nothing is forgotten.
    sb->destroyed = false;
    spdlog::error("destroying sandbox {}: {}", sb->rec.id, r.error().message());
    return fail(std::move(r.error()).wrap("destroying sandbox " + sb->rec.id));
  }
  // Its state directory (the CA, empty mount points) goes in the background; a spaced that
  // stops first removes it at its next start (reconcile).
  Janitor::instance().post([dir = cfg_.state_dir / "sandboxes" / sb->rec.id] {
    std::error_code ec;
    fs::remove_all(dir, ec);
  });
  record_destroyed(sb->rec, reason);
  {
    std::lock_guard l(mu_);
    sandboxes_.erase(sb->rec.id);
  }
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
    sb->rec.state = "destroying";
    sb->rec.reason = reason;
    if (auto r = store_->put_sandbox(sb->rec); !r) {
      sb->rec.state = sb->paused ? "paused" : "running";
      sb->destroyed = false;
      return fail(std::move(r.error()).wrap("destroying sandbox " + sb->rec.id));
    }
  }
  {
    std::lock_guard l(mu_);
    sandboxes_.erase(sb->rec.id);
    teardowns_pending_++;
  }
  Janitor::instance().post([this, sb, reason] { finish_teardown(sb, reason); });
  return {};
}

void Daemon::finish_teardown(const std::shared_ptr<Sandbox>& sb, const std::string& reason) {
  std::lock_guard lock(sb->mu);
  close_agent(*sb);
  Result<void> r = sb->inst ? sb->inst->destroy() : Result<void>{};
  teardowns_pending_--;
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
  TRY_VOID_CTX(sb->inst->pause(), "pausing sandbox " + id);
  sb->paused = true;
  sb->rec.state = "paused";
  audit(id, "sandbox.pause", json::object());
  return store_->put_sandbox(sb->rec);
}

Result<void> Daemon::resume(const std::string& id) {
  auto sb = TRY(live(id));
  std::lock_guard lock(sb->mu);
  if (sb->destroyed) return fail(Code::kConflict, "sandbox " + id + " was destroyed");
  if (!sb->paused) return {};
  TRY_VOID_CTX(sb->inst->resume(), "resuming sandbox " + id);
  sb->paused = false;
  sb->rec.state = "running";
  audit(id, "sandbox.resume", json::object());
  return store_->put_sandbox(sb->rec);
}

void Daemon::reaper() {
  std::unique_lock lock(mu_);
  auto next_checkpoint = std::chrono::steady_clock::now();
  while (!stopping_) {
    reaper_cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (stopping_) break;
    if (auto now = std::chrono::steady_clock::now(); now >= next_checkpoint) {
      next_checkpoint = now + std::chrono::seconds(1);
      lock.unlock();
      if (auto r = store_->checkpoint(); !r)
        spdlog::warn("database checkpoint: {}", r.error().message());
      lock.lock();
      if (stopping_) break;
    }
    std::vector<std::pair<std::shared_ptr<Sandbox>, std::string>> doomed;
    double now = now_s();
    for (auto& [id, sb] : sandboxes_) {
      if (sb->destroyed) continue;
      if (sb->rec.expires_at && *sb->rec.expires_at <= now)
        doomed.emplace_back(sb, "lifetime timeout expired");
      else if (sb->idle_timeout_s > 0 && sb->open_execs.load() == 0 &&
               now - sb->last_active.load() > sb->idle_timeout_s)
        doomed.emplace_back(sb, "idle timeout expired: no client used it for " +
                                    format_duration(sb->idle_timeout_s));
      else if (sb->conn && !sb->conn->alive())
        doomed.emplace_back(sb, "the sandbox's agent exited");
    }
    lock.unlock();
    for (auto& [sb, why] : doomed) {
      if (why.starts_with("lifetime") || why.starts_with("idle")) metrics_.timeouts++;
      (void)destroy_sandbox(sb, why);
    }
    lock.lock();
  }
}

Result<void> Daemon::reconcile() {
  auto recs = TRY(store_->live_sandboxes());
  std::set<std::string> keep;
  for (auto& rec : recs) {
    auto rt_it = runtimes_.find(rec.runtime);
    auto sb = std::make_shared<Sandbox>();
    sb->rec = rec;
    sb->idle_timeout_s = rec.spec.value("idle_timeout", 0.0);
    sb->touch();  // its clients get the idle timeout afresh after a restart
    auto mark_gone = [&](const std::string& why) {
      record_destroyed(rec, why);
      std::error_code ec;
      fs::remove_all(cfg_.state_dir / "sandboxes" / rec.id, ec);
      metrics_.cleaned_up++;
      spdlog::warn("sandbox {}: {}", rec.id, why);
    };
    if (rt_it == runtimes_.end()) {
      mark_gone("its runtime " + rec.runtime + " is not available in this spaced");
      continue;
    }
    sb->rt = rt_it->second.get();
    auto spec = spec_for(rec);
    if (!spec) {
      mark_gone("cannot rebuild its spec: " + spec.error().message());
      continue;
    }
    sb->spec = *spec;
    if (rec.state == "pooled") {
      (void)sb->rt->cleanup(*spec, rec.runtime_state);
      mark_gone("warm pool: never used; spaced stopped");
      continue;
    }
    if (rec.state == "destroying") {
      // Removed by its owner, torn down in the background, and spaced stopped before that
      // finished (docs/pools.md, "Destroying in the background").
      auto cleaned = sb->rt->cleanup(*spec, rec.runtime_state);
      if (!cleaned) {
        spdlog::error("sandbox {}: finishing its teardown: {}", rec.id, cleaned.error().message());
        keep.insert(rec.id);  // still "destroying", its state kept: the next start tries again
        continue;
      }
      mark_gone(rec.reason.empty() ? std::string("removed by the API") : rec.reason);
      continue;
    }
    if (rec.state == "creating" || rec.runtime_state.is_null()) {
      (void)sb->rt->cleanup(*spec, rec.runtime_state);
      mark_gone("interrupted while being created (spaced stopped)");
      continue;
    }
    auto inst = sb->rt->reattach(*spec, rec.runtime_state);
    if (!inst) {
      (void)sb->rt->cleanup(*spec, rec.runtime_state);
      mark_gone("lost while spaced was down: " + inst.error().message());
      continue;
    }
    sb->inst = std::move(*inst);
    bool was_paused = rec.state == "paused";
    // A frozen agent cannot answer the handshake; and a spaced that died while taking a
    // snapshot left the sandbox frozen: thaw it in every case.
    (void)sb->inst->resume();
    auto conn = AgentConn::open(sb->inst->channel_fd(), rec.id, true, std::chrono::seconds(5));
    if (!conn) {
      (void)sb->inst->destroy();
      mark_gone("its agent did not answer after the restart: " + conn.error().message());
      continue;
    }
    sb->conn = std::move(*conn);
    start_relay(*sb);
    start_guest_exec_audit(*sb);
    if (auto eg = egress_of(rec); !eg) {
      spdlog::warn("sandbox {}: egress not restored: {}", rec.id, eg.error().message());
    } else if (auto r = start_egress(*sb, std::move(*eg), CaMode::kSaved); !r) {
      // Its listeners could not be bound again (a process inside may hold the proxy port):
      // the sandbox keeps running without a way out.
      spdlog::warn("sandbox {}: egress not restored: {}", rec.id, r.error().message());
    }
    if (was_paused && sb->inst->pause()) sb->paused = true;
    sb->rec.state = sb->paused ? "paused" : "running";
    sb->rec.runtime_state = sb->inst->persist();
    (void)store_->put_sandbox(sb->rec);
    schedule_snapshots(*sb);
    sandboxes_[rec.id] = sb;
    watch(sb);
    keep.insert(rec.id);
    metrics_.reattached++;
    audit(rec.id, "sandbox.reattach", {{"agent_pid", sb->inst->agent_pid()}});
    spdlog::info("reattached sandbox {} (agent pid {})", rec.id, sb->inst->agent_pid());
  }
  // Directories of sandboxes the database does not know as live.
  std::error_code ec;
  for (auto& e : fs::directory_iterator(cfg_.state_dir / "sandboxes", ec)) {
    if (!keep.count(e.path().filename().string())) {
      std::error_code e2;
      fs::remove_all(e.path(), e2);
    }
  }
  return {};
}

Result<nlohmann::json> Daemon::import_image(const std::string& name, const ChunkSource& source) {
  auto rec = TRY(images_.import(name, source));
  return json{{"name", rec.name},
              {"kind", rec.kind},
              {"created_at", rfc3339(rec.created_at)},
              {"size_bytes", rec.size_bytes},
              {"files", rec.files}};
}

Result<nlohmann::json> Daemon::list_images() {
  json out = json::array();
  for (auto& rec : TRY(images_.list()))
    out.push_back({{"name", rec.name},
                   {"kind", rec.kind},
                   {"created_at", rfc3339(rec.created_at)},
                   {"size_bytes", rec.size_bytes},
                   {"files", rec.files}});
  return out;
}

Result<void> Daemon::remove_image(const std::string& name) {
  {
    std::lock_guard lock(pool_mu_);
    for (auto& pool : pools_)
      if (pool.t.image == name)
        return fail(Code::kConflict, "image \"" + name + "\" is used by the warm pool of profile " +
                                         pool.t.profile +
                                         "; remove that pool from spaced's config first");
  }
  return images_.remove(name);
}

Result<nlohmann::json> Daemon::build_image_vm(
    const std::string& name, const std::function<void(const std::string&)>& progress) {
  auto disk = TRY(images_.build_vm(name, cfg_.agent, progress));
  return json{{"name", name},
              {"path", disk.path.string()},
              {"size_bytes", disk.size_bytes},
              {"cached", disk.cached}};
}

json Daemon::health() {
  size_t n;
  {
    std::lock_guard lock(mu_);
    n = sandboxes_.size();
  }
  return {{"status", "ok"}, {"version", SPACE_VERSION},          {"draining", draining_.load()},
          {"sandboxes", n}, {"uptime_s", now_s() - started_at_}, {"pid", ::getpid()}};
}

std::string Daemon::metrics() {
  std::ostringstream o;
  size_t running = 0, paused = 0;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, sb] : sandboxes_) (sb->paused ? paused : running)++;
  }
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " counter\n"
      << name << ' ' << v << '\n';
  };
  o << "# HELP space_sandboxes Live sandboxes by state.\n# TYPE space_sandboxes gauge\n"
    << "space_sandboxes{state=\"running\"} " << running << '\n'
    << "space_sandboxes{state=\"paused\"} " << paused << '\n';
  if (gateway_) {
    auto g = gateway_->stats();
    counter("space_egress_connections_total", "Connections sandboxes opened to the gateway.",
            g.connections);
    counter("space_egress_requests_total", "HTTP requests the gateway forwarded.", g.requests);
    counter("space_egress_denied_total", "Egress attempts the gateway refused.", g.denied);
    counter("space_egress_bytes_up_total", "Bytes sent from sandboxes upstream.", g.bytes_up);
    counter("space_egress_bytes_down_total", "Bytes received by sandboxes.", g.bytes_down);
    counter("space_egress_credential_uses_total", "Requests a credential was injected into.",
            g.credential_uses);
    counter("space_egress_dns_queries_total", "Queries the DNS stubs answered.", g.dns_queries);
    counter("space_egress_process_restarts_total",
            "Times the gateway process died and was started again.", gateway_->restarts());
    o << "# HELP space_egress_active_connections Open gateway connections.\n"
      << "# TYPE space_egress_active_connections gauge\nspace_egress_active_connections "
      << g.active_connections << '\n';
    o << "# HELP space_egress_processes Gateway processes running (space-egress).\n"
      << "# TYPE space_egress_processes gauge\nspace_egress_processes " << gateway_->processes()
      << '\n';
  }
  counter("space_sandbox_creates_total", "Sandboxes created.", metrics_.creates);
  counter("space_sandbox_create_failures_total", "Sandbox creations that failed.",
          metrics_.create_failures);
  counter("space_sandbox_destroys_total", "Sandboxes destroyed.", metrics_.destroys);
  counter("space_sandbox_teardown_failures_total",
          "Background teardowns that failed (left for the next start).",
          metrics_.teardown_failures);
  o << "# HELP space_sandbox_teardowns_pending Destroyed sandboxes still being torn down.\n"
    << "# TYPE space_sandbox_teardowns_pending gauge\nspace_sandbox_teardowns_pending "
    << teardowns_pending_.load() << '\n';
  counter("space_sandbox_timeouts_total", "Sandboxes destroyed by their lifetime timeout.",
          metrics_.timeouts);
  counter("space_agents_lost_total", "Agent channels that broke.", metrics_.agents_lost);
  counter("space_sandboxes_reattached_total", "Sandboxes reattached after a restart.",
          metrics_.reattached);
  counter("space_sandboxes_cleaned_up_total", "Sandboxes cleaned up after a restart.",
          metrics_.cleaned_up);
  counter("space_snapshots_total", "Snapshots taken.", metrics_.snapshots);
  counter("space_snapshot_failures_total", "Snapshots that could not be taken.",
          metrics_.snapshot_failures);
  counter("space_snapshots_dropped_total", "Snapshots removed (API or retention).",
          metrics_.snapshots_dropped);
  counter("space_rollbacks_total", "Sandboxes rolled back to a snapshot.", metrics_.rollbacks);
  counter("space_restores_total", "Sandboxes made from a snapshot.", metrics_.restores);
  counter("space_snapshot_gc_bytes_freed_total", "Snapshot store bytes garbage-collected.",
          metrics_.gc_bytes_freed);
  counter("space_execs_total", "Execs started.", metrics_.execs);
  counter("space_exec_failures_total", "Execs that could not be started.", metrics_.exec_failures);
  o << "# HELP space_sandbox_create_seconds_sum Total time spent creating sandboxes.\n"
    << "# TYPE space_sandbox_create_seconds_sum counter\n"
    << "space_sandbox_create_seconds_sum "
    << static_cast<double>(metrics_.create_ns_sum + metrics_.pooled_ns_sum) / 1e9 << '\n';
  o << "# HELP space_sandbox_create_path_seconds_count Sandboxes created, by path.\n"
    << "# TYPE space_sandbox_create_path_seconds_count counter\n"
    << "space_sandbox_create_path_seconds_count{path=\"cold\"} "
    << metrics_.creates - metrics_.creates_pooled << '\n'
    << "space_sandbox_create_path_seconds_count{path=\"pool\"} " << metrics_.creates_pooled << '\n'
    << "# HELP space_sandbox_create_path_seconds_sum Time spent creating sandboxes, by path.\n"
    << "# TYPE space_sandbox_create_path_seconds_sum counter\n"
    << "space_sandbox_create_path_seconds_sum{path=\"cold\"} "
    << static_cast<double>(metrics_.create_ns_sum) / 1e9 << '\n'
    << "space_sandbox_create_path_seconds_sum{path=\"pool\"} "
    << static_cast<double>(metrics_.pooled_ns_sum) / 1e9 << '\n';
  pool_metrics(o);
  {
    std::lock_guard lock(metrics_.steps_mu);
    o << "# HELP space_sandbox_create_step_seconds_sum Time spent in each step of sandbox "
         "creation (cold path).\n# TYPE space_sandbox_create_step_seconds_sum counter\n";
    for (auto& [step, v] : metrics_.create_steps)
      o << "space_sandbox_create_step_seconds_sum{step=\"" << step << "\"} "
        << static_cast<double>(v.second) / 1e9 << '\n';
    o << "# HELP space_sandbox_create_step_count Times each step of sandbox creation ran.\n"
         "# TYPE space_sandbox_create_step_count counter\n";
    for (auto& [step, v] : metrics_.create_steps)
      o << "space_sandbox_create_step_count{step=\"" << step << "\"} " << v.first << '\n';
  }
  return o.str();
}

namespace {

// First line of a host tool's `--version` output, or "" if it cannot run. Looked for in
// spaced's own PATH, as the VM runtimes look for their binaries (vm::find_in_path).
std::string version_line(const char* program) {
  const char* path = std::getenv("PATH");
  return first_output_line({program, "--version"}, std::chrono::seconds(10),
                           path && *path ? path : kDefaultSearchPath);
}

// Facts about the host that the VM runtimes and memory snapshots depend on.
json host_facts() {
  std::string qemu = version_line("qemu-system-x86_64");
  std::string criu = version_line("criu");
  return {
      {"qemu", qemu.empty() ? json{{"found", false}, {"hint", "apt-get install qemu-system-x86"}}
                            : json{{"found", true}, {"version", qemu}}},
      {"criu", criu.empty()
                   ? json{{"found", false}, {"note", "process memory snapshots need CRIU >= 4"}}
                   : json{{"found", true}, {"version", criu}}}};
}

}  // namespace

json Daemon::doctor() {
  json rts = json::object();
  for (auto& [name, rt] : runtimes_) rts[name] = rt->doctor();
  json host = host_facts();
  // KVM as the qemu runtime proved it; where that runtime could not decide (no QEMU, no guest
  // kernel), the device's facts alone.
  host["kvm"] = rts.contains("qemu") && rts["qemu"].contains("kvm")
                    ? rts["qemu"]["kvm"]
                    : runtime::vm::judge_kvm_facts(runtime::vm::gather_kvm_facts()).to_json();
  // What a snapshot holds (docs/snapshots.md): say it, and why, rather than let a user expect a
  // linux sandbox's process to survive a rollback.
  std::string criu = host["criu"].value("found", false)
                         ? "CRIU " + host["criu"].value("version", std::string()) + " is installed"
                         : "CRIU is not installed (Debian 12's criu 3.17 fails `criu check` on "
                           "recent kernels; 4.1 or later is needed)";
  // The top-level fields describe the linux runtime's snapshots; `by_runtime` every runtime's.
  json by_runtime = json::object();
  for (auto& [name, rt] : runtimes_)
    by_runtime[name] =
        rt->keeps_machine_state()
            ? json{{"contents", "machine"}, {"processes", "resumed"}, {"memory", true}}
            : json{{"contents", "filesystem"}, {"processes", "restarted"}, {"memory", false}};
  json snapshots = {
      {"contents", "filesystem"},
      {"processes", "restarted"},
      {"memory", false},
      {"reason",
       "a linux sandbox's snapshots hold its writable layer only: spaced does not drive "
       "CRIU, so its processes start afresh after a rollback or restore (qemu and "
       "firecracker sandboxes' snapshots are whole machines: their processes resume). " +
           criu + "."},
      {"by_runtime", by_runtime},
      {"store", (cfg_.state_dir / "snapshots").string()}};
  return {{"version", SPACE_VERSION},
          {"state_dir", cfg_.state_dir.string()},
          {"socket", cfg_.socket.string()},
          {"host", host},
          {"runtimes", rts},
          {"snapshots", snapshots},
          {"pools", pool_report()},
          {"pools_note", cfg_.pools_configured
                             ? "the config's \"pools\" (docs/pools.md)"
                             : "the default pool: the config names none; \"pools\": [] in the "
                               "config turns it off (docs/pools.md)"}};
}

}  // namespace space::daemon
