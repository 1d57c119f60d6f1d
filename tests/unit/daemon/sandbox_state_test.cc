// The lifecycle's states and moves (daemon/sandbox_state.h): names round-trip, the intents can
// only be left the ways reconcile leaves them, and nothing comes back from destroyed.
#include "daemon/sandbox_state.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace space::daemon {
namespace {

constexpr SandboxState kAll[] = {SandboxState::kPooled,      SandboxState::kCreating,
                                 SandboxState::kRunning,     SandboxState::kPaused,
                                 SandboxState::kRollingBack, SandboxState::kDestroying,
                                 SandboxState::kDestroyed};

TEST(SandboxStateTest, NamesRoundTripAndAreDistinct) {
  std::set<std::string> names;
  for (auto s : kAll) {
    names.insert(std::string(to_string(s)));
    EXPECT_EQ(parse_sandbox_state(to_string(s)), s);
  }
  EXPECT_EQ(names.size(), std::size(kAll));
  EXPECT_EQ(parse_sandbox_state("Running"), std::nullopt);
  EXPECT_EQ(parse_sandbox_state(""), std::nullopt);
}

TEST(SandboxStateTest, Moves) {
  using enum SandboxState;
  // The paths a sandbox takes.
  EXPECT_TRUE(can_move(kCreating, kRunning));
  EXPECT_TRUE(can_move(kPooled, kRunning));
  EXPECT_TRUE(can_move(kRunning, kPaused));
  EXPECT_TRUE(can_move(kPaused, kRunning));
  EXPECT_TRUE(can_move(kRunning, kRollingBack));
  EXPECT_TRUE(can_move(kRollingBack, kRunning));
  EXPECT_TRUE(can_move(kRunning, kDestroying));
  EXPECT_TRUE(can_move(kDestroying, kDestroyed));
  // A restart that finds a sandbox gone moves any live state to destroyed.
  for (auto s : kAll) {
    if (s != kDestroyed) {
      EXPECT_TRUE(can_move(s, kDestroyed)) << to_string(s);
    }
  }
  // Never: out of destroyed, back into an intent of creation, out of destroying but to its end.
  for (auto s : kAll) {
    EXPECT_FALSE(can_move(kDestroyed, s)) << to_string(s);
    if (s != kCreating) {
      EXPECT_FALSE(can_move(s, kCreating)) << to_string(s);
    }
    if (s != kPooled) {
      EXPECT_FALSE(can_move(s, kPooled)) << to_string(s);
    }
    if (s != kDestroyed && s != kDestroying) {
      EXPECT_FALSE(can_move(kDestroying, s)) << to_string(s);
    }
  }
  EXPECT_FALSE(can_move(kCreating, kPaused));
  EXPECT_FALSE(can_move(kPooled, kRollingBack));
}

}  // namespace
}  // namespace space::daemon
