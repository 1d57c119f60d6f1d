// A live sandbox as spaced holds it in memory (its record, runtime instance, agent channel and
// relays), what a sandbox is made of before a request personalizes it (Template), and a
// sandbox started up to that step (Prepared): the objects the registry, the warm pools and the
// lifecycle code in Daemon pass between them.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "daemon/agent_conn.h"
#include "daemon/dns_relay.h"
#include "daemon/egress_relay.h"
#include "daemon/exec_log.h"
#include "daemon/guest_exec_audit.h"
#include "daemon/store.h"
#include "egress/gateway.h"
#include "runtime/runtime.h"

namespace space::daemon {

// A live sandbox. Exec sessions and file transfers hold a shared_ptr so the agent channel
// outlives them. `mu` serializes its lifecycle operations (pause, resume, destroy, snapshot,
// rollback); `rec.expires_at` of a registered sandbox is written under the registry's lock
// too (Registry::set_expiry), since the reaper reads it there.
struct Sandbox {
  std::mutex mu;
  SandboxRecord rec;
  runtime::Runtime* rt = nullptr;
  runtime::SandboxSpec spec;
  std::unique_ptr<runtime::Instance> inst;
  std::unique_ptr<AgentConn> conn;
  // VMs: carries the agent's egress connections to the gateway (before conn in destruction
  // order: it uses conn). Stopped by Daemon::close_agent().
  std::unique_ptr<EgressRelay> egress_relay;
  // VMs: carries the guest's DNS queries to the gateway's stub (likewise before conn).
  std::unique_ptr<DnsRelay> dns_relay;
  // VMs: turns the agent's guest-reported execs into audit events (daemon/guest_exec_audit.h);
  // finished (its last drop count written) by close_agent().
  std::shared_ptr<GuestExecAudit> guest_exec_audit;
  std::atomic<bool> destroyed{false};
  std::atomic<bool> paused{false};
  // Rollback replaces the Sandbox object under the same id: `replacing` while it runs (the
  // id answers "being rolled back"), `replaced` once the new object is registered.
  std::atomic<bool> replacing{false}, replaced{false};
  // Reattached by this spaced after a restart: what the one before kept in memory (detached
  // commands' output and ends) is gone.
  bool reattached = false;
  // Rolling snapshots: when the next is due (0 = none scheduled). Written under `mu`, read by
  // the snapshot loop without it.
  std::atomic<double> next_snapshot_at{0};
  // Idle timeout (CreateRequest::idle_timeout_s; 0 = none): the last API call on it, and
  // how many exec streams are open (an open stream is activity).
  double idle_timeout_s = 0;
  std::atomic<double> last_active{0};
  std::atomic<int> open_execs{0};
  // Detached commands: their kept output and end (daemon/exec_log.h).
  ExecLogs exec_logs;
  void touch() { last_active = now_s(); }
  // Why it is being destroyed, set before its agent is cut off, so that an exec it cuts
  // short can say why (an exec stream reads it without taking `mu`, which the destroy holds).
  void set_doom(const std::string& why) {
    std::lock_guard l(doom_mu);
    doom = why;
  }
  std::string doom_reason() {
    std::lock_guard l(doom_mu);
    return doom;
  }
  std::mutex doom_mu;  // a leaf lock: nothing is taken while it is held
  std::string doom;
};

// What a sandbox is made of before any request personalizes it: a warm pool's key.
struct Template {
  std::string runtime, image, profile;
  runtime::Limits limits;
  std::string workdir;
  bool same_kind(const Template& o) const;  // all but the workdir
};

// A sandbox started up to the user-facing step: its agent runs, its CA is made and (where
// the runtime has a writable layer) installed, its gateway listeners are bound but not
// served, its workdir exists. Not registered: no API call reaches it until create()
// personalizes it (env, placeholders, egress policy, lifetime) and registers it.
struct Prepared {
  std::shared_ptr<Sandbox> sb;
  std::shared_ptr<egress::SandboxCa> ca;
  egress::BoundListeners listeners;
  std::string workdir;        // created already
  bool ca_installed = false;  // the CA files are in place (writable layer, or via the agent)
  nlohmann::json installed;   // installed_stats() of them, where taken beforehand (VMs)
  double prepared_at = 0;
};

}  // namespace space::daemon
