// run_program (common/subprocess.h) with real programs: how a run ends (exit code, signal,
// deadline), what comes back (bounded output, stderr modes, the environment), and what must
// not happen: a shell interpreting an argument, a parent fd reaching the child, a process of
// its group surviving it, a zombie left behind.
#include "common/subprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "../temp_dir.h"

namespace space {
namespace {

using namespace std::chrono_literals;

RunResult run_ok(const std::vector<std::string>& argv, const RunOptions& o = {}) {
  auto r = run_program(argv, o);
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message());
  return r ? *r : RunResult{};
}

// Whether `pid` is gone (or a zombie waiting for whoever it was reparented to), polled for up
// to two seconds: SIGKILL is delivered at once but the exit takes a moment.
bool dead_soon(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!stat || !std::getline(stat, line)) return true;
    size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z')
      return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// True when this process has an exited, unreaped child.
bool have_zombie_child() {
  siginfo_t info{};
  return ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0;
}

TEST(Subprocess, ExitCodes) {
  EXPECT_EQ(run_ok({"true"}).exit_code, 0);
  EXPECT_TRUE(run_ok({"true"}).exited_ok());
  RunResult f = run_ok({"false"});
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_FALSE(f.exited_ok());
  RunResult seven = run_ok({"sh", "-c", "exit 7"});
  EXPECT_EQ(seven.exit_code, 7);
  EXPECT_EQ(seven.signal, 0);
  EXPECT_FALSE(seven.timed_out);
  EXPECT_EQ(seven.describe_status(), "exited with 7");
}

TEST(Subprocess, KilledBySignal) {
  RunResult r = run_ok({"sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.describe_status(), "killed by signal 15 (SIGTERM)");
}

TEST(Subprocess, CapturesStdoutAndStderr) {
  std::vector<std::string> argv{"sh", "-c", "echo out; echo err >&2"};
  RunResult cap = run_ok(argv);
  EXPECT_EQ(cap.out, "out\n");
  EXPECT_EQ(cap.err, "err\n");
  RunOptions o;
  o.stderr_mode = StderrMode::kNull;
  RunResult null = run_ok(argv, o);
  EXPECT_EQ(null.out, "out\n");
  EXPECT_EQ(null.err, "");
  o.stderr_mode = StderrMode::kMerge;
  RunResult merged = run_ok(argv, o);
  EXPECT_EQ(merged.out, "out\nerr\n");
  EXPECT_EQ(merged.err, "");
}

TEST(Subprocess, StdinIsDevNull) {
  RunOptions o;
  o.timeout = 5s;
  RunResult r = run_ok({"cat"}, o);  // would wait for input on anything else
  EXPECT_TRUE(r.exited_ok());
  EXPECT_EQ(r.out, "");
}

TEST(Subprocess, DeadlineKillsTheProcessGroup) {
  RunOptions o;
  o.timeout = 300ms;
  auto t0 = std::chrono::steady_clock::now();
  // The shell starts a grandchild in its group, says its pid, and waits.
  RunResult r = run_ok({"sh", "-c", "sleep 60 & echo $!; sleep 60"}, o);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_TRUE(r.timed_out);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_LT(took, 300ms + 1500ms);
  EXPECT_EQ(r.describe_status(o), "timed out after 300 ms (killed)");
  pid_t grandchild = std::atoi(r.out.c_str());
  ASSERT_GT(grandchild, 1) << r.out;
  EXPECT_TRUE(dead_soon(grandchild));
  EXPECT_FALSE(have_zombie_child());
}

TEST(Subprocess, WhatTheProgramLeftInItsGroupGoesWithIt) {
  RunOptions o;
  o.timeout = 30s;
  auto t0 = std::chrono::steady_clock::now();
  // The background sleep keeps stdout open: without the kill this would last 60 s.
  RunResult r = run_ok({"sh", "-c", "sleep 60 & echo $!"}, o);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
  pid_t grandchild = std::atoi(r.out.c_str());
  ASSERT_GT(grandchild, 1) << r.out;
  EXPECT_TRUE(dead_soon(grandchild));
  EXPECT_FALSE(have_zombie_child());
}

TEST(Subprocess, OutputPastTheBoundIsDropped) {
  RunOptions o;
  o.max_output = 64 * 1024;
  o.timeout = 30s;
  RunResult r = run_ok({"head", "-c", "10000000", "/dev/zero"}, o);
  EXPECT_TRUE(r.exited_ok());  // drained to the end: head was not stopped by SIGPIPE
  EXPECT_TRUE(r.out_truncated);
  EXPECT_TRUE(r.truncated());
  EXPECT_EQ(r.out.size(), 64u * 1024);
  EXPECT_LT(r.out.capacity(), 256u * 1024);  // never held the 10 MB

  o.max_output = 8;
  o.keep_tail = true;
  RunResult tail = run_ok({"seq", "1", "100000"}, o);
  EXPECT_TRUE(tail.out_truncated);
  EXPECT_EQ(tail.out, "\n100000\n");
  EXPECT_LT(tail.out.capacity(), 256u * 1024);

  RunResult small = run_ok({"echo", "hi"}, o);
  EXPECT_FALSE(small.truncated());
  EXPECT_EQ(small.out, "hi\n");
}

TEST(Subprocess, ArgumentsAreNeverInterpretedByAShell) {
  test_support::TempDir dir("space-subprocess");
  std::string marker = (dir.path() / "x").string();
  std::string subst = "$(touch " + marker + ")";
  RunResult r = run_ok({"echo", subst, ";", "touch", marker, "|", "touch", marker, "`id`"});
  EXPECT_EQ(r.out, subst + " ; touch " + marker + " | touch " + marker + " `id`\n");
  EXPECT_FALSE(std::filesystem::exists(marker));
  // A program name with metacharacters is a name, not a command line.
  auto bad = run_program({"true; touch " + marker});
  EXPECT_FALSE(bad.has_value());
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(Subprocess, AMissingProgramIsAClearError) {
  auto r = run_program({"space-no-such-program", "--version"});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_NE(r.error().message().find("\"space-no-such-program\" not found"), std::string::npos)
      << r.error().message();
  auto abs = run_program({"/nonexistent/space-tool"});
  ASSERT_FALSE(abs.has_value());
  EXPECT_NE(abs.error().message().find("/nonexistent/space-tool"), std::string::npos);
  EXPECT_FALSE(run_program({}).has_value());
  // A directory in the search path is no program, and relative entries are skipped.
  EXPECT_FALSE(find_program("sh", "bin:.").has_value());
  EXPECT_EQ(first_output_line({"space-no-such-program", "--version"}), "");
}

TEST(Subprocess, NoParentFdReachesTheChild) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);  // deliberately without O_CLOEXEC
  int high = ::fcntl(p[0], F_DUPFD, 100);
  ASSERT_GE(high, 100);
  RunResult r = run_ok({"ls", "/proc/self/fd"});
  ::close(p[0]);
  ::close(p[1]);
  ::close(high);
  std::set<std::string> fds;
  std::istringstream in(r.out);
  for (std::string fd; in >> fd;) fds.insert(fd);
  // 0-2, and 3: the directory ls is reading.
  EXPECT_EQ(fds, (std::set<std::string>{"0", "1", "2", "3"})) << r.out;
}

TEST(Subprocess, MinimalOrGivenEnvironment) {
  setenv("SPACE_SUBPROCESS_TEST_SECRET", "1", 1);
  RunResult def = run_ok({"env"});
  unsetenv("SPACE_SUBPROCESS_TEST_SECRET");
  EXPECT_EQ(def.out, "PATH=" + std::string(kDefaultSearchPath) + "\nLC_ALL=C\n");
  RunOptions o;
  o.env = std::vector<std::string>{"A=1", "B=two words"};
  EXPECT_EQ(run_ok({"/usr/bin/env"}, o).out, "A=1\nB=two words\n");
}

TEST(Subprocess, FirstOutputLine) {
  EXPECT_EQ(first_output_line({"sh", "-c", "printf 'v1.2\\r\\nmore\\n'; echo noise >&2"}), "v1.2");
  EXPECT_EQ(first_output_line({"true"}), "");
}

TEST(Subprocess, SafeFromManyThreads) {
  std::vector<std::thread> threads;
  std::vector<std::string> outs(8);
  for (size_t i = 0; i < outs.size(); ++i)
    threads.emplace_back([&outs, i] {
      for (int k = 0; k < 5; ++k) {
        auto r = run_program({"echo", std::to_string(i)});
        if (r) outs[i] += r->out;
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string want;
    for (int k = 0; k < 5; ++k) want += std::to_string(i) + "\n";
    EXPECT_EQ(outs[i], want);
  }
  EXPECT_FALSE(have_zombie_child());
}

// The wait-status wording of spaced's gateway supervisor and the CLI's helper launcher.
TEST(DescribeWaitStatus, ExitAndSignal) {
  auto status_of = [](auto child) {
    pid_t pid = ::fork();
    if (pid == 0) child();
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  };
  EXPECT_EQ(describe_wait_status(status_of([] { ::_exit(3); })), "exited with status 3");
  EXPECT_EQ(describe_wait_status(status_of([] {
              ::raise(SIGKILL);
              ::_exit(0);
            })),
            "was killed by signal KILL");
}

}  // namespace
}  // namespace space
