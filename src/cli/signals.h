// Ctrl-C and friends for the CLI. A handler for SIGINT, SIGTERM and SIGHUP records the first
// signal and makes interrupt_fd() readable: every blocking read or write on a daemon
// connection polls that fd and gives up, so the connection closes (the daemon then kills the
// exec's process tree) and the command exits 128+signal. A second signal ends the CLI at once
// (exit 128+signal). SIGPIPE is ignored (a closed stdout is an EPIPE error instead).
// A handler rather than a sigwait() thread: starting (and, at exit, stopping) a thread cost
// every `space` run a few hundred microseconds.
#pragma once

namespace space::cli {

// Call once, first thing in main.
void install_signal_handling();
// An eventfd that becomes readable on the first signal; -1 before install_signal_handling().
int interrupt_fd();
// The first signal received, 0 if none.
int received_signal();

}  // namespace space::cli
