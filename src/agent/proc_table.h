// A snapshot of the process table from /proc, for `ps` and for the exec shim's tree kill
// (every descendant of the shim, found through ppid links, including processes that
// double-forked or called setsid and were re-parented to the shim).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace space::agent {

struct ProcEntry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  char state = '?';
};

// Reads /proc/*/stat. Processes that vanish while scanning are skipped.
std::vector<ProcEntry> scan_procs();

// Parses the content of /proc/PID/stat ("pid (comm) state ppid pgrp ..."); comm may hold
// spaces and parentheses. Returns false if the text is malformed.
bool parse_proc_stat(std::string_view text, ProcEntry& out);

// All descendants of `root` in the snapshot (not root itself), parents before children.
std::vector<pid_t> descendants(const std::vector<ProcEntry>& procs, pid_t root);

// /proc/PID/cmdline split at NULs, at most max_bytes of it in total (empty for kernel threads
// and zombies).
std::vector<std::string> read_cmdline(pid_t pid, size_t max_bytes);
// Effective uid from /proc/PID/status, -1 if unreadable.
long read_euid(pid_t pid);

}  // namespace space::agent
