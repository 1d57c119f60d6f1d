// space-upper-reader: lists the overlay upper layer of a microVM's writable disk for
// `space diff` (docs/snapshots.md, "diff"), so that the host never mounts a disk the guest
// wrote and never parses it in spaced. spaced starts it (src/runtime/vm_diff.cc) as the
// sandbox's own unprivileged uid, with no_new_privs, in new pid, network, ipc and uts
// namespaces, with rlimits on memory, CPU time, files and fds, the disk open read-only on
// --fd and stdout a pipe it reads with a size cap and a deadline. The recipe here:
//
//   1. parse the command line (nothing else is read: no environment, no files)
//   2. set up libext2fs's error tables, then confine itself (confine.h: seccomp, closed list)
//   3. walk `upper` on the disk (ext4_upper.h), printing the listing (runtime/upper_listing.h)
//
// Exit status: 0 with an `end` line; 1 with a `limit` or `error` line; 2 for a bad command line.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/upper_listing.h"
#include "upper_reader/confine.h"
#include "upper_reader/ext4_upper.h"

namespace {

using space::Code;
using space::Result;

constexpr const char* kUsage =
    "usage: space-upper-reader --fd N [--max-entries N]\n"
    "lists the directory `upper` of the ext4 file system open read-only on fd N\n";

// Buffered writes to stdout; a failed write (the daemon went away) ends the process.
class Out {
 public:
  void add(std::string_view s) {
    buf_ += s;
    if (buf_.size() >= 64 * 1024) flush();
  }
  void flush() {
    size_t off = 0;
    while (off < buf_.size()) {
      ssize_t n = ::write(1, buf_.data() + off, buf_.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ::_exit(1);
      off += static_cast<size_t>(n);
    }
    buf_.clear();
  }

 private:
  std::string buf_;
};

bool parse_size(const char* s, size_t& out) {
  std::string_view v(s);
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc() && p == v.data() + v.size();
}

// Printable ASCII only: the daemon shows it, and it may quote bytes from the disk.
std::string printable(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  // 1. The command line.
  size_t fd = SIZE_MAX;
  space::upper_reader::WalkLimits limits;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    bool ok = i + 1 < argc;
    if (ok && a == "--fd")
      ok = parse_size(argv[++i], fd) && fd <= 1024;
    else if (ok && a == "--max-entries")
      ok = parse_size(argv[++i], limits.max_entries);
    else
      ok = false;
    if (!ok) {
      (void)!::write(2, kUsage, std::strlen(kUsage));
      return 2;
    }
  }
  const int disk = static_cast<int>(fd);
  if (fd == SIZE_MAX || disk <= 2 || ::fcntl(disk, F_GETFD) < 0) {
    (void)!::write(2, kUsage, std::strlen(kUsage));
    return 2;
  }

  // 2. Confinement, before the first byte of the disk is read.
  Out out;
  space::upper_reader::prepare();
  if (auto r = space::upper_reader::confine(disk); !r) {
    out.add("error confining the disk reader: " + printable(r.error().message()) + "\n");
    out.flush();
    ::_exit(1);
  }

  // 3. The walk.
  out.add(std::string(space::runtime::kListingHeader) + "\n");
  size_t count = 0;
  auto r = space::upper_reader::walk_upper(
      disk, limits, [&](const space::runtime::UpperEntry& e) -> Result<void> {
        out.add(space::runtime::encode_entry(e));
        ++count;
        return {};
      });
  int status = 0;
  if (r) {
    out.add("end " + std::to_string(count) + "\n");
  } else if (r.error().code() == Code::kResourceExhausted) {
    out.add("limit " + std::to_string(limits.max_entries) + "\n");
    status = 1;
  } else {
    out.add("error " + printable(r.error().message()) + "\n");
    status = 1;
  }
  out.flush();
  // _exit: nothing runs after the listing (atexit handlers, and in sanitizer builds the leak
  // checker, would make system calls outside the policy).
  ::_exit(status);
}
