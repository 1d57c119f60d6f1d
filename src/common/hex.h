// Hex encoding as the project writes it: lowercase, two digits per byte (token secrets and
// hashes, chunk ids, audit MACs, sealed snapshot manifests, random ids). One copy here; the
// digests that are printed in hex are in tls/digest.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace space {

inline constexpr char kHexDigits[] = "0123456789abcdef";

// Lowercase hex of n bytes.
inline std::string to_hex(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out(n * 2, '\0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHexDigits[p[i] >> 4];
    out[2 * i + 1] = kHexDigits[p[i] & 15];
  }
  return out;
}
inline std::string to_hex(std::string_view bytes) { return to_hex(bytes.data(), bytes.size()); }

// The value of one hex digit of either case, -1 for anything else.
inline int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Whether every character is a lowercase hex digit (true for "").
inline bool is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Decodes lowercase hex, as to_hex writes it, into *out. Strict: false for an odd length or any
// other character, uppercase included, so each value has exactly one spelling (what a MAC or
// an id is compared as).
inline bool from_hex(std::string_view hex, std::string* out) {
  if (hex.size() % 2 != 0 || !is_lower_hex(hex)) return false;
  out->clear();
  out->reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2)
    out->push_back(static_cast<char>(hex_value(hex[i]) << 4 | hex_value(hex[i + 1])));
  return true;
}

}  // namespace space
