// The sandbox's network namespace (see namespaces.h): created on a scratch thread with
// unshare(CLONE_NEWNET) so it is owned by the host user namespace. It holds only `lo`; the
// daemon's egress gateway binds its listeners inside it through the kept fd.
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "runtime/linux/namespaces.h"

namespace space::runtime::linux {

void run_on_scratch_thread(const std::function<void()>& fn) {
  std::thread t(fn);
  t.join();
}

namespace {

// Runs on the scratch thread, already inside the new namespace.
Result<void> bring_up_loopback() {
  UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return fail_sys("socket", "AF_INET");
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0) return fail_sys("ioctl", "SIOCGIFFLAGS lo");
  ifr.ifr_flags |= IFF_UP;
  if (::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0) return fail_sys("ioctl", "SIOCSIFFLAGS lo up");
  return {};
}

}  // namespace

Result<UniqueFd> create_netns() {
  Result<UniqueFd> out = fail(Code::kInternal, "scratch thread did not run");
  run_on_scratch_thread([&] {
    // CLONE_NEWNET only affects this thread, which exits right after.
    if (::unshare(CLONE_NEWNET) != 0) {
      out = fail_sys("unshare", "CLONE_NEWNET");
      return;
    }
    if (auto r = bring_up_loopback(); !r) {
      out = fail(std::move(r.error()));
      return;
    }
    UniqueFd ns(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!ns) {
      out = fail_sys("open", "/proc/thread-self/ns/net");
      return;
    }
    out = std::move(ns);
  });
  if (!out) return fail(std::move(out.error()).wrap("creating network namespace"));
  return out;
}

}  // namespace space::runtime::linux
