// Shared host-side helpers of the microVM runtimes; see vm_host.h.
#include "runtime/vm_host.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <deque>
#include <fstream>
#include <sstream>

#include "common/fd.h"
#include "host/limits.h"
#include "host/syscalls.h"

namespace space::runtime::vm {
namespace fs = std::filesystem;
using nlohmann::json;

Result<fs::path> find_in_path(const fs::path& prog) {
  if (prog.is_absolute()) {
    if (::access(prog.c_str(), X_OK) != 0) return fail_sys("access", prog.string());
    return prog;
  }
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::stringstream ss(p);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    fs::path cand = fs::path(dir) / prog;
    if (::access(cand.c_str(), X_OK) == 0) return fs::canonical(cand);
  }
  return fail(Code::kUnavailable, prog.string() + " not found in PATH");
}

Result<void> run_tool(const std::vector<std::string>& argv, const fs::path& log,
                      std::chrono::milliseconds timeout) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  char* env[] = {const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), nullptr};
  int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), env);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return fail_sys("posix_spawn", argv[0], rc);
  bool timed_out = false;
  if (timeout.count() > 0) {
    // Our own unreaped child: its pid cannot be reused before the waitpid below.
    UniqueFd pidfd(host::sys_pidfd_open(pid));
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      pollfd pfd{pidfd.get(), POLLIN, 0};
      int r = pidfd ? ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left, 0))) : 0;
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {  // the deadline passed (or no pidfd to wait on: stop at once)
        timed_out = true;
        ::kill(pid, SIGKILL);
      }
      break;
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return fail_sys("waitpid", argv[0]);
  }
  if (timed_out)
    return fail(Code::kTimeout, argv[0] + " did not finish within " +
                                    std::to_string(timeout.count()) +
                                    " ms (killed); its output "
                                    "is in " +
                                    log.string());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(Code::kInternal, argv[0] + " failed (status " + std::to_string(status) +
                                     "); its output is in " + log.string());
  return {};
}

Result<void> make_writable_disk(const fs::path& path, const Limits& limits, const fs::path& log) {
  UniqueFd f(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!f) return fail_sys("open", path.string());
  if (::ftruncate(f.get(), static_cast<off_t>(limits.disk_bytes)) != 0)
    return fail_sys("ftruncate", path.string());
  f.reset();
  return run_tool({"mke2fs", "-q", "-F", "-t", "ext4", "-L", "space-rw", "-m", "0", "-O",
                   "^has_journal", "-N", std::to_string(host::layer_inodes(limits)), "-E",
                   "lazy_itable_init=1,nodiscard", path.string()},
                  log);
}

json disk_identity(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return nullptr;
  return {{"dev", static_cast<uint64_t>(st.st_dev)},
          {"ino", static_cast<uint64_t>(st.st_ino)},
          {"size", static_cast<int64_t>(st.st_size)},
          {"mtime_ns", static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec}};
}

Result<void> write_machine_file(int dir_fd, const char* name, const json& j) {
  UniqueFd m(::openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!m) return fail_sys("openat", name);
  std::string text = j.dump();
  if (::write(m.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return fail_sys("write", name);
  return {};
}

Result<json> read_machine_file(int dir_fd, const char* name) {
  UniqueFd m(::openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!m) return fail_sys("openat", name);
  char buf[4096];
  ssize_t n = ::read(m.get(), buf, sizeof buf);
  json j = json::parse(std::string_view(buf, n > 0 ? static_cast<size_t>(n) : 0), nullptr, false);
  if (!j.is_object()) return fail(Code::kProtocol, std::string(name) + " is not a JSON object");
  return j;
}

std::string image_changed(const std::string& image) {
  return "the saved machine ran on another build of image \"" + image +
         "\"'s VM disk (`space image build-vm` has rebuilt it since) or with other limits: "
         "a VM snapshot resumes only on the disk it was saved with, so the snapshots taken "
         "before the rebuild cannot be restored any more; start a new sandbox instead";
}

std::string tail_of(const fs::path& p, size_t n) {
  std::ifstream in(p);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    for (char& c : line)
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t') c = ' ';
    if (line.size() > 200) line.resize(200);
    lines.push_back(std::move(line));
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (auto& l : lines) out += "\n  | " + l;
  return out;
}

}  // namespace space::runtime::vm
