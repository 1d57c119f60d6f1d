// The daemon core: the sandbox registry and lifecycle state machine
// (creating -> running <-> paused -> destroyed), the SandboxService the API calls, lifetime
// timeouts, and reconciliation after a restart. Runtimes do the isolation; AgentConn speaks to
// the agent inside; Store keeps the metadata.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "audit/audit_log.h"
#include "cluster/etcd.h"
#include "cluster/object_store.h"
#include "common/clock.h"
#include "common/ids.h"
#include "common/stop_signal.h"
#include "common/wait_group.h"
#include "daemon/agent_conn.h"
#include "daemon/config.h"
#include "daemon/egress_pool.h"
#include "daemon/images.h"
#include "daemon/pool.h"
#include "daemon/push_queue.h"
#include "daemon/registry.h"
#include "daemon/sandbox.h"
#include "daemon/service.h"
#include "daemon/snapshot_stores.h"
#include "daemon/store.h"
#include "egress/gateway.h"
#include "image/dockerfile.h"
#include "runtime/runtime.h"
#include "snapshot/cas.h"

namespace space::daemon {

class Daemon : public SandboxService {
 public:
  using Runtimes = std::map<std::string, std::unique_ptr<runtime::Runtime>, std::less<>>;

  // Opens the store, prepares images, reconciles what a previous run left (reattaching live
  // sandboxes, cleaning up dead ones) and starts the lifetime reaper.
  static Result<std::unique_ptr<Daemon>> start(Config cfg, Runtimes runtimes);
  ~Daemon() override;
  // Stops background work and closes agent channels. Sandboxes keep running: a restarted
  // spaced reattaches to them.
  void shutdown();

  Result<SandboxInfo> create(const CreateRequest& req) override;
  Result<std::vector<SandboxInfo>> list() override;
  Result<SandboxInfo> inspect(const std::string& id) override;
  Result<void> destroy(const std::string& id, bool force, bool wait = true) override;
  Result<std::unique_ptr<ExecSession>> exec(const std::string& id, const ExecRequest& req) override;
  Result<std::vector<ProcessInfo>> processes(const std::string& id) override;
  Result<void> kill(const std::string& id, int pid, int sig) override;
  Result<std::shared_ptr<ExecLog>> exec_log(const std::string& id, int pid) override;
  Result<FileStat> stat(const std::string& id, const std::string& path) override;
  Result<SandboxInfo> set_timeout(const std::string& id, double timeout_s) override;
  Result<UniqueFd> connect_port(const std::string& id, uint16_t port) override;
  Result<std::vector<DirEntry>> list_dir(const std::string& id, const std::string& path) override;
  Result<void> read_file(const std::string& id, const std::string& path,
                         const ChunkSink& sink) override;
  Result<void> read_tar(const std::string& id, const std::string& path,
                        const ChunkSink& sink) override;
  Result<void> write_file(const std::string& id, const std::string& path, uint32_t mode,
                          const ChunkSource& source, bool parents = false) override;
  Result<void> write_tar(const std::string& id, const std::string& path,
                         const ChunkSource& source) override;
  Result<void> remove(const std::string& id, const std::string& path, bool recursive) override;
  Result<Diff> diff(const std::string& id) override;
  Result<void> pause(const std::string& id) override;
  Result<void> resume(const std::string& id) override;
  Result<SnapshotInfo> snapshot(const std::string& id, const SnapshotRequest& req) override;
  Result<std::vector<SnapshotInfo>> list_snapshots(const std::string& id) override;
  Result<std::vector<SnapshotInfo>> all_snapshots() override;
  Result<SnapshotInfo> get_snapshot(const std::string& snap) override;
  Result<void> delete_snapshot(const std::string& snap) override;
  Result<SandboxInfo> rollback(const std::string& id, const std::string& snap) override;
  Result<SandboxInfo> restore(const std::string& snap,
                              const std::optional<std::string>& profile) override;
  Result<Diff> diff_since(const std::string& id, const std::string& snap) override;
  Result<ImageInfo> import_image(const std::string& name, const ChunkSource& source) override;
  Result<std::vector<ImageInfo>> list_images() override;
  Result<void> remove_image(const std::string& name) override;
  Result<ImageInfo> build_image(const std::string& name, const BuildRequest& req,
                                const ChunkSource& context,
                                const std::function<void(const BuildEvent&)>& progress) override;
  Result<VmDiskInfo> build_image_vm(
      const std::string& name, const std::function<void(const std::string&)>& progress) override;
  Result<std::vector<AuditEvent>> audit_events(const std::string& id, int64_t after,
                                               size_t limit) override;
  Result<AuditVerdict> audit_verify(const std::string& id) override;
  Health health() override;
  std::string metrics() override;
  nlohmann::json doctor() override;
  Result<NodeInfo> node_info() override;
  Result<DrainResult> drain() override;
  bool draining() const { return draining_.load(); }
  // Set once shutdown() starts closing agent channels: an exec stream cut then was cut by the
  // shutdown, not lost (its audit event says so).
  bool shutting_down() const { return shutting_down_.load(); }

