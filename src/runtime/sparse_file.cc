// Sparse-aware copies for snapshot memory and template disks; see sparse_file.h.
#include "runtime/sparse_file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace space::runtime::vm {
namespace {

// Calls `each(offset, length)` for every data extent of `fd` (size `size`).
template <class F>
Result<void> for_each_extent(int fd, off_t size, F each) {
  off_t pos = 0;
  while (pos < size) {
    off_t data = ::lseek(fd, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) return {};  // only a hole is left
      return fail_sys("lseek", "SEEK_DATA");
    }
    off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) return fail_sys("lseek", "SEEK_HOLE");
    hole = std::min(hole, size);
    TRY_VOID(each(data, hole - data));
    pos = hole;
  }
  return {};
}

// Copies [off, off+len) from `src` to `dst` at the same offset.
Result<void> copy_range(int src, int dst, off_t off, off_t len) {
  while (len > 0) {
    loff_t in = off, out = off;
    ssize_t n = ::copy_file_range(src, &in, dst, &out, static_cast<size_t>(len), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
      char buf[1 << 16];
      ssize_t r = ::pread(src, buf, static_cast<size_t>(std::min<off_t>(len, sizeof buf)), off);
      if (r <= 0) return r < 0 ? fail_sys("pread") : fail(Code::kInternal, "short read");
      if (::pwrite(dst, buf, static_cast<size_t>(r), off) != r) return fail_sys("pwrite");
      n = r;
    } else if (n < 0) {
      return fail_sys("copy_file_range");
    } else if (n == 0) {
      return fail(Code::kInternal, "the file shrank while it was copied");
    }
    off += n;
    len -= n;
  }
  return {};
}

}  // namespace

Result<uint64_t> apply_diff(int base_fd, int diff_fd) {
  struct stat b, d;
  if (::fstat(base_fd, &b) != 0 || ::fstat(diff_fd, &d) != 0) return fail_sys("fstat");
  if (d.st_size > b.st_size)
    return fail(Code::kInvalidArgument, "the diff (" + std::to_string(d.st_size) +
                                            " bytes) is larger than the memory it applies to (" +
                                            std::to_string(b.st_size) + ")");
  uint64_t written = 0;
  TRY_VOID(for_each_extent(diff_fd, d.st_size, [&](off_t off, off_t len) -> Result<void> {
    TRY_VOID(copy_range(diff_fd, base_fd, off, len));
    written += static_cast<uint64_t>(len);
    return {};
  }));
  return written;
}

Result<void> copy_sparse(int src_fd, int dst_fd) {
  struct stat s;
  if (::fstat(src_fd, &s) != 0) return fail_sys("fstat");
  if (::ioctl(dst_fd, FICLONE, src_fd) == 0) return {};
  if (::ftruncate(dst_fd, s.st_size) != 0) return fail_sys("ftruncate");
  return for_each_extent(src_fd, s.st_size, [&](off_t off, off_t len) {
    return copy_range(src_fd, dst_fd, off, len);
  });
}

Result<uint64_t> copy_nonzero_pages(int src_fd, int dst_fd) {
  struct stat s;
  if (::fstat(src_fd, &s) != 0) return fail_sys("fstat");
  if (::ftruncate(dst_fd, s.st_size) != 0) return fail_sys("ftruncate");
  constexpr size_t kPage = 4096, kChunk = 1 << 20;
  static const char zeros[kPage] = {};
  std::vector<char> buf(kChunk);
  uint64_t written = 0;
  TRY_VOID(for_each_extent(src_fd, s.st_size, [&](off_t off, off_t len) -> Result<void> {
    for (off_t pos = off; pos < off + len;) {
      size_t want = static_cast<size_t>(std::min<off_t>(kChunk, off + len - pos));
      ssize_t n = ::pread(src_fd, buf.data(), want, pos);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n < 0 ? fail_sys("pread") : fail(Code::kInternal, "short read");
      // Runs of pages with data go out in one write each.
      for (ssize_t i = 0; i < n;) {
        auto page_at = [&](ssize_t k) {
          return std::min<size_t>(kPage, static_cast<size_t>(n - k));
        };
        if (std::memcmp(buf.data() + i, zeros, page_at(i)) == 0) {
          i += static_cast<ssize_t>(page_at(i));
          continue;
        }
        ssize_t end = i;
        while (end < n && std::memcmp(buf.data() + end, zeros, page_at(end)) != 0)
          end += static_cast<ssize_t>(page_at(end));
        size_t len2 = static_cast<size_t>(end - i);
        if (::pwrite(dst_fd, buf.data() + i, len2, pos + i) != static_cast<ssize_t>(len2))
          return fail_sys("pwrite");
        written += len2;
        i = end;
      }
      pos += n;
    }
    return {};
  }));
  return written;
}

}  // namespace space::runtime::vm
