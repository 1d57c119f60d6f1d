// Cgroup back ends (see cgroup.h): layout detection (with the v2 base: spaced's delegated
// subtree), the cgroup2 directory helper shared by the v2 back end and the unified part of
// hybrid hosts, CgroupV2 and CgroupV1.
#include "host/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <thread>

#include "host/host_files.h"

namespace space::host {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

std::string_view cgroup_mode_name(CgroupMode m) {
  switch (m) {
    case CgroupMode::kV2:
      return "v2";
    case CgroupMode::kV1:
      return "v1";
    case CgroupMode::kHybrid:
      return "hybrid";
  }
  return "?";
}

namespace {

constexpr uint64_t kCpuPeriodUs = 100000;
constexpr milliseconds kFreezeTimeout{5000};

std::string q(const fs::path& p) { return "\"" + p.string() + "\""; }

bool path_exists(const fs::path& p) { return ::access(p.c_str(), F_OK) == 0; }

// Polls `done` with a growing sleep until it is true or `timeout` passes.
template <class F>
Result<bool> poll_until(milliseconds timeout, F done) {
  auto deadline = steady_clock::now() + timeout;
  auto nap = std::chrono::microseconds(100);
  for (;;) {
    bool ok = TRY(done());
    if (ok) return true;
    if (steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(10));
  }
}

// mkdir <mount>/<parent> (shared by every sandbox, may exist) and then <mount>/<parent>/<id>
// (must not exist: a sandbox always gets a fresh cgroup). A concurrent destroy may remove an
// empty parent between the two mkdirs, hence the retry.
Result<fs::path> make_sandbox_dir(const fs::path& mount, const std::string& parent,
                                  const std::string& id,
                                  const std::function<Result<void>(const fs::path&)>& init_parent) {
  fs::path parent_dir = mount / parent;
  fs::path dir = parent_dir / id;
  for (int attempt = 0;; ++attempt) {
    if (::mkdir(parent_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return fail_sys("mkdir", q(parent_dir));
    }
    if (init_parent) TRY_VOID(init_parent(parent_dir));
    if (::mkdir(dir.c_str(), 0755) == 0) return dir;
    if (errno == ENOENT && attempt < 5) continue;
    return fail_sys("mkdir", q(dir));
  }
}

// rmdir of a sandbox cgroup: gone already is fine.
Result<void> remove_dir(const fs::path& dir) {
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return fail_sys("rmdir", q(dir));
  return {};
}

// The shared parent goes when its last sandbox does; another daemon (or a concurrent create)
// may still use it, so EBUSY/ENOTEMPTY are expected.
void remove_parent_if_empty(const fs::path& dir) { (void)::rmdir(dir.parent_path().c_str()); }

bool safe_component(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos;
}

// A directory in a cgroup2 hierarchy: the whole sandbox cgroup on v2, the controller-less
// kill/freeze cgroup on hybrid hosts.
class Cgroup2Dir {
 public:
  Cgroup2Dir() = default;
  explicit Cgroup2Dir(fs::path dir) : dir_(std::move(dir)) {
    fd_.reset(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    has_kill_ = path_exists(dir_ / "cgroup.kill");
    has_freeze_ = path_exists(dir_ / "cgroup.freeze");
  }
  bool valid() const { return !dir_.empty(); }
  const fs::path& dir() const { return dir_; }
  int fd() const { return fd_.get(); }
  bool has_kill() const { return has_kill_; }
  bool has_freeze() const { return has_freeze_; }

  Result<void> set_frozen(bool frozen) {
    TRY_VOID(write_text(dir_ / "cgroup.freeze", frozen ? "1" : "0"));
    const uint64_t want = frozen ? 1 : 0;
    bool ok = TRY(poll_until(kFreezeTimeout, [&]() -> Result<bool> {
      uint64_t v = TRY(read_keyed(dir_ / "cgroup.events", "frozen"));
      return v == want;
    }));
    if (!ok) {
      return fail(Code::kTimeout, std::string(frozen ? "freezing " : "thawing ") + q(dir_) +
                                      ": cgroup.events never showed frozen " +
                                      std::to_string(want));
    }
    return {};
  }
  Result<bool> frozen() const {
    uint64_t v = TRY(read_keyed(dir_ / "cgroup.events", "frozen"));
    return v == 1;
  }
  bool kill() { return has_kill_ && write_text(dir_ / "cgroup.kill", "1").has_value(); }
  Result<bool> empty() const {
    if (!path_exists(dir_)) return true;
    uint64_t populated = TRY(read_keyed(dir_ / "cgroup.events", "populated"));
    return populated == 0;
  }

 private:
  fs::path dir_;
  UniqueFd fd_;
  bool has_kill_ = false;
  bool has_freeze_ = false;
};

Result<void> wait_dirs_empty(std::vector<std::function<Result<bool>()>> checks,
                             milliseconds timeout, const std::string& what) {
  bool ok = TRY(poll_until(timeout, [&]() -> Result<bool> {
    for (auto& c : checks) {
      bool e = TRY(c());
      if (!e) return false;
    }
    return true;
  }));
  if (!ok)
    return fail(Code::kTimeout,
                "processes still in " + what + " after " + std::to_string(timeout.count()) + " ms");
  return {};
}

// ---------------------------------------------------------------------------------------------
// Pure cgroup2.

class CgroupV2 final : public Cgroup {
 public:
  explicit CgroupV2(fs::path dir) : cg_(std::move(dir)) {}

  static Result<void> enable_controllers(const fs::path& dir) {
    std::string available = TRY(read_text(dir / "cgroup.controllers"));
    std::string enabled = TRY(read_text(dir / "cgroup.subtree_control"));
    auto has = [](const std::string& list, std::string_view c) {
      size_t pos = 0;
      while ((pos = list.find(c, pos)) != std::string::npos) {
        bool start = pos == 0 || list[pos - 1] == ' ';
        size_t end = pos + c.size();
        bool stop = end == list.size() || list[end] == ' ' || list[end] == '\n';
        if (start && stop) return true;
        pos = end;
      }
      return false;
    };
    for (std::string_view c : {"memory", "pids", "cpu"}) {
      if (has(enabled, c)) continue;
      if (!has(available, c)) {
        if (c == "cpu") continue;  // optional: no cpu.max then
        return fail(Code::kUnavailable,
                    "cgroup controller " + std::string(c) + " is not available in " + q(dir));
      }
      auto r = write_text(dir / "cgroup.subtree_control", "+" + std::string(c));
      // cpu is refused while realtime threads sit in non-root cgroups: run without cpu.max then.
      if (!r && c != "cpu") return fail(std::move(r.error()));
    }
    return {};
  }

  Result<void> apply(const Limits& limits) {
    const fs::path& d = cg_.dir();
    TRY_VOID(write_text(d / "memory.max", std::to_string(limits.memory_bytes)));
    if (path_exists(d / "memory.swap.max")) TRY_VOID(write_text(d / "memory.swap.max", "0"));
    TRY_VOID(write_text(d / "pids.max", std::to_string(limits.pids)));
    if (path_exists(d / "cpu.max")) {
      std::string v = "max " + std::to_string(kCpuPeriodUs);
      if (limits.cpus > 0) {
        auto quota = static_cast<uint64_t>(std::llround(limits.cpus * kCpuPeriodUs));
        v = std::to_string(std::max<uint64_t>(quota, 1000)) + " " + std::to_string(kCpuPeriodUs);
      }
      TRY_VOID(write_text(d / "cpu.max", v));
    }
    return {};
  }

  int clone_into_fd() const override { return cg_.fd(); }
  Result<void> attach(pid_t pid) override {
    return write_text(cg_.dir() / "cgroup.procs", std::to_string(pid));
  }
  Result<void> freeze() override { return cg_.set_frozen(true); }
  Result<void> thaw() override { return cg_.set_frozen(false); }
  Result<bool> frozen() const override { return cg_.frozen(); }

  Result<Usage> usage() const override {
    const fs::path& d = cg_.dir();
    Usage u;
    u.memory_bytes = TRY(read_u64(d / "memory.current"));
    u.memory_limit = TRY(read_u64(d / "memory.max"));
    u.oom_kills = oom_kills();
    u.pids = TRY(read_u64(d / "pids.current"));
    u.cpu_usage_ns = TRY(read_keyed(d / "cpu.stat", "usage_usec")) * 1000;
    return u;
  }
  uint64_t oom_kills() const override {
    return read_keyed(cg_.dir() / "memory.events", "oom_kill").value_or(0);
  }

  bool kill_all() override { return cg_.kill(); }
  Result<void> wait_empty(milliseconds timeout) override {
    return wait_dirs_empty({[this] { return cg_.empty(); }}, timeout, q(cg_.dir()));
  }
  Result<void> remove() override {
    TRY_VOID(remove_dir(cg_.dir()));
    remove_parent_if_empty(cg_.dir());
    return {};
  }
  nlohmann::json persist() const override {
    return {{"mode", "v2"}, {"unified", cg_.dir().string()}};
  }
  std::vector<fs::path> paths() const override { return {cg_.dir()}; }

 private:
  Cgroup2Dir cg_;
};

// The pids listed in <dir>/cgroup.procs (processes, not threads).
Result<std::vector<std::string>> procs_of(const fs::path& dir) {
  std::string text = TRY(read_text(dir / "cgroup.procs"));
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) out.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

// Makes the v2 base an inner node: every process in <base>/cgroup.procs (spaced itself, or a
// service manager's holder process) moves into <base>/supervisor, then memory, pids and cpu are
// enabled in <base>/cgroup.subtree_control (the kernel refuses that while <base> has processes:
// "no internal processes"). The root is exempt from that rule and is left as it is.
Result<void> prepare_v2_base(const fs::path& base, const fs::path& mount) {
  if (base == mount) return CgroupV2::enable_controllers(base);
  const fs::path leaf = base / std::string(kSupervisorLeaf);
  // A few rounds: a process may fork while we move it (its child lands in <base> too).
  for (int round = 0; round < 10; ++round) {
    std::vector<std::string> pids = TRY(procs_of(base));
    if (pids.empty()) break;
    if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) return fail_sys("mkdir", q(leaf));
    for (const std::string& pid : pids) {
      // Moving a pid moves the whole process, every thread. ESRCH: it exited meanwhile.
      if (auto r = write_text(leaf / "cgroup.procs", pid); !r) {
        if (::access((fs::path("/proc") / pid).c_str(), F_OK) != 0) continue;
        return fail(std::move(r.error()).wrap("moving process " + pid + " of " + q(base) +
                                              " into its leaf " + q(leaf)));
      }
    }
  }
  return CgroupV2::enable_controllers(base);
}

// ---------------------------------------------------------------------------------------------
// cgroup v1 controllers, plus the unified kill/freeze cgroup on hybrid hosts.

class CgroupV1 final : public Cgroup {
 public:
  CgroupV1(std::vector<std::pair<std::string, fs::path>> dirs, fs::path unified)
      : dirs_(std::move(dirs)) {
    if (!unified.empty()) unified_ = Cgroup2Dir(std::move(unified));
  }

  const fs::path* dir_of(std::string_view controller) const {
    for (const auto& [c, d] : dirs_) {
      if (c == controller) return &d;
    }
    return nullptr;
  }

  Result<void> apply(const Limits& limits) {
    const fs::path& mem = *dir_of("memory");
    TRY_VOID(write_text(mem / "memory.limit_in_bytes", std::to_string(limits.memory_bytes)));
    // memsw = memory + swap; equal to the memory limit means no swap. Must follow the memory
    // limit (the kernel keeps memsw >= memory). memory.oom_control stays at its default so the
    // kernel OOM-kills inside the sandbox instead of pausing it.
    if (path_exists(mem / "memory.memsw.limit_in_bytes")) {
      TRY_VOID(
          write_text(mem / "memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes)));
    }
    TRY_VOID(write_text(*dir_of("pids") / "pids.max", std::to_string(limits.pids)));
    if (const fs::path* cpu = dir_of("cpu")) {
      TRY_VOID(write_text(*cpu / "cpu.cfs_period_us", std::to_string(kCpuPeriodUs)));
      std::string quota = "-1";
      if (limits.cpus > 0) {
        quota = std::to_string(std::max<uint64_t>(1000, std::llround(limits.cpus * kCpuPeriodUs)));
      }
      TRY_VOID(write_text(*cpu / "cpu.cfs_quota_us", quota));
    }
    return {};
  }

  int clone_into_fd() const override { return unified_.valid() ? unified_.fd() : -1; }

  Result<void> attach(pid_t pid) override {
    for (const auto& [c, d] : dirs_) {
      TRY_VOID_CTX(write_text(d / "cgroup.procs", std::to_string(pid)), "joining " + c);
    }
    if (unified_.valid())
      TRY_VOID_CTX(write_text(unified_.dir() / "cgroup.procs", std::to_string(pid)),
                   "joining the unified cgroup");
    return {};
  }

  bool unified_freezer() const { return unified_.valid() && unified_.has_freeze(); }

  Result<void> freeze() override {
    if (unified_freezer()) return unified_.set_frozen(true);
    return set_v1_frozen(true);
  }
  Result<void> thaw() override {
    if (unified_freezer()) return unified_.set_frozen(false);
    return set_v1_frozen(false);
  }
  Result<bool> frozen() const override {
    if (unified_freezer()) return unified_.frozen();
    const fs::path* f = dir_of("freezer");
    if (!f) return false;
    std::string state = TRY(read_text(*f / "freezer.state"));
    return state.starts_with("FROZEN");
  }

  Result<Usage> usage() const override {
    const fs::path* mem = dir_of("memory");
    const fs::path* pids = dir_of("pids");
    if (!mem || !pids) return fail(Code::kNotFound, "sandbox has no memory or pids cgroup");
    Usage u;
    u.memory_bytes = TRY(read_u64(*mem / "memory.usage_in_bytes"));
    u.memory_limit = TRY(read_u64(*mem / "memory.limit_in_bytes"));
    u.oom_kills = oom_kills();
    u.pids = TRY(read_u64(*pids / "pids.current"));
    if (const fs::path* acct = dir_of("cpuacct")) {
      u.cpu_usage_ns = TRY(read_u64(*acct / "cpuacct.usage"));
    } else if (unified_.valid()) {
      u.cpu_usage_ns = TRY(read_keyed(unified_.dir() / "cpu.stat", "usage_usec")) * 1000;
    }
    return u;
  }

  uint64_t oom_kills() const override {
    const fs::path* mem = dir_of("memory");
    return mem ? read_keyed(*mem / "memory.oom_control", "oom_kill").value_or(0) : 0;
  }

  bool kill_all() override { return unified_.valid() && unified_.kill(); }

  Result<void> wait_empty(milliseconds timeout) override {
    std::vector<std::function<Result<bool>()>> checks;
    for (const auto& entry : dirs_) {
      const fs::path procs = entry.second / "cgroup.procs";
      checks.push_back([procs]() -> Result<bool> {
        if (!path_exists(procs)) return true;
        std::string text = TRY(read_text(procs));
        return text.empty();
      });
    }
    if (unified_.valid()) checks.push_back([this] { return unified_.empty(); });
    return wait_dirs_empty(std::move(checks), timeout, "the sandbox's cgroups");
  }

  Result<void> remove() override {
    std::optional<Error> first;
    auto rm = [&](const fs::path& d) {
      auto r = remove_dir(d);
      if (!r && !first) first = std::move(r.error());
      remove_parent_if_empty(d);
    };
    for (const auto& entry : dirs_) rm(entry.second);
    if (unified_.valid()) rm(unified_.dir());
    if (first) return fail(std::move(*first));
    return {};
  }

  nlohmann::json persist() const override {
    nlohmann::json v1 = nlohmann::json::object();
    for (const auto& [c, d] : dirs_) v1[c] = d.string();
    return {{"mode", unified_.valid() ? "hybrid" : "v1"},
            {"v1", v1},
            {"unified", unified_.valid() ? unified_.dir().string() : ""}};
  }
  std::vector<fs::path> paths() const override {
    std::vector<fs::path> out;
    for (const auto& entry : dirs_) out.push_back(entry.second);
    if (unified_.valid()) out.push_back(unified_.dir());
    return out;
  }

 private:
  Result<void> set_v1_frozen(bool frozen) {
    const fs::path* f = dir_of("freezer");
    if (!f) return fail(Code::kUnavailable, "no freezer cgroup on this host");
    const std::string want = frozen ? "FROZEN" : "THAWED";
    TRY_VOID(write_text(*f / "freezer.state", want));
    bool ok = TRY(poll_until(kFreezeTimeout, [&]() -> Result<bool> {
      std::string state = TRY(read_text(*f / "freezer.state"));
      return state.starts_with(want);
    }));
    if (!ok) return fail(Code::kTimeout, "freezer.state of " + q(*f) + " never became " + want);
    return {};
  }

  std::vector<std::pair<std::string, fs::path>> dirs_;
  Cgroup2Dir unified_;
};

// v1 controllers a sandbox uses; memory and pids are required.
constexpr std::string_view kV1Controllers[] = {"memory", "pids", "cpu", "cpuacct", "freezer"};

}  // namespace

std::optional<std::string> unified_cgroup_path(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.starts_with("0::")) continue;
    std::string_view path = line.substr(3);
    if (!path.starts_with('/')) return std::nullopt;
    return std::string(path);
  }
  return std::nullopt;
}

fs::path delegated_base(const fs::path& mount, std::string_view own) {
  fs::path rel = fs::path(own).lexically_normal().relative_path();
  while (!rel.empty() && !rel.has_filename()) rel = rel.parent_path();  // a trailing "/"
  if (rel.empty()) return mount;
  if (rel.filename() == kSupervisorLeaf) rel = rel.parent_path();
  return rel.empty() ? mount : mount / rel;
}

namespace {

// The v2 base (see cgroup.h): $SPACE_CGROUP_BASE, spaced's delegated cgroup, or the root.
Result<fs::path> choose_v2_base(const fs::path& mount) {
  if (const char* env = std::getenv("SPACE_CGROUP_BASE"); env != nullptr && *env != '\0') {
    fs::path rel(env);
    bool ok = rel.is_absolute() && rel == rel.lexically_normal();
    for (const auto& part : rel) ok &= part != "..";
    if (!ok) {
      return fail(Code::kInvalidArgument, std::string("$SPACE_CGROUP_BASE=\"") + env +
                                              "\": want an absolute cgroup path such as "
                                              "/system.slice/space-sandboxes.service");
    }
    fs::path base = delegated_base(mount, env);
    if (!path_exists(base / "cgroup.procs")) {
      return fail(Code::kUnavailable,
                  std::string("$SPACE_CGROUP_BASE=\"") + env + "\": no cgroup at " + q(base));
    }
    return base;
  }
  std::string self = TRY(read_text("/proc/self/cgroup"));
  std::optional<std::string> own = unified_cgroup_path(self);
  if (!own) return mount;
  fs::path base = delegated_base(mount, *own);
  if (base == mount) return mount;
  if (base == mount / fs::path(*own).relative_path()) {
    // Still in the cgroup we were started in: ours only if nobody else is in it. A shell's
    // session scope, say, is not delegated to us: keep the sandboxes at the root then, as a
    // host without delegation has to.
    const std::string me = std::to_string(::getpid());
    for (const std::string& pid : TRY(procs_of(base))) {
      if (pid != me) return mount;
    }
  }
  return base;
}

}  // namespace

Result<CgroupLayout> detect_cgroups(const fs::path& root) {
  CgroupLayout layout;
  layout.root = root;
  if (path_exists(root / "cgroup.controllers")) {
    layout.mode = CgroupMode::kV2;
    layout.unified = root;
    layout.base = TRY(choose_v2_base(root));
    return layout;
  }
  for (std::string_view c : kV1Controllers) {
    // Controllers may be co-mounted ("cpu,cpuacct"); the per-name symlink points at the mount.
    fs::path p = root / std::string(c);
    if (path_exists(p / "cgroup.procs")) layout.v1.emplace_back(std::string(c), p);
  }
  bool has_memory = false, has_pids = false;
  for (const auto& entry : layout.v1) {
    has_memory |= entry.first == "memory";
    has_pids |= entry.first == "pids";
  }
  if (!has_memory || !has_pids) {
    return fail(Code::kUnavailable,
                "no cgroup2 at " + q(root) + " and no v1 memory and pids controllers under it");
  }
  // Same controller mounted twice under different names (cpu -> cpu,cpuacct) would make us
  // write it twice: drop duplicates by device/inode.
  std::vector<std::pair<std::string, fs::path>> unique;
  std::vector<std::pair<dev_t, ino_t>> seen;
  for (auto& entry : layout.v1) {
    struct stat st;
    if (::stat(entry.second.c_str(), &st) != 0) continue;
    bool dup = false;
    for (auto& s : seen) dup |= s.first == st.st_dev && s.second == st.st_ino;
    if (dup) continue;
    seen.emplace_back(st.st_dev, st.st_ino);
    unique.push_back(std::move(entry));
  }
  layout.v1 = std::move(unique);
  if (path_exists(root / "unified" / "cgroup.procs")) {
    layout.mode = CgroupMode::kHybrid;
    layout.unified = root / "unified";
  } else {
    layout.mode = CgroupMode::kV1;
  }
  return layout;
}

Result<std::unique_ptr<Cgroup>> Cgroup::create(const CgroupLayout& layout,
                                               const std::string& parent, const std::string& id,
                                               const Limits& limits) {
  if (!safe_component(parent) || !safe_component(id)) {
    return fail(Code::kInvalidArgument, "bad cgroup name \"" + parent + "/" + id + "\"");
  }
  if (layout.mode == CgroupMode::kV2) {
    // <base>/<parent>/<id>: controllers on in <base> (after its processes moved to its
    // supervisor leaf) and in <parent>.
    const fs::path& base = layout.base.empty() ? layout.unified : layout.base;
    TRY_VOID(prepare_v2_base(base, layout.unified));
    fs::path dir = TRY(make_sandbox_dir(base, parent, id, CgroupV2::enable_controllers));
    auto cg = std::make_unique<CgroupV2>(dir);
    if (auto r = cg->apply(limits); !r) {
      (void)cg->remove();
      return fail(std::move(r.error()));
    }
    return std::unique_ptr<Cgroup>(std::move(cg));
  }

  std::vector<std::pair<std::string, fs::path>> dirs;
  fs::path unified;
  auto undo = [&] {
    for (auto& entry : dirs) {
      (void)remove_dir(entry.second);
      remove_parent_if_empty(entry.second);
    }
    if (!unified.empty()) {
      (void)remove_dir(unified);
      remove_parent_if_empty(unified);
    }
  };
  for (const auto& [c, mount] : layout.v1) {
    auto dir = make_sandbox_dir(mount, parent, id, nullptr);
    if (!dir) {
      undo();
      return fail(std::move(dir.error()));
    }
    dirs.emplace_back(c, *dir);
  }
  if (layout.mode == CgroupMode::kHybrid) {
    // Best effort: without it we fall back to the v1 freezer and to killing via the pid
    // namespace.
    if (auto dir = make_sandbox_dir(layout.unified, parent, id, nullptr)) unified = *dir;
  }
  auto cg = std::make_unique<CgroupV1>(dirs, unified);
  if (auto r = cg->apply(limits); !r) {
    undo();
    return fail(std::move(r.error()));
  }
  return std::unique_ptr<Cgroup>(std::move(cg));
}

Result<std::unique_ptr<Cgroup>> Cgroup::open(const CgroupLayout& layout, const std::string& parent,
                                             const nlohmann::json& persisted) {
  // Persisted paths come from the daemon's own database, but are still checked to be sandbox
  // cgroups under this host's cgroup mounts before anything is removed.
  auto under = [&](const fs::path& p, const fs::path& mount) {
    if (mount.empty() || p != p.lexically_normal()) return false;
    fs::path rel = p.lexically_relative(mount);
    std::vector<std::string> parts;
    for (const auto& part : rel) parts.push_back(part.string());
    return parts.size() == 2 && parts[0] == parent && safe_component(parts[1]);
  };
  try {
    std::string mode = persisted.at("mode").get<std::string>();
    std::string unified = persisted.value("unified", "");
    const fs::path& unified_base =
        layout.mode == CgroupMode::kV2 && !layout.base.empty() ? layout.base : layout.unified;
    if (!unified.empty() && !under(unified, unified_base)) {
      return fail(Code::kInvalidArgument, "persisted cgroup " + q(unified) + " is not ours");
    }
    if (mode == "v2") {
      if (layout.mode != CgroupMode::kV2) {
        return fail(Code::kConflict, "sandbox was created on a cgroup v2 host");
      }
      return std::unique_ptr<Cgroup>(std::make_unique<CgroupV2>(unified));
    }
    std::vector<std::pair<std::string, fs::path>> dirs;
    for (const auto& [c, p] : persisted.at("v1").items()) {
      fs::path path = p.get<std::string>();
      bool ok = false;
      for (const auto& [lc, mount] : layout.v1) ok |= lc == c && under(path, mount);
      if (!ok) return fail(Code::kInvalidArgument, "persisted cgroup " + q(path) + " is not ours");
      dirs.emplace_back(c, path);
    }
    return std::unique_ptr<Cgroup>(std::make_unique<CgroupV1>(dirs, unified));
  } catch (const nlohmann::json::exception& e) {
    return fail(Code::kInvalidArgument, std::string("persisted cgroups: ") + e.what());
  }
}

nlohmann::json Cgroup::planned(const CgroupLayout& layout, const std::string& parent,
                               const std::string& id) {
  if (layout.mode == CgroupMode::kV2) {
    const fs::path& base = layout.base.empty() ? layout.unified : layout.base;
    return {{"mode", "v2"}, {"unified", (base / parent / id).string()}};
  }
  nlohmann::json v1 = nlohmann::json::object();
  for (const auto& [c, mount] : layout.v1) v1[c] = (mount / parent / id).string();
  const bool hybrid = layout.mode == CgroupMode::kHybrid;
  return {{"mode", hybrid ? "hybrid" : "v1"},
          {"v1", v1},
          {"unified", hybrid ? (layout.unified / parent / id).string() : ""}};
}

Result<void> remove_sandbox_cgroups(const CgroupLayout& layout, const std::string& parent,
                                    const std::string& id, const nlohmann::json& persisted,
                                    milliseconds timeout) {
  const nlohmann::json where = persisted.is_object() && persisted.contains("mode")
                                   ? persisted
                                   : Cgroup::planned(layout, parent, id);
  auto cg = TRY(Cgroup::open(layout, parent, where));
  cg->kill_all();
  (void)cg->thaw();  // v1-frozen tasks die only once thawed; fails harmlessly if gone
  TRY_VOID(cg->wait_empty(timeout));
  return cg->remove();
}

}  // namespace space::host
