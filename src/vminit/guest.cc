// Pure helpers of space-vminit: command line, ext4 labels, the agent's argv (guest.h).
#include "vminit/guest.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "common/fd.h"
#include "proto/guest_boot.h"

namespace space::vminit {
namespace {

template <class T>
Result<T> parse_number(std::string_view key, std::string_view v, T min, T max) {
  T n{};
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < min || n > max)
    return fail(Code::kInvalidArgument, std::string(key) + "=" + std::string(v.substr(0, 32)) +
                                            ": expected a number from " + std::to_string(min) +
                                            " to " + std::to_string(max));
  return n;
}

bool valid_hostname(std::string_view h) {
  if (h.empty() || h.size() > 64) return false;
  for (char c : h)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return false;
  return true;
}

}  // namespace

Result<BootParams> parse_cmdline(std::string_view cmdline) {
  BootParams p;
  size_t i = 0;
  while (i < cmdline.size()) {
    while (i < cmdline.size() && (cmdline[i] == ' ' || cmdline[i] == '\n' || cmdline[i] == '\t'))
      ++i;
    size_t j = i;
    while (j < cmdline.size() && cmdline[j] != ' ' && cmdline[j] != '\n' && cmdline[j] != '\t') ++j;
    std::string_view word = cmdline.substr(i, j - i);
    i = j;
    if (!word.starts_with("space.")) continue;
    size_t eq = word.find('=');
    std::string_view key = word.substr(0, eq);
    std::string_view value =
        eq == std::string_view::npos ? std::string_view() : word.substr(eq + 1);
    if (eq == std::string_view::npos)
      return fail(Code::kInvalidArgument, std::string(key) + " needs a value (KEY=VALUE)");
    if (key == "space.hostname") {
      if (!valid_hostname(value))
        return fail(Code::kInvalidArgument,
                    "space.hostname=" + std::string(value.substr(0, 80)) +
                        ": expected 1-64 characters of a-z, A-Z, 0-9, '-', '_', '.'");
      p.hostname = std::string(value);
    } else if (key == "space.pids") {
      p.pids = TRY(parse_number<uint32_t>(key, value, 1, 4194304));
    } else if (key == "space.egress") {
      // PORT[,PORT...]: the gateway's listeners, the proxy's first.
      p.egress.clear();
      size_t start = 0;
      for (;;) {
        size_t comma = value.find(',', start);
        std::string_view one = value.substr(
            start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        uint16_t port = TRY(parse_number<uint16_t>(key, one, 1, 65535));
        if (std::find(p.egress.begin(), p.egress.end(), port) != p.egress.end() ||
            p.egress.size() >= 8)
          return fail(Code::kInvalidArgument, "space.egress: at most 8 different ports");
        p.egress.push_back(port);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    } else if (key == "space.channel") {
      // vsock:PORT, the only form so far (without the key: the virtio-serial port).
      if (!value.starts_with("vsock:"))
        return fail(Code::kInvalidArgument,
                    "space.channel=" + std::string(value.substr(0, 80)) + ": expected vsock:PORT");
      p.channel_vsock_port = TRY(parse_number<uint16_t>(key, value.substr(6), 1, 65535));
    } else if (key == "space.probe") {
      if (value != "1")
        return fail(Code::kInvalidArgument,
                    "space.probe=" + std::string(value.substr(0, 80)) + ": expected 1");
      p.probe = true;
    } else {
      return fail(Code::kInvalidArgument,
                  "unknown kernel parameter " + std::string(key.substr(0, 80)) +
                      " (known: space.hostname, space.pids, space.egress, space.channel, "
                      "space.probe)");
    }
  }
  return p;
}

std::string module_params(std::string_view cmdline, std::string_view module) {
  auto norm = [](std::string_view s) {
    std::string o(s);
    for (char& c : o)
      if (c == '-') c = '_';
    return o;
  };
  std::string want = norm(module) + ".";
  std::string out;
  size_t i = 0;
  while (i < cmdline.size()) {
    while (i < cmdline.size() && std::isspace(static_cast<unsigned char>(cmdline[i]))) ++i;
    size_t j = i;
    while (j < cmdline.size() && !std::isspace(static_cast<unsigned char>(cmdline[j]))) ++j;
    std::string_view word = cmdline.substr(i, j - i);
    i = j;
    size_t dot = word.find('.');
    if (dot == std::string_view::npos || dot + 1 >= word.size()) continue;
    size_t eq = word.find('=');
    if (eq != std::string_view::npos && eq < dot) continue;  // a '.' inside a value
    if (norm(word.substr(0, dot + 1)) != want) continue;
    if (!out.empty()) out += ' ';
    out += word.substr(dot + 1);
  }
  return out;
}

std::optional<std::string> ext4_label(std::string_view b) {
  if (b.size() < kSuperblockOffset + kVolumeNameOffset + 16) return std::nullopt;
  const auto* sb = reinterpret_cast<const unsigned char*>(b.data() + kSuperblockOffset);
  uint16_t magic = static_cast<uint16_t>(sb[kMagicOffset] | (sb[kMagicOffset + 1] << 8));
  if (magic != kExt4Magic) return std::nullopt;
  const char* name = reinterpret_cast<const char*>(sb + kVolumeNameOffset);
  size_t n = 0;
  while (n < 16 && name[n] != '\0') ++n;
  return std::string(name, n);
}

Result<std::optional<std::string>> read_ext4_label(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_sys("open", path);
  std::string buf(2048, '\0');
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = ::pread(fd.get(), buf.data() + got, buf.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_sys("pread", path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  buf.resize(got);
  return ext4_label(buf);
}

std::vector<std::string> agent_argv(const std::string& channel_dev, const BootParams& p) {
  std::vector<std::string> argv = {"/.space/space-agent"};
  if (p.channel_vsock_port) {
    argv.push_back("--channel-listen");
    argv.push_back("vsock:" + std::to_string(*p.channel_vsock_port));
  } else {
    argv.push_back("--channel");
    argv.push_back(channel_dev);
  }
  for (uint16_t port : p.egress) {
    argv.push_back("--egress-listen");
    argv.push_back("127.0.0.1:" + std::to_string(port));
  }
  if (!p.egress.empty()) {
    argv.push_back("--dns-listen");
    argv.push_back(std::string(proto::kDnsStubIp) + ":" + std::to_string(proto::kDnsStubPort));
  }
  return argv;
}

std::string resolv_conf(const BootParams& p) {
  if (p.egress.empty()) return "";
  return "nameserver " + std::string(proto::kDnsStubIp) + "\noptions edns0\n";
}

bool module_wanted(std::string_view module, const BootParams& p) {
  if (module == "vsock" || module == "vmw_vsock_virtio_transport_common" ||
      module == "vmw_vsock_virtio_transport")
    return p.channel_vsock_port.has_value();
  return true;
}

}  // namespace space::vminit
