// space-vminit's host-testable parts: kernel command line, ext4 labels, the agent's argv.
#include "vminit/guest.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace space::vminit {
namespace {

TEST(VminitCmdline, ParsesSpaceKeysAndIgnoresOthers) {
  auto p = parse_cmdline(
      "console=ttyS0 tsc_early_khz=2000000 space.hostname=sb_1a2b space.pids=256 "
      "space.egress=3128,443,80 quiet\n");
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->hostname, "sb_1a2b");
  ASSERT_TRUE(p->pids);
  EXPECT_EQ(*p->pids, 256u);
  EXPECT_EQ(p->egress, (std::vector<uint16_t>{3128, 443, 80}));
  EXPECT_EQ(parse_cmdline("space.egress=3128")->egress, std::vector<uint16_t>{3128});
  auto fc = parse_cmdline("console=ttyS0 space.channel=vsock:1024 space.egress=3128");
  ASSERT_TRUE(fc) << fc.error().message();
  EXPECT_EQ(fc->channel_vsock_port, 1024);
  EXPECT_EQ(parse_cmdline("space.channel=vsock:1")->channel_vsock_port, 1);
  EXPECT_EQ(parse_cmdline("space.channel=vsock:65535")->channel_vsock_port, 65535);
}

TEST(VminitCmdline, ProbeIsOneOrAnError) {
  auto p = parse_cmdline("console=ttyS0 rdinit=/init space.probe=1");
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_TRUE(p->probe);
  EXPECT_FALSE(parse_cmdline("console=ttyS0")->probe);
  for (const char* bad : {"space.probe=0", "space.probe=yes", "space.probe", "space.probe="})
    EXPECT_FALSE(parse_cmdline(bad)) << bad;
}

TEST(VminitCmdline, AbsentKeysStayUnset) {
  auto p = parse_cmdline("console=ttyS0");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->hostname, "");
  EXPECT_FALSE(p->pids);
  EXPECT_TRUE(p->egress.empty());
  EXPECT_FALSE(p->channel_vsock_port);
  EXPECT_TRUE(parse_cmdline(""));
}

TEST(VminitCmdline, RejectsBadValues) {
  EXPECT_FALSE(parse_cmdline("space.pids=0"));
  EXPECT_FALSE(parse_cmdline("space.pids=12x"));
  EXPECT_FALSE(parse_cmdline("space.pids=-1"));
  EXPECT_FALSE(parse_cmdline("space.egress=65536"));
  EXPECT_FALSE(parse_cmdline("space.egress="));
  EXPECT_FALSE(parse_cmdline("space.egress=80,"));
  EXPECT_FALSE(parse_cmdline("space.egress=80,80"));
  EXPECT_FALSE(parse_cmdline("space.egress=1,2,3,4,5,6,7,8,9"));
  EXPECT_FALSE(parse_cmdline("space.hostname=a/b"));
  EXPECT_FALSE(parse_cmdline("space.hostname"));
  for (const char* bad :
       {"space.channel=vsock:0", "space.channel=vsock:65536",
        "space.channel=vsock:", "space.channel=vsock:1x", "space.channel=vsock",
        "space.channel=", "space.channel=virtio-serial", "space.channel=unix:/x", "space.channel"})
    EXPECT_FALSE(parse_cmdline(bad)) << bad;
  auto typo = parse_cmdline("space.pid=5");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message().find("unknown kernel parameter space.pid"), std::string::npos);
  EXPECT_NE(typo.error().message().find("space.channel"), std::string::npos)
      << typo.error().message();
}

TEST(VminitModuleParams, CollectsModuleWordsLikeModprobe) {
  std::string cmdline =
      "console=ttyS0 virtio_mmio.device=512@0xfeb00e00:12 virtio-mmio.device=512@0xfeb00c00:11 "
      "ext4.x=1 virtio_mmio_extra.y=2 space.hostname=a.b foo=virtio_mmio.z virtio_mmio.flag\n";
  EXPECT_EQ(module_params(cmdline, "virtio_mmio"),
            "device=512@0xfeb00e00:12 device=512@0xfeb00c00:11 flag");
  EXPECT_EQ(module_params(cmdline, "virtio-mmio"),
            "device=512@0xfeb00e00:12 device=512@0xfeb00c00:11 flag");
  EXPECT_EQ(module_params(cmdline, "ext4"), "x=1");
  EXPECT_EQ(module_params(cmdline, "overlay"), "");
}

