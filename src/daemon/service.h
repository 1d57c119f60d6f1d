// The sandbox service: everything the REST API (src/api) can ask of the daemon. The API layer
// parses and validates HTTP requests into these types, calls the service, and renders results
// and errors; the daemon (src/daemon/daemon.cc) implements it. Results are typed structs
// (service_types.h); their JSON is made in src/api/views.cc, once. Keeping the interface here lets
// the API be tested against a test double and lets a second front end (gRPC, say) reuse it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "daemon/service_types.h"
#include "runtime/runtime.h"

namespace space::daemon {

struct CreateRequest {
  std::string runtime = "linux";  // linux | qemu | firecracker
  std::string image = "host";
  std::string profile = "test";
  runtime::Limits limits;
  // Which of limits' fields the request set (memory, cpus, pids, disk); the others take the
  // config's "defaults".
  std::array<bool, 4> limits_given{};
  std::optional<double> timeout_s;  // lifetime; destroyed when it expires
  // Destroyed once no API call touched it and no exec stream was open for this long: a
  // sandbox whose client died (`space run` killed with SIGKILL) does not outlive it for long.
  std::optional<double> idle_timeout_s;
  std::vector<std::string> env;      // "K=V", default environment of every exec
  std::vector<std::string> secrets;  // credential names granted (egress issue)
  std::vector<std::string> allow;    // HOST[:PORT] narrowing the profile's egress allowlist
  std::string workdir = "/root";     // default cwd of execs
  // Whether the caller chose `workdir`; if not, an image's WorkingDir replaces it.
  bool workdir_given = false;
  // Rolling snapshots: take one this often (seconds) while the sandbox lives. Unset = the
  // profile's default ("snapshot_every" in the config); 0 = never.
  std::optional<double> snapshot_every_s;
  // The caller's own labels (E2B's sandbox metadata, docs/e2b.md): kept with the sandbox and
  // its snapshots, never seen inside it. At most kMaxMetadataEntries, keys of 1-256 bytes,
  // values of at most 4096.
  std::map<std::string, std::string> metadata;
  // When the lifetime (timeout_s) expires, pause the sandbox instead of destroying it (E2B's
  // autoPause); it then stays paused until resumed or destroyed, for 7 days at most.
  bool pause_on_timeout = false;
};
inline constexpr size_t kMaxMetadataEntries = 64;

struct ExecRequest {
  // Empty: the sandbox's default command, its image's Entrypoint + Cmd (docs/images.md);
  // kInvalidArgument where the image has none.
  std::vector<std::string> argv;
  std::vector<std::string> env;     // "K=V", added to the sandbox's env
  std::string cwd;                  // empty = the sandbox's workdir
  std::optional<double> timeout_s;  // kill the exec's process tree after this long
  // Start and return once it runs; spaced keeps its output (the last kExecLogBytes) and its
  // end for SandboxService::exec_log (GET .../processes/{pid}/logs and /wait).
  bool detach = false;
  bool stdin = false;     // the client will stream stdin
  bool snapshot = false;  // take a snapshot (kind "exec") before it starts
  // A pseudo-terminal for its stdin, stdout and stderr (all output comes as stdout), of
  // rows x cols; ExecSession::resize changes it.
  bool tty = false;
  uint16_t rows = 24, cols = 80;
  // Run as this user: a name in the sandbox's /etc/passwd, "UID" or "UID:GID" (the agent
  // resolves it). Empty: root of the sandbox, or with image_user its image's User if it names
  // one.
  std::string user;
  // Whether an empty `user` means the image config's User: set by SPACE's REST API (the CLI,
  // the SDKs); E2B's door names its users itself and spaced's own execs run as root.
  bool image_user = false;
};

// `space image build` (POST /v1/images/{name}/build, docs/images.md "Building from a
// Dockerfile"): the build context arrives as a tar stream; these are the rest of its options.
struct BuildRequest {
  std::string dockerfile = "Dockerfile";  // a path inside the context
  // The profile whose sandboxes run the RUN steps (egress allowlist, credentials): "" = the
  // profile named "build" when spaced's config has one, else "test".
  std::string profile;
  std::map<std::string, std::string> build_args;  // --build-arg K=V
  std::vector<std::string> secrets;      // credential names granted to RUN steps (the gateway's)
  std::vector<std::string> allow;        // HOST[:PORT] narrowing the profile's allowlist
  bool no_cache = false;                 // run every step even where the cache has it
  std::optional<double> step_timeout_s;  // each RUN's limit (default: 30 minutes)
};
inline constexpr double kDefaultBuildStepTimeoutS = 1800;

// What a build reports as it goes, on the calling thread, in this order per step: kStep, then
// (for a RUN that runs) kOutput chunks, then kStepDone. kWarning may come before the first step.
struct BuildEvent {
  enum class Kind { kStep, kOutput, kStepDone, kWarning } kind = Kind::kStep;
  size_t step = 0, of = 0;  // 1-based: FROM is step 1, `of` counts every instruction
  std::string text;         // kStep: the instruction; kOutput: bytes; kWarning: the message
  bool is_stderr = false;   // kOutput
  bool cached = false;      // kStep, kStepDone: the step's result came from the build cache
  double duration_s = 0;    // kStepDone
};

struct ExitStatus {
  std::optional<int> exit_code;  // set if the process exited
  std::optional<int> signal;     // set if it was killed by a signal
  bool core_dumped = false;
  bool timed_out = false;   // killed because --timeout expired
  bool oom_killed = false;  // the sandbox's memory limit killed a process meanwhile
  std::string error;        // set if the program could not be started
  double duration_s = 0;
  // The code a shell would give: exit_code, or 128+signal.
  int shell_code() const { return exit_code ? *exit_code : 128 + signal.value_or(0); }
};

// One running exec, as its HTTP handler sees it. Thread-safe: one thread may feed stdin while
// another reads events.
class ExecSession {
 public:
  virtual ~ExecSession() = default;  // if the exec has not ended: kills its process tree