  // How long an audit read waits for the events queued before it to be written (a full disk
  // must not hang the reader: it gets a 503 saying why).
  static constexpr std::chrono::milliseconds kAuditReadWait{5000};
  // Appends to the audit log; blocks while the log is behind. A failure is logged (the log
  // only fails once closed at shutdown).
  void audit(const std::string& id, const std::string& kind, nlohmann::json data);

  // A live sandbox (daemon/sandbox.h).
  using Sandbox = daemon::Sandbox;

 private:
  Daemon(Config cfg, Runtimes runtimes, std::unique_ptr<Store> store);

  // Connects to a started sandbox's agent (and its egress relay). `resumed`: the sandbox went on
  // from a saved machine (runtime::SandboxSpec::restore_machine): its agent is pinged, then
  // told its new hostname, the time and fresh entropy (op "resync").
  Result<void> open_agent(Sandbox& sb, bool resumed);
  // Sandbox creation, also from a snapshot (`populate` fills the writable layer, daemon/
  // snapshots.cc): everything create() does.
  // `populate` gets the upper dir and the new sandbox's uid_base.
  Result<SandboxInfo> create_sandbox(const CreateRequest& req,
                                     std::function<Result<void>(int, uint32_t)> populate,
                                     nlohmann::json audit_extra);