TEST(VminitAgentArgv, EgressOnlyWhenGiven) {
  BootParams p;
  EXPECT_EQ(agent_argv("/dev/vport1p1", p),
            (std::vector<std::string>{"/.space/space-agent", "--channel", "/dev/vport1p1"}));
  // With egress the agent also takes the guest's DNS queries on the stub's address.
  p.egress = {3128, 443};
  EXPECT_EQ(agent_argv("/dev/vport1p1", p),
            (std::vector<std::string>{"/.space/space-agent", "--channel", "/dev/vport1p1",
                                      "--egress-listen", "127.0.0.1:3128", "--egress-listen",
                                      "127.0.0.1:443", "--dns-listen", "127.0.0.53:53"}));
}

TEST(VminitResolvConf, TheStubWithEgressNothingWithout) {
  BootParams p;
  EXPECT_EQ(resolv_conf(p), "");  // the image's own file stays
  p.egress = {3128};
  EXPECT_EQ(resolv_conf(p), "nameserver 127.0.0.53\noptions edns0\n");
}

TEST(VminitAgentArgv, VsockChannelListensInsteadOfTheDevice) {
  BootParams p;
  p.channel_vsock_port = 1024;
  EXPECT_EQ(agent_argv("", p),
            (std::vector<std::string>{"/.space/space-agent", "--channel-listen", "vsock:1024"}));
  p.egress = {3128};
  EXPECT_EQ(agent_argv("/dev/vport1p1", p),  // a device, if given anyway, is not used
            (std::vector<std::string>{"/.space/space-agent", "--channel-listen", "vsock:1024",
                                      "--egress-listen", "127.0.0.1:3128", "--dns-listen",
                                      "127.0.0.53:53"}));
  // What vminit builds from the kernel command line the firecracker runtime gives.
  auto fc = parse_cmdline("console=ttyS0 space.channel=vsock:2049 space.egress=3128,443");
  ASSERT_TRUE(fc);
  EXPECT_EQ(agent_argv("", *fc),
            (std::vector<std::string>{"/.space/space-agent", "--channel-listen", "vsock:2049",
                                      "--egress-listen", "127.0.0.1:3128", "--egress-listen",
                                      "127.0.0.1:443", "--dns-listen", "127.0.0.53:53"}));
}

TEST(VminitLabel, ReadsSyntheticSuperblock) {
  std::string b(2048, '\0');
  EXPECT_FALSE(ext4_label(b));  // no magic
  b[kSuperblockOffset + kMagicOffset] = '\x53';
  b[kSuperblockOffset + kMagicOffset + 1] = '\xef';
  EXPECT_EQ(ext4_label(b), "");
  std::string full = "0123456789abcdef";  // 16 bytes, no terminator
  b.replace(kSuperblockOffset + kVolumeNameOffset, 16, full);
  EXPECT_EQ(ext4_label(b), full);
  EXPECT_FALSE(ext4_label(b.substr(0, 1100)));  // too short
}

// The real thing: a file formatted by mke2fs (e2fsprogs is a dependency).
TEST(VminitLabel, ReadsMke2fsLabel) {
  char tmpl[] = "/tmp/space-vminit-label-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::string path = tmpl;
  std::filesystem::resize_file(path, 8 << 20);
  std::string cmd = "mke2fs -q -F -t ext4 -L space-rw " + path + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "mke2fs failed";
  auto label = read_ext4_label(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(label) << label.error().message();
  EXPECT_EQ(*label, "space-rw");
  EXPECT_FALSE(read_ext4_label("/nonexistent/disk"));
}

// A qemu guest gets no AF_VSOCK at all: the vsock family is loaded only for a vsock channel.
TEST(VminitModules, VsockOnlyForAVsockChannel) {
  auto qemu = parse_cmdline("space.hostname=sb_1");
  auto fc = parse_cmdline("space.hostname=sb_1 space.channel=vsock:1024");
  ASSERT_TRUE(qemu);
  ASSERT_TRUE(fc);
  for (const char* m :
       {"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport"}) {
    EXPECT_FALSE(module_wanted(m, *qemu)) << m;
    EXPECT_TRUE(module_wanted(m, *fc)) << m;
  }
  for (const char* m : {"virtio_mmio", "virtio_blk", "ext4", "overlay", "virtio-rng"}) {
    EXPECT_TRUE(module_wanted(m, *qemu)) << m;
    EXPECT_TRUE(module_wanted(m, *fc)) << m;
  }
}

}  // namespace
}  // namespace space::vminit
