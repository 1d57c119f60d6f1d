// Robustness: a deterministic stream of random and half-valid frames from the "daemon" must
// never crash or wedge the agent. Requests are confined to a temporary directory, and `kill`
// and runnable exec specs are never generated (this runs on the host, not in a sandbox).
#include <random>

#include "agent_client.h"

namespace space::agent::testing {
namespace {

TEST(AgentFuzzTest, RandomFramesNeverCrashOrWedgeTheAgent) {
  SKIP_WITHOUT_AGENT();
  AgentClient agent;
  ASSERT_EQ(agent.hello().value("version", 0), 1);
  TempDir tmp;
  std::mt19937 rng(20261202);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  auto random_bytes = [&](size_t max) {
    std::string s(pick(max + 1), '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  const std::vector<std::string> ops = {"stat",   "walk",  "read", "mkdir", "symlink",
                                        "remove", "write", "ps",   "bogus"};
  const std::vector<json> odd_values = {nullptr,
                                        true,
                                        -1,
                                        0,
                                        4096,
                                        1e300,
                                        "x",
                                        json::array(),
                                        json::object(),
                                        "/",
                                        std::string(5000, '/')};
  auto random_value = [&]() { return odd_values[pick(odd_values.size())]; };
  auto random_path = [&]() -> json {
    switch (pick(4)) {
      case 0:
        return tmp / ("f" + std::to_string(pick(8)));
      case 1:
        return tmp / ("d" + std::to_string(pick(4)) + "/f" + std::to_string(pick(4)));
      case 2:
        return tmp.path() + "/../" + tmp.path().substr(1) + "/x";
      default:
        return random_value();
    }
  };
  const FrameType kinds[] = {FrameType::kRequest, FrameType::kExec,   FrameType::kStdin,
                             FrameType::kSignal,  FrameType::kCredit, FrameType::kData,
                             FrameType::kPing,    FrameType::kHello,  FrameType::kExit};
  for (int i = 0; i < 3000; ++i) {
    FrameType t = kinds[pick(std::size(kinds))];
    uint32_t stream = static_cast<uint32_t>(pick(6));
    std::string payload;
    if (t == FrameType::kRequest && pick(3) != 0) {
      json req = {{"op", ops[pick(ops.size())]}, {"path", random_path()}};
      if (pick(2)) req["parents"] = pick(2) ? json(true) : random_value();
      if (pick(2)) req["recursive"] = pick(2) ? json(true) : random_value();
      if (pick(2)) req["mode"] = pick(2) ? json(0755) : random_value();
      if (pick(2)) req["target"] = pick(2) ? json("../x") : random_value();
      payload = req.dump();
    } else if ((t == FrameType::kSignal || t == FrameType::kCredit) && pick(2)) {
      payload = json{{t == FrameType::kSignal ? "signal" : "bytes", random_value()}}.dump();
    } else {
      payload = random_bytes(pick(10) == 0 ? 70000 : 64);  // never valid exec JSON
    }
    agent.send(t, stream, payload);
    if (i % 200 == 0) {
      // Keep the agent's output queue drained, as a daemon would.
      while (agent.next_any(1ms)) {
      }
    }
  }
  agent.send(FrameType::kPing, 99, "still alive?");
  bool ponged = false;
  while (auto f = agent.next_any(5000ms)) {
    if (f->type == FrameType::kPong && f->stream == 99) {
      ponged = true;
      break;
    }
  }
  EXPECT_TRUE(ponged);
  EXPECT_EQ(::kill(agent.pid(), 0), 0);
  ExecResult r = agent.run(1000, {{"argv", {"echo", "ok"}}});
  EXPECT_EQ(r.out, "ok\n");
}

}  // namespace
}  // namespace space::agent::testing
