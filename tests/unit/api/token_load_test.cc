// TokenLoad: requests in progress per API token, given back as they end; root is not counted.
#include "api/token_load.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace space::api {
namespace {

TEST(TokenLoad, BoundsEachTokenApartAndGivesBackAsRequestsEnd) {
  TokenLoad load(2);
  std::vector<TokenLoad::Ticket> held;
  for (int i = 0; i < 2; ++i) {
    auto t = load.enter("tok_a");
    ASSERT_TRUE(t);
    held.push_back(std::move(*t));
  }
  auto over = load.enter("tok_a");
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code(), Code::kResourceExhausted);
  EXPECT_NE(over.error().message().find("token tok_a has 2 requests in progress"),
            std::string::npos)
      << over.error().message();
  EXPECT_TRUE(load.enter("tok_b"));                           // another token is not affected
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(load.enter(""));  // root: never counted
  held.pop_back();
  EXPECT_EQ(load.in_progress("tok_a"), 1u);
  EXPECT_TRUE(load.enter("tok_a"));
  held.clear();
  EXPECT_EQ(load.in_progress("tok_a"), 0u);
}

}  // namespace
}  // namespace space::api
