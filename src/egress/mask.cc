// The forms a secret value takes on the way back, the matcher that finds them all in one pass,
// and the streaming redactor over it.
#include "egress/mask.h"

#include <openssl/evp.h>

#include <algorithm>

#include "egress/ascii.h"

namespace space::egress {
namespace {

constexpr size_t kMinDerivedForm = 8;
constexpr char kHexUpper[] = "0123456789ABCDEF";
constexpr char kHexLower[] = "0123456789abcdef";

bool is_unreserved(char c) {
  return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

std::string percent_encoded(std::string_view v, const char* hex, std::string_view also_kept) {
  std::string out;
  for (char c : v) {
    if (is_unreserved(c) || also_kept.find(c) != std::string_view::npos) {
      out += c;
    } else {
      auto u = static_cast<unsigned char>(c);
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

std::string json_escaped(std::string_view v, bool slash) {
  std::string out;
  for (char c : v) {
    if (c == '"' || c == '\\' || (slash && c == '/')) out += '\\';
    out += c;
  }
  return out;
}

std::string html_escaped(std::string_view v, std::string_view apostrophe) {
  std::string out;
  for (char c : v) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += apostrophe;
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string hex_of(std::string_view v, const char* hex) {
  std::string out;
  for (char c : v) {
    auto u = static_cast<unsigned char>(c);
    out += hex[u >> 4];
    out += hex[u & 15];
  }
  return out;
}

// Base64 of whole 3-byte groups of `v` (a trailing partial group left out), so the result is
// the same wherever `v` sits in a longer encoded text, as long as it starts a group.
std::string base64_groups(std::string_view v, bool url) {
  size_t n = v.size() / 3 * 3;
  if (n == 0) return {};
  std::string out(n / 3 * 4 + 1, '\0');
  int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(v.data()), static_cast<int>(n));
  out.resize(static_cast<size_t>(std::max(len, 0)));
  if (url) {
    std::replace(out.begin(), out.end(), '+', '-');
    std::replace(out.begin(), out.end(), '/', '_');
  }
  return out;
}

}  // namespace

std::string percent_encode(std::string_view value) { return percent_encoded(value, kHexUpper, ""); }

std::vector<std::string> mask_forms(std::string_view value) {
  std::vector<std::string> forms;
  if (value.empty()) return forms;
  forms.emplace_back(value);
  auto add = [&](std::string f) {
    if (f.size() < kMinDerivedForm) return;
    if (std::find(forms.begin(), forms.end(), f) == forms.end()) forms.push_back(std::move(f));
  };
  add(json_escaped(value, false));
  add(json_escaped(value, true));
  add(html_escaped(value, "&#39;"));
  add(html_escaped(value, "&#x27;"));
  for (const char* hex : {kHexUpper, kHexLower}) {
    add(percent_encoded(value, hex, ""));
    add(percent_encoded(value, hex, "/:@!$&'()*+,;="));
    add(hex_of(value, hex));
  }
  for (size_t offset = 0; offset < 3 && offset < value.size(); ++offset) {
    add(base64_groups(value.substr(offset), false));
    add(base64_groups(value.substr(offset), true));
  }
  return forms;
}

// ---- MaskPatterns ------------------------------------------------------------------------

MaskPatterns::MaskPatterns(std::vector<std::string> patterns) {
  std::erase_if(patterns, [](const std::string& p) { return p.empty(); });
  std::sort(patterns.begin(), patterns.end());
  patterns.erase(std::unique(patterns.begin(), patterns.end()), patterns.end());
  patterns_ = std::move(patterns);
  if (patterns_.empty()) return;
  shortest_ = SIZE_MAX;
  for (const auto& p : patterns_) {
    shortest_ = std::min(shortest_, p.size());
    longest_ = std::max(longest_, p.size());
  }
  q_ = std::min<size_t>(shortest_, 4);
  filter_.assign(65536 / 64, 0);
  for (uint32_t i = 0; i < patterns_.size(); ++i) {
    const std::string& p = patterns_[i];
    uint32_t s = static_cast<unsigned char>(p[0]);
    if (q_ >= 2) s |= uint32_t{static_cast<unsigned char>(p[1])} << 8;
    filter_[s >> 6] |= uint64_t{1} << (s & 63);
    by_key_[key(p.data())].push_back(i);
  }
}

// ---- Redactor ----------------------------------------------------------------------------

Redactor::Redactor(std::shared_ptr<const MaskPatterns> patterns) : patterns_(std::move(patterns)) {}

Redactor::Redactor(std::vector<std::string> patterns)
    : patterns_(std::make_shared<const MaskPatterns>(std::move(patterns))) {}

std::string Redactor::feed(std::string_view chunk) {
  if (!active()) return std::string(chunk);
  pending_.append(chunk);
  // A start position is decided once the longest pattern would fit after it.
  size_t keep = patterns_->longest() - 1;
  if (pending_.size() <= keep) return {};
  return scan(pending_.size() - keep);
}

std::string Redactor::finish() {
  if (!active()) return {};  // feed() kept nothing
  std::string out = scan(pending_.size());
  pending_.clear();
  masked_ = 0;
  return out;
}

std::string Redactor::mask(std::string_view whole) {
  if (!active()) return std::string(whole);
  std::string out = feed(whole);
  out += finish();
  return out;
}

std::string Redactor::scan(size_t decided) {
  std::string out = pending_.substr(0, decided);
  auto star = [&](size_t from, size_t to) {
    to = std::min(to, decided);
    if (from < to) std::memset(out.data() + from, '*', to - from);
  };
  size_t frontier = masked_;  // everything before it is masked already
  star(0, frontier);
  const MaskPatterns& m = *patterns_;
  std::string_view text(pending_);
  // Every occurrence starting in [0, decided) lies inside pending_ (decided + longest-1 bytes);
  // starts too close to the end for the shortest pattern (at finish) hold none.
  size_t last = text.size() < m.shortest() ? 0 : std::min(decided, text.size() - m.shortest() + 1);
  for (size_t i = 0; i < last; ++i) {
    m.matches_at(text, i, [&](size_t len) {
      ++count_;
      size_t from = std::max(i, frontier);
      if (i + len > from) {
        star(from, i + len);
        frontier = i + len;
      }
    });
  }
  masked_ = frontier > decided ? frontier - decided : 0;
  pending_.erase(0, decided);
  return out;
}

}  // namespace space::egress
