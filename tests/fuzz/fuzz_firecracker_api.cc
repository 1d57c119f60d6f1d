// libFuzzer target: the Firecracker API client's reading of HTTP responses from the VMM's Unix
// socket (src/runtime/firecracker/api.cc), which a compromised Firecracker controls. The input
// is everything the fake VMM answers (on a socketpair, closed after it); the first byte picks
// the calls the client makes on its one connection. Properties checked besides "no crash, no
// exception, no hang":
//  - every error message is printable ASCII and bounded (Firecracker's words are sanitized
//    before they reach logs and API answers);
//  - a connection that failed (transport or protocol error, timeout) is never used again:
//    every later call on it fails with kUnavailable without reading anything;
//  - balloon statistics, when they are returned, are a JSON object.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/firecracker/api.h"

namespace fc = space::runtime::firecracker;
using namespace std::chrono_literals;

namespace {

void check_error(const space::Error& e) {
  const std::string& m = e.message();
  if (m.size() > 2048) std::abort();
  for (unsigned char c : m)
    if (c < 0x20 || c >= 0x7f) std::abort();
}

// One call, chosen by `which`; true if it succeeded. On failure, `*code` is its code.
bool call(fc::ApiClient& api, int which, space::Code* code) {
  auto note = [&](const auto& r) {
    if (r) return true;
    check_error(r.error());
    *code = r.error().code();
    return false;
  };
  switch (which) {
    case 0:
      return note(api.describe());
    case 1:
      return note(api.version());
    case 2: {
      auto r = api.balloon_statistics();
      if (r && !r->is_object()) std::abort();
      return note(r);
    }
    case 3:
      return note(api.put_machine_config(fc::MachineConfig{}));
    case 4:
      return note(api.request("GET", "/vm/config", std::nullopt, 2000ms));
    case 5:
      return note(api.pause());
    case 6:
      return note(api.put_drive(fc::Drive{.drive_id = "rootfs", .path_on_host = "/x"}));
    default:
      return note(api.create_snapshot(
          fc::SnapshotCreate{.snapshot_path = "s", .mem_file_path = "m"}, 2000ms));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 64 * 1024) return 0;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  // All of the VMM's answers are written up front (they fit in the socket buffer), then its
  // side stops writing: the client reads them as they come and then EOF, never waits.
  size_t off = 1;
  while (off < size) {
    ssize_t n = ::send(sv[1], data + off, size - off, MSG_NOSIGNAL);
    if (n <= 0) std::abort();
    off += static_cast<size_t>(n);
  }
  ::shutdown(sv[1], SHUT_WR);
  {
    fc::ApiClient api{space::UniqueFd(sv[0])};
    // Three calls: byte 0 bits 0-2, 3-5, and 6-7 (+ the first).
    int which[3] = {data[0] & 7, (data[0] >> 3) & 7, ((data[0] >> 6) + (data[0] & 7)) & 7};
    bool lost = false;
    for (int w : which) {
      space::Code code{};
      bool ok = call(api, w, &code);
      if (lost && (ok || code != space::Code::kUnavailable)) std::abort();
      // Transport failure, timeout, or a protocol error of request() itself (calls 3..7 return
      // its errors as they are; describe, version and balloon statistics add their own
      // kProtocol for a well-framed answer of the wrong shape): the connection is out of step.
      if (!ok && (code == space::Code::kUnavailable || code == space::Code::kTimeout ||
                  (code == space::Code::kProtocol && w >= 3)))
        lost = true;
    }
  }
  ::close(sv[1]);
  return 0;
}
