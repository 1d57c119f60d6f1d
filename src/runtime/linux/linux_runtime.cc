// The linux runtime and its instances (see linux_runtime.h).
#include "runtime/linux/linux_runtime.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cctype>
#include <utility>

#include "common/guard.h"
#include "common/janitor.h"
#include "host/host_files.h"
#include "host/syscalls.h"
#include "runtime/linux/agent_image.h"
#include "runtime/linux/exec_supervisor.h"
#include "runtime/linux/launcher.h"
#include "runtime/linux/mounts.h"
#include "runtime/linux/namespaces.h"
#include "runtime/linux/writable_layer.h"

namespace space::runtime::linux {

namespace fs = std::filesystem;

namespace {

// The staging directory <spec.dir>/mnt holds the empty mount points the child mounts on in its
// own mount namespace (mounts.h): layer (the writable tmpfs), root (the overlay), and lower
// (the id-mapped image rootfs). Mode 0711: the sandbox's uid (not host root) must be able to
// enter it.
Result<fs::path> make_stage(const fs::path& dir) {
  fs::path stage = dir / "mnt";
  for (const fs::path& d : {stage, stage / "layer", stage / "root", stage / "lower"}) {
    if (::mkdir(d.c_str(), d == stage ? 0711 : 0700) != 0 && errno != EEXIST) {
      return fail_sys("mkdir", "\"" + d.string() + "\"");
    }
  }
  if (::chmod(stage.c_str(), 0711) != 0) return fail_sys("chmod", "\"" + stage.string() + "\"");
  return stage;
}

void remove_stage(const fs::path& stage) {
  if (stage.empty()) return;
  (void)::rmdir((stage / "layer").c_str());
  (void)::rmdir((stage / "root").c_str());
  (void)::rmdir((stage / "lower").c_str());
  (void)::rmdir(stage.c_str());
}

Result<void> validate(const SandboxSpec& spec) {
  if (spec.id.empty() || spec.id.size() > 64) {
    return fail(Code::kInvalidArgument, "sandbox id must be 1-64 characters");
  }
  for (char c : spec.id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) {
      return fail(Code::kInvalidArgument, "sandbox id \"" + spec.id + "\" has bad characters");
    }
  }
  if (spec.uid_base == 0 || uint64_t{spec.uid_base} + SandboxSpec::kIdRange > UINT32_MAX) {
    return fail(Code::kInvalidArgument, "uid_base must be non-zero (host root stays unmapped)");
  }
  if (!spec.dir.is_absolute()) {
    return fail(Code::kInvalidArgument, "sandbox directory must be an absolute path");
  }
  if (!spec.image.rootfs.is_absolute()) {
    return fail(Code::kInvalidArgument, "image rootfs must be an absolute path");
  }
  if (spec.limits.memory_bytes < (4u << 20) || spec.limits.pids < 1) {
    return fail(Code::kInvalidArgument, "memory limit below 4 MiB or no pids");
  }
  return {};
}

// Fetches the agent's fd 6 and checks it is the writable layer: a tmpfs, and when known the
// very directory recorded at creation (the agent is not trusted to keep it).
Result<UniqueFd> fetch_layer(int pidfd, dev_t dev, ino_t ino) {
  UniqueFd fd(host::sys_pidfd_getfd(pidfd, kLayerFd));
  if (!fd) return fail_sys("pidfd_getfd", "agent fd 6");
  struct statfs sfs;
  if (::fstatfs(fd.get(), &sfs) != 0) return fail_sys("fstatfs", "writable layer");
  if (sfs.f_type != TMPFS_MAGIC) {
    return fail(Code::kProtocol, "agent fd 6 is not the writable layer (not a tmpfs)");
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fail_sys("fstat", "writable layer");
  if (!S_ISDIR(st.st_mode) || (ino != 0 && (st.st_dev != dev || st.st_ino != ino))) {
    return fail(Code::kProtocol, "agent fd 6 is not the writable layer");
  }
  return fd;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Instance.

struct LinuxInstance::Parts {
  std::string id;
  uint32_t uid_base = 0;
  pid_t pid = -1;
  uint64_t start_time = 0;
  bool is_child = false;  // false after reattach: someone else reaps it
  UniqueFd pidfd, channel, netns;
  std::unique_ptr<host::Cgroup> cgroup;
  fs::path stage;
  dev_t layer_dev = 0;
  ino_t layer_ino = 0;
  bool paused = false;
  bool destroyed = false;
  std::chrono::milliseconds stop_timeout{5000};
  std::unique_ptr<ExecSupervisor> exec_supervisor;  // last: stopped first
};

LinuxInstance::LinuxInstance(std::unique_ptr<Parts> parts) : p_(std::move(parts)) {}
LinuxInstance::~LinuxInstance() = default;

int LinuxInstance::channel_fd() const { return p_->channel.get(); }
int LinuxInstance::agent_pid() const { return p_->pid; }
int LinuxInstance::netns_fd() const { return p_->netns.get(); }
int LinuxInstance::pidfd() const { return p_->pidfd.get(); }
bool LinuxInstance::paused() const { return p_->paused; }
std::vector<fs::path> LinuxInstance::cgroup_paths() const { return p_->cgroup->paths(); }

Result<void> LinuxInstance::pause() {
  if (p_->destroyed) return fail(Code::kConflict, "sandbox " + p_->id + " is destroyed");
  TRY_VOID_CTX(p_->cgroup->freeze(), "pausing sandbox " + p_->id);
  p_->paused = true;
  return {};
}

Result<void> LinuxInstance::resume() {
  if (p_->destroyed) return fail(Code::kConflict, "sandbox " + p_->id + " is destroyed");
  TRY_VOID_CTX(p_->cgroup->thaw(), "resuming sandbox " + p_->id);
  p_->paused = false;
  return {};
}

Result<Usage> LinuxInstance::usage() const {
  if (p_->destroyed) return fail(Code::kConflict, "sandbox " + p_->id + " is destroyed");
  return TRY_CTX(p_->cgroup->usage(), "reading usage of sandbox " + p_->id);
}

Result<uint64_t> LinuxInstance::oom_kills() const {
  if (p_->destroyed) return fail(Code::kConflict, "sandbox " + p_->id + " is destroyed");
  return p_->cgroup->oom_kills();
}

Result<void> LinuxInstance::destroy() {
  if (p_->destroyed) return {};
  const std::string ctx = "destroying sandbox " + p_->id;
  // cgroup.kill reaches every task at once; SIGKILL to the agent (pid 1 of the sandbox's pid
  // namespace) makes the kernel kill the rest of the namespace too.
  p_->cgroup->kill_all();
  TRY_VOID_CTX(host::kill_and_reap(p_->pidfd.get(), p_->is_child, p_->stop_timeout), ctx);
  if (p_->paused) {  // v1-frozen tasks die only once thawed
    (void)p_->cgroup->thaw();
    p_->paused = false;
  }
  TRY_VOID_CTX(p_->cgroup->wait_empty(p_->stop_timeout), ctx);
  TRY_VOID_CTX(p_->cgroup->remove(), ctx);
  // (The staging directory is removed now, not later: a rollback makes it again at once.)
  remove_stage(p_->stage);
  // Every process is gone: joining the exec supervisor's thread need not hold up the caller.
  Janitor::instance().post([sup = std::shared_ptr<ExecSupervisor>(
                                std::move(p_->exec_supervisor))]() mutable { sup.reset(); });
  p_->channel.reset();
  p_->netns.reset();
  p_->pidfd.reset();
  p_->destroyed = true;
  return {};
}

Result<UniqueFd> LinuxInstance::writable_layer() {
  if (p_->destroyed) return fail(Code::kConflict, "sandbox " + p_->id + " is destroyed");
  return TRY_CTX(fetch_layer(p_->pidfd.get(), p_->layer_dev, p_->layer_ino),
                 "opening the writable layer of sandbox " + p_->id);
}

nlohmann::json LinuxInstance::persist() const {
  return {{"pid", p_->pid},
          {"start_time", p_->start_time},
          {"uid_base", p_->uid_base},
          {"cgroups", p_->cgroup->persist()},
          {"mode", p_->cgroup->persist().value("mode", "")},
          {"stage", p_->stage.string()},
          {"layer",
           {{"dev", static_cast<uint64_t>(p_->layer_dev)},
            {"ino", static_cast<uint64_t>(p_->layer_ino)}}}};
}

// ---------------------------------------------------------------------------------------------
// Runtime.
LinuxRuntime::LinuxRuntime(Config config, host::SeccompProgram seccomp,
                           host::SeccompProgram seccomp_notify, host::CapPlan caps)
    : config_(std::move(config)),
      seccomp_(std::move(seccomp)),
      seccomp_notify_(std::move(seccomp_notify)),
      caps_(caps),
      layout_(host::detect_cgroups(config_.cgroup_root)) {
  auto agent = seal_agent_image(config_.agent_path);
  if (agent) {
    agent_ = std::move(*agent);
  } else {
    agent_error_ = std::move(agent.error());
  }
}

Result<std::unique_ptr<LinuxRuntime>> LinuxRuntime::create(Config config) {
  if (config.cgroup_name.empty() || config.cgroup_name.find('/') != std::string::npos ||
      config.cgroup_name == "." || config.cgroup_name == "..") {
    return fail(Code::kInvalidArgument, "bad cgroup name \"" + config.cgroup_name + "\"");
  }
  host::SeccompProgram seccomp =
      TRY_CTX(host::compile_policy(host::sandbox_policy()), "compiling seccomp policy");
  host::SeccompProgram notify = TRY_CTX(host::compile_policy(host::sandbox_policy(), true),
                                        "compiling seccomp policy with exec notifications");
  host::CapPlan caps = TRY(host::make_cap_plan());
  return std::unique_ptr<LinuxRuntime>(
      new LinuxRuntime(std::move(config), std::move(seccomp), std::move(notify), caps));
}

Result<const host::CgroupLayout*> LinuxRuntime::cgroup_layout() const {
  if (!layout_) return fail(Error(layout_.error()).wrap("detecting cgroups"));
  return &*layout_;
}

Result<std::unique_ptr<Instance>> LinuxRuntime::create(const SandboxSpec& spec) {
  auto r = start(spec);
  if (!r) return fail(std::move(r.error()).wrap("starting sandbox " + spec.id));
  return r;
}

Result<std::unique_ptr<Instance>> LinuxRuntime::start(const SandboxSpec& spec) {
  TRY_VOID(validate(spec));
  if (!agent_) return fail(Error(*agent_error_));
  const host::CgroupLayout* layout = TRY(cgroup_layout());
  const auto stop = config_.stop_timeout;
  StepTimes scratch;
  StepTimes& times = spec.times ? *spec.times : scratch;

  // 1. cgroups, fresh for this sandbox, limits applied.
  std::unique_ptr<host::Cgroup> cgroup = TRY_CTX(
      host::Cgroup::create(*layout, config_.cgroup_name, spec.id, spec.limits), "creating cgroups");
  times.mark("cgroup");
  Guard cgroup_guard([&] {
    cgroup->kill_all();
    (void)cgroup->wait_empty(stop);
    (void)cgroup->remove();
  });

  // 2. network namespace with only lo.
  UniqueFd netns = TRY(create_netns());
  times.mark("netns");

  // 3. staging directory and the mount plan.
  fs::path stage = TRY_CTX(make_stage(spec.dir), "creating the staging directory");
  Guard stage_guard([&] { remove_stage(stage); });
  FsPlan plan = TRY_CTX(make_fs_plan(spec, kLowerFdSlot), "planning mounts");
  times.mark("stage");

  // 4. the writable layer, a detached tmpfs (unmounted and freed when `layer` closes), filled
  // by the daemon's callback, if any, before any process of the sandbox exists.
  UniqueFd layer =
      TRY_CTX(make_writable_layer(spec.limits, spec.uid_base), "creating the writable layer");
  if (spec.populate_upper) TRY_VOID(populate_writable_layer(layer.get(), spec.populate_upper));
  struct stat layer_st;
  if (::fstat(layer.get(), &layer_st) != 0) return fail_sys("fstat", "writable layer");
  times.mark("layer");

  // 5-8. socketpairs, clone3, id maps, cgroups, release, wait for the agent's exec.
  LaunchRequest req{.id = spec.id,
                    .uid_base = spec.uid_base,
                    .shm_bytes = spec.limits.memory_bytes / 2,
                    .netns_fd = netns.get(),
                    .agent_fd = agent_.get(),
                    .seccomp = spec.exec_events ? &seccomp_notify_ : &seccomp_,
                    .caps = caps_,
                    .cgroup = cgroup.get(),
                    .stage_dir = stage,
                    .lower_dir = spec.image.rootfs,
                    .layer_fd = layer.get(),
                    .fs = &plan,
                    .nofile = config_.nofile,
                    .timeout = config_.start_timeout,
                    .times = &times};
  std::unique_ptr<ExecSupervisor> supervisor;
  if (spec.exec_events) {
    req.on_exec_listener = [&](UniqueFd listener) -> Result<void> {
      supervisor =
          TRY_CTX(ExecSupervisor::start(std::move(listener), spec.uid_base, spec.exec_events),
                  "starting the exec supervisor");
      return {};
    };
  }
  times.mark("plan");
  Launched child = TRY(launch(req));
  Guard child_guard([&] { (void)host::kill_and_reap(child.pidfd.get(), true, stop); });
  layer.reset();  // attached in the sandbox's mount namespace now

  // Identify the agent for reattach; its fd 6 must be the very layer made above.
  uint64_t start_time = TRY_CTX(host::process_start_time(child.pid), "identifying the agent");
  (void)TRY_CTX(fetch_layer(child.pidfd.get(), layer_st.st_dev, layer_st.st_ino),
                "checking the writable layer");
  times.mark("identify");

  auto parts = std::make_unique<LinuxInstance::Parts>();
  parts->id = spec.id;
  parts->uid_base = spec.uid_base;
  parts->pid = child.pid;
  parts->start_time = start_time;
  parts->is_child = true;
  parts->pidfd = std::move(child.pidfd);
  parts->channel = std::move(child.channel);
  parts->netns = std::move(netns);
  parts->cgroup = std::move(cgroup);
  parts->stage = stage;
  parts->layer_dev = layer_st.st_dev;
  parts->layer_ino = layer_st.st_ino;
  parts->stop_timeout = stop;
  parts->exec_supervisor = std::move(supervisor);
  child_guard.dismiss();
  stage_guard.dismiss();
  cgroup_guard.dismiss();
  return std::unique_ptr<Instance>(std::make_unique<LinuxInstance>(std::move(parts)));
}

namespace {

struct Persisted {
  pid_t pid = 0;
  uint64_t start_time = 0;
  uint32_t uid_base = 0;
  fs::path stage;
  dev_t layer_dev = 0;
  ino_t layer_ino = 0;
};

Result<Persisted> parse_persisted(const nlohmann::json& j) {
  try {
    Persisted p;
    p.pid = j.at("pid").get<pid_t>();
    p.start_time = j.at("start_time").get<uint64_t>();
    p.uid_base = j.at("uid_base").get<uint32_t>();
    p.stage = j.value("stage", "");
    if (j.contains("layer")) {
      p.layer_dev = static_cast<dev_t>(j["layer"].at("dev").get<uint64_t>());
      p.layer_ino = static_cast<ino_t>(j["layer"].at("ino").get<uint64_t>());
    }
    if (p.pid <= 1) return fail(Code::kInvalidArgument, "persisted pid is not an agent");
    return p;
  } catch (const nlohmann::json::exception& e) {
    return fail(Code::kInvalidArgument, std::string("persisted sandbox state: ") + e.what());
  }
}

// A pidfd for the persisted agent, if that very process (same start time) is still alive.
Result<UniqueFd> find_agent(const Persisted& p) {
  UniqueFd pidfd(host::sys_pidfd_open(p.pid));
  if (!pidfd) {
    if (errno == ESRCH) return fail(Code::kNotFound, "agent process is gone");
    return fail_sys("pidfd_open", std::to_string(p.pid));
  }
  // Checked after pidfd_open: if the start time matches now, the pidfd is that process.
  auto start = host::process_start_time(p.pid);
  if (!start || *start != p.start_time) {
    return fail(Code::kNotFound, "pid " + std::to_string(p.pid) + " is another process now");
  }
  return pidfd;
}

bool stage_is_ours(const SandboxSpec& spec, const fs::path& stage) {
  return !stage.empty() && stage == spec.dir / "mnt";
}

}  // namespace

Result<std::unique_ptr<Instance>> LinuxRuntime::reattach(const SandboxSpec& spec,
                                                         const nlohmann::json& persisted) {
  const std::string ctx = "reattaching sandbox " + spec.id;
  Persisted p = TRY_CTX(parse_persisted(persisted), ctx);
  const host::CgroupLayout* layout = TRY_CTX(cgroup_layout(), ctx);
  UniqueFd pidfd = TRY_CTX(find_agent(p), ctx);

  // The spare's daemon end becomes the new channel; the agent switches to it on the first
  // frame (docs/agent-protocol.md).
  UniqueFd channel(host::sys_pidfd_getfd(pidfd.get(), kSpareDaemonFd));
  if (!channel) return fail(Error::sys("pidfd_getfd", "agent fd 5").wrap(ctx));
  struct stat st;
  if (::fstat(channel.get(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return fail(Code::kProtocol, ctx + ": agent fd 5 is not a socket");
  }
  UniqueFd netns(
      ::open(("/proc/" + std::to_string(p.pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns) return fail(Error::sys("open", "/proc/<agent>/ns/net").wrap(ctx));
  // Still the same process after opening by pid? Then the namespace is the sandbox's.
  if (host::sys_pidfd_send_signal(pidfd.get(), 0) != 0) {
    return fail(Code::kNotFound, ctx + ": agent exited during reattach");
  }
  if (!persisted.contains("cgroups")) {
    return fail(Code::kInvalidArgument, ctx + ": persisted state has no cgroups");
  }
  std::unique_ptr<host::Cgroup> cgroup =
      TRY_CTX(host::Cgroup::open(*layout, config_.cgroup_name, persisted["cgroups"]), ctx);

  auto parts = std::make_unique<LinuxInstance::Parts>();
  parts->id = spec.id;
  parts->uid_base = p.uid_base;
  parts->pid = p.pid;
  parts->start_time = p.start_time;
  parts->is_child = false;
  parts->pidfd = std::move(pidfd);
  parts->channel = std::move(channel);
  parts->netns = std::move(netns);
  parts->cgroup = std::move(cgroup);
  parts->stage = stage_is_ours(spec, p.stage) ? p.stage : fs::path();
  parts->layer_dev = p.layer_dev;
  parts->layer_ino = p.layer_ino;
  parts->stop_timeout = config_.stop_timeout;
  parts->paused = TRY_CTX(parts->cgroup->frozen(), ctx);
  if (spec.exec_events) {
    // The agent holds the exec listener of a sandbox created with exec auditing; a sandbox
    // created without it has none, and its execs stay unaudited.
    UniqueFd listener(host::sys_pidfd_getfd(parts->pidfd.get(), kExecListenerFd));
    if (listener && ExecSupervisor::is_listener(listener.get())) {
      parts->exec_supervisor =
          TRY_CTX(ExecSupervisor::start(std::move(listener), p.uid_base, spec.exec_events), ctx);
    }
  }
  return std::unique_ptr<Instance>(std::make_unique<LinuxInstance>(std::move(parts)));
}

Result<void> LinuxRuntime::cleanup(const SandboxSpec& spec, const nlohmann::json& persisted) {
  const std::string ctx = "cleaning up sandbox " + spec.id;
  const host::CgroupLayout* layout = TRY_CTX(cgroup_layout(), ctx);
  // A create interrupted before its instance was persisted left no pid: its processes are found
  // by their cgroups (the agent and the launcher's child are born into them), whose paths
  // depend on the id alone.
  const bool has_agent = persisted.is_object() && persisted.contains("pid");
  const nlohmann::json cgroups = persisted.is_object() && persisted.contains("cgroups")
                                     ? persisted["cgroups"]
                                     : host::Cgroup::planned(*layout, config_.cgroup_name, spec.id);
  {
    // Everything in the cgroups first (cgroup.kill reaches frozen tasks), thawed, so that a
    // sandbox left paused on a v1 freezer can die: its agent's SIGKILL below waits for that.
    auto cg = TRY_CTX(host::Cgroup::open(*layout, config_.cgroup_name, cgroups), ctx);
    cg->kill_all();
    (void)cg->thaw();
  }
  if (has_agent) {
    Persisted p = TRY_CTX(parse_persisted(persisted), ctx);
    if (auto pidfd = find_agent(p)) {
      TRY_VOID_CTX(host::kill_and_reap(pidfd->get(), false, config_.stop_timeout), ctx);
    }
  }
  TRY_VOID_CTX(host::remove_sandbox_cgroups(*layout, config_.cgroup_name, spec.id, cgroups,
                                            config_.stop_timeout),
               ctx);
  fs::path stage = has_agent ? fs::path(persisted.value("stage", "")) : spec.dir / "mnt";
  if (stage_is_ours(spec, stage)) remove_stage(stage);
  return {};
}

}  // namespace space::runtime::linux