  using Template = daemon::Template;  // daemon/sandbox.h
  using Prepared = daemon::Prepared;
  // The cold path: makes a sandbox of template `t` (state "creating", or "pooled" for a warm
  // pool, recorded so that a restarted spaced can clean it up). On failure nothing is left
  // but a "destroyed" record saying why.
  Result<Prepared> prepare_sandbox(const Template& t, runtime::Runtime* rt,
                                   const std::function<Result<void>(int, uint32_t)>& populate,
                                   std::chrono::seconds ca_life, SandboxState state,
                                   StepTimes& times);
  // Moves a record to `to` (daemon/sandbox_state.h). A move the lifecycle does not allow is
  // logged and counted (space_state_errors in /metrics) and made all the same: the record must
  // say what is true.
  void move(SandboxRecord& rec, SandboxState to);
  // Marks a sandbox's record destroyed with `reason`, saves it and appends the audit event
  // `audit_kind` ({"reason": ...}).
  void record_destroyed(SandboxRecord& rec, const std::string& reason,
                        const char* audit_kind = "sandbox.destroy");
  // A create that failed after its record was written: removes what exists of the sandbox,
  // records it destroyed with the reason, audits it; returns `e` in context.
  Error abandon_create(Sandbox& sb, Error e);
  // Removes a prepared sandbox no request got (pool drained at shutdown, refill failed late).
  void discard_prepared(Prepared& p, const std::string& why);
  // Warm pools (pools_): a pool sandbox made, for the filler.
  Result<Prepared> make_pooled(const Template& t);
  void pool_metrics(std::ostream& o);
  nlohmann::json pool_report();  // `space doctor`: each pool, its size and what is ready
  // What every sandbox trusts besides its own CA: the host's CA bundle plus sandbox_ca_files
  // (`bundle`), and the sandbox_ca_files alone (`extra`, PEM), which Chromium is told to trust
  // by policy (it has its own root store and ignores the bundle). Read once and again when the
  // host's bundle changes.
  struct TrustBase {
    std::string bundle;
    std::string extra;
  };
  Result<std::shared_ptr<const TrustBase>> trust_base();
  // Writes the CA (egress::kCaCertPath) and trust store (kCaBundlePath) into a writable layer's
  // `upper` before the sandbox starts, owned by sandbox root as if its agent had written them.
  // false (nothing written) where the layer cannot mirror the image's /etc simply (a symlink,
  // or a restored snapshot's whiteout there): the agent installs them then.
  // The same files written through the sandbox's agent (VMs: no writable layer on the host).
  Result<void> install_ca_via_agent(Sandbox& sb, const egress::SandboxCa& ca);
  // Chromium's policy file (egress::kChromiumPolicyPath) is written next to them: its own
  // trust (the policy CACertificates: the CA and sandbox_ca_files; Chromium ignores the
  // bundle and SSL_CERT_FILE) and EncryptedClientHelloEnabled false, since the gateway refuses
  // ECH where it tunnels (docs/workloads.md).
  static Result<bool> install_ca_files(int upper_fd, uint32_t uid_base,
                                       const std::filesystem::path& rootfs,
                                       const std::string& ca_pem, const TrustBase& base);
  Result<void> reconcile();
  void reaper();
  // The reaper's end of a sandbox's lifetime: destroyed; or, with "on_timeout": "pause"
  // (E2B's autoPause), paused and kept paused for kPausedKeepS more (one already paused when
  // its lifetime ends is destroyed).
  void end_lifetime(const std::shared_ptr<Sandbox>& sb);
  static constexpr double kPausedKeepS = 7 * 24 * 3600;
  // Freezes a running sandbox and writes its record, paused, once (with whatever the caller
  // changed in it before); sb.mu held. Failpoint pause.after_freeze between the two.
  Result<void> pause_locked(Sandbox& sb, const nlohmann::json& audit_data);
  Result<std::shared_ptr<Sandbox>> live(const std::string& id);
  Result<std::shared_ptr<Sandbox>> running(const std::string& id);  // live and not paused
  Result<void> destroy_sandbox(const std::shared_ptr<Sandbox>& sb, const std::string& reason);
  // destroy(wait = false): cut it off and record it "destroying" now; finish_teardown() (on the
  // janitor's thread) kills its processes, removes its resources and records it destroyed.
  Result<void> destroy_in_background(const std::shared_ptr<Sandbox>& sb, const std::string& reason);
  void finish_teardown(const std::shared_ptr<Sandbox>& sb, const std::string& reason);
  static constexpr uint64_t kMaxTeardowns = 32;
  std::atomic<uint64_t> teardowns_pending_{0};
  Result<uint32_t> allocate_uid_base();
  Result<runtime::SandboxSpec> spec_for(const SandboxRecord& rec);
  // After the agent's channel is open: for runtimes whose agent carries egress (VMs), starts
  // relaying its connections to the gateway's listeners in the sandbox's network namespace, and
  // its DNS queries to the gateway's stub there.
  // The agent may hold at most its profile's egress max_connections (+ kAgentStreamSlack)
  // streams open (each costs spaced two threads): a guest flooding connects is refused, not
  // served by more threads.
  void start_relay(Sandbox& sb);
  static constexpr size_t kAgentStreamSlack = 16;
  // Stops the egress and DNS relays, then closes the agent channel. Idempotent.
  static void close_agent(Sandbox& sb);
  // Egress (daemon/egress.cc). plan_egress checks a create request's --secret and --allow
  // against the profile and records grants and placeholders in rec.spec; start_egress gives
  // the sandbox its CA and attaches it to the gateway (fresh: a new CA; otherwise the saved one,
  // after a restart); stop_egress detaches it.
  const egress::EgressProfile& egress_profile(const std::string& profile) const;
  Result<egress::SandboxEgress> plan_egress(SandboxRecord& rec, const CreateRequest& req);
  Result<egress::SandboxEgress> egress_of(const SandboxRecord& rec);
  // How start_egress treats the sandbox's CA: a new one (creation), the saved one (a restart),
  // or the saved one written into the sandbox again (its writable layer was replaced).
  enum class CaMode { kSaved, kReinstall };
  Result<void> start_egress(Sandbox& sb, egress::SandboxEgress eg, CaMode mode);
  void stop_egress(const std::string& id);
  // Size and mtime of files the daemon itself put in a sandbox's writable layer at creation
  // ({"/etc/space/ca.crt": {"size","mtime_ns","dir"}}), so `space diff` can leave them out
  // while they are untouched.
  static nlohmann::json installed_stats(Sandbox& sb, const std::vector<std::string>& rel_paths);
  // The files spaced installs in every sandbox with egress: the gateway's CA and trust store,
  // and Chromium's policy (snapshots.cc's kInstalled lists the same).
  static inline const std::vector<std::string> kInstalledFiles = {
      "etc/space",
      "etc/space/ca.crt",
      "etc/space/ca-bundle.crt",
      "etc/chromium",
      "etc/chromium/policies",
      "etc/chromium/policies/managed",
      "etc/chromium/policies/managed/space.json"};
  // Writes a small file into a running sandbox through its agent (parents created).
  static Result<void> put_file(AgentConn& conn, const std::string& path, uint32_t mode,
                               std::string_view bytes);
  // The runtime's exec-event callback for a sandbox: appends "proc.exec" audit events.
  std::function<void(nlohmann::json)> exec_sink(const std::string& id);
  // After the agent's channel is open: for microVMs, records the execs their agent reports
  // (daemon/guest_exec_audit.cc).
  void start_guest_exec_audit(Sandbox& sb);
  // With `usage`, the cgroup's current usage too (a few file reads: not for a create's answer).
  SandboxInfo info(const SandboxRecord& rec, const Sandbox* sb, bool usage = true);
  // Snapshots (daemon/snapshots.cc).
  Result<snapshot::Store*> snapshot_store(const std::string& profile);
  // Takes a snapshot of a live sandbox, its processes frozen meanwhile. Caller holds sb.mu.
  // With skip_unchanged, a snapshot identical to the sandbox's previous one is not kept
  // (nullopt).
  Result<std::optional<SnapshotRecord>> take_snapshot(Sandbox& sb, const std::string& kind,
                                                      const std::string& name,
                                                      bool skip_unchanged = false);
  // A snapshot by id or name; with a profile, only that profile's ("" = any).
  // With a sandbox, a name resolves among that sandbox's snapshots only (an id resolves
  // anywhere); without one, a name must be unique.
  Result<SnapshotRecord> find_snapshot(const std::string& ref, const std::string& profile,
                                       const std::string& sandbox = "");
  // Its manifest, loaded and verified, with owners moved to `uid_base`'s range.
  Result<snapshot::Manifest> manifest_for(const SnapshotRecord& rec, uint32_t uid_base,
                                          bool verify_chunks);
  SnapshotInfo snapshot_info(const SnapshotRecord& rec) const;
  // Whether `runtime`'s snapshots are whole machines (VMs: processes resume) rather than files.
  bool machine_snapshots(const std::string& runtime) const;
  Result<void> drop_snapshot(const SnapshotRecord& rec, const std::string& why);
  // Rollback (daemon/rollback.cc). start_from_snapshot starts `sb` (record, runtime and spec
  // set, no instance) afresh on a snapshot's files or machine: instance, agent, workdir,
  // egress; on failure nothing of it is left. finish_rollback records it running and lists it.
  // resume_rollback, at start, finishes a rollback a killed spaced left (state rolling_back):
  // on its snapshot, else on the state before; false (recorded destroyed, saying which
  // snapshot to restore) when neither starts.
  Result<void> start_from_snapshot(Sandbox& sb, const snapshot::Manifest& man,
                                   snapshot::Store& store);
  void finish_rollback(const std::shared_ptr<Sandbox>& sb, const std::string& outcome);
  bool resume_rollback(const std::shared_ptr<Sandbox>& sb);
  // Collects `profile`'s store's garbage: counts what it freed, and remembers (for doctor and
  // /metrics) whether a manifest that does not load blocked it.
  void collect_garbage(const std::string& profile, snapshot::Store& store);
  // Per profile: doctor's and /metrics' view of the store (quarantined chunks, gc blocked).
  nlohmann::json store_report();
  // Rolling snapshots, retention and garbage collection: one background thread.
  void snapshot_loop();
  // Drops what retention no longer keeps and collects garbage in the stores it touched (every
  // store with full_gc).
  void run_retention(bool full_gc);
  // At start: removes manifests spaced wrote but never recorded (it died in between) and the
  // records of snapshots whose data is gone.
  void reconcile_snapshots();
  void schedule_snapshots(Sandbox& sb);
  void watch(const std::shared_ptr<Sandbox>& sb);
  // The shared snapshot store (cluster.store, docs/cluster.md), src/daemon/cluster_sync.cc:
  // pushes a snapshot (chunks the store lacks, then its manifest, then the sandbox's pointer
  // to it) in its turn (pusher_), and waits for it.
  Result<void> push_to_cluster(const SnapshotRecord& rec);
  // The push itself, on the pusher's thread.
  Result<void> push_snapshot_now(const SnapshotRecord& rec);
  // Where a snapshot id is unknown here: fetches it from the shared store (manifest checked
  // against the cluster key first, then the chunks this node lacks) and records it, so that a
  // restore on this node works. kNotFound when the store has none either.
  Result<SnapshotRecord> pull_from_cluster(const std::string& snap_id);
  Result<void> start_cluster();  // the shared store, the pusher, the etcd registration
  void stop_cluster();           // pushes what is queued, revokes the registration
  void queue_push(const SnapshotRecord& rec);  // after a snapshot: pushed in the background
  // `id` with this node's name appended ("sb_<hex>-<node>", docs/cluster.md); unchanged on a
  // host with no node name.
  std::string node_id(std::string id) const {
    return cfg_.node.name.empty() ? id : id + "-" + cfg_.node.name;
  }

