// Content-defined chunking (FastCDC with normalized chunking): a gear hash rolls over the bytes
// and a chunk ends where its top bits are zero. Cuts depend only on the last 64 bytes, so an
// insertion or an edit in a big file changes the chunks around it and no others, and the same
// bytes in two files (or two sandboxes) make the same chunks. Sizes: at least 256 KiB (no cut is
// looked for before), about 1 MiB on average (a stricter mask before 1 MiB, a looser one after),
// at most 4 MiB. The gear table is generated from a fixed seed: changing it would move every cut
// and lose dedup against chunks already stored (never correctness).
#include <array>
#include <vector>

#include "snapshot/internal.h"

namespace space::snapshot::detail {
namespace {

constexpr std::array<uint64_t, 256> make_gear() {
  std::array<uint64_t, 256> table{};
  uint64_t x = 0x5350414345434453ull;  // "SPACECDS"
  for (auto& v : table) {              // splitmix64
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    v = z ^ (z >> 31);
  }
  return table;
}

constexpr std::array<uint64_t, 256> kGear = make_gear();

// log2(kAvgChunk) = 20 bits; two more before the average size, two fewer after (FastCDC's
// normalization level 2). The masks take the top bits, which depend on the last 64 bytes.
constexpr uint64_t top_bits(int n) { return ~0ull << (64 - n); }
constexpr uint64_t kMaskStrict = top_bits(22);
constexpr uint64_t kMaskLoose = top_bits(18);

}  // namespace

size_t cut_point(const uint8_t* data, size_t n) {
  if (n <= kMinChunk) return n;
  const size_t normal = n < kAvgChunk ? n : kAvgChunk;
  const size_t end = n < kMaxChunk ? n : kMaxChunk;
  uint64_t h = 0;
  size_t i = kMinChunk;
  for (; i < normal; ++i) {
    h = (h << 1) + kGear[data[i]];
    if ((h & kMaskStrict) == 0) return i + 1;
  }
  for (; i < end; ++i) {
    h = (h << 1) + kGear[data[i]];
    if ((h & kMaskLoose) == 0) return i + 1;
  }
  return end;
}

const ZeroChunk& zero_chunk() {
  static const ZeroChunk kZero = [] {
    std::vector<uint8_t> zeros(kMaxChunk, 0);
    size_t n = cut_point(zeros.data(), zeros.size());
    return ZeroChunk{n, sha256_hex(zeros.data(), n)};
  }();
  return kZero;
}

}  // namespace space::snapshot::detail
