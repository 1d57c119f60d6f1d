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
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

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

}  // namespace space
