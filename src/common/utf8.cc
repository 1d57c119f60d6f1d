// RFC 3629 decoding, shared by the API's checks and the CLI's escaping.
#include "common/utf8.h"

namespace space {

Utf8Char decode_utf8(std::string_view s) {
  if (s.empty()) return {};
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char b0 = byte(0);
  if (b0 < 0x80) return {b0, 1};
  // RFC 3629 section 4: the lead byte fixes the length and the range of the second byte,
  // which is what excludes overlong forms, surrogates and code points past U+10FFFF.
  size_t len;
  char32_t cp;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return {};  // a continuation byte, 0xC0/0xC1 (overlong) or 0xF5..0xFF
  }
  if (s.size() < len) return {};
  for (size_t i = 1; i < len; ++i) {
    unsigned char b = byte(i);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return {};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, len};
}

std::optional<size_t> invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t len = decode_utf8(s.substr(i)).len;
    if (len == 0) return i;
    i += len;
  }
  return std::nullopt;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    auto at = invalid_utf8_at(s);
    if (!at) {
      out.append(s);
      break;
    }
    out.append(s.substr(0, *at));
    out.append("\xEF\xBF\xBD");  // U+FFFD
    s.remove_prefix(*at + 1);
  }
  return out;
}

std::string encode_utf8(char32_t cp) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = 0xFFFD;
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

}  // namespace space
