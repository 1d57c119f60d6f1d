// Signal waiter thread for the CLI (see signals.h).
#include "cli/signals.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <thread>

namespace space::cli {
namespace {

std::atomic<int> g_signal{0};
int g_fd = -1;

}  // namespace

void install_signal_handling() {
  if (g_fd >= 0) return;
  std::signal(SIGPIPE, SIG_IGN);
  g_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) return;
    g_signal = sig;
    uint64_t one = 1;
    (void)!::write(g_fd, &one, sizeof one);
    // A second signal while we clean up means "now": die of it.
    if (sigwait(&set, &sig) == 0) _exit(128 + sig);
  }).detach();
}

int interrupt_fd() { return g_fd; }
int received_signal() { return g_signal.load(); }

}  // namespace space::cli
