// A guard for nlohmann-json, whose DOM is built and destroyed recursively: untrusted text nested
// deeper than a format can use is refused before it is parsed (a deep [[[[... would otherwise
// exhaust the stack).
#pragma once

#include <string_view>

namespace space {

// True when no array or object in `text` (JSON, or anything: strings and escapes are skipped)
// is nested more than `max_depth` deep.
bool json_nesting_within(std::string_view text, int max_depth);

}  // namespace space
