// Wall-clock time as the API, the store and the audit log keep it: Unix seconds as a double.
#pragma once

#include <chrono>

namespace space {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace space
