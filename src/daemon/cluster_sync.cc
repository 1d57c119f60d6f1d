// This node and the rest of its cluster (docs/cluster.md): snapshots pushed to the shared store
// (cluster.store) once taken, snapshots this node does not have pulled from it for a restore,
// and the node's record kept in etcd (cluster.etcd) for gateways to find.
#include <spdlog/spdlog.h>

#include "cluster/etcd.h"
#include "cluster/object_store.h"
#include "cluster/snapshot_push.h"
#include "daemon/daemon.h"

namespace space::daemon {
using nlohmann::json;

Result<void> Daemon::start_cluster() {
  if (!cfg_.cluster.store.empty()) {
    cluster::ObjectStoreOptions o;
    o.credentials_file = cfg_.cluster.store_credentials_file.string();
    cluster_store_ = TRY_CTX(cluster::open_object_store(cfg_.cluster.store, o), "cluster.store");
    pusher_.start([this](const SnapshotRecord& rec) { return push_snapshot_now(rec); });
    spdlog::info("cluster: snapshots go to {}{}", cluster_store_->url(),
                 cfg_.cluster.push_snapshots ? " as they are taken" : " when drained");
  }
  if (cfg_.cluster.etcd) {
    if (cfg_.node.name.empty() || cfg_.node.url.empty())
      return fail(Code::kInvalidArgument,
                  "cluster.etcd registers this node: give node.name and node.url (or "
                  "--node-name and --node-url)");
    cluster::NodeRecord self{cfg_.node.name, cfg_.node.url, cfg_.node.labels};
    registration_ =
        TRY_CTX(cluster::Registration::create(*cfg_.cluster.etcd, self), "cluster.etcd");
    registration_->start();
  }
  return {};
}

void Daemon::stop_cluster() {
  pusher_.stop();
  // A drained node is gone for good: its lease is revoked, so gateways see it go at once. A
  // plain stop (a restart, an upgrade) leaves the lease to run out: its sandboxes run on, and
  // a spaced back within the TTL registers again before gateways think the node lost.
  if (registration_) registration_->stop(draining_.load());
}

void Daemon::queue_push(const SnapshotRecord& rec) {
  if (cluster_store_ && cfg_.cluster.push_snapshots) pusher_.add(rec);
}

Result<void> Daemon::push_to_cluster(const SnapshotRecord& rec) {
  if (!cluster_store_) return fail(Code::kConflict, "no cluster.store is configured");
  return pusher_.push_and_wait(rec);
}

Result<void> Daemon::push_snapshot_now(const SnapshotRecord& rec) {
  if (!cluster_store_) return fail(Code::kConflict, "no cluster.store is configured");
  auto* store = TRY(snapshot_store(rec.profile));
  auto t0 = std::chrono::steady_clock::now();
  auto pushed = TRY_CTX(cluster::push_snapshot(*store, rec.profile, rec.id, *cluster_store_),
                        "pushing snapshot " + rec.id + " to " + cluster_store_->url());
  TRY_VOID_CTX(cluster::write_sandbox_pointer(*cluster_store_, {{"sandbox", rec.sandbox_id},
                                                                {"snapshot", rec.id},
                                                                {"profile", rec.profile},
                                                                {"node", cfg_.node.name},
                                                                {"created_at", rec.created_at},
                                                                {"runtime", rec.runtime},
                                                                {"image", rec.image}}),
               "recording snapshot " + rec.id + " as the latest of " + rec.sandbox_id);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  audit(rec.sandbox_id, "snapshot.push",
        {{"snapshot", rec.id},
         {"store", cluster_store_->url()},
         {"chunks_uploaded", pushed.chunks_uploaded},
         {"chunks_skipped", pushed.chunks_skipped},
         {"bytes_uploaded", pushed.bytes_uploaded}});
  spdlog::info(
      "cluster: pushed snapshot {} of {} ({} chunks sent, {} already there, {} bytes, "
      "{:.0f} ms)",
      rec.id, rec.sandbox_id, pushed.chunks_uploaded, pushed.chunks_skipped, pushed.bytes_uploaded,
      ms);
  return {};
}

Result<SnapshotRecord> Daemon::pull_from_cluster(const std::string& snap_id) {
  if (!cluster_store_) return fail(Code::kNotFound, "no cluster.store to look in");
  for (const std::string& profile : cfg_.profiles) {
    auto* store = TRY(snapshot_store(profile));
    auto pulled = cluster::pull_snapshot(*cluster_store_, profile, snap_id, *store);
    if (!pulled && pulled.error().code() == Code::kNotFound) continue;
    if (!pulled)
      return fail(std::move(pulled.error())
                      .wrap("pulling snapshot " + snap_id + " from " + cluster_store_->url()));
    // The manifest's MAC was checked against this cluster's key: its labels are as sealed.
    snapshot::Manifest m = TRY(store->load(snap_id));
    json r = json::parse(m.labels.count("record") ? m.labels.at("record") : "", nullptr, false);
    if (!r.is_object() || !r.contains("spec") || !r["spec"].is_object() || !r.contains("runtime") ||
        !r["runtime"].is_string() || !r.contains("image") || !r["image"].is_string() ||
        !r.contains("uid_base") || !r["uid_base"].is_number_unsigned())
      return fail(Code::kProtocol, "snapshot " + snap_id +
                                       " in the shared store has no restore record (taken by a "
                                       "spaced older than the cluster form?)");
    SnapshotRecord rec;
    rec.id = snap_id;
    rec.sandbox_id = m.labels.count("sandbox") ? m.labels.at("sandbox") : "";
    rec.profile = profile;
    rec.kind = m.labels.count("kind") ? m.labels.at("kind") : "manual";
    rec.runtime = r["runtime"].get<std::string>();
    rec.image = r["image"].get<std::string>();
    rec.spec = r["spec"];
    rec.uid_base = r["uid_base"].get<uint32_t>();
    rec.created_at = m.created_at;
    rec.files = m.entries.empty() ? 0 : m.entries.size() - 1;
    rec.logical_bytes = m.logical_bytes;
    rec.skipped = m.skipped;
    TRY_VOID(store_->put_snapshot(rec));
    audit(rec.sandbox_id, "snapshot.pull",
          {{"snapshot", snap_id},
           {"store", cluster_store_->url()},
           {"chunks_downloaded", pulled->chunks_downloaded},
           {"bytes_downloaded", pulled->bytes_downloaded}});
    spdlog::info("cluster: pulled snapshot {} of {} ({} chunks fetched, {} bytes)", snap_id,
                 rec.sandbox_id, pulled->chunks_downloaded, pulled->bytes_downloaded);
    return rec;
  }
  return fail(Code::kNotFound,
              "snapshot " + snap_id + " is neither on this node nor in " + cluster_store_->url());
}

}  // namespace space::daemon
