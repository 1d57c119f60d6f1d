// UTF-8 as RFC 3629 defines it (no overlong forms, no surrogates, nothing past U+10FFFF): the
// API refuses text that is not it, and the CLI escapes it, with this one reading of it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace space {

struct Utf8Char {
  char32_t cp = 0;
  size_t len = 0;  // 0: `s` does not start with a well-formed character
};

// The character at the start of `s` (len 0 when there is none, `s` empty included).
Utf8Char decode_utf8(std::string_view s);
// The offset of the first byte of `s` that is not part of well-formed UTF-8; nullopt if none.
std::optional<size_t> invalid_utf8_at(std::string_view s);
// `s` with every byte that is not part of well-formed UTF-8 replaced by U+FFFD (for messages).
std::string utf8_lossy(std::string_view s);
// `cp` in UTF-8; a surrogate or a value past U+10FFFF gives U+FFFD.
std::string encode_utf8(char32_t cp);

}  // namespace space
