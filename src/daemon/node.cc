// This host as a node of a cluster (docs/cluster.md): what it reports to gateways
// (GET /v1/node) and how it drains (POST /v1/node/drain, `spaced drain`).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>

#include "daemon/daemon.h"
#include "runtime/kvm.h"

namespace space::daemon {
using nlohmann::json;

namespace {

// Whether microVMs can use KVM here, as `space doctor` decides it (a boot probe where the qemu
// runtime made one, else the device's facts). Decided at most every 5 minutes: gateways ask
// for node info every second.
bool node_kvm_usable(const Daemon::Runtimes& runtimes) {
  static std::mutex mu;
  static std::chrono::steady_clock::time_point next;
  static bool usable = false;
  std::lock_guard lock(mu);
  auto now = std::chrono::steady_clock::now();
  if (now < next) return usable;
  next = now + std::chrono::minutes(5);
  auto it = runtimes.find("qemu");
  if (it != runtimes.end()) {
    json j = it->second->doctor();
    if (j.contains("kvm") && j["kvm"].is_object()) {
      usable = j["kvm"].value("usable", false);
      return usable;
    }
  }
  usable = runtime::vm::judge_kvm_facts(runtime::vm::gather_kvm_facts()).usable;
  return usable;
}

}  // namespace

Result<NodeInfo> Daemon::node_info() {
  NodeInfo n{.name = cfg_.node.name,
             .url = cfg_.node.url,
             .labels = cfg_.node.labels,
             .draining = draining_.load(),
             .kvm = node_kvm_usable(runtimes_),
             .version = SPACE_VERSION};
  for (auto& sb : registry_.all()) {
    (sb->paused ? n.sandboxes.paused : n.sandboxes.running)++;
    n.cpus.allocated += sb->rec.spec.value("cpus", 0.0);
    n.memory.allocated_bytes += sb->rec.spec.value("memory", uint64_t{0});
  }
  n.sandboxes.max = cfg_.max_sandboxes;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  n.cpus.total = cpus > 0 ? cpus : 0;
  if (pages > 0 && page > 0)
    n.memory.total_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  for (auto& [name, rt] : runtimes_) n.runtimes.push_back(name);
  for (auto& p : pools_.status())
    n.warm.push_back({.runtime = p.t.runtime,
                      .image = p.t.image,
                      .profile = p.t.profile,
                      .memory = p.t.limits.memory_bytes,
                      .cpus = p.t.limits.cpus,
                      .ready = p.ready});
  if (!cfg_.cluster.store.empty()) n.snapshot_store = cfg_.cluster.store;
  return n;
}

Result<DrainResult> Daemon::drain() {
  bool was = draining_.exchange(true);
  spdlog::info("node {}: draining{}", cfg_.node.name.empty() ? "(unnamed)" : cfg_.node.name,
               was ? " (again)" : "");
  audit("", "node.drain", {{"node", cfg_.node.name}});
  pools_.stop();  // warm sandboxes are not work: dropped, not snapshotted
  std::vector<std::string> ids;
  for (auto& sb : registry_.all()) ids.push_back(sb->rec.id);
  DrainResult out{.node = cfg_.node.name};
  for (const std::string& id : ids) {
    DrainResult::Item item{.id = id};
    auto sb = live(id);
    if (!sb) continue;  // went away meanwhile
    Result<std::optional<SnapshotRecord>> rec = [&]() -> Result<std::optional<SnapshotRecord>> {
      std::lock_guard lock((*sb)->mu);
      if ((*sb)->destroyed) return std::optional<SnapshotRecord>{};
      return take_snapshot(**sb, "manual", "");
    }();
    if (!rec) {
      item.error = rec.error().message();
      ++out.left_running;
      spdlog::warn("drain: sandbox {} left running: {}", id, rec.error().message());
      out.sandboxes.push_back(std::move(item));
      continue;
    }
    if (!*rec) continue;  // destroyed meanwhile
    item.snapshot = (*rec)->id;
    if (!cfg_.cluster.store.empty()) {
      auto pushed = push_to_cluster(**rec);
      item.pushed = static_cast<bool>(pushed);
      if (!pushed) {
        // Destroying it now would lose it: the snapshot is on this node only.
        item.error = pushed.error().message();
        ++out.left_running;
        spdlog::warn("drain: sandbox {} left running: {}", id, pushed.error().message());
        out.sandboxes.push_back(std::move(item));
        continue;
      }
    }
    auto gone = destroy_sandbox(*sb, "drained: its files are in snapshot " + (*rec)->id);
    item.destroyed = static_cast<bool>(gone);
    if (!gone) {
      item.error = gone.error().message();
      ++out.left_running;
    }
    out.sandboxes.push_back(std::move(item));
  }
  spdlog::info("node {}: drained {} sandboxes, {} left", cfg_.node.name,
               out.sandboxes.size() - out.left_running, out.left_running);
  return out;
}

}  // namespace space::daemon
