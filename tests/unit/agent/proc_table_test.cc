// /proc parsing for ps and the shim's tree kill.
#include "agent/proc_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

namespace space::agent {
namespace {

TEST(ProcTable, ParsesStatWithHostileComm) {
  ProcEntry e;
  ASSERT_TRUE(parse_proc_stat("1234 (a) b (c) R 77 1234 1 0 -1", e));
  EXPECT_EQ(e.pid, 1234);
  EXPECT_EQ(e.state, 'R');
  EXPECT_EQ(e.ppid, 77);
  EXPECT_EQ(e.pgrp, 1234);
  ASSERT_TRUE(parse_proc_stat("5 ( ) S 1 5 5", e));
  EXPECT_EQ(e.ppid, 1);
  for (const char* bad : {"", "12 (x", "x (y) S 1 2", "1 (y) SS 1 2", "1 (y) S a 2", "1 (y) S"})
    EXPECT_FALSE(parse_proc_stat(bad, e)) << bad;
}

TEST(ProcTable, DescendantsFollowPpidLinks) {
  std::vector<ProcEntry> t = {{10, 1, 10, 'S'},  {11, 10, 11, 'S'}, {12, 11, 11, 'S'},
                              {13, 10, 13, 'S'}, {20, 1, 20, 'S'},  {21, 20, 20, 'S'}};
  auto d = descendants(t, 10);
  std::sort(d.begin(), d.end());
  EXPECT_EQ(d, (std::vector<pid_t>{11, 12, 13}));
  EXPECT_TRUE(descendants(t, 12).empty());
}

TEST(ProcTable, ScansThisProcess) {
  auto procs = scan_procs();
  auto me = std::find_if(procs.begin(), procs.end(),
                         [](const ProcEntry& p) { return p.pid == ::getpid(); });
  ASSERT_NE(me, procs.end());
  EXPECT_EQ(me->ppid, ::getppid());
  EXPECT_FALSE(read_cmdline(::getpid(), 4096).empty());
  EXPECT_EQ(read_euid(::getpid()), static_cast<long>(::geteuid()));
}

}  // namespace
}  // namespace space::agent
