// The config's "images" key (docs/configuration.md, docs/images.md "Limits"): the bounds of an
// image import and the setuid rule.
#include <gtest/gtest.h>

#include <fstream>

#include "../temp_dir.h"
#include "daemon/config.h"

namespace space::daemon {
namespace {

Result<Config> load(const std::string& json) {
  space::test_support::TempDir dir;
  auto file = dir.path() / "config.json";
  std::ofstream(file) << json;
  Config cfg;
  TRY_VOID(cfg.load(file));
  return cfg;
}

TEST(ConfigImages, ParsesEveryKey) {
  auto cfg = load(R"({"images": {"max_layer": "1G", "max_total": "2G", "max_entries": 1000,
                     "max_ratio": 50, "keep_setuid": true}})");
  ASSERT_TRUE(cfg) << cfg.error().message();
  EXPECT_EQ(cfg->images.max_layer_bytes, 1ull << 30);
  EXPECT_EQ(cfg->images.max_total_bytes, 2ull << 30);
  EXPECT_EQ(cfg->images.max_entries, 1000u);
  EXPECT_EQ(cfg->images.max_ratio, 50u);
  EXPECT_TRUE(cfg->images.keep_setuid);
}

TEST(ConfigImages, DefaultsAreTheBuiltInOnes) {
  auto cfg = load("{}");
  ASSERT_TRUE(cfg) << cfg.error().message();
  EXPECT_EQ(cfg->images.max_layer_bytes, 0u);  // 0: image::kDefaultLimits
  EXPECT_FALSE(cfg->images.keep_setuid);
}

TEST(ConfigImages, RefusesWhatCannotWork) {
  for (const char* json : {R"({"images": {"max_layer": 5}})", R"({"images": {"max_total": "0"}})",
                           R"({"images": {"max_ratio": 0}})", R"({"images": {"max_entrys": 1}})",
                           R"({"images": {"keep_setuid": "yes"}})"}) {
    SCOPED_TRACE(json);
    auto cfg = load(json);
    ASSERT_FALSE(cfg);
    EXPECT_EQ(cfg.error().code(), Code::kInvalidArgument);
    EXPECT_NE(cfg.error().message().find("images"), std::string::npos) << cfg.error().message();
  }
}

}  // namespace
}  // namespace space::daemon
