// Starting spaced on demand (see daemon_start.h).
#include "cli/daemon_start.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>
#include <vector>

#include "cli/output.h"
#include "cli/signals.h"

extern char** environ;

namespace space::cli {
namespace fs = std::filesystem;

Result<fs::path> find_spaced() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path candidate = self.parent_path() / "spaced";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  const char* path = std::getenv("PATH");
  std::string_view dirs =
      path != nullptr ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin";
  while (!dirs.empty()) {
    size_t colon = dirs.find(':');
    std::string_view dir = dirs.substr(0, colon);
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (dir.empty()) continue;
    fs::path candidate = fs::path(dir) / "spaced";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return fail(Code::kUnavailable,
              "no `spaced` executable next to space or in PATH; install SPACE (make install) "
              "or start the daemon yourself");
}

Result<Connection> ensure_daemon(const Client& client) {
  const std::string& socket = client.socket_path();
  auto conn = client.connect();
  if (conn) return conn;
  if (conn.error().code() != Code::kUnavailable) return fail(std::move(conn.error()));
  // A daemon behind a TCP address is someone else's to start.
  if (is_tcp_address(socket)) return fail(std::move(conn.error()));

  fs::path spaced = TRY_CTX(find_spaced(), "no daemon at " + socket);
  // Detached: own session, stdio on /dev/null, default signal dispositions and mask (ours
  // block SIGINT/SIGTERM and ignore SIGPIPE, which the daemon must not inherit).
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);  // nothing else of ours leaks in
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::string program = spaced.native();
  std::vector<char*> argv = {program.data(), const_cast<char*>("--socket"),
                             const_cast<char*>(socket.c_str()), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, program.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return fail(Error::sys("posix_spawn", "\"" + program + "\"", rc));

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (received_signal() != 0) {
      return fail(Code::kUnavailable, "interrupted while waiting for spaced (pid " +
                                          std::to_string(pid) + ") to start");
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      std::string how = WIFEXITED(status) ? "with status " + std::to_string(WEXITSTATUS(status))
                                          : "killed by signal " + std::to_string(WTERMSIG(status));
      return fail(Code::kUnavailable, "started " + program + " but it exited " + how +
                                          " before answering; run `" + program + " --socket " +
                                          socket + "` in a terminal to see why");
    }
    auto health = client.call("GET", "/v1/health");
    if (health) {
      write_all(STDERR_FILENO,
                "space: started spaced (pid " + std::to_string(pid) + ") on " + socket + "\n");
      return client.connect();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return fail(Code::kTimeout, "started " + program + " (pid " + std::to_string(pid) +
                                  ") but it did not answer on " + socket +
                                  " within 10 s; its log is in its state directory");
}

}  // namespace space::cli
