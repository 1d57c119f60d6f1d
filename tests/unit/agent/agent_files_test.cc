// File requests against the real space-agent binary. The agent's root here is the host's "/",
// so every path lives under a temporary directory the test creates.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent_client.h"

namespace space::agent::testing {
namespace {

namespace fs = std::filesystem;

class AgentFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_AGENT();
    agent_ = std::make_unique<AgentClient>();
    ASSERT_EQ(agent_->hello().value("version", 0), 1);
  }
  // Sends `data` as a write on `stream` in chunks and returns the response.
  json write_file(uint32_t stream, const std::string& path, const std::string& data,
                  json extra = json::object()) {
    json req = {{"op", "write"}, {"path", path}};
    req.update(extra);
    agent_->send_json(FrameType::kRequest, stream, req);
    for (size_t off = 0; off < data.size(); off += 100000)
      agent_->send(FrameType::kData, stream, std::string_view(data).substr(off, 100000));
    agent_->send(FrameType::kData, stream, "");
    return agent_->response(stream);
  }
  // Reads a transfer's data frames (crediting them) until the empty frame, then the response.
  std::pair<std::string, json> read_stream(uint32_t stream, bool credit = true) {
    std::string data;
    while (auto f = agent_->next(stream)) {
      if (f->type == FrameType::kData && f->payload.empty()) break;
      EXPECT_EQ(f->type, FrameType::kData);
      data += f->payload;
      if (credit) agent_->send_json(FrameType::kCredit, stream, {{"bytes", f->payload.size()}});
    }
    return {data, agent_->response(stream)};
  }
  std::unique_ptr<AgentClient> agent_;
  TempDir tmp_;
};

TEST_F(AgentFilesTest, WriteReadWalkMkdirSymlinkRemoveRoundTrip) {
  std::string base = tmp_ / "work";
  json mk = agent_->request(
      1, {{"op", "mkdir"}, {"path", base + "/a/b"}, {"parents", true}, {"mode", 0750}});
  ASSERT_TRUE(mk.value("ok", false)) << mk;
  EXPECT_EQ(fs::status(base + "/a/b").permissions(), static_cast<fs::perms>(0750));

  std::string data;
  for (int i = 0; i < 2'500'000; ++i) data.push_back(static_cast<char>(i * 7 % 251));
  json w = write_file(2, base + "/a/b/blob", data, {{"mode", 0600}});
  ASSERT_TRUE(w.value("ok", false)) << w;
  EXPECT_EQ(w.value("size", 0u), data.size());
  EXPECT_EQ(fs::status(base + "/a/b/blob").permissions(), static_cast<fs::perms>(0600));

  json st = agent_->request(3, {{"op", "stat"}, {"path", base + "/a/b/blob"}});
  ASSERT_TRUE(st.value("ok", false)) << st;
  EXPECT_EQ(st["stat"]["type"], "file");
  EXPECT_EQ(st["stat"]["size"], data.size());
  EXPECT_EQ(st["stat"]["mode"], 0600);

  agent_->send_json(FrameType::kRequest, 4, {{"op", "read"}, {"path", base + "/a/b/blob"}});
  auto [back, rr] = read_stream(4);
  EXPECT_TRUE(rr.value("ok", false)) << rr;
  EXPECT_EQ(rr.value("size", 0u), data.size());
  EXPECT_TRUE(back == data);

  json ln = agent_->request(5, {{"op", "symlink"}, {"path", base + "/link"}, {"target", "a/b"}});
  ASSERT_TRUE(ln.value("ok", false)) << ln;
  json lst = agent_->request(6, {{"op", "stat"}, {"path", base + "/link"}});
  EXPECT_EQ(lst["stat"]["type"], "symlink");
  EXPECT_EQ(lst["stat"]["target"], "a/b");

  agent_->send_json(FrameType::kRequest, 7, {{"op", "walk"}, {"path", base}});
  auto [listing, wr] = read_stream(7, /*credit=*/false);
  ASSERT_TRUE(wr.value("ok", false)) << wr;
  EXPECT_EQ(wr.value("count", 0), 4);
  std::vector<std::string> paths;
  std::istringstream lines(listing);
  for (std::string l; std::getline(lines, l);) paths.push_back(json::parse(l)["path"]);
  std::sort(paths.begin(), paths.end());
  EXPECT_EQ(paths, (std::vector<std::string>{"a", "a/b", "a/b/blob", "link"}));

  json rm = agent_->request(8, {{"op", "remove"}, {"path", base}, {"recursive", true}});
  ASSERT_TRUE(rm.value("ok", false)) << rm;
  json gone = agent_->request(9, {{"op", "stat"}, {"path", base}});
  EXPECT_FALSE(gone.value("ok", true));
  EXPECT_EQ(gone["error"]["code"], "not_found");
  EXPECT_EQ(gone["error"]["errno"], ENOENT);
}

