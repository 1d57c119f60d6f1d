// Random ids (ids.h).
#include "common/ids.h"

#include <sys/random.h>

#include <algorithm>
#include <cstdlib>

#include "common/hex.h"

namespace space {

std::string random_id(std::string_view prefix, size_t bytes) {
  unsigned char b[32];
  bytes = std::min(bytes, sizeof b);
  if (getrandom(b, bytes, 0) != static_cast<ssize_t>(bytes)) abort();  // cannot happen
  return std::string(prefix) + to_hex(b, bytes);
}

}  // namespace space
