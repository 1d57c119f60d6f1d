// Running a host program once and collecting what it prints: `qemu-system-x86_64 --version`,
// mke2fs, debugfs. Never through a shell: the program is found by an explicit PATH search and
// started with its argv as given, so an argument holding `;`, `|` or `$(...)` is passed on
// literally. spaced is a multithreaded root process with sandbox and listener fds open, so the
// child is started with posix_spawn (glibc: clone(CLONE_VM | CLONE_VFORK), no code of ours runs
// between fork and exec), gets stdin from /dev/null, only fds 0-2 (closefrom(3)), default signal
// dispositions, an empty signal mask, a minimal environment unless one is given, and a process
// group of its own. run_program always leaves nothing behind: at the deadline, or as soon as the
// program itself exits, its whole process group is killed with SIGKILL, and the child is reaped
// before returning (no zombie). Output past the bound is read and dropped, never buffered.
//
// spawn_with_channel starts a long-lived helper instead (space-egress, spaced's gateway
// process; space-https, the CLI's TLS helper) with one end of a socket pair as its fd 3, the
// same way: posix_spawn, fds 0-3 only, default signals, an empty mask.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace space {

// The search path used when RunOptions does not name one: the usual system directories.
inline constexpr std::string_view kDefaultSearchPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

enum class StderrMode {
  kCapture,  // into RunResult::err, bounded like stdout
  kNull,     // to /dev/null
  kMerge,    // into stdout (one pipe, one bound): what a terminal would show
};

struct RunOptions {
  // The program is killed (with its process group) once this has passed since the start.
  std::chrono::milliseconds timeout{10'000};
  // At most this many bytes of each stream are kept; the rest is read and dropped.
  size_t max_output = 64 * 1024;
  // Keep the last max_output bytes instead of the first (error messages come at the end).
  // Memory stays bounded by twice max_output.
  bool keep_tail = false;
  StderrMode stderr_mode = StderrMode::kCapture;
  // The child's environment, "NAME=value" entries. Default: PATH=<search_path> and LC_ALL=C.
  std::optional<std::vector<std::string>> env;
  // Where a program name without '/' is looked for (colon-separated directories).
  std::string search_path = std::string(kDefaultSearchPath);
  // The child's working directory; empty: the caller's.
  std::string cwd;
};

struct RunResult {
  int exit_code = -1;  // the exit status when the program exited, else -1
  int signal = 0;      // the signal that killed it, else 0 (SIGKILL when timed_out)
  bool timed_out = false;
  std::string out;  // stdout (with stderr when StderrMode::kMerge)
  std::string err;  // stderr when StderrMode::kCapture
  bool out_truncated = false;
  bool err_truncated = false;

  bool exited_ok() const { return exit_code == 0 && !timed_out; }
  bool truncated() const { return out_truncated || err_truncated; }
  // "exited with 2", "killed by signal 9 (SIGKILL)", "timed out after 10000 ms (killed)".
  std::string describe_status(const RunOptions& opts = {}) const;
};

// How a child ended, from its waitpid() status, for messages: "exited with status 1", "was
// killed by signal KILL", "... (core dumped)"; "ended" for anything else.
std::string describe_wait_status(int status);

// Finds `program` as execvp would, but explicitly: a name with '/' is taken as is, another is
// looked for in each directory of `search_path`; it must be a regular file we may execute.
// kNotFound "program \"x\" not found in /usr/bin:/bin" when there is none.
[[nodiscard]] Result<std::string> find_program(std::string_view program,
                                               std::string_view search_path = kDefaultSearchPath);

// Runs argv[0] (found by find_program) with argv, waits for it to exit or for the deadline, and
// returns how it ended and what it printed. An error only when it could not be started (not
// found, spawn failure) or waited for; a non-zero exit, a signal or the deadline are results.
[[nodiscard]] Result<RunResult> run_program(const std::vector<std::string>& argv,
                                            const RunOptions& opts = {});

// The first line of what the program printed on stdout (stderr to /dev/null), without its line
// end; "" when it cannot be run or prints nothing. For `--version` probes (spaced's doctor, the
// Firecracker runtime), whatever the exit status.
std::string first_output_line(const std::vector<std::string>& argv,
                              std::chrono::milliseconds timeout = std::chrono::seconds(10),
                              std::string_view search_path = kDefaultSearchPath);

// --- Long-lived helpers with a channel ---

// The helper's end of the channel is always this fd.
inline constexpr int kChannelFd = 3;

enum class ChannelType { kStream, kSeqPacket };

struct ChannelOptions {
  ChannelType type = ChannelType::kStream;
  // The helper's environment, "NAME=value" entries. Default: PATH=<kDefaultSearchPath> and
  // LC_ALL=C (nothing of the caller's: secrets may come from its variables).
  std::optional<std::vector<std::string>> env;
  bool inherit_env = false;  // the caller's environment instead of `env`
  bool stdin_null = true;    // stdin from /dev/null; false: the caller's
  bool own_process_group = false;
};

// A started child, killed (SIGKILL) and reaped when destroyed unless released first.
class ChildProcess {
 public:
  ChildProcess() = default;
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  ChildProcess(ChildProcess&& o) noexcept : pid_(std::exchange(o.pid_, -1)) {}
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // The caller kills and reaps it from now on.
  pid_t release() { return std::exchange(pid_, -1); }
  // Sends `sig` (0: none, it is only waited for), waits for the child to end and returns its
  // waitpid() status (for describe_wait_status); 0 when none is held.
  int kill_and_wait(int sig);

 private:
  pid_t pid_ = -1;
};

struct SpawnedHelper {
  ChildProcess child;
  UniqueFd channel;  // the caller's end (close-on-exec)
};

// Starts `program` (a path, not searched for) with `argv` and one end of a new socket pair
// (AF_UNIX, `options.type`) as its fd 3, and nothing else of the caller's open but 0-2 (stdin
// /dev/null unless asked otherwise). The helper's end is moved above 3 first when the socket
// pair lands on 0-3: a plain dup2(3, 3) leaves close-on-exec set (glibc's spawn clears it only
// since 2.29), and the stdin action must not overwrite a source on 0. No code of ours runs in
// the child (posix_spawn); a helper that needs namespaces, ids or limits set before its exec is
// started by clone3 at its own site (runtime/vm_diff.cc).
[[nodiscard]] Result<SpawnedHelper> spawn_with_channel(const std::string& program,
                                                       const std::vector<std::string>& argv,
                                                       const ChannelOptions& options = {});

}  // namespace space
