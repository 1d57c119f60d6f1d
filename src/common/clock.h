// Wall-clock time as the API, the store and the audit log keep it: Unix seconds as a double,
// shown as RFC 3339 UTC with milliseconds.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace space {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// "2026-12-05T01:38:28.123Z" for Unix seconds (UTC, milliseconds truncated).
inline std::string rfc3339(double unix_seconds) {
  time_t s = static_cast<time_t>(unix_seconds);
  int ms = static_cast<int>((unix_seconds - static_cast<double>(s)) * 1000);
  struct tm tm;
  gmtime_r(&s, &tm);
  char buf[40];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, ms);
  return out;
}

// Whole Unix seconds of a UTC time as rfc3339() writes it ("2026-12-05T01:38:28Z", a fraction
// allowed and dropped). `strict`: nothing but that; otherwise whatever follows the seconds is
// ignored (the CLI reading times the daemon wrote). nullopt when it does not parse.
inline std::optional<double> parse_rfc3339(const std::string& s, bool strict = true) {
  struct tm tm {};
  const char* end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return std::nullopt;
  if (strict) {
    if (*end == '.')
      while (*++end >= '0' && *end <= '9') {
      }
    if (std::string_view(end) != "Z") return std::nullopt;
  }
  return static_cast<double>(::timegm(&tm));
}

}  // namespace space
