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
  auto several = parse({"--channel-fd", "3", "--egress-listen", "127.0.0.1:3128", "--egress-listen",
                        "127.0.0.1:443"});
  ASSERT_TRUE(several);
  ASSERT_EQ(several->egress_listen.size(), 2u);
  EXPECT_EQ(several->egress_listen[1].port, 443);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                          "localhost:3128", "::1:3128", "127.0.0.1:31x", "1.2.3:80"}) {
    auto r = parse({"--channel-fd", "3", "--egress-listen", bad});
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find("IPV4:PORT"), std::string::npos) << r.error().message();
  }
  EXPECT_FALSE(
      parse({"--channel-fd", "3", "--egress-listen=127.0.0.1:1", "--egress-listen=127.0.0.1:1"}));
}

TEST(Options, DnsListen) {
  auto o = parse({"--channel", "/dev/vport0p1", "--egress-listen", "127.0.0.1:3128", "--dns-listen",
                  "127.0.0.53:53"});
  ASSERT_TRUE(o) << o.error().message();
  ASSERT_TRUE(o->dns_listen);
  EXPECT_EQ(o->dns_listen->port, 53);
  EXPECT_EQ(o->dns_listen->ip, htonl(0x7f000035));
  EXPECT_EQ(o->dns_listen->text, "127.0.0.53:53");
  EXPECT_FALSE(parse({"--channel-fd", "3"})->dns_listen);
  EXPECT_TRUE(parse({"--channel-fd", "3", "--dns-listen=127.0.0.53:53"}));
  // One address at most, and the same syntax as --egress-listen.
  EXPECT_FALSE(parse(
      {"--channel-fd", "3", "--dns-listen", "127.0.0.53:53", "--dns-listen", "127.0.0.54:53"}));
  for (const char* bad : {"127.0.0.53", "127.0.0.53:0", "localhost:53", "::1:53"}) {
    auto r = parse({"--channel-fd", "3", "--dns-listen", bad});
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find("--dns-listen"), std::string::npos) << r.error().message();
  }
}

TEST(Options, ChannelListen) {
  auto v = parse({"--channel-listen", "vsock:1024", "--egress-listen", "127.0.0.1:3128"});
  ASSERT_TRUE(v) << v.error().message();
  ASSERT_TRUE(v->channel_listen);
  EXPECT_EQ(v->channel_listen->family, Options::ChannelListen::Family::kVsock);
  EXPECT_EQ(v->channel_listen->port, 1024u);
  EXPECT_EQ(v->channel_listen->text, "vsock:1024");
  EXPECT_EQ(v->channel_fd, -1);
  EXPECT_TRUE(v->channel_path.empty());
  EXPECT_TRUE(v->guest_channel());
  EXPECT_EQ(parse({"--channel-listen=vsock:1"})->channel_listen->port, 1u);
  EXPECT_EQ(parse({"--channel-listen=vsock:65535"})->channel_listen->port, 65535u);

  auto u = parse({"--channel-listen=unix:/tmp/agent.sock"});
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_EQ(u->channel_listen->family, Options::ChannelListen::Family::kUnix);
  EXPECT_EQ(u->channel_listen->path, "/tmp/agent.sock");
  std::string longest = "unix:/" + std::string(106, 'a');  // 107 bytes: sun_path holds them
  EXPECT_TRUE(parse({"--channel-listen", longest.c_str()}));

  EXPECT_TRUE(parse({"--channel", "/dev/vport0p1"})->guest_channel());
  EXPECT_FALSE(parse({"--channel-fd", "3"})->guest_channel());

  std::string too_long = "unix:/" + std::string(107, 'a');  // 108 bytes
  for (const std::string& bad : std::vector<std::string>{
           "vsock:", "vsock:0", "vsock:65536", "vsock:4294967296", "vsock:-1", "vsock:1x",
           "vsock: 1", "vsock", "unix:", "unix", "tcp:1", "/tmp/agent.sock", "", too_long}) {
    auto r = parse({"--channel-listen", bad.c_str()});
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find("--channel-listen"), std::string::npos)
        << r.error().message();
  }
}

TEST(Options, ExactlyOneChannel) {
  for (auto args : std::vector<std::vector<const char*>>{
           {},
           {"--channel-fd", "3", "--channel", "/dev/x"},
           {"--channel-fd", "3", "--channel-listen", "vsock:1024"},
           {"--channel", "/dev/x", "--channel-listen", "vsock:1024"},
           {"--channel-fd", "3", "--channel", "/dev/x", "--channel-listen", "unix:/s"},
           {"--egress-listen", "127.0.0.1:3128"}}) {
    auto r = parse(args);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message().find("exactly one of --channel-fd, --channel and "
                                       "--channel-listen"),
              std::string::npos)
        << r.error().message();
  }
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
