// /proc scanning; see proc_table.h.
#include "agent/proc_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <memory>
#include <string_view>
#include <unordered_map>

namespace space::agent {
namespace {

// Reads a small /proc file into buf; returns the byte count or -1.
ssize_t read_small(const char* path, char* buf, size_t cap) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got < cap) {
    ssize_t n = ::read(fd, buf + got, cap - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return static_cast<ssize_t>(got);
}

bool parse_int(std::string_view s, long& v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

bool parse_proc_stat(std::string_view text, ProcEntry& out) {
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return false;
  long pid = 0;
  std::string_view pid_s = text.substr(0, open);
  while (!pid_s.empty() && pid_s.back() == ' ') pid_s.remove_suffix(1);
  if (!parse_int(pid_s, pid)) return false;
  std::string_view rest = text.substr(close + 1);
  // " S ppid pgrp ..."
  std::string_view fields[3];
  for (auto& f : fields) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    size_t sp = rest.find(' ');
    f = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp);
  }
  long ppid = 0, pgrp = 0;
  if (fields[0].size() != 1 || !parse_int(fields[1], ppid) || !parse_int(fields[2], pgrp))
    return false;
  out.pid = static_cast<pid_t>(pid);
  out.ppid = static_cast<pid_t>(ppid);
  out.pgrp = static_cast<pid_t>(pgrp);
  out.state = fields[0][0];
  return true;
}

std::vector<ProcEntry> scan_procs() {
  std::vector<ProcEntry> out;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir("/proc"), ::closedir);
  if (!d) return out;
  char path[64];
  char buf[1024];
  while (dirent* e = ::readdir(d.get())) {
    long pid = 0;
    if (!parse_int(e->d_name, pid) || pid <= 0) continue;
    std::snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    ssize_t n = read_small(path, buf, sizeof(buf));
    if (n <= 0) continue;
    ProcEntry p;
    if (parse_proc_stat(std::string_view(buf, static_cast<size_t>(n)), p)) out.push_back(p);
  }
  return out;
}

std::vector<pid_t> descendants(const std::vector<ProcEntry>& procs, pid_t root) {
  std::unordered_multimap<pid_t, pid_t> children;
  for (const ProcEntry& p : procs) children.emplace(p.ppid, p.pid);
  std::vector<pid_t> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    pid_t cur = todo.back();
    todo.pop_back();
    auto [b, e] = children.equal_range(cur);
    for (auto it = b; it != e; ++it) {
      if (it->second == root || out.size() > procs.size()) continue;  // no cycles
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

std::vector<std::string> read_cmdline(pid_t pid, size_t max_bytes) {
  std::vector<std::string> argv;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
  std::string buf(max_bytes, '\0');
  ssize_t n = read_small(path, buf.data(), buf.size());
  if (n <= 0) return argv;
  buf.resize(static_cast<size_t>(n));
  size_t i = 0;
  while (i < buf.size()) {
    size_t j = buf.find('\0', i);
    if (j == std::string::npos) j = buf.size();
    argv.emplace_back(buf, i, j - i);
    i = j + 1;
  }
  return argv;
}

long read_euid(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/status", pid);
  char buf[4096];
  ssize_t n = read_small(path, buf, sizeof(buf) - 1);
  if (n <= 0) return -1;
  std::string_view s(buf, static_cast<size_t>(n));
  size_t at = s.find("\nUid:");
  if (at == std::string_view::npos) return -1;
  std::string_view rest = s.substr(at + 5);
  // "\tREAL\tEFFECTIVE\t..."
  long v[2] = {-1, -1};
  for (long& x : v) {
    while (!rest.empty() && (rest.front() == '\t' || rest.front() == ' ')) rest.remove_prefix(1);
    size_t end = rest.find_first_of("\t \n");
    if (!parse_int(rest.substr(0, end), x)) return -1;
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  }
  return v[1];
}

}  // namespace space::agent
