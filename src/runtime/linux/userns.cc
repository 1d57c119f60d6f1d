// uid/gid maps of the sandbox's user namespace (see namespaces.h): sandbox ids 0..count-1 map
// to host ids base..base+count-1, a range the daemon allocates to this sandbox alone. Host
// root (and every other host id) stays unmapped inside.
#include <string>

#include "host/host_files.h"
#include "runtime/linux/namespaces.h"

namespace space::runtime::linux {

Result<void> write_id_maps(pid_t pid, uint32_t base, uint32_t count) {
  if (base == 0 || count == 0 || uint64_t{base} + count > uint64_t{UINT32_MAX}) {
    return fail(Code::kInvalidArgument,
                "bad id range " + std::to_string(base) + "+" + std::to_string(count));
  }
  const std::string line = "0 " + std::to_string(base) + " " + std::to_string(count) + "\n";
  const std::string proc = "/proc/" + std::to_string(pid);
  TRY_VOID_CTX(host::write_text(proc + "/uid_map", line), "writing uid_map");
  TRY_VOID_CTX(host::write_text(proc + "/gid_map", line), "writing gid_map");
  return {};
}

}  // namespace space::runtime::linux
