// Loads the agent binary into a sealed, execute-only memfd (see agent_image.h).
#include "runtime/linux/agent_image.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace space::runtime::linux {

namespace {

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U  // Linux 6.3: executable memfd even when vm.memfd_noexec=1
#endif

UniqueFd make_memfd() {
  int fd = ::memfd_create("space-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
  if (fd < 0 && errno == EINVAL) {  // kernels before 6.3 do not know MFD_EXEC
    fd = ::memfd_create("space-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  }
  return UniqueFd(fd);
}

}  // namespace

Result<UniqueFd> seal_agent_image(const std::filesystem::path& agent_path) {
  const std::string where = "loading agent \"" + agent_path.string() + "\"";
  UniqueFd src(::open(agent_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!src) return fail(Error::sys("open").wrap(where));
  struct stat st;
  if (::fstat(src.get(), &st) != 0) return fail(Error::sys("fstat").wrap(where));
  if (!S_ISREG(st.st_mode)) return fail(Code::kInvalidArgument, where + ": not a regular file");
  char magic[4] = {};
  if (::pread(src.get(), magic, sizeof magic, 0) != sizeof magic || std::memcmp(magic,
                                                                                "\x7f"
                                                                                "ELF",
                                                                                4) != 0) {
    return fail(Code::kInvalidArgument, where + ": not an ELF executable");
  }

  UniqueFd mem = make_memfd();
  if (!mem) return fail(Error::sys("memfd_create").wrap(where));
  off_t offset = 0;
  while (offset < st.st_size) {
    ssize_t n = ::sendfile(mem.get(), src.get(), &offset, static_cast<size_t>(st.st_size - offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(Error::sys("sendfile").wrap(where));
    }
    if (n == 0) return fail(Code::kInternal, where + ": file shrank while copying");
  }
  // Execute-only: root inside a sandbox is not the owner (host root is unmapped there) and has
  // no CAP_DAC_* over it, so it can neither read nor (given the seals) write the agent.
  if (::fchmod(mem.get(), 0111) != 0) return fail(Error::sys("fchmod", "0111").wrap(where));
  if (::fcntl(mem.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
      0) {
    return fail(Error::sys("fcntl", "F_ADD_SEALS").wrap(where));
  }
  return mem;
}

}  // namespace space::runtime::linux
