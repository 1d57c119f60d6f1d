// The agent's command line. The launcher (linux runtime) execs
//   space-agent --channel-fd 3 --spare-fds 4,5 --hold-fds 6
// the qemu runtime starts it as the guest's init with
//   space-agent --channel /dev/vport0p1 --egress-listen 127.0.0.1:3128 --dns-listen 127.0.0.53:53
// and the firecracker runtime (no virtio-serial; the host connects through its vsock) with
//   space-agent --channel-listen vsock:1024 --egress-listen 127.0.0.1:3128
// Parsing is separate from main.cc so the contract is testable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace space::agent {

struct Options {
  // Where the agent listens for the daemon's connections (--channel-listen): each accepted
  // connection becomes the channel, replacing the one before (docs/agent-protocol.md).
  struct ChannelListen {
    enum class Family { kVsock, kUnix };
    Family family = Family::kVsock;
    uint32_t port = 0;  // kVsock: bound on VMADDR_CID_ANY
    std::string path;   // kUnix: a SOCK_STREAM socket created at this path (tests)
    std::string text;   // as given, for messages
  };

  // Exactly one of channel_fd / channel_path / channel_listen is set.
  int channel_fd = -1;       // an inherited byte stream (SOCK_STREAM socketpair end)
  std::string channel_path;  // a character device opened O_RDWR (virtio-serial port, tty)
  std::optional<ChannelListen> channel_listen;
  // The spare socketpair for reattach after a daemon restart: the agent's end and the daemon's
  // end (which the agent only keeps open so a new daemon can take it with pidfd_getfd).
  int spare_agent_fd = -1;
  int spare_daemon_fd = -1;
  // Fds the agent keeps open and otherwise ignores (the writable layer's directory).
  std::vector<int> hold_fds;
  // Where the agent accepts guest TCP connections that it carries to the daemon's egress
  // gateway over the channel (microVMs, which have no network device): the proxy's address and
  // the transparent HTTP and TLS ones, each connection tagged with the port it came to. See
  // docs/agent-protocol.md, "Egress".
  struct ListenAddr {
    uint32_t ip = 0;  // IPv4 address, network byte order
    uint16_t port = 0;
    std::string text;  // as given, for messages
  };
  std::vector<ListenAddr> egress_listen;
  // Where the agent receives guest DNS queries (UDP) that it carries to the gateway's DNS stub
  // over the channel (microVMs: the stub's own address, 127.0.0.53:53). See
  // docs/agent-protocol.md, "DNS".
  std::optional<ListenAddr> dns_listen;

  // The channel is the guest machine's own (a device or a vsock listener), not a socketpair
  // into a jail that shares the host's kernel: `resync` and the `reattach` ping apply.
  bool guest_channel() const { return !channel_path.empty() || channel_listen.has_value(); }
  // Exec auditing inside the guest (exec_audit.h, docs/audit.md): on for the guest's init (PID 1
  // on a guest channel) and wherever --audit-execs asks for it. Never with --channel-fd: the
  // linux runtime audits a jail's execs from the host, and a second notifying filter in the
  // jail would take them from its supervisor.
  bool audit_execs = false;  // --audit-execs
  bool exec_audit_wanted(int self_pid) const {
    return audit_execs || (guest_channel() && self_pid == 1);
  }
};
inline constexpr size_t kMaxEgressListen = 8;

inline constexpr const char* kUsage =
    "usage: space-agent (--channel-fd N | --channel PATH | --channel-listen vsock:PORT|unix:PATH)"
    " [--spare-fds A,B] [--hold-fds N[,N...]] [--egress-listen IPV4:PORT]..."
    " [--dns-listen IPV4:PORT] [--audit-execs]";

// Parses argv (argv[0] is the program name). Accepts "--opt value" and "--opt=value".
Result<Options> parse_options(int argc, const char* const* argv);

}  // namespace space::agent