TEST_F(AgentFilesTest, ReadIsFlowControlled) {
  std::string path = tmp_ / "big";
  std::ofstream(path) << std::string(3u << 20, 'z');
  agent_->send_json(FrameType::kRequest, 1, {{"op", "read"}, {"path", path}});
  size_t got = 0;
  while (auto f = agent_->next(1, 400ms)) {
    ASSERT_EQ(f->type, FrameType::kData);
    ASSERT_FALSE(f->payload.empty()) << "transfer ended without credits";
    got += f->payload.size();
  }
  EXPECT_EQ(got, proto::kStreamWindow);
  agent_->send_json(FrameType::kCredit, 1, {{"bytes", got}});
  auto [rest, r] = read_stream(1);
  EXPECT_EQ(got + rest.size(), 3u << 20);
  EXPECT_EQ(r.value("size", 0u), 3u << 20);
}

TEST_F(AgentFilesTest, WalkIsFlowControlledAndEntriesMaySpanFrames) {
  // ~1.4 MiB of listing: more than one window.
  std::string dir = tmp_ / "many";
  fs::create_directories(dir + "/sub");
  const int kFiles = 6000;
  for (int i = 0; i < kFiles; ++i)
    std::ofstream(dir + "/sub/" + std::string(100, 'n') + std::to_string(i));
  agent_->send_json(FrameType::kRequest, 1, {{"op", "walk"}, {"path", dir}});
  std::string listing;
  while (auto f = agent_->next(1, 400ms)) {
    ASSERT_EQ(f->type, FrameType::kData);
    ASSERT_FALSE(f->payload.empty()) << "walk ended without credits";
    listing += f->payload;
  }
  EXPECT_EQ(listing.size(), proto::kStreamWindow);
  agent_->send_json(FrameType::kCredit, 1, {{"bytes", listing.size()}});
  auto [rest, r] = read_stream(1);
  listing += rest;
  ASSERT_TRUE(r.value("ok", false)) << r;
  EXPECT_EQ(r.value("count", 0), kFiles + 1);
  std::istringstream lines(listing);
  int n = 0;
  for (std::string l; std::getline(lines, l); ++n) {
    json e = json::parse(l, nullptr, false);
    ASSERT_TRUE(e.is_object()) << "entry " << n << " is not JSON";
  }
  EXPECT_EQ(n, kFiles + 1);
}

TEST_F(AgentFilesTest, FailedWriteIsAnsweredAtOnceAndItsDataIgnored) {
  std::string path = tmp_ / "missing-dir/file";
  agent_->send_json(FrameType::kRequest, 1, {{"op", "write"}, {"path", path}});
  json r = agent_->response(1);
  EXPECT_FALSE(r.value("ok", true));
  EXPECT_EQ(r["error"]["code"], "not_found");
  agent_->send(FrameType::kData, 1, "ignored bytes");
  agent_->send(FrameType::kData, 1, "");
  // Nothing else arrives on stream 1, the agent still serves requests, and no file appeared.
  json ok = agent_->request(2, {{"op", "mkdir"}, {"path", tmp_ / "d"}});
  EXPECT_TRUE(ok.value("ok", false)) << ok;
  EXPECT_FALSE(agent_->next(1, 100ms).has_value());
  EXPECT_FALSE(fs::exists(tmp_ / "missing-dir"));
  // The stream id is reusable.
  json again = write_file(1, tmp_ / "d/file", "abc");
  EXPECT_EQ(again.value("size", 0), 3) << again;
}

TEST_F(AgentFilesTest, WriteThroughFinalSymlinkIsRefused) {
  TempDir outside;
  std::ofstream(outside / "secret") << "outside";
  fs::create_symlink(outside / "secret", tmp_ / "link");
  json r = write_file(1, tmp_ / "link", "overwritten");
  EXPECT_FALSE(r.value("ok", true));
  EXPECT_EQ(r["error"]["errno"], ELOOP);
  std::ifstream in(outside / "secret");
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(content, "outside");
  // remove acts on the link itself.
  json rm = agent_->request(2, {{"op", "remove"}, {"path", tmp_ / "link"}});
  EXPECT_TRUE(rm.value("ok", false));
  EXPECT_TRUE(fs::exists(outside / "secret"));
}

