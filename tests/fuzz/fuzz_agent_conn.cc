// libFuzzer target: the daemon's side of the agent channel (src/daemon/agent_conn.cc), which
// reads bytes a subverted agent controls. A fake agent on a socketpair says hello, then
//   mode 0: sends the rest of the input as raw channel bytes (decoder + frame routing);
//   mode 1: answers a one-shot request (AgentConn::request, as file operations use it) with
//           frames built from the input ([type u8][len u16 LE][payload]...) on the request's
//           own stream, so response validation is reached.
// The daemon must survive every input: report an error or a result, never crash or hang.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>

#include "daemon/agent_conn.h"
#include "proto/frame.h"

using space::daemon::AgentConn;
using space::proto::FrameType;
using namespace std::chrono_literals;

namespace {

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the daemon side closed: fine
    off += static_cast<size_t>(n);
  }
}

std::string hello() {
  std::string out;
  (void)space::proto::encode(FrameType::kHello, 0, R"({"version":1,"pid":1})", out);
  return out;
}

// Reads one frame header + payload from the daemon side; returns its stream id (0 on EOF).
uint32_t read_request_stream(int fd) {
  space::proto::Decoder dec;
  char buf[4096];
  for (;;) {
    auto f = dec.next();
    if (!f) return 0;
    if (*f) return (*f)->stream;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return 0;
    dec.feed(std::span<const char>(buf, static_cast<size_t>(n)));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  const int mode = data[0] & 1;
  std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::thread agent([&] {
    write_all(sv[1], hello());
    if (mode == 0) {
      write_all(sv[1], rest);
    } else {
      uint32_t stream = read_request_stream(sv[1]);
      std::string frames;
      size_t i = 0;
      while (i + 3 <= rest.size()) {
        uint8_t type = static_cast<uint8_t>(rest[i]);
        size_t len = static_cast<uint8_t>(rest[i + 1]) | static_cast<uint8_t>(rest[i + 2]) << 8;
        i += 3;
        len = std::min(len, rest.size() - i);
        std::string payload = rest.substr(i, len);
        i += len;
        // Raw header: any type byte, the request's stream.
        char h[12] = {};
        uint32_t n = static_cast<uint32_t>(payload.size());
        for (int k = 0; k < 4; ++k) h[k] = static_cast<char>(n >> (8 * k));
        h[4] = static_cast<char>(type);
        for (int k = 0; k < 4; ++k) h[8 + k] = static_cast<char>(stream >> (8 * k));
        frames.append(h, sizeof h);
        frames += payload;
      }
      write_all(sv[1], frames);
    }
    ::shutdown(sv[1], SHUT_WR);
  });
  auto conn = AgentConn::open(sv[0], "fuzz", false, 5000ms);
  if (conn) {
    if (mode == 1) {
      auto r = (*conn)->request({{"op", "stat"}, {"path", "/"}}, 2000ms);
      (void)r;
    } else {
      std::promise<void> lost;
      auto done = lost.get_future();
      (*conn)->set_on_lost([&lost](const space::Error&) { lost.set_value(); });
      if (done.wait_for(5000ms) != std::future_status::ready) std::abort();  // wedged
    }
    (*conn)->close();
  }
  ::shutdown(sv[0], SHUT_RDWR);
  agent.join();
  conn = {};
  ::close(sv[0]);
  ::close(sv[1]);
  return 0;
}
