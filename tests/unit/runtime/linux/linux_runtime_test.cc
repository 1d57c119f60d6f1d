// The linux runtime end to end: real namespaces, cgroups, mounts and seccomp, with the stand-in
// agent (probe/runtime_probe.c) reporting what it sees from inside and the test checking the
// sandbox from the host side as well. Security assertions are negative: the sandbox must fail
// to do what would break isolation.
#include "runtime/linux/linux_runtime.h"

#include <grp.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>

#include "host/caps.h"
#include "proto/frame.h"
#include "test_sandbox.h"

namespace space::runtime::linux::testing {
namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string status_field(int pid, const std::string& key) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::string v = line.substr(key.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

ino_t ns_inode(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_ino;
}

std::string errno_str(int e) { return std::to_string(e); }

TEST_F(SandboxTest, PostureFromInside) {
  SandboxSpec s = spec();
  // Give the "daemon" supplementary groups (root's group among them) that must not leak in.
  const gid_t groups[] = {0, 4242};
  ASSERT_EQ(::setgroups(2, groups), 0);
  auto inst = start(s);
  ASSERT_EQ(::setgroups(0, nullptr), 0);
  ASSERT_TRUE(inst);
  ProbeClient probe(inst->channel_fd());
  auto r = probe.ask("report");
  ASSERT_FALSE(r.empty()) << "no answer from the sandbox";

  EXPECT_EQ(r["pid"], "1");
  EXPECT_EQ(r["ppid"], "0");
  EXPECT_EQ(r["uid"], "0");
  EXPECT_EQ(r["gid"], "0");
  EXPECT_EQ(r["groups"], "0") << "the daemon's supplementary groups must be dropped";
  EXPECT_EQ(r["hostname"], s.id);
  EXPECT_EQ(r["uid_map"], "0 " + std::to_string(s.uid_base) + " 65536");
  EXPECT_EQ(r["gid_map"], "0 " + std::to_string(s.uid_base) + " 65536");
  EXPECT_EQ(r["netdevs"], "lo");
  EXPECT_EQ(r["cwd"], "/");
  EXPECT_EQ(r["fds"], "0,1,2,3,4,5,6,7") << "fd 7 is the probe's own /proc/self/fd listing";
  EXPECT_EQ(r["fd6_dir"], "1");
  EXPECT_EQ(r["no_new_privs"], "1");
  EXPECT_EQ(r["seccomp"], "2");
  EXPECT_EQ(r["dumpable"], "0") << "the agent must start non-dumpable";
  EXPECT_EQ(r["core"], "0");
  EXPECT_EQ(r["umask"], "22");
  const std::string nofile = r["nofile"];
  EXPECT_LE(std::stoull(nofile.substr(nofile.find('/') + 1)), config_.nofile);

  // File system.
  EXPECT_EQ(r["usr_write"], errno_str(EROFS)) << "/usr must be read-only inside";
  EXPECT_EQ(r["root_write"], "0");
  EXPECT_EQ(r["tmp_write"], "0");
  EXPECT_EQ(r["tmp_mode"], "1777");
  for (const char* f : {"kcore", "keys", "timer_list", "sched_debug", "sysrq-trigger",
                        "latency_stats", "timer_stats"}) {
    if (::access((std::string("/proc/") + f).c_str(), F_OK) != 0) continue;  // not in this kernel
    EXPECT_EQ(r[std::string("proc_") + f], "chr") << "/proc/" << f << " must be masked";
  }
  for (const char* d : {"acpi", "scsi"}) {
    if (::access((std::string("/proc/") + d).c_str(), F_OK) != 0) continue;
    EXPECT_EQ(r[std::string("proc_") + d], "empty-ro") << "/proc/" << d << " must be masked";
  }
  EXPECT_EQ(r["proc_sys_ro"], "1");
  EXPECT_NE(r["proc_sys_write"], "0");
  EXPECT_EQ(r["usr_ro"], "1");
  EXPECT_EQ(r["usr_nosuid"], "1");
  EXPECT_EQ(r["root_ro"], "0");
  EXPECT_EQ(r["sys"], "") << "/sys is empty";
  for (const char* d : {"null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout",
                        "stderr", "ptmx", "pts", "shm"}) {
    EXPECT_NE(("," + r["dev"] + ",").find(std::string(",") + d + ","), std::string::npos) << d;
  }
  EXPECT_EQ(("," + r["dev"] + ",").find(",kmsg,"), std::string::npos);
  EXPECT_EQ(r["dev_null_write"], "1");
  EXPECT_EQ(r["shm_write"], "0");
  EXPECT_EQ(r["ptmx_open"], "0");
  EXPECT_EQ(r["exe_read"], errno_str(EACCES)) << "the agent binary must not be readable inside";
  EXPECT_NE(r["exe_write"], "0") << "the agent binary must not be writable inside";
  EXPECT_EQ(r["mknod"], errno_str(EPERM));
  EXPECT_EQ(r["sethostname"], errno_str(EPERM)) << "no CAP_SYS_ADMIN";
  EXPECT_EQ(r["raw_socket"], errno_str(EPERM)) << "no CAP_NET_RAW";
  EXPECT_EQ(r["tcp_socket"], "0");

  // Capabilities: exactly the default set.
  char mask[32];
  std::snprintf(mask, sizeof mask, "%016llx",
                static_cast<unsigned long long>(host::default_capability_mask()));
  EXPECT_EQ(r["cap_eff"], mask);
  EXPECT_EQ(r["cap_bnd"], mask);

  ASSERT_TRUE(inst->destroy());
}

TEST_F(SandboxTest, SeccompRefusesEscapeHatches) {
  auto inst = start(spec());
  ASSERT_TRUE(inst);
  ProbeClient probe(inst->channel_fd());
  auto r = probe.ask("report");
  ASSERT_FALSE(r.empty());
  for (const char* call : {"mount",
                           "umount",
                           "chroot",
                           "unshare_user",
                           "unshare_ns",
                           "setns",
                           "clone_newuser",
                           "keyctl",
                           "add_key",
                           "bpf",
                           "perf_event_open",
                           "userfaultfd",
                           "io_uring_setup",
                           "open_by_handle_at",
                           "fsopen",
                           "open_tree",
                           "syslog",
                           "reboot",
                           "init_module",
                           "settimeofday",
                           "iopl",
                           "tiocsti",
                           "personality_norandom"}) {
    EXPECT_EQ(r[call], errno_str(EPERM)) << call;
  }
  EXPECT_EQ(r["clone3"], errno_str(ENOSYS)) << "clone3 must fall back to the filterable clone";
  EXPECT_EQ(r["clone_plain"], "0") << "ordinary fork must work";
  EXPECT_EQ(r["vsock"], errno_str(EAFNOSUPPORT));
  EXPECT_EQ(r["alg"], errno_str(EAFNOSUPPORT));
  EXPECT_NE(r["tiocgwinsz"], errno_str(EPERM)) << "other ioctls stay allowed";
  EXPECT_EQ(r["personality_query"], "0");

  auto x = probe.ask("x32");
  EXPECT_EQ(x["signal"], std::to_string(SIGSYS)) << "x32 syscalls must kill the process";
  ASSERT_TRUE(inst->destroy());
}

TEST_F(SandboxTest, PostureFromHost) {
  auto inst = start(spec());
  ASSERT_TRUE(inst);
  const int pid = inst->agent_pid();
  char mask[32];
  std::snprintf(mask, sizeof mask, "%016llx",
                static_cast<unsigned long long>(host::default_capability_mask()));
  EXPECT_EQ(status_field(pid, "CapEff"), mask);
  EXPECT_EQ(status_field(pid, "CapPrm"), mask);
  EXPECT_EQ(status_field(pid, "CapBnd"), mask);
  EXPECT_EQ(status_field(pid, "CapInh"), "0000000000000000");
  EXPECT_EQ(status_field(pid, "CapAmb"), "0000000000000000");
  EXPECT_EQ(status_field(pid, "NoNewPrivs"), "1");
  EXPECT_EQ(status_field(pid, "Seccomp"), "2");
  EXPECT_EQ(status_field(pid, "NSpid").substr(status_field(pid, "NSpid").rfind('\t') + 1), "1");
  const std::string proc = "/proc/" + std::to_string(pid) + "/ns/";
  for (const char* ns : {"user", "pid", "mnt", "uts", "ipc", "cgroup", "net"}) {
    EXPECT_NE(ns_inode(proc + ns), ns_inode(std::string("/proc/self/ns/") + ns)) << ns;
  }
  struct stat st;
  ASSERT_EQ(::fstat(inst->netns_fd(), &st), 0);
  EXPECT_EQ(ns_inode(proc + "net"), st.st_ino) << "the agent lives in the daemon's netns";
  // The sandbox's fds, seen from the host: exactly 0-6.
  std::vector<std::string> fds;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    fds.push_back(e.path().filename().string());
  }
  std::sort(fds.begin(), fds.end());
  EXPECT_EQ(fds, (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6"}));
  ASSERT_TRUE(inst->destroy());
}

std::string first_line(const fs::path& p) {
  std::string s = slurp(p);
  return s.substr(0, s.find('\n'));
}

TEST_F(SandboxTest, LimitsAreInTheCgroups) {
  SandboxSpec s = spec();
  s.limits.memory_bytes = 96ull << 20;
  s.limits.pids = 33;
  s.limits.cpus = 0.5;
  auto inst = start(s);
  ASSERT_TRUE(inst);
  auto layout = host::detect_cgroups();
  ASSERT_TRUE(layout);
  bool saw_memory = false, saw_pids = false;
  for (const fs::path& dir : inst->cgroup_paths()) {
    EXPECT_EQ(dir.parent_path().filename(), cgroup_name_);
    EXPECT_EQ(dir.filename(), s.id);
    // The agent is in every one of the sandbox's cgroups.
    EXPECT_NE(slurp(dir / "cgroup.procs").find(std::to_string(inst->agent_pid())),
              std::string::npos)
        << dir;
    if (fs::exists(dir / "memory.limit_in_bytes")) {
      saw_memory = true;
      EXPECT_EQ(first_line(dir / "memory.limit_in_bytes"), std::to_string(96ull << 20));
      if (fs::exists(dir / "memory.memsw.limit_in_bytes")) {
        EXPECT_EQ(first_line(dir / "memory.memsw.limit_in_bytes"), std::to_string(96ull << 20));
      }
    }
    if (fs::exists(dir / "memory.max")) {
      saw_memory = true;
      EXPECT_EQ(first_line(dir / "memory.max"), std::to_string(96ull << 20));
      EXPECT_EQ(first_line(dir / "memory.swap.max"), "0");
    }
    if (fs::exists(dir / "pids.max")) {
      saw_pids = true;
      EXPECT_EQ(first_line(dir / "pids.max"), "33");
    }
    if (fs::exists(dir / "cpu.cfs_quota_us")) {
      EXPECT_EQ(first_line(dir / "cpu.cfs_quota_us"), "50000");
      EXPECT_EQ(first_line(dir / "cpu.cfs_period_us"), "100000");
    }
    if (fs::exists(dir / "cpu.max")) {
      EXPECT_EQ(first_line(dir / "cpu.max"), "50000 100000");
    }
  }
  EXPECT_TRUE(saw_memory);
  EXPECT_TRUE(saw_pids);

  auto u = inst->usage();
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_EQ(u->memory_limit, 96ull << 20);
  EXPECT_GT(u->memory_bytes, 0u);
  EXPECT_GE(u->pids, 1u);
  EXPECT_EQ(u->oom_kills, 0u);
  ASSERT_TRUE(inst->destroy());
  for (const fs::path& dir : inst->cgroup_paths()) EXPECT_FALSE(fs::exists(dir)) << dir;
}

TEST_F(SandboxTest, WritableLayerIsCapped) {
  SandboxSpec s = spec();
  s.limits.disk_bytes = 8ull << 20;
  auto inst = start(s);
  ASSERT_TRUE(inst);
  ProbeClient probe(inst->channel_fd());
  auto r = probe.ask("fill 32");
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r["errno"], errno_str(ENOSPC));
  EXPECT_LE(std::stoll(r["written"]), 8ll << 20);
  ASSERT_TRUE(inst->destroy());
}

TEST_F(SandboxTest, WritableLayerFromHost) {
  auto inst = start(spec());
  ASSERT_TRUE(inst);
  ProbeClient probe(inst->channel_fd());
  ASSERT_FALSE(probe.ask("report").empty());  // creates /probe-file
  auto layer = inst->writable_layer();
  ASSERT_TRUE(layer) << layer.error().message();
  struct statfs sfs;
  ASSERT_EQ(::fstatfs(layer->get(), &sfs), 0);
  EXPECT_EQ(sfs.f_type, TMPFS_MAGIC);
  // The sandbox's changes are in upper/, readable from the host through the fd.
  int fd = ::openat(layer->get(), "upper/probe-file", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  char buf[16] = {};
  EXPECT_EQ(::read(fd, buf, sizeof buf), 6);
  EXPECT_STREQ(buf, "hello\n");
  ::close(fd);
  ASSERT_TRUE(inst->destroy());
  EXPECT_FALSE(inst->writable_layer());
}

TEST_F(SandboxTest, PauseAndResume) {
  auto inst = start(spec());
  ASSERT_TRUE(inst);
  ProbeClient probe(inst->channel_fd());
  ASSERT_TRUE(inst->pause());
  EXPECT_TRUE(inst->paused());
  EXPECT_TRUE(probe.ask("report", std::chrono::milliseconds(300)).empty())
      << "a paused sandbox must not run";
  ASSERT_TRUE(inst->resume());
  EXPECT_FALSE(inst->paused());
  // The command sent while frozen is answered now.
  auto r = probe.ask("report");
  EXPECT_FALSE(r.empty());
  // Destroy works on a paused sandbox too.
  ASSERT_TRUE(inst->pause());
  ASSERT_TRUE(inst->destroy());
  EXPECT_NE(::kill(inst->agent_pid(), 0), 0);
}

TEST_F(SandboxTest, ReattachTakesTheSpareChannel) {
  SandboxSpec s = spec();
  auto inst = start(s);
  ASSERT_TRUE(inst);
  nlohmann::json persisted = inst->persist();
  EXPECT_EQ(persisted["pid"], inst->agent_pid());
  EXPECT_EQ(persisted["uid_base"], s.uid_base);

  // A "restarted daemon": a second runtime finds the same agent.
  auto rt2 = LinuxRuntime::create(config_);
  ASSERT_TRUE(rt2);
  auto again = (*rt2)->reattach(s, persisted);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ((*again)->agent_pid(), inst->agent_pid());
  EXPECT_NE((*again)->channel_fd(), inst->channel_fd());
  ProbeClient probe((*again)->channel_fd());
  auto r = probe.ask("report");
  ASSERT_FALSE(r.empty()) << "no answer on the spare channel";
  EXPECT_EQ(r["hostname"], s.id);
  auto* linux_again = static_cast<LinuxInstance*>(again->get());
  struct stat a, b;
  ASSERT_EQ(::fstat(linux_again->netns_fd(), &a), 0);
  ASSERT_EQ(::fstat(inst->netns_fd(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  auto layer = (*again)->writable_layer();
  EXPECT_TRUE(layer) << layer.error().message();

  // A different start time is a different process.
  nlohmann::json wrong = persisted;
  wrong["start_time"] = persisted["start_time"].get<uint64_t>() + 1;
  auto bad = (*rt2)->reattach(s, wrong);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), Code::kNotFound);

  ASSERT_TRUE((*again)->destroy());
  ASSERT_TRUE(inst->destroy());  // reaps our child; cgroups are already gone
  for (const fs::path& dir : inst->cgroup_paths()) EXPECT_FALSE(fs::exists(dir)) << dir;
}

TEST_F(SandboxTest, CleanupRemovesWhatIsLeft) {
  SandboxSpec s = spec();
  auto inst = start(s);
  ASSERT_TRUE(inst);
  nlohmann::json persisted = inst->persist();
  auto cg = inst->cgroup_paths();
  ASSERT_TRUE(runtime_->cleanup(s, persisted));
  for (const fs::path& dir : cg) EXPECT_FALSE(fs::exists(dir)) << dir;
  EXPECT_FALSE(fs::exists(s.dir / "mnt"));
  ASSERT_TRUE(runtime_->cleanup(s, persisted)) << "cleanup must be idempotent";
  auto gone = runtime_->reattach(s, persisted);
  EXPECT_FALSE(gone);
  ASSERT_TRUE(inst->destroy());  // reaps the zombie
}

// Failures inside the child name the step and leave nothing behind.
TEST_F(SandboxTest, FailedStepIsReportedAndUnwound) {
  SandboxSpec s = spec();
  // The launcher needs this name for the old root; an image that has it cannot start.
  fs::path blocker = rootfs_ / ".space-old-root";
  { std::ofstream(blocker) << "x"; }
  auto r = runtime_->create(s);
  fs::remove(blocker);
  ASSERT_FALSE(r);
  EXPECT_EQ(
      r.error().message(),
      "starting sandbox " + s.id + ": step \"create old root mount point\": File exists (EEXIST)");
  for (const char* mount : {"memory", "pids", "unified", ""}) {
    EXPECT_FALSE(fs::exists(fs::path("/sys/fs/cgroup") / mount / cgroup_name_ / s.id));
  }
  EXPECT_FALSE(fs::exists(s.dir / "mnt"));

  SandboxSpec bad = spec();
  bad.image.ro_binds = {"/does/not/exist"};
  auto r2 = runtime_->create(bad);
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message().find("/does/not/exist"), std::string::npos);

  SandboxSpec root = spec();
  root.uid_base = 0;
  auto r3 = runtime_->create(root);
  ASSERT_FALSE(r3);
  EXPECT_EQ(r3.error().code(), Code::kInvalidArgument);
}

size_t count_fds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// create + destroy many times: no cgroup, mount, process or fd may be left behind.
TEST_F(SandboxTest, NothingLeaks) {
  constexpr int kRounds = 50;
  const size_t fds_before = count_fds();
  const std::string mounts_before = slurp("/proc/self/mountinfo");
  std::vector<int> pids;
  std::chrono::nanoseconds create_total{0}, destroy_total{0};
  for (int i = 0; i < kRounds; ++i) {
    SandboxSpec s = spec();
    auto t0 = std::chrono::steady_clock::now();
    auto inst = start(s);
    ASSERT_TRUE(inst);
    auto t1 = std::chrono::steady_clock::now();
    pids.push_back(inst->agent_pid());
    ASSERT_TRUE(inst->destroy());
    auto t2 = std::chrono::steady_clock::now();
    create_total += t1 - t0;
    destroy_total += t2 - t1;
  }
  std::printf("[ latency  ] create %.2f ms, destroy %.2f ms (mean of %d)\n",
              create_total.count() / 1e6 / kRounds, destroy_total.count() / 1e6 / kRounds, kRounds);
  EXPECT_EQ(count_fds(), fds_before);
  EXPECT_EQ(slurp("/proc/self/mountinfo"), mounts_before);
  for (int pid : pids) EXPECT_NE(::kill(pid, 0), 0) << "agent " << pid << " still exists";
  auto layout = host::detect_cgroups();
  ASSERT_TRUE(layout);
  std::vector<fs::path> mounts;
  for (const auto& entry : layout->v1) mounts.push_back(entry.second);
  if (!layout->unified.empty()) mounts.push_back(layout->unified);
  for (const fs::path& m : mounts) {
    EXPECT_FALSE(fs::exists(m / cgroup_name_)) << "left behind: " << (m / cgroup_name_);
  }
}

TEST_F(SandboxTest, Doctor) {
  nlohmann::json d = runtime_->doctor();
  EXPECT_EQ(d["runtime"], "linux");
  EXPECT_TRUE(d["user_namespaces"]["ok"].get<bool>());
  EXPECT_TRUE(d["cgroups"]["ok"].get<bool>());
  EXPECT_TRUE(d["overlay_in_userns"]["ok"].get<bool>()) << d["overlay_in_userns"].dump();
  EXPECT_TRUE(d["pidfd"]["ok"].get<bool>());
  EXPECT_TRUE(d["agent"]["found"].get<bool>());
  EXPECT_GT(d["seccomp"]["policy"].size(), 40u);
  EXPECT_EQ(d["capabilities"].size(), 12u);

  Config missing = config_;
  missing.agent_path = base_ / "no-such-agent";
  auto rt = LinuxRuntime::create(missing);
  ASSERT_TRUE(rt);
  EXPECT_FALSE((*rt)->doctor()["agent"]["found"].get<bool>());
  auto r = (*rt)->create(spec());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("no-such-agent"), std::string::npos);
}

// The real space-agent (when built): it starts in the sandbox, says hello on the channel, and
// after a reattach says hello again on the spare.
fs::path real_agent() {
  if (const char* env = std::getenv("SPACE_AGENT_BIN")) return env;
#ifdef SPACE_AGENT_BIN_DEFAULT
  return SPACE_AGENT_BIN_DEFAULT;
#else
  return "";
#endif
}

std::optional<proto::Frame> read_frame(int fd, proto::Decoder& dec) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    auto f = dec.next();
    if (!f) return std::nullopt;
    if (*f) return std::move(**f);
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
      return std::nullopt;
    }
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    dec.feed(std::span<const char>(buf, static_cast<size_t>(n)));
  }
}

