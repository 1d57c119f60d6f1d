// The agent's command-line contract.
#include "agent/options.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <vector>

namespace space::agent {
namespace {

Result<Options> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "space-agent");
  return parse_options(static_cast<int>(args.size()), args.data());
}

TEST(Options, LinuxRuntimeCommandLine) {
  auto o = parse({"--channel-fd", "3", "--spare-fds", "4,5", "--hold-fds", "6"});
  ASSERT_TRUE(o) << o.error().message();
  EXPECT_EQ(o->channel_fd, 3);
  EXPECT_EQ(o->spare_agent_fd, 4);
  EXPECT_EQ(o->spare_daemon_fd, 5);
  EXPECT_EQ(o->hold_fds, std::vector<int>{6});
  EXPECT_TRUE(o->channel_path.empty());
}

TEST(Options, DevicePathAndEqualsForm) {
  auto o = parse({"--channel=/dev/vport0p1", "--hold-fds=7,8"});
  ASSERT_TRUE(o) << o.error().message();
  EXPECT_EQ(o->channel_path, "/dev/vport0p1");
  EXPECT_EQ(o->channel_fd, -1);
  EXPECT_EQ(o->spare_agent_fd, -1);
  EXPECT_EQ(o->hold_fds, (std::vector<int>{7, 8}));
}

TEST(Options, EgressListen) {
  auto o = parse({"--channel", "/dev/vport0p1", "--egress-listen", "127.0.0.1:3128"});
  ASSERT_TRUE(o) << o.error().message();
  ASSERT_EQ(o->egress_listen.size(), 1u);
  EXPECT_EQ(o->egress_listen[0].port, 3128);
  EXPECT_EQ(o->egress_listen[0].ip, htonl(INADDR_LOOPBACK));
  EXPECT_TRUE(parse({"--channel-fd", "3"})->egress_listen.empty());
  auto several = parse({"--channel-fd", "3", "--egress-listen", "127.0.0.1:3128",
                        "--egress-listen", "127.0.0.1:443"});
  ASSERT_TRUE(several);
  ASSERT_EQ(several->egress_listen.size(), 2u);
  EXPECT_EQ(several->egress_listen[1].port, 443);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                          "localhost:3128", "::1:3128", "127.0.0.1:31x", "1.2.3:80"}) {
    auto r = parse({"--channel-fd", "3", "--egress-listen", bad});
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find("IPV4:PORT"), std::string::npos) << r.error().message();
  }
  EXPECT_FALSE(parse({"--channel-fd", "3", "--egress-listen=127.0.0.1:1",
                      "--egress-listen=127.0.0.1:1"}));
}

TEST(Options, RejectsBadCommandLines) {
  for (auto args :
       std::vector<std::vector<const char*>>{{},
                                             {"--channel-fd", "3", "--channel", "/dev/x"},
                                             {"--channel-fd"},
                                             {"--channel-fd", "x"},
                                             {"--channel-fd", "-1"},
                                             {"--channel-fd", "1"},
                                             {"--channel-fd", "3", "--spare-fds", "4"},
                                             {"--channel-fd", "3", "--spare-fds", "4,4"},
                                             {"--channel-fd", "3", "--spare-fds", "3,5"},
                                             {"--channel-fd", "3", "--hold-fds", "6,"},
                                             {"--channel-fd", "3", "--bogus"},
                                             {"--channel", ""}}) {
    EXPECT_FALSE(parse(args)) << (args.empty() ? "(none)" : args.back());
  }
}

}  // namespace
}  // namespace space::agent