  Config cfg_;
  Runtimes runtimes_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<audit::AuditLog> audit_;
  Images images_;
  double started_at_;
  std::shared_ptr<egress::SecretStore> secrets_;
  std::unique_ptr<EgressPool> gateway_;  // the gateway processes (egress_pool.h)

  // The components, each with one lock of its own (docs/architecture.md, "Locks").
  Registry registry_;  // live sandboxes, admission
  StopSignal stop_;    // the reaper and the snapshot loop sleep on it; set by shutdown()
  std::atomic<bool> draining_{false};  // drain(): no more creates or restores
  std::atomic<bool> shutting_down_{false};
  // The cluster (cluster_sync.cc): the shared store, this node's record in etcd, the pusher.
  std::unique_ptr<cluster::ObjectStore> cluster_store_;
  std::unique_ptr<cluster::Registration> registration_;
  PushQueue pusher_;
  std::thread reaper_;
  // Detached commands' pump threads (daemon/exec.cc): each moves one command's output into its
  // ExecLog until it ends; shutdown() waits for them once the agent channels are closed.
  void start_pump(std::unique_ptr<ExecSession> session, std::shared_ptr<KeptExecLog> log);
  WaitGroup pumps_;
  SnapshotStores snap_stores_;
  // One snapshot is taken at a time: spaced's memory for manifests (proportional to a tree's
  // entries) is then bounded by one tree, not by the number of sandboxes snapshotting. Held
  // while a snapshot is taken, inside the sandbox's `mu`.
  // Image builds (image_build.cc): one RUN step in a sandbox of the build profile, its
  // changes written as a layer tar at `layer`; and, at start, destroying the step sandboxes
  // of builds a kill cut short. One build at a time (build_mu_).
  Result<void> run_build_step(const std::string& name, const std::string& profile,
                              const BuildRequest& req, const std::string& image,
                              const image::Step& step, size_t step_no, size_t of,
                              double step_timeout, const std::filesystem::path& layer,
                              const std::function<void(const BuildEvent&)>& progress);
  void sweep_build_sandboxes();
  std::mutex build_mu_;
  std::mutex take_mu_;
  std::thread snapshotter_;
  WarmPools pools_;
  // The host's trust store and sandbox_ca_files, read again when the bundle changes.
  struct {
    std::mutex mu;  // a leaf
    std::shared_ptr<const TrustBase> base;
    struct timespec mtime {};
    off_t size = -1;
  } trust_;