  struct Event {
    enum class Kind { kStarted, kStdout, kStderr, kExit } kind;
    std::string data;      // stdout/stderr bytes
    int pid = 0;           // kStarted: pid inside the sandbox
    ExitStatus exit;       // kExit
    std::string snapshot;  // kStarted: the snapshot taken before the exec, if asked
  };
  // Blocks for the next event. After kExit it returns kExit again. An error means the sandbox
  // went away (destroyed, agent lost).
  virtual Result<Event> next() = 0;
  // Tells the agent that `bytes` of stdout/stderr were delivered to the client (flow control).
  // Call after writing each kStdout/kStderr event out.
  virtual void consumed(size_t bytes) = 0;
  virtual Result<void> write_stdin(std::string_view bytes) = 0;
  virtual Result<void> close_stdin() = 0;
  virtual void signal(int sig) = 0;
  // Kills its process tree for a reason of spaced's own (spaced stopping), which its exec.end
  // audit event records as "stopped", so that it does not read like an OOM kill.
  virtual void stop(const std::string& why) { signal(9); }
  // A new size of its terminal (ExecRequest::tty); nothing otherwise.
  virtual void resize(uint16_t rows, uint16_t cols) {}
};

// What spaced keeps of a command started with "detach": its output as it arrived (stdout and
// stderr interleaved, the last kExecLogBytes of them) and how it ended. Thread-safe.
inline constexpr size_t kExecLogBytes = 1 << 20;
// Detached commands kept per sandbox (running or ended); the oldest ended one makes room.
inline constexpr size_t kExecLogsPerSandbox = 64;
// The most one ExecLog::read returns.
inline constexpr size_t kExecLogReadBytes = 64 << 10;

class ExecLog {
 public:
  virtual ~ExecLog() = default;
  struct Chunk {
    bool is_stderr = false;
    std::string data;
  };
  struct Read {
    std::vector<Chunk> chunks;
    uint64_t dropped = 0;  // bytes after the cursor that were no longer kept
    bool ended = false;    // nothing more will come: `exit` or `error` says how it ended
    std::optional<ExitStatus> exit;
    std::optional<Error> error;  // ended without an exit status (its sandbox went away)
    bool more = false;  // cut at kExecLogReadBytes: more is kept after the cursor (read again)
  };
  // The output after byte offset `cursor` of all output so far (stdout and stderr counted
  // together), at most kExecLogReadBytes of it, advancing the cursor past what is returned
  // (so a follower holds at most that much of a copy, however slowly it reads). With nothing
  // new and the command still running, waits for output or its end until `until`.
  virtual Read read(uint64_t& cursor, std::chrono::steady_clock::time_point until) = 0;
  // Waits until the command ended or `until`; true if it ended.
  virtual bool wait(std::chrono::steady_clock::time_point until) = 0;
  virtual int pid() const = 0;
};

// Streams a file from the sandbox: called with chunks of bytes; return false to abort.
using ChunkSink = std::function<bool(std::string_view)>;
// Pulls bytes to write into the sandbox: fills `out` (clears it first); an empty `out` with
// a success result means end of input.
using ChunkSource = std::function<Result<void>(std::string& out)>;

struct FileStat {
  std::string type;  // file | dir | symlink | other
  uint32_t mode = 0;
  uint64_t size = 0;
  std::string target;  // symlink target
};

// One entry of a directory listing.
struct DirEntry {
  std::string name;  // the entry's name in the directory
  FileStat stat;
  int64_t mtime = 0;  // seconds since the epoch
};
// The most entries GET files?list=true answers (more is a resource_exhausted error).
inline constexpr size_t kMaxListEntries = 100'000;

// POST /v1/sandboxes/{id}/snapshots. Names are unique within a profile: 1-64 characters of
// [A-Za-z0-9._-], starting with a letter or digit, and never "snap_..." (that is an id).
struct SnapshotRequest {
  std::string name;  // "" = unnamed
};

class SandboxService {
 public:
  virtual ~SandboxService() = default;

