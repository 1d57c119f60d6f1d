// Escaping of untrusted text, tables, ages, error reporting for the CLI (see output.h).
#include "cli/output.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iterator>

#include "common/clock.h"
#include "common/units.h"
#include "common/utf8.h"

namespace space::cli {
namespace {

struct Range {
  char32_t first, last;
};

// Whether `cp` is in one of `ranges` (sorted, disjoint).
template <size_t N>
bool in_ranges(const Range (&ranges)[N], char32_t cp) {
  const Range* r = std::lower_bound(std::begin(ranges), std::end(ranges), cp,
                                    [](const Range& r, char32_t c) { return r.last < c; });
  return r != std::end(ranges) && r->first <= cp;
}

// Code points that are invisible or rearrange text, shown as \u{XXXX} (sorted).
constexpr Range kInvisible[] = {
    {0x00AD, 0x00AD},    // soft hyphen
    {0x034F, 0x034F},    // combining grapheme joiner
    {0x061C, 0x061C},    // arabic letter mark (bidi)
    {0x115F, 0x1160},    // hangul fillers
    {0x17B4, 0x17B5},    // khmer inherent vowels
    {0x180B, 0x180F},    // mongolian variation selectors and vowel separator
    {0x200B, 0x200F},    // zero-width space, non-joiner, joiner; LRM, RLM
    {0x2028, 0x202E},    // line/paragraph separators; LRE, RLE, PDF, LRO, RLO
    {0x2060, 0x206F},    // word joiner, invisible operators, LRI, RLI, FSI, PDI, deprecated
    {0x3164, 0x3164},    // hangul filler
    {0xFEFF, 0xFEFF},    // zero-width no-break space (BOM)
    {0xFFA0, 0xFFA0},    // halfwidth hangul filler
    {0xFFF9, 0xFFFB},    // interlinear annotation
    {0x1BCA0, 0x1BCA3},  // shorthand format controls
    {0x1D173, 0x1D17A},  // musical symbol format controls
    {0xE0000, 0xE007F},  // tags ("ASCII smuggling")
};

// East Asian Wide and Fullwidth, and the emoji presented wide: a compact approximation of
// Unicode's EastAsianWidth.txt (as wcwidth implementations use it), enough to align table
// columns without depending on the locale (sorted).
constexpr Range kWide[] = {
    {0x1100, 0x115F},   {0x231A, 0x231B},   {0x2329, 0x232A},   {0x23E9, 0x23EC},
    {0x23F0, 0x23F0},   {0x23F3, 0x23F3},   {0x25FD, 0x25FE},   {0x2614, 0x2615},
    {0x2648, 0x2653},   {0x267F, 0x267F},   {0x2693, 0x2693},   {0x26A1, 0x26A1},
    {0x26AA, 0x26AB},   {0x26BD, 0x26BE},   {0x26C4, 0x26C5},   {0x26CE, 0x26CE},
    {0x26D4, 0x26D4},   {0x26EA, 0x26EA},   {0x26F2, 0x26F3},   {0x26F5, 0x26F5},
    {0x26FA, 0x26FA},   {0x26FD, 0x26FD},   {0x2705, 0x2705},   {0x270A, 0x270B},
    {0x2728, 0x2728},   {0x274C, 0x274C},   {0x274E, 0x274E},   {0x2753, 0x2755},
    {0x2757, 0x2757},   {0x2795, 0x2797},   {0x27B0, 0x27B0},   {0x27BF, 0x27BF},
    {0x2B1B, 0x2B1C},   {0x2B50, 0x2B50},   {0x2B55, 0x2B55},   {0x2E80, 0x303E},
    {0x3041, 0x33FF},   {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},
    {0xA960, 0xA97F},   {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFE10, 0xFE19},
    {0xFE30, 0xFE6F},   {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x16FE0, 0x16FE4},
    {0x17000, 0x18CFF}, {0x1B000, 0x1B2FF}, {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF},
    {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A}, {0x1F200, 0x1F251}, {0x1F300, 0x1F64F},
    {0x1F680, 0x1F6FF}, {0x1F7E0, 0x1F7EB}, {0x1F90C, 0x1F9FF}, {0x1FA70, 0x1FAFF},
    {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD},
};

// Combining marks and variation selectors: they take no column of their own (sorted).
constexpr Range kZeroWidth[] = {
    {0x0300, 0x036F},   {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x05BF, 0x05BF},
    {0x05C1, 0x05C2},   {0x05C4, 0x05C5}, {0x05C7, 0x05C7}, {0x0610, 0x061A},
    {0x064B, 0x065F},   {0x0670, 0x0670}, {0x06D6, 0x06DC}, {0x06DF, 0x06E4},
    {0x06E7, 0x06E8},   {0x06EA, 0x06ED}, {0x0E31, 0x0E31}, {0x0E34, 0x0E3A},
    {0x0E47, 0x0E4E},   {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF}, {0x20D0, 0x20FF},
    {0x302A, 0x302F},   {0x3099, 0x309A}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F},
    {0x1F3FB, 0x1F3FF},  // skin tone modifiers join the emoji before them
    {0xE0100, 0xE01EF},
};

// Code points escape_text() shows as \u{XXXX} and dump_json() as \uXXXX.
bool hidden(char32_t cp) { return (cp >= 0x80 && cp <= 0x9F) || in_ranges(kInvisible, cp); }

void append_hex(std::string& out, const char* format, unsigned value) {
  char buf[16];
  int n = std::snprintf(buf, sizeof buf, format, value);
  out.append(buf, static_cast<size_t>(n));
}

}  // namespace

