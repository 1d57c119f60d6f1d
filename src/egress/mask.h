// Masking secret values out of what the gateway passes back to a sandbox (docs/egress.md,
// "What comes back"): the forms a value takes when an upstream echoes it (as sent, JSON- and
// HTML-escaped, percent-encoded, hex, base64 at each alignment), one matcher for all of them
// at once, and a streaming redactor over it that replaces every byte of every occurrence
// with '*' (same length, so Content-Length and chunk sizes stay right).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace space::egress {

// The spellings of `value` an upstream that stores or reflects text commonly returns: the value
// itself; JSON-escaped (with and without "\/"); HTML-escaped; percent-encoded (upper- and
// lower-case hex, with only unreserved characters kept, and also with "/:@" and the other
// sub-delimiters kept); hex (both cases); and standard and URL-safe base64 of the value at each
// of the three alignments a 3-byte group can start at (the part of the encoding that does not
// depend on the bytes around it). Derived forms shorter than 8 bytes are left out (they would
// mask ordinary text); the value itself is always first. Duplicates are removed.
std::vector<std::string> mask_forms(std::string_view value);

// `value` with every byte but RFC 3986's unreserved characters percent-encoded, upper-case hex:
// how a value is put into a query parameter, and one of its mask_forms().
std::string percent_encode(std::string_view value);

// A fixed set of patterns, found by a filter on their first two bytes (a bit per 2-byte prefix,
// an 8 KiB table that stays in the L1 cache, so most positions of a text cost two loads and a
// bit test), then a hash lookup on the first q bytes (q = the shortest pattern's length, at
// most 4), and only then a full compare. Immutable once built, so one instance
// is shared by every connection.
class MaskPatterns {
 public:
  explicit MaskPatterns(std::vector<std::string> patterns);  // empty patterns are ignored
  bool empty() const { return patterns_.empty(); }
  size_t longest() const { return longest_; }
  size_t shortest() const { return shortest_; }
  size_t patterns() const { return patterns_.size(); }
  // Calls hit(length) for each pattern that starts at text[at] (the text must hold at least
  // shortest() bytes from `at`).
  template <class F>
  void matches_at(std::string_view text, size_t at, F&& hit) const {
    const char* p = text.data() + at;
    uint32_t s = static_cast<unsigned char>(p[0]);
    if (q_ >= 2) s |= uint32_t{static_cast<unsigned char>(p[1])} << 8;
    if (!(filter_[s >> 6] >> (s & 63) & 1)) return;
    auto it = by_key_.find(key(p));
    if (it == by_key_.end()) return;
    for (uint32_t i : it->second) {
      const std::string& p = patterns_[i];
      if (p.size() <= text.size() - at && text.compare(at, p.size(), p) == 0) hit(p.size());
    }
  }

 private:
  uint32_t key(const char* p) const {
    uint32_t k = 0;
    if (q_ == 4) {
      std::memcpy(&k, p, 4);  // a fixed size: one load, not a call
    } else {
      for (size_t i = 0; i < q_; ++i) k |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
    }
    return k;
  }

  std::vector<std::string> patterns_;
  size_t q_ = 0, shortest_ = 0, longest_ = 0;
  std::vector<uint64_t> filter_;  // 65536 bits: the first 2 bytes (1 if q_ is 1) of a pattern
  std::unordered_map<uint32_t, std::vector<uint32_t>> by_key_;  // first q bytes -> patterns
};

// Streaming redaction: feed() returns the bytes that are safe to pass on (holding back at most
// longest-1 bytes that could start a match), finish() returns the rest and resets the stream.
// Every byte that belongs to an occurrence of any pattern becomes '*', occurrences overlapping
// or not, and redactions() counts occurrences. The output does not depend on how the input
// was split.
class Redactor {
 public:
  explicit Redactor(std::shared_ptr<const MaskPatterns> patterns);
  explicit Redactor(std::vector<std::string> patterns);  // the patterns as given, no forms
  std::string feed(std::string_view chunk);
  std::string finish();  // also resets the stream (the count is kept)
  size_t redactions() const { return count_; }
  bool active() const { return patterns_ && !patterns_->empty(); }
  // One whole string (a header field's name or value, a reason phrase).
  std::string mask(std::string_view whole);

 private:
  // Examines pending_[0, decided) as match starts, returns those bytes masked, drops them.
  std::string scan(size_t decided);

  std::shared_ptr<const MaskPatterns> patterns_;
  std::string pending_;  // fed, not yet returned, as it came
  size_t masked_ = 0;    // leading bytes of pending_ covered by an occurrence already counted
  size_t count_ = 0;
};

}  // namespace space::egress