  virtual Result<SandboxInfo> create(const CreateRequest& req) = 0;
  virtual Result<std::vector<SandboxInfo>> list() = 0;
  virtual Result<SandboxInfo> inspect(const std::string& id) = 0;
  // force: also while an exec stream is open (a command with its client attached); without
  // it that is a kConflict. Processes running detached or in the background never block it.
  // wait = false: return once
  // the sandbox is unreachable (no API operation finds it, its egress is cut, its record says
  // "destroying"); its processes are killed and its resources removed in the background
  // (docs/pools.md, "Destroying in the background").
  virtual Result<void> destroy(const std::string& id, bool force, bool wait = true) = 0;
  // A TCP connection to 127.0.0.1:`port` inside the sandbox (what `space port` forwards to).
  virtual Result<UniqueFd> connect_port(const std::string& id, uint16_t port) = 0;
  // A new lifetime: the sandbox now expires `timeout_s` from now (within the daemon's maximum).
  virtual Result<SandboxInfo> set_timeout(const std::string& id, double timeout_s) = 0;

  virtual Result<std::unique_ptr<ExecSession>> exec(const std::string& id,
                                                    const ExecRequest& req) = 0;
  // Processes inside the sandbox.
  virtual Result<std::vector<ProcessInfo>> processes(const std::string& id) = 0;
  virtual Result<void> kill(const std::string& id, int pid, int sig) = 0;
  // The kept output and end of the detached command `pid` (ExecRequest::detach).
  virtual Result<std::shared_ptr<ExecLog>> exec_log(const std::string& id, int pid) {
    return fail(Code::kUnimplemented, "this service keeps no output of detached commands");
  }

  virtual Result<FileStat> stat(const std::string& id, const std::string& path) = 0;
  // The entries of directory `path` (not recursive), in directory order; at most
  // kMaxListEntries.
  virtual Result<std::vector<DirEntry>> list_dir(const std::string& id,
                                                 const std::string& path) = 0;
  // A regular file's bytes, or (dir) a tar archive of the directory tree.
  virtual Result<void> read_file(const std::string& id, const std::string& path,
                                 const ChunkSink& sink) = 0;
  virtual Result<void> read_tar(const std::string& id, const std::string& path,
                                const ChunkSink& sink) = 0;
  // Writes a regular file (created or truncated) with `mode`.
  // parents: create missing parent directories (mode 0755) first.
  virtual Result<void> write_file(const std::string& id, const std::string& path, uint32_t mode,
                                  const ChunkSource& source, bool parents = false) = 0;
  // Extracts a tar archive into directory `path` (created if missing). Entries are resolved
  // inside the sandbox; absolute names and ".." are refused.
  virtual Result<void> write_tar(const std::string& id, const std::string& path,
                                 const ChunkSource& source) = 0;
  virtual Result<void> remove(const std::string& id, const std::string& path, bool recursive) = 0;

  // Files added, changed and deleted since creation.
  virtual Result<Diff> diff(const std::string& id) = 0;

  virtual Result<void> pause(const std::string& id) = 0;
  virtual Result<void> resume(const std::string& id) = 0;

