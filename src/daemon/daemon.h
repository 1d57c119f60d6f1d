// The daemon core: the sandbox registry and lifecycle state machine
// (creating -> running <-> paused -> destroyed), the SandboxService the API calls, lifetime
// timeouts, and reconciliation after a restart. Runtimes do the isolation; AgentConn speaks to
// the agent inside; Store keeps the metadata.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "audit/audit_log.h"
#include "daemon/agent_conn.h"
#include "daemon/config.h"
#include "daemon/images.h"
#include "daemon/service.h"
#include "daemon/store.h"
#include "egress/gateway.h"
#include "runtime/runtime.h"

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
  Result<void> destroy(const std::string& id, bool force) override;
  Result<std::unique_ptr<ExecSession>> exec(const std::string& id,
                                            const ExecRequest& req) override;
  Result<nlohmann::json> processes(const std::string& id) override;
  Result<void> kill(const std::string& id, int pid, int sig) override;
  Result<FileStat> stat(const std::string& id, const std::string& path) override;
  Result<void> read_file(const std::string& id, const std::string& path,
                         const ChunkSink& sink) override;
  Result<void> read_tar(const std::string& id, const std::string& path,
                        const ChunkSink& sink) override;
  Result<void> write_file(const std::string& id, const std::string& path, uint32_t mode,
                          const ChunkSource& source) override;
  Result<void> write_tar(const std::string& id, const std::string& path,
                         const ChunkSource& source) override;
  Result<void> remove(const std::string& id, const std::string& path, bool recursive) override;
  Result<nlohmann::json> diff(const std::string& id) override;
  Result<void> pause(const std::string& id) override;
  Result<void> resume(const std::string& id) override;
  Result<nlohmann::json> import_image(const std::string& name,
                                      const ChunkSource& source) override;
  Result<nlohmann::json> list_images() override;
  Result<void> remove_image(const std::string& name) override;
  Result<nlohmann::json> audit_events(const std::string& id, int64_t after,
                                      size_t limit) override;
  Result<nlohmann::json> audit_verify(const std::string& id) override;
  nlohmann::json health() override;
  std::string metrics() override;
  nlohmann::json doctor() override;

  // Appends to the audit log; blocks while the log is behind. A failure is logged (the log
  // only fails once closed at shutdown).
  void audit(const std::string& id, const std::string& kind, nlohmann::json data);

  // A live sandbox. Exec sessions and file transfers hold a shared_ptr so the agent channel
  // outlives them.
  struct Sandbox {
    std::mutex mu;  // serializes lifecycle operations (pause, resume, destroy)
    SandboxRecord rec;
    runtime::Runtime* rt = nullptr;
    runtime::SandboxSpec spec;
    std::unique_ptr<runtime::Instance> inst;
    std::unique_ptr<AgentConn> conn;
    std::atomic<bool> destroyed{false};
    std::atomic<bool> paused{false};
  };

 private:
  Daemon(Config cfg, Runtimes runtimes, std::unique_ptr<Store> store);

  Result<void> reconcile();
  void reaper();
  Result<std::shared_ptr<Sandbox>> live(const std::string& id);
  Result<std::shared_ptr<Sandbox>> running(const std::string& id);  // live and not paused
  Result<void> destroy_sandbox(const std::shared_ptr<Sandbox>& sb, const std::string& reason);
  Result<uint32_t> allocate_uid_base();
  Result<runtime::SandboxSpec> spec_for(const SandboxRecord& rec);
  // Egress (daemon/egress.cc). plan_egress checks a create request's --secret and --allow
  // against the profile and records grants and placeholders in rec.spec; start_egress gives
  // the sandbox its CA and attaches it to the gateway (fresh: a new CA; otherwise the saved one,
  // after a restart); stop_egress detaches it.
  const egress::EgressProfile& egress_profile(const std::string& profile) const;
  Result<egress::SandboxEgress> plan_egress(SandboxRecord& rec, const CreateRequest& req);
  Result<egress::SandboxEgress> egress_of(const SandboxRecord& rec);
  Result<void> start_egress(Sandbox& sb, egress::SandboxEgress eg, bool fresh);
  void stop_egress(const std::string& id);
  // Size and mtime of files the daemon itself put in a sandbox's writable layer at creation
  // ({"/etc/space/ca.crt": {"size","mtime_ns","dir"}}), so `space diff` can leave them out
  // while they are untouched.
  static nlohmann::json installed_stats(Sandbox& sb, const std::vector<std::string>& rel_paths);
  // Writes a small file into a running sandbox through its agent (parents created).
  static Result<void> put_file(AgentConn& conn, const std::string& path, uint32_t mode,
                               std::string_view bytes);
  // The runtime's exec-event callback for a sandbox: appends "proc.exec" audit events.
  std::function<void(nlohmann::json)> exec_sink(const std::string& id);
  SandboxInfo info(const SandboxRecord& rec, const Sandbox* sb);
  void watch(const std::shared_ptr<Sandbox>& sb);

  Config cfg_;
  Runtimes runtimes_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<audit::AuditLog> audit_;
  Images images_;
  double started_at_;
  std::shared_ptr<egress::SecretStore> secrets_;
  std::unique_ptr<egress::Gateway> gateway_;

  std::mutex mu_;  // guards sandboxes_
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  std::condition_variable reaper_cv_;
  bool stopping_ = false;
  std::thread reaper_;

 public:
  // Counters for /metrics.
  struct Metrics {
    std::atomic<uint64_t> creates{0}, create_failures{0}, destroys{0}, execs{0},
        exec_failures{0}, timeouts{0}, agents_lost{0}, reattached{0}, cleaned_up{0};
    std::atomic<uint64_t> create_ns_sum{0};
  } metrics_;
};

std::string rfc3339(double unix_seconds);
double now_s();

}  // namespace space::daemon
