// The forms a secret value takes on the way back, the automaton that finds them all in one pass,
// and the streaming redactor over it.
#include "egress/mask.h"

#include <openssl/evp.h>

#include <algorithm>
#include <deque>

namespace space::egress {
namespace {

constexpr size_t kMinDerivedForm = 8;
constexpr char kHexUpper[] = "0123456789ABCDEF";
constexpr char kHexLower[] = "0123456789abcdef";

bool is_unreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
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
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += apostrophe; break;
      default: out += c;
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
  if (url) std::replace(out.begin(), out.end(), '+', '-'), std::replace(out.begin(), out.end(), '/', '_');
  return out;
}

}  // namespace

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
  patterns_ = patterns.size();
  // Byte classes: one per byte some pattern uses; every other byte is class 0.
  for (const auto& p : patterns) {
    for (char c : p) {
      auto u = static_cast<unsigned char>(c);
      if (class_of_[u] == 0) class_of_[u] = static_cast<uint16_t>(classes_++);
    }
    longest_ = std::max(longest_, p.size());
  }
  constexpr uint32_t kNone = UINT32_MAX;
  // The trie, rows of `classes_` children.
  delta_.assign(classes_, kNone);
  match_length_.assign(1, 0);
  match_count_.assign(1, 0);
  for (const auto& p : patterns) {
    uint32_t s = 0;
    for (char c : p) {
      size_t at = s * classes_ + class_of_[static_cast<unsigned char>(c)];
      if (delta_[at] == kNone) {
        uint32_t next = static_cast<uint32_t>(match_length_.size());
        delta_[at] = next;
        delta_.resize(delta_.size() + classes_, kNone);
        match_length_.push_back(0);
        match_count_.push_back(0);
      }
      s = delta_[s * classes_ + class_of_[static_cast<unsigned char>(c)]];
    }
    match_length_[s] = static_cast<uint32_t>(p.size());
    match_count_[s] = 1;
  }
  // Breadth first: failure links folded into the table, match data inherited along them.
  std::vector<uint32_t> fail(match_length_.size(), 0);
  std::deque<uint32_t> queue;
  for (size_t c = 0; c < classes_; ++c) {
    uint32_t& t = delta_[c];
    if (t == kNone) {
      t = 0;
    } else {
      fail[t] = 0;
      queue.push_back(t);
    }
  }
  while (!queue.empty()) {
    uint32_t s = queue.front();
    queue.pop_front();
    match_length_[s] = std::max(match_length_[s], match_length_[fail[s]]);
    match_count_[s] += match_count_[fail[s]];
    for (size_t c = 0; c < classes_; ++c) {
      uint32_t& t = delta_[s * classes_ + c];
      uint32_t via_fail = delta_[fail[s] * classes_ + c];
      if (t == kNone) {
        t = via_fail;
      } else {
        fail[t] = via_fail;
        queue.push_back(t);
      }
    }
  }
}

// ---- Redactor ----------------------------------------------------------------------------

Redactor::Redactor(std::shared_ptr<const MaskPatterns> patterns) : patterns_(std::move(patterns)) {}

Redactor::Redactor(std::vector<std::string> patterns)
    : patterns_(std::make_shared<const MaskPatterns>(std::move(patterns))) {}

std::string Redactor::take(size_t n) {
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  masked_from_ = masked_from_ > n ? masked_from_ - n : 0;
  masked_to_ = masked_to_ > n ? masked_to_ - n : 0;
  return out;
}

std::string Redactor::feed(std::string_view chunk) {
  if (!active()) return std::string(chunk);
  const MaskPatterns& m = *patterns_;
  size_t base = pending_.size();
  pending_.append(chunk);
  for (size_t i = 0; i < chunk.size(); ++i) {
    state_ = m.step(state_, static_cast<unsigned char>(chunk[i]));
    uint32_t len = m.match_length(state_);
    if (len == 0) continue;
    count_ += m.match_count(state_);
    size_t end = base + i + 1;  // the match is pending_[end - len, end): all still held
    size_t from = end - len;
    auto star = [this](size_t a, size_t b) {
      if (a < b) std::fill(pending_.begin() + static_cast<ptrdiff_t>(a),
                           pending_.begin() + static_cast<ptrdiff_t>(b), '*');
    };
    if (from <= masked_to_ && masked_from_ < masked_to_) {
      // Touches the run masked last: only what lies outside it is new.
      star(from, std::min(masked_from_, end));
      star(masked_to_, end);
      masked_from_ = std::min(masked_from_, from);
    } else {
      star(from, end);
      masked_from_ = from;
    }
    masked_to_ = end;
  }
  // A byte is decided once no later match can reach back to it.
  size_t keep = m.longest() - 1;
  return pending_.size() > keep ? take(pending_.size() - keep) : std::string();
}

std::string Redactor::finish() {
  std::string out = take(pending_.size());
  state_ = 0;
  masked_from_ = masked_to_ = 0;
  return out;
}

std::string Redactor::mask(std::string_view whole) {
  if (!active()) return std::string(whole);
  std::string out = feed(whole);
  out += finish();
  return out;
}

}  // namespace space::egress