 public:
  // Counters for /metrics.
  struct Metrics {
    std::atomic<uint64_t> creates{0}, create_failures{0}, destroys{0}, execs{0}, exec_failures{0},
        timeouts{0}, agents_lost{0}, reattached{0}, cleaned_up{0}, snapshots{0},
        snapshot_failures{0}, snapshots_dropped{0}, rollbacks{0}, restores{0}, gc_bytes_freed{0},
        teardown_failures{0}, state_errors{0};
    std::atomic<uint64_t> create_ns_sum{0};
    std::atomic<uint64_t> creates_pooled{0}, pooled_ns_sum{0};
    // Where creation time goes, by step (StepTimes names): count and nanoseconds.
    std::mutex steps_mu;
    // In the order the steps first ran.
    std::vector<std::pair<std::string, std::pair<uint64_t, int64_t>>> create_steps;
    void add_steps(const StepTimes& t) {
      std::lock_guard lock(steps_mu);
      for (auto& [name, ns] : t.steps()) {
        auto it = std::find_if(create_steps.begin(), create_steps.end(),
                               [&](const auto& e) { return e.first == name; });
        if (it == create_steps.end())
          it = create_steps.emplace(create_steps.end(), name, std::pair{0, 0});
        it->second.first++;
        it->second.second += ns;
      }
    }
  } metrics_;
};

}  // namespace space::daemon
