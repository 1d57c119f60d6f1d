// WebSocket frames from an upstream through the gateway (src/egress/websocket.cc): lengths in
// each of the three encodings, fragmented messages with control frames in between, every way a
// stream of frames can be split into reads, a secret split across two frames of one message (and
// across reads) masked, control payloads masked, and each malformed frame refused.
#include "egress/websocket.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>

namespace space::egress::websocket {
namespace {

const std::string kSecret = "wsSECRETvalue-91c2";

std::shared_ptr<const MaskPatterns> patterns() {
  return std::make_shared<const MaskPatterns>(std::vector<std::string>{kSecret});
}
std::shared_ptr<const MaskPatterns> none() {
  return std::make_shared<const MaskPatterns>(std::vector<std::string>{});
}

struct Frame {
  bool fin;
  uint8_t opcode;
  std::string payload;
};

// Parses unmasked frames (what the gateway sends to the client); the whole input must be
// frames.
std::vector<Frame> parse(std::string_view s) {
  std::vector<Frame> out;
  while (!s.empty()) {
    EXPECT_GE(s.size(), 2u);
    auto b0 = static_cast<uint8_t>(s[0]), b1 = static_cast<uint8_t>(s[1]);
    EXPECT_EQ(b0 & 0x70, 0);
    EXPECT_EQ(b1 & 0x80, 0);
    uint64_t len = b1 & 0x7f;
    size_t h = 2;
    if (len == 126) {
      len = (uint64_t{static_cast<uint8_t>(s[2])} << 8) | static_cast<uint8_t>(s[3]);
      h = 4;
    } else if (len == 127) {
      len = 0;
      for (int i = 2; i < 10; ++i) len = (len << 8) | static_cast<uint8_t>(s[i]);
      h = 10;
    }
    EXPECT_GE(s.size(), h + len);
    out.push_back({bool(b0 & 0x80), uint8_t(b0 & 0x0f), std::string(s.substr(h, len))});
    s.remove_prefix(h + len);
  }
  return out;
}

// Messages (opcode, payload) and control frames in the order the client would see them.
std::vector<std::pair<uint8_t, std::string>> messages(const std::vector<Frame>& frames) {
  std::vector<std::pair<uint8_t, std::string>> out;
  std::optional<std::pair<uint8_t, std::string>> open;
  for (auto& f : frames) {
    if (f.opcode >= 8) {
      EXPECT_TRUE(f.fin);
      out.emplace_back(f.opcode, f.payload);
      continue;
    }
    if (f.opcode == 0) {
      EXPECT_TRUE(open.has_value()) << "continuation with no message";
      if (!open) continue;
      open->second += f.payload;
    } else {
      EXPECT_FALSE(open.has_value()) << "data frame inside a message";
      open.emplace(f.opcode, f.payload);
    }
    if (f.fin) {
      out.push_back(*open);
      open.reset();
    }
  }
  EXPECT_FALSE(open.has_value()) << "message left open";
  return out;
}

std::string run(ServerFrames& sf, std::string_view in, size_t step = 0) {
  std::string out;
  if (step == 0) step = in.size() ? in.size() : 1;
  for (size_t i = 0; i < in.size(); i += step) {
    auto r = sf.feed(in.substr(i, step));
    EXPECT_TRUE(r) << r.error().message();
    if (!r) return out;
    out += *r;
  }
  return out;
}

TEST(WebSocketFrames, HeaderLengthEncodings) {
  EXPECT_EQ(frame_header(true, kText, 5), std::string("\x81\x05", 2));
  EXPECT_EQ(frame_header(true, kBinary, 125), std::string("\x82\x7d", 2));
  EXPECT_EQ(frame_header(false, kText, 126), std::string("\x01\x7e\x00\x7e", 4));
  EXPECT_EQ(frame_header(true, kBinary, 65535), std::string("\x82\x7e\xff\xff", 4));
  EXPECT_EQ(frame_header(true, kBinary, 65536),
            std::string("\x82\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10));
  EXPECT_EQ(close_frame(1002, "bad"), std::string("\x88\x05\x03\xea"
                                                  "bad",
                                                  7));
}

TEST(WebSocketFrames, EveryLengthEncodingPassesUnchanged) {
  for (size_t len : {0, 1, 125, 126, 300, 65535, 65536, 70000}) {
    std::string payload(len, '\0');
    for (size_t i = 0; i < len; ++i) payload[i] = static_cast<char>('a' + i % 26);
    std::string in = frame(true, kBinary, payload);
    for (size_t step : {size_t(0), size_t(1), size_t(7), size_t(4096)}) {
      if (step == 1 && len > 300) continue;  // byte by byte: small frames only (time)
      ServerFrames sf(patterns());
      auto m = messages(parse(run(sf, in, step)));
      ASSERT_EQ(m.size(), 1u) << len << " step " << step;
      EXPECT_EQ(m[0].first, kBinary);
      EXPECT_EQ(m[0].second, payload) << len << " step " << step;
    }
  }
}

TEST(WebSocketFrames, FragmentedMessageWithControlFramesBetween) {
  std::string in = frame(false, kText, "hel") + frame(true, kPing, "p1") +
                   frame(false, kContinuation, "lo ") + frame(true, kPong, "") +
                   frame(true, kContinuation, "world") + frame(true, kBinary, "\x01\x02") +
                   close_frame(1000, "bye");
  for (size_t step : {size_t(0), size_t(1), size_t(2), size_t(5)}) {
    ServerFrames sf(patterns());
    auto m = messages(parse(run(sf, in, step)));
    ASSERT_EQ(m.size(), 5u) << step;
    EXPECT_EQ(m[0], std::make_pair(uint8_t(kPing), std::string("p1")));
    EXPECT_EQ(m[1], std::make_pair(uint8_t(kPong), std::string("")));
    EXPECT_EQ(m[2], std::make_pair(uint8_t(kText), std::string("hello world")));
    EXPECT_EQ(m[3], std::make_pair(uint8_t(kBinary), std::string("\x01\x02")));
    EXPECT_EQ(m[4], std::make_pair(uint8_t(kClose), std::string("\x03\xe8"
                                                                "bye",
                                                                5)));
  }
}

TEST(WebSocketFrames, SecretSplitAcrossTwoFramesIsMasked) {
  const std::string stars(kSecret.size(), '*');
  for (size_t cut = 1; cut < kSecret.size(); ++cut) {
    std::string in = frame(false, kText, "abc " + kSecret.substr(0, cut)) +
                     frame(true, kPing, "between") +
                     frame(true, kContinuation, kSecret.substr(cut) + " def");
    for (size_t step : {size_t(0), size_t(1), size_t(3)}) {
      ServerFrames sf(patterns());
      std::string out = run(sf, in, step);
      EXPECT_EQ(out.find(kSecret), std::string::npos);
      auto m = messages(parse(out));
      ASSERT_EQ(m.size(), 2u);
      EXPECT_EQ(m[1].second, "abc " + stars + " def") << "cut " << cut << " step " << step;
      EXPECT_EQ(sf.redactions(), 1u);
    }
  }
}

TEST(WebSocketFrames, SecretInOneFrameAndInControlFramesIsMasked) {
  const std::string stars(kSecret.size(), '*');
  std::string in = frame(true, kText, kSecret + kSecret) + frame(true, kPing, kSecret) +
                   close_frame(1000, kSecret);
  ServerFrames sf(patterns());
  std::string out = run(sf, in);
  EXPECT_EQ(out.find(kSecret), std::string::npos);
  auto m = messages(parse(out));
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].second, stars + stars);
  EXPECT_EQ(m[1].second, stars);
  EXPECT_EQ(m[2].second, std::string("\x03\xe8", 2) + stars);
  EXPECT_EQ(sf.redactions(), 4u);
}

TEST(WebSocketFrames, RandomSplitsGiveTheSameMessages) {
  std::mt19937 rng(24);
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += (i % 7 == 3 ? kSecret : std::string("xyz-") + char('a' + i % 26));
  // One message in random fragments, pings between.
  std::string in;
  size_t at = 0;
  bool first = true;
  while (at < text.size()) {
    size_t n = std::min<size_t>(text.size() - at, rng() % 40);
    bool fin = at + n == text.size();
    in += frame(fin, first ? kText : kContinuation, text.substr(at, n));
    if (rng() % 3 == 0) in += frame(true, kPing, "x");
    first = false;
    at += n;
  }
  std::string want = text;
  for (size_t p = want.find(kSecret); p != std::string::npos; p = want.find(kSecret, p))
    want.replace(p, kSecret.size(), std::string(kSecret.size(), '*'));
  for (int round = 0; round < 50; ++round) {
    ServerFrames sf(patterns());
    std::string out;
    for (size_t i = 0; i < in.size();) {
      size_t n = 1 + rng() % 64;
      auto r = sf.feed(std::string_view(in).substr(i, n));
      ASSERT_TRUE(r) << r.error().message();
      out += *r;
      i += n;
    }
    std::string got;
    for (auto& [op, payload] : messages(parse(out)))
      if (op == kText) got = payload;
    EXPECT_EQ(got, want);
  }
}

TEST(WebSocketFrames, NoPatternsPassesPayloadsAsTheyAre) {
  ServerFrames sf(none());
  std::string in = frame(false, kText, "a" + kSecret) + frame(true, kContinuation, "b");
  auto m = messages(parse(run(sf, in)));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].second, "a" + kSecret + "b");
}

