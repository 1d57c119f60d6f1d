// Parsing of the agent's command line (see options.h for the contract).
#include "agent/options.h"

#include <arpa/inet.h>
#include <sys/un.h>

#include <charconv>
#include <string_view>

namespace space::agent {
namespace {

Result<int> parse_fd(std::string_view s, std::string_view flag) {
  int v = -1;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > 1 << 20)
    return fail(Code::kInvalidArgument,
                std::string(flag) + ": \"" + std::string(s) + "\" is not a file descriptor");
  return v;
}

Result<std::vector<int>> parse_fd_list(std::string_view s, std::string_view flag) {
  std::vector<int> out;
  while (true) {
    size_t comma = s.find(',');
    out.push_back(TRY(parse_fd(s.substr(0, comma), flag)));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

// "A.B.C.D:PORT" with an IPv4 literal and a port in 1..65535.
Result<Options::ListenAddr> parse_listen_addr(std::string_view s, std::string_view flag) {
  auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument, std::string(flag) + ": \"" + std::string(s) + "\" " +
                                            std::string(why) + " (expected IPV4:PORT, e.g. " +
                                            "127.0.0.1:3128)");
  };
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos) return bad("has no port");
  std::string ip(s.substr(0, colon));
  std::string_view port_text = s.substr(colon + 1);
  Options::ListenAddr a;
  in_addr in{};
  if (::inet_pton(AF_INET, ip.c_str(), &in) != 1) return bad("is not an IPv4 literal");
  a.ip = in.s_addr;
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 || port > 65535)
    return bad("has no valid port");
  a.port = static_cast<uint16_t>(port);
  a.text = std::string(s);
  return a;
}

// "vsock:PORT" (port 1..65535) or "unix:PATH" (PATH non-empty and fitting sun_path).
Result<Options::ChannelListen> parse_channel_listen(std::string_view s, std::string_view flag) {
  auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument, std::string(flag) + ": \"" + std::string(s) + "\" " +
                                            std::string(why) +
                                            " (expected vsock:PORT or unix:PATH, e.g. vsock:1024)");
  };
  Options::ChannelListen l;
  l.text = std::string(s);
  if (s.starts_with("vsock:")) {
    std::string_view port_text = s.substr(6);
    unsigned port = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 || port > 65535)
      return bad("has no valid port (1-65535)");
    l.family = Options::ChannelListen::Family::kVsock;
    l.port = port;
    return l;
  }
  if (s.starts_with("unix:")) {
    l.family = Options::ChannelListen::Family::kUnix;
    l.path = std::string(s.substr(5));
    if (l.path.empty()) return bad("has an empty path");
    if (l.path.size() >= sizeof(sockaddr_un{}.sun_path))
      return bad("has a path of 108 bytes or more");
    return l;
  }
  return bad("has an unknown address family");
}

}  // namespace

Result<Options> parse_options(int argc, const char* const* argv) {
  Options o;
  bool have_channel_fd = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    bool inline_value = false;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    auto need_value = [&]() -> Result<std::string_view> {
      if (inline_value) return value;
      if (i + 1 >= argc) return fail(Code::kInvalidArgument, std::string(arg) + " needs a value");
      return std::string_view(argv[++i]);
    };
    if (arg == "--channel-fd") {
      o.channel_fd = TRY(parse_fd(TRY(need_value()), arg));
      have_channel_fd = true;
    } else if (arg == "--channel") {
      o.channel_path = std::string(TRY(need_value()));
      if (o.channel_path.empty()) return fail(Code::kInvalidArgument, "--channel: empty path");
    } else if (arg == "--channel-listen") {
      o.channel_listen = TRY(parse_channel_listen(TRY(need_value()), arg));
    } else if (arg == "--spare-fds") {
      auto fds = TRY(parse_fd_list(TRY(need_value()), arg));
      if (fds.size() != 2 || fds[0] == fds[1])
        return fail(Code::kInvalidArgument, "--spare-fds takes two different fds: AGENT,DAEMON");
      o.spare_agent_fd = fds[0];
      o.spare_daemon_fd = fds[1];
    } else if (arg == "--hold-fds") {
      auto fds = TRY(parse_fd_list(TRY(need_value()), arg));
      o.hold_fds.insert(o.hold_fds.end(), fds.begin(), fds.end());
    } else if (arg == "--egress-listen") {
      auto addr = TRY(parse_listen_addr(TRY(need_value()), arg));
      for (const auto& l : o.egress_listen)
        if (l.ip == addr.ip && l.port == addr.port)
          return fail(Code::kInvalidArgument, "--egress-listen " + addr.text + " given twice");
      if (o.egress_listen.size() >= kMaxEgressListen)
        return fail(Code::kInvalidArgument,
                    "--egress-listen: at most " + std::to_string(kMaxEgressListen) + " addresses");
      o.egress_listen.push_back(std::move(addr));
    } else if (arg == "--dns-listen") {
      if (o.dns_listen) return fail(Code::kInvalidArgument, "--dns-listen given twice");
      o.dns_listen = TRY(parse_listen_addr(TRY(need_value()), arg));
    } else if (arg == "--audit-execs") {
      if (inline_value) return fail(Code::kInvalidArgument, "--audit-execs takes no value");
      o.audit_execs = true;
    } else {
      return fail(Code::kInvalidArgument, "unknown argument \"" + std::string(arg) + "\"");
    }
  }
  if (int(have_channel_fd) + int(!o.channel_path.empty()) + int(o.channel_listen.has_value()) != 1)
    return fail(Code::kInvalidArgument,
                "exactly one of --channel-fd, --channel and --channel-listen is required");
  if (o.audit_execs && have_channel_fd)
    return fail(Code::kInvalidArgument,
                "--audit-execs is for microVM guests (--channel, --channel-listen): the linux "
                "runtime audits the execs of a jail from the host");
  // The fds must all be distinct and must not be stdio.
  std::vector<int> all = o.hold_fds;
  if (have_channel_fd) all.push_back(o.channel_fd);
  if (o.spare_agent_fd >= 0) {
    all.push_back(o.spare_agent_fd);
    all.push_back(o.spare_daemon_fd);
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] <= 2)
      return fail(Code::kInvalidArgument,
                  "fd " + std::to_string(all[i]) + " is stdio and cannot be a channel or held fd");
    for (size_t j = i + 1; j < all.size(); ++j)
      if (all[i] == all[j])
        return fail(Code::kInvalidArgument, "fd " + std::to_string(all[i]) + " given twice");
  }
  return o;
}

}  // namespace space::agent
