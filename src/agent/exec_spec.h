// The `exec` frame's payload, validated, and what the worker needs to run it: the execve
// candidates for argv[0] along the exec's own PATH (execvp's rules, but with the PATH of the
// exec's environment, not the agent's empty one), and the message for a failed start.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::agent {

inline constexpr size_t kMaxExecArgs = 65536;  // argv + env entries
inline constexpr const char* kDefaultPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct ExecSpec {
  std::vector<std::string> argv;  // non-empty, no NUL bytes
  std::vector<std::string> env;   // "K=V", no NUL bytes
  std::string cwd = "/";
  uint32_t uid = 0;  // 0 = keep the agent's (sandbox root)
  uint32_t gid = 0;
  // "user": a name in the sandbox's /etc/passwd, "UID" or "UID:GID"; resolved by apply_user()
  // into uid/gid (and HOME, USER, LOGNAME and the default cwd). Empty: uid/gid as given.
  std::string user;
  bool cwd_given = false;
  bool stdin_pipe = false;  // false: stdin is /dev/null
  bool detach = false;      // true: /dev/null for all three streams
  // A pseudo-terminal for stdin, stdout and stderr (all output comes as stdout), the process
  // its session leader with the terminal as its controlling tty; `rows` x `cols` at first.
  bool tty = false;
  uint16_t rows = 24, cols = 80;
  // Extension (docs/agent-protocol.md): the agent acknowledges stdin bytes with `credit`
  // frames once they are written into the process's pipe.
  bool stdin_credit = false;
};

Result<ExecSpec> parse_exec_spec(std::string_view payload);

// Resolves spec.user against `passwd` (the sandbox's /etc/passwd text): sets uid and gid; for a
// name found there, also HOME, USER and LOGNAME unless env sets them, and the cwd (its home)
// unless the spec gave one. Numeric users need no entry (HOME "/", cwd "/" by default).
Result<void> apply_user(ExecSpec& spec, std::string_view passwd);

// Paths to try with execve for argv[0]: argv[0] itself if it has a '/', otherwise each PATH
// directory (from spec.env, kDefaultPath if unset; an empty entry means the cwd).
std::vector<std::string> exec_candidates(const ExecSpec& spec);

// Steps of the worker between fork and exec, reported with errno when one fails.
enum class WorkerStep : int32_t {
  kNone = 0,
  kDevNull = 1,
  kSetpgid = 2,
  kStdio = 3,
  kChdir = 4,
  kSetgroups = 5,
  kSetgid = 6,
  kSetuid = 7,
  kExec = 8,
  kTty = 9,  // setsid or TIOCSCTTY for the terminal
};

struct StartFailure {
  int exit_code;  // 127 (program not found) or 126
  Error error;
};
// `"python4": command not found` (127), `exec "/x": Permission denied (EACCES)` (126),
// `chdir "/nope": No such file or directory (ENOENT)` (126), ...
StartFailure describe_start_failure(const ExecSpec& spec, WorkerStep step, int err);

}  // namespace space::agent
