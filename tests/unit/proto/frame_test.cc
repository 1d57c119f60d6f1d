// Tests for the daemon <-> agent frame codec: round trips, byte-by-byte feeding, and rejection
// of every malformed header field, after which the decoder must stay failed.
#include "proto/frame.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace space::proto {
namespace {

std::string encoded(FrameType t, uint32_t stream, std::string_view payload) {
  std::string out;
  EXPECT_TRUE(encode(t, stream, payload, out));
  return out;
}

std::vector<Frame> decode_all(Decoder& d) {
  std::vector<Frame> out;
  while (true) {
    auto r = d.next();
    EXPECT_TRUE(r) << r.error().message();
    if (!r || !r->has_value()) break;
    out.push_back(std::move(**r));
  }
  return out;
}

TEST(Frame, HeaderLayoutIsLittleEndian) {
  std::string b = encoded(FrameType::kStdout, 0x01020304, "hey");
  ASSERT_EQ(b.size(), kHeaderSize + 3);
  EXPECT_EQ(b.substr(0, 4), std::string("\x03\x00\x00\x00", 4));
  EXPECT_EQ(static_cast<uint8_t>(b[4]), 7);
  EXPECT_EQ(b.substr(5, 3), std::string(3, '\0'));
  EXPECT_EQ(b.substr(8, 4), std::string("\x04\x03\x02\x01", 4));
  EXPECT_EQ(b.substr(12), "hey");
}

TEST(Frame, RoundTripsEveryTypeAndBinaryPayloads) {
  std::string wire;
  std::string binary;
  for (int i = 0; i < 256; ++i) binary.push_back(static_cast<char>(i));
  for (uint8_t t = 1; t <= 18; ++t) {
    ASSERT_TRUE(is_valid_type(t));
    ASSERT_TRUE(encode(static_cast<FrameType>(t), t * 1000u, t % 2 ? binary : "", wire));
  }
  Decoder d;
  d.feed(wire);
  auto frames = decode_all(d);
  ASSERT_EQ(frames.size(), 18u);
  for (uint8_t t = 1; t <= 18; ++t) {
    const Frame& f = frames[t - 1];
    EXPECT_EQ(static_cast<uint8_t>(f.type), t);
    EXPECT_EQ(f.stream, t * 1000u);
    EXPECT_EQ(f.payload, t % 2 ? binary : "");
  }
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(Frame, ByteByByteFeedYieldsSameFrames) {
  std::string wire = encoded(FrameType::kRequest, 7, R"({"op":"ps"})") +
                     encoded(FrameType::kData, 0xffffffff, std::string(70000, 'x')) +
                     encoded(FrameType::kPing, 0, "");
  Decoder d;
  std::vector<Frame> frames;
  for (char c : wire) {
    d.feed(std::span<const char>(&c, 1));
    auto more = decode_all(d);
    for (auto& f : more) frames.push_back(std::move(f));
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].type, FrameType::kRequest);
  EXPECT_EQ(frames[0].payload, R"({"op":"ps"})");
  EXPECT_EQ(frames[1].stream, 0xffffffffu);
  EXPECT_EQ(frames[1].payload.size(), 70000u);
  EXPECT_EQ(frames[2].type, FrameType::kPing);
  EXPECT_TRUE(frames[2].payload.empty());
}

TEST(Frame, MaxPayloadIsAcceptedOneMoreIsNot) {
  std::string out;
  EXPECT_TRUE(encode(FrameType::kData, 1, std::string(kMaxPayload, 'a'), out));
  Decoder d;
  d.feed(out);
  auto frames = decode_all(d);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].payload.size(), kMaxPayload);

  std::string too_big;
  auto r = encode(FrameType::kData, 1, std::string(kMaxPayload + 1, 'a'), too_big);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
  EXPECT_TRUE(too_big.empty());
}

// Each case corrupts one header byte of a valid frame.
struct Corruption {
  const char* name;
  size_t offset;
  uint8_t value;
};

class FrameHeaderTest : public ::testing::TestWithParam<Corruption> {};

TEST_P(FrameHeaderTest, RejectedBeforePayloadArrivesAndDecoderStaysFailed) {
  std::string wire = encoded(FrameType::kStdout, 3, "payload");
  wire[GetParam().offset] = static_cast<char>(GetParam().value);
  Decoder d;
  // Only the header: validation must not wait for (possibly huge) payload bytes.
  d.feed(std::span<const char>(wire.data(), kHeaderSize));
  auto r = d.next();
  ASSERT_FALSE(r) << GetParam().name;
  EXPECT_EQ(r.error().code(), Code::kProtocol);
  // A valid frame afterwards does not revive it.
  std::string good = encoded(FrameType::kPing, 0, "");
  d.feed(good);
  auto again = d.next();
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), Code::kProtocol);
}

INSTANTIATE_TEST_SUITE_P(AllFields, FrameHeaderTest,
                         ::testing::Values(Corruption{"length over max (top byte)", 3, 0x01},
                                           Corruption{"length over max (0x00100001)", 2, 0x10},
                                           Corruption{"type 0", 4, 0}, Corruption{"type 19", 4, 19},
                                           Corruption{"type 255", 4, 255},
                                           Corruption{"flags", 5, 1},
                                           Corruption{"flags high bit", 5, 0x80},
                                           Corruption{"reserved lo", 6, 1},
                                           Corruption{"reserved hi", 7, 0x40}),
                         [](const auto& info) {
                           std::string n;
                           for (char c : std::string(info.param.name))
                             n += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

TEST(Frame, LengthJustOverMaxIsRejected) {
  std::string wire = encoded(FrameType::kData, 1, "");
  uint32_t len = kMaxPayload + 1;
  for (int i = 0; i < 4; ++i) wire[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  Decoder d;
  d.feed(wire);
  EXPECT_FALSE(d.next());
}

TEST(Frame, IncompleteInputWaits) {
  std::string wire = encoded(FrameType::kStdin, 9, "abc");
  Decoder d;
  d.feed(std::span<const char>(wire.data(), kHeaderSize - 1));
  auto r = d.next();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_value());
  d.feed(std::span<const char>(wire.data() + kHeaderSize - 1, 2));
  r = d.next();
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_value());
  d.feed(std::span<const char>(wire.data() + kHeaderSize + 1, wire.size() - kHeaderSize - 1));
  r = d.next();
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->payload, "abc");
}

TEST(Frame, TypeNames) {
  EXPECT_STREQ(frame_type_name(FrameType::kHello), "hello");
  EXPECT_STREQ(frame_type_name(FrameType::kPong), "pong");
  EXPECT_FALSE(is_valid_type(0));
  EXPECT_FALSE(is_valid_type(19));
  EXPECT_STREQ(frame_type_name(FrameType::kConnect), "connect");
  EXPECT_STREQ(frame_type_name(FrameType::kReset), "reset");
  EXPECT_STREQ(frame_type_name(FrameType::kDns), "dns");
  EXPECT_STREQ(frame_type_name(FrameType::kProcExec), "proc_exec");
}

}  // namespace
}  // namespace space::proto