TEST(WebSocketFrames, MalformedFramesAreRefused) {
  struct Case {
    std::string bytes;
    std::string why;
  };
  std::string big(126, 'x');
  for (const Case& c : std::vector<Case>{
           {std::string("\xc1\x01x", 3), "reserved bits"},                 // RSV1 (deflate)
           {std::string("\x91\x01x", 3), "reserved bits"},                 // RSV3
           {std::string("\x81\x81\x00\x00\x00\x00x", 7), "masked frame"},  // masked by a server
           {std::string("\x80\x01x", 3), "continuation frame with no message"},
           {frame(false, kText, "a") + frame(true, kText, "b"), "inside a fragmented message"},
           {std::string("\x83\x00", 2), "unknown opcode 3"},
           {std::string("\x8b\x00", 2), "unknown opcode 11"},
           {std::string("\x09\x00", 2), "fragmented control frame"},
           {frame(true, kPing, big), "over 125 bytes"},
           {std::string("\x82\x7e\x00\x05", 4), "not minimal"},
           {std::string("\x82\x7f\x00\x00\x00\x00\x00\x00\x01\x00", 10), "not minimal"},
           {std::string("\x82\x7f\x80\x00\x00\x00\x00\x00\x00\x00", 10), "top bit"},
       }) {
    ServerFrames sf(patterns());
    auto r = sf.feed(c.bytes);
    ASSERT_FALSE(r) << c.why;
    EXPECT_NE(r.error().message().find(c.why), std::string::npos) << r.error().message();
  }
}

TEST(WebSocketFrames, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string in(rng() % 64, '\0');
    for (auto& c : in) c = static_cast<char>(rng());
    ServerFrames sf(patterns());
    (void)sf.feed(in);
  }
}

}  // namespace
}  // namespace space::egress::websocket
