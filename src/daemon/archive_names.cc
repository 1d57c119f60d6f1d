// Cleaning untrusted tar entry names.
#include "daemon/archive_names.h"

namespace space::daemon {

Result<std::string> clean_archive_name(const std::string& name) {
  if (name.find('\0') != std::string::npos)
    return fail(Code::kInvalidArgument, "archive entry name contains a NUL byte");
  std::string out;
  size_t i = 0;
  while (i <= name.size()) {
    size_t j = name.find('/', i);
    if (j == std::string::npos) j = name.size();
    std::string comp = name.substr(i, j - i);
    if (comp == "..")
      return fail(Code::kInvalidArgument,
                  "archive entry \"" + name.substr(0, 200) + "\" contains \"..\"; refused");
    if (!comp.empty() && comp != ".") out += (out.empty() ? "" : "/") + comp;
    i = j + 1;
  }
  if (out.size() > 4096) return fail(Code::kInvalidArgument, "archive entry name too long");
  return out;
}

}  // namespace space::daemon