TEST_F(SandboxTest, RealAgentSaysHello) {
  fs::path agent = real_agent();
  if (agent.empty() || ::access(agent.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "space-agent not built (set SPACE_AGENT_BIN)";
  }
  Config cfg = config_;
  cfg.agent_path = agent;
  auto rt = LinuxRuntime::create(cfg);
  ASSERT_TRUE(rt);
  SandboxSpec s = spec();
  auto inst = (*rt)->create(s);
  ASSERT_TRUE(inst) << inst.error().message();
  proto::Decoder dec;
  auto hello = read_frame((*inst)->channel_fd(), dec);
  ASSERT_TRUE(hello) << "no hello from the agent";
  EXPECT_EQ(hello->type, proto::FrameType::kHello);
  auto j = nlohmann::json::parse(hello->payload, nullptr, false);
  EXPECT_EQ(j.value("version", 0), 1);
  EXPECT_EQ(j.value("pid", 0), 1);

  auto rt2 = LinuxRuntime::create(cfg);
  ASSERT_TRUE(rt2);
  auto again = (*rt2)->reattach(s, (*inst)->persist());
  ASSERT_TRUE(again) << again.error().message();
  std::string ping;
  ASSERT_TRUE(proto::encode(proto::FrameType::kPing, 0, "are you there", ping));
  ASSERT_EQ(::write((*again)->channel_fd(), ping.data(), ping.size()),
            static_cast<ssize_t>(ping.size()));
  proto::Decoder dec2;
  bool hello_again = false, pong = false;
  for (int i = 0; i < 2; ++i) {
    auto f = read_frame((*again)->channel_fd(), dec2);
    if (!f) break;
    hello_again |= f->type == proto::FrameType::kHello;
    pong |= f->type == proto::FrameType::kPong && f->payload == "are you there";
  }
  EXPECT_TRUE(hello_again);
  EXPECT_TRUE(pong);
  ASSERT_TRUE((*again)->destroy());
  ASSERT_TRUE((*inst)->destroy());
}

}  // namespace
}  // namespace space::runtime::linux::testing
