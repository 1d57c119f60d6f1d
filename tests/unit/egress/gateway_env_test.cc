// The environment a sandbox gets for its gateway: proxies, trust store and placeholders only.
#include <gtest/gtest.h>

#include "egress/gateway.h"

namespace space::egress {
namespace {

TEST(SandboxEnv, ProxiesTrustAndPlaceholdersOnly) {
  SecretStore secrets({});
  std::vector<Grant> grants = {{"GITHUB_TOKEN", "space_ph_GITHUB_TOKEN_0123"}};
  auto env = sandbox_env(grants, secrets);
  auto has = [&](const std::string& kv) {
    return std::find(env.begin(), env.end(), kv) != env.end();
  };
  EXPECT_TRUE(has("HTTPS_PROXY=http://127.0.0.1:3128"));
  EXPECT_TRUE(has("https_proxy=http://127.0.0.1:3128"));
  EXPECT_TRUE(has("NO_PROXY=localhost,127.0.0.1,::1"));
  EXPECT_TRUE(has("REQUESTS_CA_BUNDLE=/etc/space/ca-bundle.crt"));
  EXPECT_TRUE(has("NODE_EXTRA_CA_CERTS=/etc/space/ca-bundle.crt"));
  EXPECT_TRUE(has("GIT_SSL_CAINFO=/etc/space/ca-bundle.crt"));
  EXPECT_TRUE(has("GITHUB_TOKEN=space_ph_GITHUB_TOKEN_0123"));
}

}  // namespace
}  // namespace space::egress
