// libFuzzer target: QEMU's machine protocol client (src/runtime/qemu/qmp.cc), which reads what
// a QEMU process (one a guest may have compromised) writes on the QMP socket. A fake QEMU on a
// Unix socket accepts the client's connection, writes the input (the greeting, answers and
// events, one JSON text a line) and then reads whatever the client sends until it closes.
// The first byte says how many commands the client runs after the greeting (0..3; execute and
// getfd alternate). Properties checked besides "no crash, no exception, no hang":
//  - the client's results are those of a model of the protocol on the same lines: connect()
//    succeeds only on a first object with "QMP" and a "return" to qmp_capabilities; each
//    command gets the "return" of the first message that is not an event, an error for an
//    "error" object or for anything else, and nothing survives the end of the input;
//  - every error message is bounded.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/qemu/qmp.h"

using nlohmann::json;
using space::runtime::qemu::Qmp;
using namespace std::chrono_literals;

namespace {

std::filesystem::path g_dir;
int g_listener = -1;

void cleanup() {
  std::error_code ec;
  std::filesystem::remove_all(g_dir, ec);
}

std::filesystem::path socket_path() {
  if (g_listener < 0) {
    char tmpl[] = "/tmp/fuzz_qmp.XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    g_dir = tmpl;
    std::atexit(cleanup);
    g_listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string p = (g_dir / "qmp.sock").string();
    std::memcpy(addr.sun_path, p.c_str(), p.size());
    if (::bind(g_listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(g_listener, 4) != 0)
      std::abort();
  }
  return g_dir / "qmp.sock";
}

// The model: the messages the client will read, in order (nullopt: not a JSON object, which
// ends nothing but fails that read). Blank lines are skipped; a last line without '\n' is
// never read.
std::vector<std::optional<json>> messages(const std::string& in) {
  std::vector<std::optional<json>> out;
  size_t start = 0;
  for (;;) {
    size_t nl = in.find('\n', start);
    if (nl == std::string::npos) return out;
    std::string line = in.substr(start, nl - start);
    start = nl + 1;
    if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      out.emplace_back(std::nullopt);
    else
      out.emplace_back(std::move(j));
  }
}

struct Model {
  std::vector<std::optional<json>> msgs;
  size_t next = 0;
  // The answer to one command: its return value, or nullopt for an error.
  std::optional<json> answer() {
    for (;;) {
      if (next >= msgs.size()) return std::nullopt;  // EOF
      const std::optional<json>& m = msgs[next++];
      if (!m) return std::nullopt;
      if (m->contains("event")) continue;
      if (auto it = m->find("return"); it != m->end()) return *it;
      return std::nullopt;
    }
  }
};

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

void check_error(const space::Error& e) {
  if (e.message().size() > 4096) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 64 * 1024) return 0;
  const int commands = data[0] & 3;
  std::string lines(reinterpret_cast<const char*>(data + 1), size - 1);
  auto path = socket_path();
  std::thread qemu([&] {
    int fd = ::accept4(g_listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) std::abort();
    write_all(fd, lines);
    ::shutdown(fd, SHUT_WR);
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
    ::close(fd);
  });
  Model model{messages(lines)};
  bool greeted = false;
  if (!model.msgs.empty()) {
    const auto& first = model.msgs[model.next++];
    greeted = first && first->contains("QMP") && model.answer().has_value();
  }
  {
    auto q = Qmp::connect(path, 5000ms);
    if (q.has_value() != greeted) std::abort();
    if (!q) {
      check_error(q.error());
    } else {
      for (int i = 0; i < commands; ++i) {
        std::optional<json> want = model.answer();
        if (i % 2 == 0) {
          auto r = q->execute("query-status", json::object(), 5000ms);
          if (r.has_value() != want.has_value() || (r && *r != *want)) std::abort();
          if (!r) check_error(r.error());
        } else {
          int fd = ::dup(2);
          auto r = q->send_fd("fuzz", fd, 5000ms);
          ::close(fd);
          if (r.has_value() != want.has_value()) std::abort();
          if (!r) check_error(r.error());
        }
      }
    }
  }
  qemu.join();
  return 0;
}
