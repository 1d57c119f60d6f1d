// What spaced keeps of detached commands (daemon/exec_log.h): slots taken atomically, output in
// bounded chunks, reads of bounded size that resume where they stopped.
#include "daemon/exec_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace space::daemon {
namespace {

using std::chrono::steady_clock;

TEST(ExecLogsTest, SlotsAreReservedAtomically) {
  ExecLogs logs;
  // Many requests at once: exactly kExecLogsPerSandbox get a slot, whatever the interleaving.
  std::atomic<int> granted{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 3 * static_cast<int>(kExecLogsPerSandbox); ++i)
    ts.emplace_back([&] {
      if (logs.reserve("sb_x")) granted++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(granted.load(), static_cast<int>(kExecLogsPerSandbox));
  // A slot given back (the command failed to start) is free again; filled ones are not.
  logs.release();
  EXPECT_TRUE(logs.reserve("sb_x"));
  auto refused = logs.reserve("sb_x");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), Code::kResourceExhausted);
}

TEST(ExecLogsTest, AnEndedLogMakesRoom) {
  ExecLogs logs;
  for (size_t i = 0; i < kExecLogsPerSandbox; ++i) {
    ASSERT_TRUE(logs.reserve("sb_x"));
    logs.add(std::make_shared<KeptExecLog>(static_cast<int>(100 + i)));
  }
  EXPECT_FALSE(logs.reserve("sb_x"));
  logs.find(100)->finish(ExitStatus{});
  EXPECT_TRUE(logs.reserve("sb_x"));
  EXPECT_EQ(logs.find(100), nullptr);
}

TEST(KeptExecLogTest, TinyWritesAreJoinedAndReadsAreBounded) {
  KeptExecLog log(7);
  const size_t total = 3 * kExecLogReadBytes + 5;
  for (size_t i = 0; i < total; ++i)
    log.append(false, std::string(1, static_cast<char>('a' + i % 26)));
  log.finish(ExitStatus{});
  uint64_t cursor = 0;
  std::string all;
  int reads = 0;
  for (;;) {
    auto r = log.read(cursor, steady_clock::now());
    ++reads;
    size_t got = 0;
    for (auto& c : r.chunks) {
      got += c.data.size();
      all += c.data;
    }
    EXPECT_LE(got, kExecLogReadBytes);
    EXPECT_LE(r.chunks.size(), 2u) << "one-byte writes are kept joined, not a chunk each";
    if (r.ended) {
      EXPECT_FALSE(r.more);
      break;
    }
    EXPECT_TRUE(r.more);
    ASSERT_LT(reads, 10);
  }
  EXPECT_EQ(all.size(), total);
  EXPECT_EQ(cursor, total);
  EXPECT_EQ(all[26], 'a');
  EXPECT_EQ(reads, 4);
}

TEST(KeptExecLogTest, KeepsTheNewestBytesAndSaysWhatWasDropped) {
  KeptExecLog log(7, 100);
  log.append(false, std::string(80, 'x'));
  log.append(true, std::string(50, 'y'));  // another stream: a chunk of its own
  uint64_t cursor = 0;
  auto r = log.read(cursor, steady_clock::now());
  EXPECT_EQ(r.dropped, 30u);
  ASSERT_EQ(r.chunks.size(), 2u);
  EXPECT_EQ(r.chunks[0].data, std::string(50, 'x'));
  EXPECT_TRUE(r.chunks[1].is_stderr);
  EXPECT_EQ(cursor, 130u);
}

}  // namespace
}  // namespace space::daemon