// `resync` sets a guest's clock, hostname and entropy; an agent on a socketpair shares the
// host's kernel and must refuse it before touching anything (this test's agent runs as root),
// even before checking the fields (AgentListenTest.ResyncIsForGuestChannels sends the same bad
// request to a listening agent, which gets past the refusal to the field checks).
TEST_F(AgentFilesTest, SyncAndNanosecondMtimes) {
  // `sync` flushes the root's file system (a microVM's writable disk, for `space diff`); `stat`
  // gives the mtime to the nanosecond, which diff compares with the disk's inode.
  json s = agent_->request(1, {{"op", "sync"}});
  EXPECT_TRUE(s.value("ok", false)) << s;
  std::string f = tmp_ / "t";
  std::ofstream(f) << "x";
  struct timespec ts[2] = {{1700000000, 123456789}, {1700000000, 123456789}};
  ASSERT_EQ(::utimensat(AT_FDCWD, f.c_str(), ts, 0), 0);
  json st = agent_->request(2, {{"op", "stat"}, {"path", f}});
  ASSERT_TRUE(st.value("ok", false)) << st;
  EXPECT_EQ(st["stat"]["mtime"], 1700000000);
  EXPECT_EQ(st["stat"]["mtime_ns"], 1700000000123456789LL);
}

TEST_F(AgentFilesTest, ResyncIsRefusedOutsideAVmGuest) {
  json bad = agent_->request(2, {{"op", "resync"},
                                 {"hostname", "Bad/Host"},
                                 {"time_ns", 1000000000},
                                 {"seed", std::string(128, 'a')}});
  EXPECT_FALSE(bad.value("ok", true));
  EXPECT_EQ(bad["error"].value("code", ""), "permission_denied") << bad.dump();
  EXPECT_EQ(bad["error"].value("errno", 0), EPERM) << bad.dump();
  char before[256] = {};
  ASSERT_EQ(::gethostname(before, sizeof before - 1), 0);
  json r = agent_->request(1, {{"op", "resync"},
                               {"hostname", "sb_resync0000"},
                               {"time_ns", 1000000000},
                               {"seed", std::string(128, 'a')}});
  EXPECT_FALSE(r.value("ok", true));
  EXPECT_EQ(r["error"].value("code", ""), "permission_denied") << r.dump();
  char after[256] = {};
  ASSERT_EQ(::gethostname(after, sizeof after - 1), 0);
  EXPECT_STREQ(before, after);
  EXPECT_GT(std::time(nullptr), 1700000000) << "the host clock was set";
}

TEST_F(AgentFilesTest, BadRequestsGetErrorResponses) {
  std::string nul_path = R"({"op":"stat","path":"/tmp/a\u0000b"})";
  std::string deep = std::string(100, '[') + std::string(100, ']');
  std::vector<std::string> bad = {"{not json",
                                  "[]",
                                  "42",
                                  deep,
                                  R"({"op":"nope"})",
                                  R"({"op":7})",
                                  R"({})",
                                  R"({"op":"stat"})",
                                  R"({"op":"stat","path":"relative"})",
                                  nul_path,
                                  R"({"op":"stat","path":"/)" + std::string(5000, 'a') + R"("})",
                                  R"({"op":"mkdir","path":"/tmp/x","mode":99999})",
                                  R"({"op":"mkdir","path":"/tmp/x","parents":"yes"})",
                                  R"({"op":"kill","pid":"1"})",
                                  R"({"op":"kill","pid":12345678901})",
                                  R"({"op":"symlink","path":"/tmp/x"})",
                                  R"({"op":"remove","path":"/"})",
                                  R"({"op":"walk","path":"/proc/self/status"})"};
  uint32_t stream = 1;
  for (const std::string& b : bad) {
    agent_->send(FrameType::kRequest, stream, b);
    json r = agent_->response(stream);
    EXPECT_FALSE(r.value("ok", true)) << b;
    EXPECT_TRUE(r["error"].contains("code") && r["error"].contains("message")) << b;
    ++stream;
  }
  json ps = agent_->request(stream, {{"op", "ps"}});
  EXPECT_TRUE(ps.value("ok", false));
}

}  // namespace
}  // namespace space::agent::testing
