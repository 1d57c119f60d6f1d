// The agent's command line. The launcher (linux runtime) execs
//   space-agent --channel-fd 3 --spare-fds 4,5 --hold-fds 6
// and the microVM runtimes start it as init with
//   space-agent --channel /dev/vport0p1 --egress-listen 127.0.0.1:3128
// Parsing is separate from main.cc so the contract is testable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace space::agent {

struct Options {
  // Exactly one of channel_fd / channel_path is set.
  int channel_fd = -1;       // an inherited byte stream (SOCK_STREAM socketpair end)
  std::string channel_path;  // a character device opened O_RDWR (virtio-serial port, tty)
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
};
inline constexpr size_t kMaxEgressListen = 8;

inline constexpr const char* kUsage =
    "usage: space-agent (--channel-fd N | --channel PATH) [--spare-fds A,B] [--hold-fds N[,N...]]"
    " [--egress-listen IPV4:PORT]...";

// Parses argv (argv[0] is the program name). Accepts "--opt value" and "--opt=value".
Result<Options> parse_options(int argc, const char* const* argv);

}  // namespace space::agent
