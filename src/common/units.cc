// Strict parsers and compact printers for sizes and durations (see units.h). Numbers are
// scanned by hand rather than with strtod so that "inf", "1e3", " 5", "0x10" and "-1" are all
// rejected instead of silently meaning something surprising.
#include "common/units.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace space {
namespace {

constexpr double kMaxDurationS = 100.0 * 365 * 24 * 3600;

// Splits "1.5G" into its numeric prefix "1.5" and suffix "G". The prefix must be digits with at
// most one '.', at least one digit before it and at least one after it if present.
struct Number {
  std::string_view whole;
  std::string_view fraction;  // digits after the '.', empty if none
  std::string_view suffix;
};

Result<Number> split_number(std::string_view text, std::string_view what,
                            std::string_view example) {
  auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument, "invalid " + std::string(what) + " \"" + std::string(text) +
                                            "\": " + std::string(why) +
                                            " (examples: " + std::string(example) + ")");
  };
  if (text.empty()) return bad("empty");
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0) return bad("must start with a digit");
  Number n;
  n.whole = text.substr(0, i);
  if (i < text.size() && text[i] == '.') {
    size_t start = ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == start) return bad("expected digits after '.'");
    n.fraction = text.substr(start, i - start);
  }
  n.suffix = text.substr(i);
  return n;
}

}  // namespace

Result<uint64_t> parse_size(std::string_view text) {
  static constexpr std::string_view kExamples = "1024, 512M, 2G, 1.5G, 64Ki, 512MiB";
  Number n = TRY(split_number(text, "size", kExamples));
  auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument, "invalid size \"" + std::string(text) +
                                            "\": " + std::string(why) +
                                            " (examples: " + std::string(kExamples) + ")");
  };

  // Unit: [KMGTPE] then an optional 'i', then an optional 'B'; or a bare 'B'.
  unsigned shift = 0;
  std::string_view s = n.suffix;
  if (!s.empty()) {
    switch (s[0]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      case 't':
      case 'T':
        shift = 40;
        break;
      case 'p':
      case 'P':
        shift = 50;
        break;
      case 'e':
      case 'E':
        shift = 60;
        break;
      case 'b':
      case 'B':
        break;
      default:
        return bad("unknown unit (use K, M, G, T, P or E, binary multiples)");
    }
    if (shift != 0) {
      s.remove_prefix(1);
      if (!s.empty() && (s[0] == 'i' || s[0] == 'I')) s.remove_prefix(1);
    }
    if (!s.empty() && (s[0] == 'b' || s[0] == 'B')) s.remove_prefix(1);
    if (!s.empty()) return bad("unexpected characters after the unit");
  }
  if (!n.fraction.empty() && shift == 0) return bad("a byte count must be a whole number");
  if (n.fraction.size() > 18) return bad("too many decimal places");

  using u128 = unsigned __int128;
  constexpr u128 kMax = std::numeric_limits<uint64_t>::max();
  u128 whole = 0;
  for (char c : n.whole) {
    whole = whole * 10 + static_cast<unsigned>(c - '0');
    if (whole > kMax) return bad("too large (the maximum is 16E)");
  }
  u128 total = whole << shift;
  if (total > kMax) return bad("too large (the maximum is 16E)");
  if (!n.fraction.empty()) {
    u128 frac = 0, scale = 1;
    for (char c : n.fraction) {
      frac = frac * 10 + static_cast<unsigned>(c - '0');
      scale *= 10;
    }
    // frac/scale < 1 and shift <= 60, so (frac << shift) fits in 128 bits (frac < 10^18 < 2^60).
    total += (frac << shift) / scale;
    if (total > kMax) return bad("too large (the maximum is 16E)");
  }
  return static_cast<uint64_t>(total);
}

Result<double> parse_duration(std::string_view text) {
  static constexpr std::string_view kExamples = "30, 30s, 1.5, 500ms, 5m, 1h, 2d";
  Number n = TRY(split_number(text, "duration", kExamples));
  auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument, "invalid duration \"" + std::string(text) +
                                            "\": " + std::string(why) +
                                            " (examples: " + std::string(kExamples) + ")");
  };
  double scale;
  if (n.suffix.empty() || n.suffix == "s") {
    scale = 1;
  } else if (n.suffix == "ms") {
    scale = 0.001;
  } else if (n.suffix == "m") {
    scale = 60;
  } else if (n.suffix == "h") {
    scale = 3600;
  } else if (n.suffix == "d") {
    scale = 86400;
  } else {
    return bad("unknown unit (use ms, s, m, h or d)");
  }
  if (n.whole.size() > 15) return bad("too large (the maximum is 100 years)");
  std::string_view numeric(n.whole.data(),
                           n.whole.size() + (n.fraction.empty() ? 0 : n.fraction.size() + 1));
  double value = 0;
  auto [ptr, ec] = std::from_chars(numeric.data(), numeric.data() + numeric.size(), value);
  if (ec != std::errc() || ptr != numeric.data() + numeric.size()) return bad("not a number");
  double seconds = value * scale;
  if (!std::isfinite(seconds) || seconds > kMaxDurationS) {
    return bad("too large (the maximum is 100 years)");
  }
  return seconds;
}

std::string format_size(uint64_t bytes) {
  static constexpr char kUnits[] = {'K', 'M', 'G', 'T', 'P', 'E'};
  if (bytes < 1024) return std::to_string(bytes) + "B";
  int unit = 0;
  while (unit + 1 < 6 && bytes >= (uint64_t{1024} << (10 * (unit + 1)))) ++unit;
  uint64_t base = uint64_t{1} << (10 * (unit + 1));
  if (bytes % base == 0) return std::to_string(bytes / base) + kUnits[unit];
  char buf[32];
  double v = static_cast<double>(bytes) / static_cast<double>(base);
  std::snprintf(buf, sizeof buf,
                v < 10    ? "%.2f%c"
                : v < 100 ? "%.1f%c"
                          : "%.0f%c",
                v, kUnits[unit]);
  return buf;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  if (seconds < 10 && seconds != std::floor(seconds)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
    return buf;
  }
  auto s = static_cast<uint64_t>(seconds);
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) {
    return std::to_string(s / 60) + "m" + (s % 60 ? std::to_string(s % 60) + "s" : "");
  }
  if (s < 86400) {
    return std::to_string(s / 3600) + "h" +
           (s % 3600 / 60 ? std::to_string(s % 3600 / 60) + "m" : "");
  }
  return std::to_string(s / 86400) + "d" +
         (s % 86400 / 3600 ? std::to_string(s % 86400 / 3600) + "h" : "");
}

}  // namespace space
