// What the sandbox service (service.h) answers, as plain typed structs: a sandbox, a snapshot,
// a process, a diff, an image, audit events and their verification, health, this node and a
// drain report. The daemon fills them; the API layer turns them into the JSON of
// api/openapi.yaml (src/api/views.cc), so this header knows nothing of JSON and the wire
// shape is decided in one place. Field comments follow the OpenAPI schemas. Times are Unix
// seconds (the API writes them as RFC 3339). An std::optional that is empty is null on the
// wire where the schema says nullable, and absent where it does not.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/sandbox_state.h"
#include "runtime/runtime.h"

namespace space::daemon {

// A sandbox (schema Sandbox; GET /v1/sandboxes/{id}).
struct SandboxInfo {
  std::string id;  // sb_<hex>
  SandboxState state = SandboxState::kCreating;
  std::string runtime;  // linux | qemu | firecracker
  std::string image;
  std::string profile;
  double created_at = 0;
  std::optional<double> expires_at;  // when the lifetime timeout destroys it (null: none)
  struct Limits {
    uint64_t memory = 0;  // bytes
    double cpus = 0;
    int64_t pids = 0;
    uint64_t disk = 0;  // bytes
  } limits;
  std::string workdir;    // default cwd of execs
  uint32_t uid_base = 0;  // first host uid of its user namespace range
  // Default environment of every exec (name -> value), including the egress gateway's proxy
  // and trust-store variables and one placeholder per granted secret (never its value).
  std::map<std::string, std::string> env;
  // What the sandbox was granted at creation (docs/egress.md).
  struct Egress {
    std::vector<std::string> allow;    // --allow narrowing (empty = the whole profile)
    std::vector<std::string> secrets;  // names of granted secrets
  } egress;
  // Destroyed sandboxes only: when, and why (`reason` is on the wire only with destroyed_at).
  std::optional<double> destroyed_at;
  std::string reason;
  // Live sandboxes only.
  std::optional<int64_t> host_pid;  // the host pid of its agent (or VM monitor)
  // microVM runtimes: the runtime's own details (runtime::Instance::details(): accelerator,
  // accelerator_note, template ...), kept as the JSON text the runtime wrote. Free-form by
  // design: each runtime says what it has, and the API passes it on as it is.
  std::optional<std::string> vm_json;
  // Current resource usage of a live sandbox (GET only; not in the create answer).
  std::optional<runtime::Usage> usage;
  // POST .../rollback only (schema RolledBackSandbox).
  struct Rollback {
    std::string snapshot;                 // the snapshot rolled back to (its id)
    std::optional<std::string> saved_as;  // the state just before (null if none was taken)
    std::string processes;                // restarted | resumed
  };
  std::optional<Rollback> rollback;
  std::optional<std::string> restored_from;  // POST /v1/snapshots/{snap}/restore only
  // CreateRequest::metadata and ::pause_on_timeout (E2B's metadata and autoPause).
  std::map<std::string, std::string> metadata;
  bool pause_on_timeout = false;
};

// A snapshot (schema Snapshot).
struct SnapshotInfo {
  std::string id;       // snap_<hex>
  std::string sandbox;  // the sandbox it was taken of (it may be gone)
  std::string profile;
  std::optional<std::string> name;  // null if unnamed
  // manual | scheduled | exec | rollback (the state saved just before a rollback)
  std::string kind;
  double created_at = 0;
  std::optional<double> expires_at;   // when retention drops it (null = never)
  std::optional<std::string> parent;  // the snapshot it is incremental to
  std::string runtime;
  std::string image;
  uint64_t files = 0;
  uint64_t logical_bytes = 0;  // size of the files it holds
  uint64_t new_bytes = 0;      // bytes stored for it that no earlier snapshot had
  uint64_t reused_files = 0;
  // filesystem: the writable layer's files (linux). machine: a microVM's whole machine, its
  // RAM and device state and its disk (qemu).
  std::string contents;
  // restarted: processes start afresh after a rollback or restore. resumed: they go on
  // where they were (machine snapshots).
  std::string processes;
  std::vector<std::string> skipped;  // "path: why" for each file that could not be captured
};

// A process inside a sandbox (schema Process).
struct ProcessInfo {
  int64_t pid = 0;              // pid inside the sandbox
  std::optional<int64_t> ppid;  // null when the agent did not say
  std::optional<int64_t> uid;   // uid inside the sandbox; null when the agent did not say
  std::string state;            // R, S, D, Z, T, ... as in /proc/PID/stat ("?" if unknown)
  std::vector<std::string> argv;
  // The exec stream the API started this process on (null for its children).
  std::optional<int64_t> stream;
};

// Files added, changed and deleted (schema Diff): absolute paths, sorted.
struct Diff {
  std::vector<std::string> added;
  std::vector<std::string> changed;
  std::vector<std::string> deleted;
};

// An image (schema Image).
struct ImageInfo {
  std::string name;
  std::string kind;  // host | imported | built
  double created_at = 0;
  uint64_t size_bytes = 0;
  uint64_t files = 0;
  std::string format;  // rootfs | oci | docker | dockerfile (built); "" for host
  std::string digest;  // sha256:... of the manifest it came from (docker: its config); or ""
  // The image config's defaults for its sandboxes (docs/images.md, "The image config").
  struct Config {
    std::vector<std::string> env;  // "K=V"
    std::string working_dir, user;
    std::vector<std::string> entrypoint, cmd;
    std::map<std::string, std::string> labels;
  } config;
};

// An image's ext4 disk for the VM runtimes (POST /v1/images/{name}/vm, the "done" event).
struct VmDiskInfo {
  std::string name;         // the image
  std::string path;         // the disk file on the host
  uint64_t size_bytes = 0;  // apparent size of the (sparse) file
  bool cached = false;      // the existing disk was current and was reused
};

// An event of a sandbox's audit log (schema AuditEvent; docs/audit.md).
struct AuditEvent {
  std::string sandbox_id;
  int64_t seq = 0;   // 1, 2, 3 ... per sandbox, without gaps
  double ts = 0;     // unix seconds (also on the wire as "time", RFC 3339)
  std::string kind;  // sandbox.create, exec.start, file.write, ... (docs/audit.md)
  // The kind-specific fields: a JSON object, as text. Free-form by design (each kind has its
  // own, and the audit log stores them as written), so it stays JSON and the API passes it on.
  std::string data_json = "{}";
  std::string hash;  // hex HMAC-SHA256 chaining this event to the previous
};

// A verification of a sandbox's audit hash chain (schema AuditVerification).
struct AuditVerdict {
  bool ok = true;
  int64_t events = 0;                    // events examined
  std::optional<int64_t> first_bad_seq;  // the first that does not check (null: none)
  std::optional<std::string> problem;    // what is wrong there (absent when ok)
};

// GET /v1/health.
struct Health {
  std::string status = "ok";
  std::string version;     // spaced's version
  bool draining = false;   // the node is draining (no creates, no restores)
  uint64_t sandboxes = 0;  // live sandboxes (those the caller may see)
  double uptime_s = 0;
  int64_t pid = 0;  // spaced's pid
};

// This host as a cluster node (schema Node; GET /v1/node).
struct NodeInfo {
  std::string name;  // node.name; "" on a host that is not a cluster node
  std::string url;   // node.url, where gateways reach this node
  std::map<std::string, std::string> labels;
  bool draining = false;
  std::vector<std::string> runtimes;
  bool kvm = false;  // whether microVMs can use KVM here
  struct Cpus {
    int64_t total = 0;
    double allocated = 0;  // the CPU limits of live sandboxes, summed
  } cpus;
  struct Memory {
    uint64_t total_bytes = 0;
    uint64_t allocated_bytes = 0;  // the memory limits of live sandboxes, summed
  } memory;
  struct Sandboxes {
    uint64_t running = 0;
    uint64_t paused = 0;
    uint64_t max = 0;
  } sandboxes;
  // A warm pool (docs/pools.md): sandboxes made ahead for a template.
  struct Warm {
    std::string runtime;
    std::string image;
    std::string profile;
    uint64_t memory = 0;  // bytes
    double cpus = 0;
    uint64_t ready = 0;  // sandboxes waiting in it
  };
  std::vector<Warm> warm;
  std::optional<std::string> snapshot_store;  // cluster.store (null: none)
  std::string version;
};

// What a drain did (schema DrainReport; POST /v1/node/drain). The API adds "exiting".
struct DrainResult {
  std::string node;
  // One per sandbox the drain found still live.
  struct Item {
    std::string id;
    std::optional<std::string> snapshot;  // the snapshot its files were saved in
    std::optional<bool> pushed;           // whether it reached the shared store (when one is set)
    bool destroyed = false;
    std::optional<std::string> error;  // why it was left running
  };
  std::vector<Item> sandboxes;
  uint64_t left_running = 0;  // sandboxes the drain could not move
};

}  // namespace space::daemon
