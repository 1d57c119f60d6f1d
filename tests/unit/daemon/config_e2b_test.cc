// The config's "e2b" key (docs/configuration.md, docs/e2b.md).
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

TEST(ConfigE2b, ParsesEveryKey) {
  auto cfg = load(R"({"e2b": {"listen": "127.0.0.1:3049", "domain": "e2b.localhost",
                     "templates": {"py": "python-image"}, "profile": "live"}})");
  ASSERT_TRUE(cfg) << cfg.error().message();
  EXPECT_EQ(cfg->e2b.listen, "127.0.0.1:3049");
  EXPECT_EQ(cfg->e2b.domain, "e2b.localhost");
  EXPECT_EQ(cfg->e2b.templates.at("py"), "python-image");
  EXPECT_EQ(cfg->e2b.profile, "live");
}

TEST(ConfigE2b, OffByDefault) {
  auto cfg = load("{}");
  ASSERT_TRUE(cfg) << cfg.error().message();
  EXPECT_TRUE(cfg->e2b.listen.empty());
}

TEST(ConfigE2b, RefusesWhatCannotWork) {
  struct Case {
    const char* json;
    const char* says;
  } cases[] = {
      {R"({"e2b": {}})", "listen is required"},
      {R"({"e2b": "127.0.0.1:3049"})", "not an object"},
      {R"({"e2b": {"listen": "127.0.0.1:3049", "domain": "a/b"}})", "letters, digits"},
      {R"({"e2b": {"listen": "127.0.0.1:3049", "templates": {"x": 1}}})", "must name an image"},
      {R"({"e2b": {"listen": "127.0.0.1:3049", "lisen": 1}})", "unknown or mistyped key"},
      {R"({"e2b": {"listen": "127.0.0.1:3049", "profile": "nope"}})", "not configured"},
  };
  for (const auto& c : cases) {
    auto cfg = load(c.json);
    ASSERT_FALSE(cfg) << c.json;
    EXPECT_NE(cfg.error().message().find(c.says), std::string::npos)
        << c.json << ": " << cfg.error().message();
    EXPECT_NE(cfg.error().message().find("e2b"), std::string::npos) << cfg.error().message();
  }
}

}  // namespace
}  // namespace space::daemon
