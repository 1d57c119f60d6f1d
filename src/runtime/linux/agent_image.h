// The agent binary, copied once into a sealed memfd. Every sandbox executes this fd with
// execveat(fd, "", ..., AT_EMPTY_PATH) after pivot_root, so the agent never has a path in the
// sandbox and nothing there can change it: the seals (F_SEAL_WRITE|SHRINK|GROW|SEAL) make
// writes through /proc/1/exe or any other route fail, and the file mode 0111 (execute only, for
// an owner the sandbox cannot map) keeps its bytes unreadable inside, which in turn makes the
// kernel start the agent non-dumpable (see would_dump() in fs/exec.c).
#pragma once

#include <filesystem>

#include "common/error.h"
#include "common/fd.h"

namespace space::runtime::linux {

Result<UniqueFd> seal_agent_image(const std::filesystem::path& agent_path);

}  // namespace space::runtime::linux
