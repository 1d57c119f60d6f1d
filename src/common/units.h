// Human units for sizes and durations, shared by the CLI (flags such as `--memory 512M`) and the
// REST API (bodies such as {"memory": "2G", "timeout": "5m"}). Sizes use binary multiples:
// "1K" = 1024 bytes. Parsing is strict: garbage, negative numbers and values that do not fit
// are errors (kInvalidArgument) whose messages say what a valid value looks like.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace space {

// "1024", "512M", "2G", "1.5G", "64k", "512Mi", "512MB", "512MiB", "3T" -> bytes. A fraction is
// allowed with a unit ("1.5G"); the result is rounded down to whole bytes. Plain numbers are
// bytes and must be whole.
Result<uint64_t> parse_size(std::string_view text);

// "30", "30s", "1.5", "500ms", "5m", "1h", "2d" -> seconds. At most 100 years.
Result<double> parse_duration(std::string_view text);

// 536870912 -> "512M", 1610612736 -> "1.5G", 1000 -> "1000B": short form for tables and
// messages; parse_size(format_size(n)) is n whenever format_size is exact.
std::string format_size(uint64_t bytes);

// 42.0 -> "42s", 90 -> "1m30s", 7200 -> "2h": compact, for ages and messages.
std::string format_duration(double seconds);

}  // namespace space
