// The token text (see tokens.h): its shape, checked without the store.
#include "daemon/tokens.h"

#include "common/hex.h"

namespace space::daemon {

std::optional<TokenText> parse_token_text(std::string_view text) {
  constexpr size_t kSecretHex = kTokenSecretBytes * 2;
  if (text.size() != kTokenPrefix.size() + kTokenIdHexDigits + 1 + kSecretHex) return std::nullopt;
  if (!text.starts_with(kTokenPrefix)) return std::nullopt;
  std::string_view id = text.substr(kTokenPrefix.size(), kTokenIdHexDigits);
  if (text[kTokenPrefix.size() + kTokenIdHexDigits] != '_') return std::nullopt;
  std::string_view secret = text.substr(kTokenPrefix.size() + kTokenIdHexDigits + 1);
  if (!is_lower_hex(id) || !is_lower_hex(secret)) return std::nullopt;
  return TokenText{std::string(id), std::string(secret)};
}

bool is_token_id(std::string_view id) { return id.size() == kTokenIdHexDigits && is_lower_hex(id); }

}  // namespace space::daemon
