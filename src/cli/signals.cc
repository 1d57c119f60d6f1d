// Signal handling for the CLI (see signals.h).
#include "cli/signals.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>

namespace space::cli {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free,
              "the handler may only touch lock-free atomics");
int g_fd = -1;

// Async-signal-safe: a lock-free atomic, write(2) and _exit(2) only.
void on_signal(int sig) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, sig)) {
    // A second signal while we clean up means "now": die of it.
    _exit(128 + sig);
  }
  int saved = errno;
  uint64_t one = 1;
  (void)!::write(g_fd, &one, sizeof one);
  errno = saved;
}

}  // namespace

void install_signal_handling() {
  if (g_fd >= 0) return;
  std::signal(SIGPIPE, SIG_IGN);
  g_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  // SA_RESTART: reads and writes carry on; poll() still returns EINTR, and every wait polls
  // interrupt_fd() anyway.
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, sig);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

int interrupt_fd() { return g_fd; }
int received_signal() { return g_signal.load(); }

}  // namespace space::cli