std::string escape_text(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  while (!in.empty()) {
    auto c = static_cast<unsigned char>(in[0]);
    Utf8Char d = decode_utf8(in);
    if (d.len == 0) {
      append_hex(out, "\\x%02x", c);  // not UTF-8: the byte
      in.remove_prefix(1);
      continue;
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      append_hex(out, "\\x%02x", c);
    } else if (hidden(d.cp)) {
      append_hex(out, "\\u{%04x}", static_cast<unsigned>(d.cp));
    } else {
      out.append(in.substr(0, d.len));
    }
    in.remove_prefix(d.len);
  }
  return out;
}

size_t display_width(std::string_view text) {
  size_t width = 0;
  while (!text.empty()) {
    Utf8Char d = decode_utf8(text);
    if (d.len == 0) {
      width += 1;
      text.remove_prefix(1);
      continue;
    }
    if (in_ranges(kZeroWidth, d.cp)) {
      // nothing: it joins the character before it
    } else if (in_ranges(kWide, d.cp)) {
      width += 2;
    } else {
      width += 1;
    }
    text.remove_prefix(d.len);
  }
  return width;
}

std::string dump_json(const nlohmann::json& j, int indent) {
  // nlohmann escapes C0 controls itself and, with `replace`, turns bytes that are not UTF-8
  // into U+FFFD, so `text` is valid UTF-8 and the code points left to escape can only be
  // inside strings, where a \uXXXX escape means the same thing.
  std::string text = j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  std::string_view rest = text;
  while (!rest.empty()) {
    Utf8Char d = decode_utf8(rest);
    if (d.len == 0) {  // cannot happen after `replace`; stay valid JSON anyway
      out += "\\ufffd";
      rest.remove_prefix(1);
      continue;
    }
    if (d.cp == 0x7f || hidden(d.cp)) {
      if (d.cp > 0xFFFF) {  // a surrogate pair, as JSON spells code points past the BMP
        char32_t v = d.cp - 0x10000;
        append_hex(out, "\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)));
        append_hex(out, "\\u%04x", static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        append_hex(out, "\\u%04x", static_cast<unsigned>(d.cp));
      }
    } else {
      out.append(rest.substr(0, d.len));
    }
    rest.remove_prefix(d.len);
  }
  return out;
}

std::string format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> width;
  for (const auto& row : rows) {
    std::vector<std::string>& escaped = cells.emplace_back();
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      escaped.push_back(escape_text(row[i]));
      width[i] = std::max(width[i], display_width(escaped.back()));
    }
  }
  std::string out;
  for (const auto& row : cells) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) out += std::string(width[i] - display_width(row[i]) + 2, ' ');
    }
    out += '\n';
  }
  return out;
}

void print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

std::string age(const nlohmann::json& created_at, double now_unix) {
  double t;
  if (created_at.is_number()) {
    t = created_at.get<double>();
  } else if (created_at.is_string()) {
    auto parsed = parse_rfc3339(created_at.get_ref<const std::string&>(), /*strict=*/false);
    if (!parsed) return "-";
    t = *parsed;
  } else {
    return "-";
  }
  double seconds = now_unix - t;
  if (seconds < 0) seconds = 0;
  auto s = static_cast<long long>(seconds);
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m";
  if (s < 86400) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

int report(const Error& e) {
  std::fflush(stdout);
  write_all(STDERR_FILENO, "space: " + escape_text(e.message()) + "\n");
  return kExitSpaceFailed;
}

void print_json(const nlohmann::json& j) {
  std::string text = dump_json(j, 2) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace space::cli
