// libFuzzer target: the agent's handling of daemon requests that is separable from its event
// loop (src/agent/): exec specs (parse_exec_spec, exec_candidates, describe_start_failure),
// request fields as agent_requests.cc reads them (parse_object, opt_*/req_string,
// check_sandbox_path, split_parent), and path resolution inside a root (path_resolver.cc).
//
// The resolver part is differential and checks the containment property: a scratch root full
// of hostile symlinks ("..", absolute, loops, a relative link to a sibling directory outside
// the root) is resolved with the userspace walk and with openat2(RESOLVE_IN_ROOT); neither may
// ever open the file or directory outside the root, and when both succeed they must open the
// same inode. The first byte of the input picks the part.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "agent/exec_spec.h"
#include "agent/path_resolver.h"
#include "agent/response.h"

namespace agent = space::agent;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path dir;
  int root_fd = -1;
  struct stat outside_dir {
  }, outside_file{};

  Scratch() {
    char tmpl[] = "/tmp/space-fuzz-root-XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    dir = tmpl;
    fs::create_directories(dir / "root/a/b");
    fs::create_directories(dir / "outside");
    write(dir / "outside/secret");
    write(dir / "root/a/f");
    write(dir / "root/a/b/g");
    link("/a", "root/abs");
    link("../../..", "root/a/b/up");
    link("../outside", "root/out");
    link("../../outside/secret", "root/a/sec");
    link(dir.string() + "/outside/secret", "root/hostabs");
    link("loop", "root/loop");
    link("a/b/up/out", "root/chain");
    link("/proc/self/root", "root/magic");
    link("/proc/self/fd", "root/fds");
    link("a/b/../../abs/f", "root/back");
    root_fd = ::open((dir / "root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0 || ::stat((dir / "outside").c_str(), &outside_dir) != 0 ||
        ::stat((dir / "outside/secret").c_str(), &outside_file) != 0) {
      std::abort();
    }
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  static void write(const fs::path& p) {
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) std::abort();
    ::close(fd);
  }
  void link(const std::string& target, const char* at) { fs::create_symlink(target, dir / at); }
  bool outside(const struct stat& st) const {
    return (st.st_dev == outside_dir.st_dev && st.st_ino == outside_dir.st_ino) ||
           (st.st_dev == outside_file.st_dev && st.st_ino == outside_file.st_ino);
  }
};

Scratch& scratch() {
  static Scratch s;
  return s;
}

void fuzz_exec_spec(std::string_view payload) {
  auto spec = agent::parse_exec_spec(payload);
  if (!spec) return;
  if (spec->argv.empty()) std::abort();
  for (const auto& c : agent::exec_candidates(*spec)) (void)c.size();
  (void)agent::describe_start_failure(*spec, agent::WorkerStep::kExec, ENOENT);
  (void)agent::describe_start_failure(*spec, agent::WorkerStep::kChdir, EACCES);
}

void fuzz_request(std::string_view payload) {
  auto o = agent::parse_object(payload);
  if (!o) return;
  (void)agent::req_string(*o, "op");
  if (auto path = agent::req_string(*o, "path")) {
    if (agent::check_sandbox_path(*path)) {
      if (auto parts = agent::split_parent(*path)) {
        const auto& [parent, name] = *parts;
        if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
          std::abort();
        }
        (void)parent;
      }
    }
  }
  (void)agent::opt_string(*o, "target");
  (void)agent::opt_int(*o, "mode", 0, 07777);
  (void)agent::opt_int(*o, "pid", 2, 4194304);
  (void)agent::opt_int(*o, "signal", 1, 64);
  (void)agent::opt_bool(*o, "parents", false);
  (void)agent::opt_bool(*o, "recursive", false);
}

void fuzz_resolve(std::string_view path, uint8_t flags_byte) {
  Scratch& s = scratch();
  int flags = O_RDONLY;
  if (flags_byte & 1) flags |= O_NOFOLLOW;
  if (flags_byte & 2) flags |= O_DIRECTORY;
  if (flags_byte & 4) flags = O_PATH | (flags & (O_NOFOLLOW | O_DIRECTORY));
  agent::PathResolver user(s.root_fd, agent::ResolveMode::kUserspace);
  agent::PathResolver kernel(s.root_fd, agent::ResolveMode::kOpenat2);
  auto a = user.open(path, flags);
  auto b = kernel.open(path, flags);
  struct stat sa {
  }, sb{};
  if (a && (::fstat(a->get(), &sa) != 0 || s.outside(sa))) std::abort();
  if (b && (::fstat(b->get(), &sb) != 0 || s.outside(sb))) std::abort();
  if (a && b && (sa.st_dev != sb.st_dev || sa.st_ino != sb.st_ino)) std::abort();
  if (auto p = user.open_parent(path)) {
    struct stat sp {};
    if (::fstat(p->dir.get(), &sp) != 0 || s.outside(sp)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view s(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      fuzz_exec_spec(s);
      break;
    case 1:
      fuzz_request(s);
      break;
    case 2:
      if (s.size() <= 8192) fuzz_resolve(s, data[0] >> 2);
      break;
  }
  return 0;
}
