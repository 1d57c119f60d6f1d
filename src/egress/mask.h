// Masking secret values out of what the gateway passes back to a sandbox (docs/egress.md,
// "What comes back"): the forms a value takes when an upstream echoes it (as sent, JSON- and
// HTML-escaped, percent-encoded, hex, base64 at each alignment), one automaton matching all of
// them at once, and a streaming redactor over it that replaces every byte of every occurrence
// with '*' (same length, so Content-Length and chunk sizes stay right).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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

// An Aho-Corasick automaton over bytes for a fixed set of patterns, as a dense transition table
// over the byte classes the patterns use: one lookup per byte however many patterns there are.
// Immutable once built, so one instance is shared by every connection.
class MaskPatterns {
 public:
  explicit MaskPatterns(std::vector<std::string> patterns);  // empty patterns are ignored
  bool empty() const { return longest_ == 0; }
  size_t longest() const { return longest_; }
  size_t patterns() const { return patterns_; }
  uint32_t step(uint32_t state, unsigned char byte) const {
    return delta_[state * classes_ + class_of_[byte]];
  }
  // The longest pattern that ends where `state` was reached (0: none), and how many do.
  uint32_t match_length(uint32_t state) const { return match_length_[state]; }
  uint32_t match_count(uint32_t state) const { return match_count_[state]; }

 private:
  std::array<uint16_t, 256> class_of_{};  // 0 = a byte no pattern contains
  size_t classes_ = 1;
  std::vector<uint32_t> delta_;
  std::vector<uint32_t> match_length_, match_count_;
  size_t longest_ = 0, patterns_ = 0;
};

// Streaming redaction: feed() returns the bytes that are safe to pass on (holding back at most
// longest-1 bytes that could still be covered by a match), finish() returns the rest and resets
// the stream. Every byte that belongs to an occurrence of any pattern becomes '*', occurrences
// overlapping or not, and redactions() counts occurrences. The output does not depend on how
// the input was split.
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
  std::string take(size_t n);

  std::shared_ptr<const MaskPatterns> patterns_;
  uint32_t state_ = 0;
  std::string pending_;   // fed, not yet returned (already masked where a match was found)
  // The run of '*' made last, pending_[masked_from_, masked_to_): matches end in increasing
  // order, so only the newest run can overlap the next match.
  size_t masked_from_ = 0, masked_to_ = 0;
  size_t count_ = 0;
};

}  // namespace space::egress
