// The content-defined chunker: sizes within bounds, cuts that depend on content only (the same
// bytes at another offset cut the same way), and locality (an edit or an insertion in a big
// buffer changes only the chunks around it).
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "snapshot/internal.h"

namespace space::snapshot::detail {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  return v;
}

// The chunk lengths of a whole buffer, as the store cuts a file.
std::vector<size_t> cuts(const std::vector<uint8_t>& data) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t n = cut_point(data.data() + pos, data.size() - pos);
    out.push_back(n);
    pos += n;
  }
  return out;
}

std::vector<std::string> chunk_hashes(const std::vector<uint8_t>& data) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t n : cuts(data)) {
    out.push_back(sha256_hex(data.data() + pos, n));
    pos += n;
  }
  return out;
}

TEST(Chunker, SmallInputIsOneChunk) {
  std::vector<uint8_t> small = random_bytes(kMinChunk, 1);
  EXPECT_EQ(cut_point(small.data(), small.size()), small.size());
  EXPECT_EQ(cut_point(small.data(), 1), 1u);
}

TEST(Chunker, SizesWithinBoundsAndAverageNearOneMiB) {
  std::vector<uint8_t> data = random_bytes(64 << 20, 2);
  std::vector<size_t> c = cuts(data);
  for (size_t i = 0; i + 1 < c.size(); ++i) {
    EXPECT_GE(c[i], kMinChunk);
    EXPECT_LE(c[i], kMaxChunk);
  }
  double avg = static_cast<double>(data.size()) / static_cast<double>(c.size());
  EXPECT_GT(avg, 0.7 * kAvgChunk);
  EXPECT_LT(avg, 1.6 * kAvgChunk);
}

TEST(Chunker, UniformBytesCutAtTheMaximum) {
  std::vector<uint8_t> zeros(10 << 20, 0);
  std::vector<size_t> c = cuts(zeros);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], kMaxChunk);
  EXPECT_EQ(c[1], kMaxChunk);
  EXPECT_EQ(c[2], (10u << 20) - 2 * kMaxChunk);
}

TEST(Chunker, EditChangesOnlyNearbyChunks) {
  std::vector<uint8_t> a = random_bytes(32 << 20, 3);
  std::vector<uint8_t> b = a;
  for (size_t i = 0; i < 4096; ++i) b[(16 << 20) + i] ^= 0x5a;  // an in-place edit
  std::vector<std::string> ha = chunk_hashes(a), hb = chunk_hashes(b);
  std::set<std::string> sa(ha.begin(), ha.end());
  size_t fresh = 0;
  for (const std::string& h : hb) fresh += !sa.contains(h);
  EXPECT_GE(fresh, 1u);
  EXPECT_LE(fresh, 2u) << "of " << hb.size() << " chunks";
}

TEST(Chunker, InsertionResynchronizes) {
  std::vector<uint8_t> a = random_bytes(32 << 20, 4);
  std::vector<uint8_t> ins = random_bytes(1000, 5);
  std::vector<uint8_t> b(a.begin(), a.begin() + (8 << 20));
  b.insert(b.end(), ins.begin(), ins.end());
  b.insert(b.end(), a.begin() + (8 << 20), a.end());
  std::vector<std::string> ha = chunk_hashes(a), hb = chunk_hashes(b);
  std::set<std::string> sa(ha.begin(), ha.end());
  size_t fresh = 0;
  for (const std::string& h : hb) fresh += !sa.contains(h);
  // Fixed-size blocks would change every chunk after the insertion point (~24 of them).
  EXPECT_LE(fresh, 2u) << "of " << hb.size() << " chunks";
}

}  // namespace
}  // namespace space::snapshot::detail
