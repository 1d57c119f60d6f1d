// spaced's configuration: command-line flags over an optional JSON config file over defaults.
// The file format is documented in docs/configuration.md.
#pragma once

#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/discovery.h"
#include "common/error.h"
#include "egress/credentials.h"
#include "egress/policy.h"
#include "runtime/runtime.h"

namespace space::daemon {

// Rolling snapshots and how long snapshots are kept (docs/snapshots.md). Automatic snapshots
// (scheduled, before an `exec --snapshot`, before a rollback) follow the tiers: a snapshot of
// age A falls in the first tier with A <= for_s, which keeps the newest snapshot of each
// sandbox per `every_s` window (0 = all of them); past the last tier it is dropped. Manual
// snapshots are kept keep_manual_s. Nothing is kept longer than 7 days.
struct RetentionTier {
  double for_s = 0;
  double every_s = 0;
};
struct SnapshotConfig {
  std::vector<RetentionTier> retention = {{3600, 0}, {86400, 3600}, {7 * 86400, 86400}};
  double keep_manual_s = 7 * 86400;
  double gc_interval_s = 60;  // how often retention and garbage collection run
  static constexpr double kMaxAge = 7 * 86400;
};

// Per-profile snapshot settings.
struct ProfileSnapshots {
  double every_s = 0;        // default rolling-snapshot interval of its sandboxes; 0 = none
  uint64_t quota_bytes = 0;  // stored (compressed, deduplicated) bytes; 0 = unlimited
};

// A warm pool (docs/pools.md): `size` sandboxes of one template (runtime, image, profile,
// limits) kept started up to the user-facing step, so that a create request for that template
// only claims one and personalizes it.
struct PoolConfig {
  std::string runtime = "linux";
  std::string image = "host";
  std::string profile = "test";
  runtime::Limits limits;         // unset fields: the config's "defaults"
  std::string workdir = "/root";  // created in advance; a request for another one makes its own
  size_t size = 0;
  bool is_default = false;  // the pool spaced keeps when the config names none
  static constexpr size_t kMaxSize = 256;
};

// The size of the default pool on a host with `mem_total_bytes` of RAM: one sandbox per 4 GiB,
// 1 to 4 (a pool sandbox costs under 1 MiB of host memory, but each refill is CPU taken from
// the host; four cover a burst of sequential `space run`s while the filler catches up).
size_t default_pool_size(uint64_t mem_total_bytes);

// The microVM runtimes' shared settings (docs/qemu-runtime.md). Empty paths: found next to
// spaced (<dir>/guest/) or under /usr/lib/space/guest/.
struct VmConfig {
  std::filesystem::path kernel;  // uncompressed vmlinux
  std::filesystem::path initrd;  // initramfs with space-vminit as /init
  std::filesystem::path qemu = "qemu-system-x86_64";
  std::string accel = "auto";  // auto, kvm, tcg
  double boot_timeout_s = 60;
  // The firecracker runtime (docs/firecracker-runtime.md): the user's binaries, looked up in
  // PATH when not absolute; templates = restore every sandbox from its image's template.
  std::filesystem::path firecracker = "firecracker";
  std::filesystem::path jailer = "jailer";
  bool templates = true;
};

// Image imports (docs/images.md, "Limits"): bounds on what one import may unpack, and whether
// setuid/setgid bits of an image's files are kept. 0 = the built-in default
// (image::kDefaultLimits).
struct ImageImportConfig {
  uint64_t max_layer_bytes = 0;  // uncompressed bytes of one layer
  uint64_t max_total_bytes = 0;  // uncompressed bytes of an image (and of the upload)
  uint64_t max_entries = 0;      // tar entries of an image
  uint64_t max_ratio = 0;        // uncompressed / compressed bytes of a layer
  bool keep_setuid = false;
};

// api_tls (docs/api-auth.md, "Remote access"): TLS on the api_listen address, with spaced's own
// CA under <state_dir>/tls/ ("auto") or the operator's certificate and key files.
struct ApiTlsConfig {
  enum class Mode { kOff, kAuto, kFiles };
  Mode mode = Mode::kOff;
  std::filesystem::path cert, key;  // kFiles: absolute paths
  std::vector<std::string> names;   // kAuto: extra names for the server certificate
  // Mutual TLS (docs/cluster.md): clients must present a certificate signed by this CA file.
  std::filesystem::path client_ca;
};

// This host as a node of a cluster (docs/cluster.md): its name (a DNS label), carried by every
// sandbox and snapshot id it makes ("sb_<hex>-<name>"), the URL gateways reach its API at, and
// labels placement may filter on. An empty name: a single host, ids without a node.
struct NodeConfig {
  std::string name;
  std::string url;
  std::map<std::string, std::string> labels;
};
// kInvalidArgument unless the name (if any) is valid and the url (if any) is http(s)://.
Result<void> check_node(const NodeConfig& node);

// What a node shares with the rest of its cluster (docs/cluster.md).
struct ClusterConfig {
  // Replaces <state_dir>/snapshot.key: every node of a cluster seals snapshots with the same
  // key, so a snapshot taken on one restores on another.
  std::filesystem::path snapshot_key_file;
  // The shared snapshot store: "file:///dir" or "s3://bucket/prefix?endpoint=...&region=...".
  std::string store;
  std::filesystem::path store_credentials_file;
  bool push_snapshots = true;  // push every snapshot to `store` once taken
  // etcd registration: the node record under <prefix><name> with a lease of ttl_s.
  std::optional<cluster::EtcdConfig> etcd;
};

struct Config {
  std::filesystem::path state_dir = "/var/lib/space";
  std::filesystem::path socket = "/run/space/space.sock";
  std::filesystem::path agent;        // space-agent binary; default: next to spaced
  std::string cgroup_name = "space";  // cgroups live at <controller root>/<name>/<id>
  runtime::Limits default_limits;
  // Lifetimes (defaults.timeout, defaults.max_timeout): a create without "timeout" gets
  // default_timeout_s; no sandbox may live longer than max_timeout_s. 0 = none.
  double default_timeout_s = 0;
  double max_timeout_s = 0;
  size_t max_sandboxes = 512;
  double destroyed_retention_s = 7 * 86400.0;  // how long destroyed sandboxes stay listed
  double audit_retention_s = 90 * 86400.0;     // how long a destroyed sandbox's audit log stays
  bool audit_execs = true;  // log every execve inside sandboxes (seccomp user notification)
  // The rate limit on execs a microVM's agent reports (daemon/guest_exec_audit.h), per sandbox:
  // tokens a second and the bucket's size.
  double audit_guest_execs_per_s = 200;
  double audit_guest_execs_burst = 2000;
  std::set<std::string> profiles = {"test", "live"};
  // Per profile: what its sandboxes may reach through the egress gateway (absent = nothing).
  std::map<std::string, egress::EgressProfile> egress;
  // Credentials the gateway injects (docs/configuration.md, "secrets").
  std::map<std::string, egress::SecretDef> secrets;
  // The gateway: resolver overrides ("host[:port]" -> "address[:port]"), CA files trusted
  // for upstream servers, and CA files added to every sandbox's trust store.
  std::map<std::string, std::string> gateway_resolve;
  std::vector<std::string> upstream_ca_files;
  std::vector<std::string> sandbox_ca_files;
  // The gateway process's own uid and gid (docs/egress.md, "The gateway process"): by default
  // just below the sandboxes' id ranges (which start at 2^30), used by nothing else.
  static constexpr uint32_t kDefaultGatewayId = (1u << 30) - 2;
  uint32_t gateway_uid = kDefaultGatewayId, gateway_gid = kDefaultGatewayId;
  std::filesystem::path gateway_binary;      // space-egress; default: next to spaced
  size_t gateway_sandboxes_per_process = 0;  // 0: one space-egress for every sandbox
  std::string log_level = "info";
  // Also serve the API on this TCP address ("127.0.0.1:7070"; loopback unless api_tls is
  // set); every request there needs an API token (docs/api-auth.md). "" = the Unix socket only.
  std::string api_listen;
  ApiTlsConfig api_tls;  // with TLS, api_listen may be any address, not only loopback
  // "e2b" (docs/e2b.md): spaced also speaks E2B's protocol, on a listener of its own.
  struct E2b {
    std::string listen;  // "127.0.0.1:PORT" ("" = off); another address needs api_tls
    std::string domain;  // host-based routing "<port>-<sandboxId>.<domain>" ("" = headers only)
    std::map<std::string, std::string> templates;  // templateID -> image
    std::string profile = "test";  // of sandboxes made by a token not limited to one profile
  } e2b;
  NodeConfig node;
  ClusterConfig cluster;
  SnapshotConfig snapshots;
  std::map<std::string, ProfileSnapshots> profile_snapshots;
  std::map<std::string, runtime::VmDevices> profile_vm;  // profiles.NAME.vm
  std::vector<PoolConfig> pools;
  bool pools_configured = false;  // the file had a "pools" key ([] = no pool at all)
  VmConfig vm;
  ImageImportConfig images;

  // Reads a JSON config file over the current values.
  Result<void> load(const std::filesystem::path& file);
  // Where the config named no pools: one pool of the default template (linux runtime, image
  // host, profile test, the defaults' limits) sized by default_pool_size(), if the profile
  // "test" exists. `"pools": []` turns it off (docs/pools.md).
  void add_default_pool(uint64_t mem_total_bytes);

 private:
  Result<void> load_profiles(const nlohmann::json& v);
  Result<void> load_gateway(const nlohmann::json& v);
  Result<void> load_snapshots(const nlohmann::json& v);
  Result<void> load_vm(const nlohmann::json& v);
  Result<void> load_images(const nlohmann::json& v);
  Result<void> load_api_tls(const nlohmann::json& v);
  Result<void> load_e2b(const nlohmann::json& v);
  Result<void> load_node(const nlohmann::json& v);
  Result<void> load_cluster(const nlohmann::json& v);
  static Result<runtime::VmDevices> load_vm_devices(const nlohmann::json& v);
  Result<void> load_pools(const nlohmann::json& v, std::vector<std::array<bool, 4>>& given);
};

}  // namespace space::daemon
