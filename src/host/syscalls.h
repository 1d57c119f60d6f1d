// Thin wrappers for the syscalls that glibc 2.36 (Debian 12) does not wrap: clone3, the pidfd
// family, pivot_root, capget/capset and seccomp. Each is a single raw syscall and therefore
// async-signal-safe, so the child side of the launcher may call them between clone and exec.
#pragma once

#include <linux/capability.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace space::host {

inline long sys_clone3(struct clone_args* args) {
  return ::syscall(SYS_clone3, args, sizeof(*args));
}
inline int sys_pidfd_open(pid_t pid, unsigned flags = 0) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, flags));
}
inline int sys_pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}
// The returned fd has O_CLOEXEC set by the kernel.
inline int sys_pidfd_getfd(int pidfd, int target_fd) {
  return static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, target_fd, 0));
}
inline int sys_pivot_root(const char* new_root, const char* put_old) {
  return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}
inline int sys_capset(__user_cap_header_struct* header, __user_cap_data_struct* data) {
  return static_cast<int>(::syscall(SYS_capset, header, data));
}
inline int sys_seccomp(unsigned op, unsigned flags, void* args) {
  return static_cast<int>(::syscall(SYS_seccomp, op, flags, args));
}

}  // namespace space::host