  // Snapshots (docs/snapshots.md). `snap` is a snapshot id or name. Services without a
  // snapshot store answer kUnimplemented.
  //
  // Takes a snapshot of a live sandbox (its processes are frozen meanwhile).
  virtual Result<SnapshotInfo> snapshot(const std::string& id, const SnapshotRequest& req) {
    return fail(Code::kUnimplemented, "this service keeps no snapshots");
  }
  // The snapshots of a sandbox, live or destroyed, newest first.
  virtual Result<std::vector<SnapshotInfo>> list_snapshots(const std::string& id) {
    return fail(Code::kUnimplemented, "this service keeps no snapshots");
  }
  // Every snapshot the service keeps, newest first.
  virtual Result<std::vector<SnapshotInfo>> all_snapshots() {
    return fail(Code::kUnimplemented, "this service keeps no snapshots");
  }
  virtual Result<SnapshotInfo> get_snapshot(const std::string& snap) {
    return fail(Code::kUnimplemented, "this service keeps no snapshots");
  }
  virtual Result<void> delete_snapshot(const std::string& snap) {
    return fail(Code::kUnimplemented, "this service keeps no snapshots");
  }
  // Puts a live sandbox back to a snapshot of the same profile and image, in place under the
  // same id: its processes are stopped, its writable layer replaced, its agent restarted.
  // Returns the sandbox with its `rollback` set: the snapshot rolled back to and the one
  // saved of the state just before.
  virtual Result<SandboxInfo> rollback(const std::string& id, const std::string& snap) {
    return fail(Code::kUnimplemented, "this service keeps no snapshots");
  }
  // A new sandbox of the snapshot's profile, image and settings, holding its files. `profile`,
  // if set, must be the snapshot's own (a snapshot never restores into another profile).
  // Returns the new sandbox with its `restored_from` set.
  virtual Result<SandboxInfo> restore(const std::string& snap,
                                      const std::optional<std::string>& profile) {
    return fail(Code::kUnimplemented, "this service keeps no snapshots");
  }
  // Like diff(), but against a snapshot of the sandbox's profile instead of its creation.
  virtual Result<Diff> diff_since(const std::string& id, const std::string& snap) {
    return fail(Code::kUnimplemented, "this service keeps no snapshots");
  }

  // Images. import_image reads a tar archive (plain, gzip, xz or zstd) of a root filesystem.
  virtual Result<ImageInfo> import_image(const std::string& name, const ChunkSource& source) = 0;
  virtual Result<std::vector<ImageInfo>> list_images() = 0;
  virtual Result<void> remove_image(const std::string& name) = 0;
  // Builds image `name` from a Dockerfile in the build context `context` (a tar stream),
  // reporting each step through `progress` (docs/images.md). Any failure leaves no image and
  // no staging files; steps that completed stay in the build cache.
  virtual Result<ImageInfo> build_image(const std::string& name, const BuildRequest& req,
                                        const ChunkSource& context,
                                        const std::function<void(const BuildEvent&)>& progress) {
    return fail(Code::kUnimplemented, "building images is not supported by this service");
  }
  // Builds (or reuses) the image's ext4 disk for VM runtimes (Images::build_vm); `progress`
  // gets one line per step, on the calling thread.
  virtual Result<VmDiskInfo> build_image_vm(
      const std::string& name, const std::function<void(const std::string&)>& progress) {
    return fail(Code::kUnimplemented, "building VM disks is not supported by this service");
  }

  // The audit log of a sandbox, live or destroyed (docs/audit.md): events with seq > after,
  // oldest first, at most `limit`; and a verification of its hash chain. Services without an
  // audit log answer kUnimplemented.
  virtual Result<std::vector<AuditEvent>> audit_events(const std::string& id, int64_t after,
                                                       size_t limit) {
    return fail(Code::kUnimplemented, "this service keeps no audit log");
  }
  virtual Result<AuditVerdict> audit_verify(const std::string& id) {
    return fail(Code::kUnimplemented, "this service keeps no audit log");
  }

  virtual Health health() = 0;
  virtual std::string metrics() = 0;  // Prometheus text exposition format
  // The one result left as JSON: a free-form report assembled from each runtime's doctor() JSON.
  virtual nlohmann::json doctor() = 0;

  // This host as a cluster node (docs/cluster.md, GET /v1/node): name, url, labels, draining,
  // runtimes, kvm, cpus/memory allocated and total, sandboxes running and max, warm sandboxes
  // per template.
  virtual Result<NodeInfo> node_info() {
    return fail(Code::kUnimplemented, "this service is not a cluster node");
  }
  // Stops admitting creates and restores, snapshots every sandbox (pushing each to the shared
  // store when one is configured) and destroys it; answers what became of each. Sandboxes
  // that could not be snapshotted are left running and listed.
  virtual Result<DrainResult> drain() {
    return fail(Code::kUnimplemented, "this service is not a cluster node");
  }
};

}  // namespace space::daemon
