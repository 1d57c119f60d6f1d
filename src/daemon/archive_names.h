// Entry names of tar archives from clients (uploads, image imports) are untrusted: this turns
// one into a clean relative path, or refuses it.
#pragma once

#include <string>

#include "common/error.h"

namespace space::daemon {

// "./a//b/" -> "a/b"; "/etc/x" -> "etc/x" (a leading "/" is dropped, as tar does); "." -> "".
// Any ".." component is refused (kInvalidArgument).
Result<std::string> clean_archive_name(const std::string& name);

}  // namespace space::daemon
