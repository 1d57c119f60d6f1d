// Tests for the DNS stub's wire format (src/egress/dns.cc): queries are built by hand byte by
// byte, responses decoded by a small independent decoder here. Beyond the round trips, every
// rule of the parser is tested from the refusing side, every prefix of a valid query is fed
// through an exactly-sized heap buffer (so a sanitizer build catches any over-read), and a few
// thousand deterministic random mutations must never yield a query that breaks the
// invariants the stub relies on.
#include "egress/dns.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>

namespace space::egress::dns {
namespace {

void put16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v >> 8));
  s.push_back(static_cast<char>(v & 0xFF));
}

std::string header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an = 0, uint16_t ns = 0,
                   uint16_t ar = 0) {
  std::string s;
  put16(s, id);
  put16(s, flags);
  put16(s, qd);
  put16(s, an);
  put16(s, ns);
  put16(s, ar);
  return s;
}

std::string wire_name(const std::vector<std::string>& labels) {
  std::string s;
  for (const std::string& l : labels) {
    s.push_back(static_cast<char>(l.size()));
    s += l;
  }
  s.push_back('\0');
  return s;
}

std::string question(const std::vector<std::string>& labels, uint16_t qtype = 1,
                     uint16_t qclass = 1) {
  std::string s = wire_name(labels);
  put16(s, qtype);
  put16(s, qclass);
  return s;
}

// An EDNS OPT pseudo-record with `rdata` as its options.
std::string opt_record(const std::string& rdata = "") {
  std::string s(1, '\0');
  put16(s, 41);
  put16(s, 1232);  // UDP payload size
  s += std::string(4, '\0');
  put16(s, static_cast<uint16_t>(rdata.size()));
  return s + rdata;
}

constexpr uint16_t kRd = 0x0100;

std::string simple_query(uint16_t id = 0x1234) {
  return header(id, kRd, 1) + question({"www", "Example", "COM"});
}

// An independent decoder for what build_response writes.
struct Answer {
  uint16_t name_ptr, type, klass;
  uint32_t ttl;
  uint16_t rdlength;
  std::string rdata;
};
struct Decoded {
  uint16_t id, flags, qd, an, ns, ar;
  std::string question;
  std::vector<Answer> answers;
};

uint16_t get16(const std::string& s, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(s.at(at)) << 8 |
                               static_cast<uint8_t>(s.at(at + 1)));
}

Decoded decode(const std::string& s) {
  Decoded d{};
  d.id = get16(s, 0);
  d.flags = get16(s, 2);
  d.qd = get16(s, 4);
  d.an = get16(s, 6);
  d.ns = get16(s, 8);
  d.ar = get16(s, 10);
  size_t pos = 12;
  if (d.qd == 1) {
    size_t start = pos;
    while (s.at(pos) != 0) pos += 1 + static_cast<uint8_t>(s.at(pos));
    pos += 1 + 4;
    d.question = s.substr(start, pos - start);
  }
  for (int i = 0; i < d.an; ++i) {
    Answer a;
    a.name_ptr = get16(s, pos);
    a.type = get16(s, pos + 2);
    a.klass = get16(s, pos + 4);
    a.ttl = static_cast<uint32_t>(get16(s, pos + 6)) << 16 | get16(s, pos + 8);
    a.rdlength = get16(s, pos + 10);
    a.rdata = s.substr(pos + 12, a.rdlength);
    pos += 12 + a.rdlength;
    d.answers.push_back(a);
  }
  EXPECT_EQ(pos, s.size()) << "bytes after the last record";
  return d;
}

TEST(DnsParse, SimpleQueryRoundTrip) {
  std::string q_wire = simple_query();
  auto q = parse_query(q_wire);
  ASSERT_TRUE(q) << q.error().message();
  EXPECT_EQ(q->id, 0x1234);
  EXPECT_TRUE(q->recursion_desired);
  EXPECT_EQ(q->name, "www.example.com");
  EXPECT_EQ(q->qtype, static_cast<uint16_t>(Type::kA));
  EXPECT_EQ(q->qclass, 1);
  // The raw question, original case included, for the echo.
  EXPECT_EQ(q->question, q_wire.substr(12));

  std::string r = build_response(*q, Rcode::kNoError, {{10, 0, 0, 1}, {192, 168, 7, 200}}, 30);
  Decoded d = decode(r);
  EXPECT_EQ(d.id, 0x1234);
  EXPECT_TRUE(d.flags & 0x8000) << "QR";
  EXPECT_EQ((d.flags >> 11) & 0xF, 0) << "opcode";
  EXPECT_TRUE(d.flags & 0x0100) << "RD copied";
  EXPECT_TRUE(d.flags & 0x0080) << "RA";
  EXPECT_FALSE(d.flags & 0x0200) << "TC";
  EXPECT_EQ(d.flags & 0xF, 0) << "rcode";
  EXPECT_EQ(d.qd, 1);
  EXPECT_EQ(d.an, 2);
  EXPECT_EQ(d.ns, 0);
  EXPECT_EQ(d.ar, 0);
  EXPECT_EQ(d.question, q_wire.substr(12));
  ASSERT_EQ(d.answers.size(), 2u);
  for (const Answer& a : d.answers) {
    EXPECT_EQ(a.name_ptr, 0xC00C) << "pointer to the question's name at offset 12";
    EXPECT_EQ(a.type, 1);
    EXPECT_EQ(a.klass, 1);
    EXPECT_EQ(a.ttl, 30u);
    EXPECT_EQ(a.rdlength, 4);
  }
  EXPECT_EQ(d.answers[0].rdata, std::string("\x0a\x00\x00\x01", 4));
  EXPECT_EQ(d.answers[1].rdata, std::string("\xc0\xa8\x07\xc8", 4));
  // Exact size: header + question + 2 * 16.
  EXPECT_EQ(r.size(), 12 + q->question.size() + 32);
}

TEST(DnsParse, DefaultTtlAndLargeTtl) {
  auto q = parse_query(simple_query());
  ASSERT_TRUE(q);
  EXPECT_EQ(decode(build_response(*q, Rcode::kNoError, {{1, 2, 3, 4}})).answers.at(0).ttl, 5u);
  EXPECT_EQ(
      decode(build_response(*q, Rcode::kNoError, {{1, 2, 3, 4}}, 0x89ABCDEF)).answers.at(0).ttl,
      0x89ABCDEFu);
}

TEST(DnsParse, NxDomainHasNoAnswers) {
  auto q = parse_query(header(7, 0, 1) + question({"blocked", "test"}, 28));
  ASSERT_TRUE(q);
  EXPECT_FALSE(q->recursion_desired);
  EXPECT_EQ(q->qtype, static_cast<uint16_t>(Type::kAaaa));
  std::string r = build_response(*q, Rcode::kNxDomain);
  Decoded d = decode(r);
  EXPECT_EQ(d.id, 7);
  EXPECT_EQ(d.flags & 0xF, 3);
  EXPECT_FALSE(d.flags & 0x0100) << "RD not set in the query, not set in the answer";
  EXPECT_EQ(d.qd, 1);
  EXPECT_EQ(d.an, 0);
  EXPECT_TRUE(d.answers.empty());
  EXPECT_EQ(r.size(), 12 + q->question.size());
}

TEST(DnsParse, BuildErrorIsBareHeader) {
  std::string r = build_error(0xBEEF, Rcode::kFormErr);
  ASSERT_EQ(r.size(), 12u);
  Decoded d = decode(r);
  EXPECT_EQ(d.id, 0xBEEF);
  EXPECT_TRUE(d.flags & 0x8000);
  EXPECT_EQ(d.flags & 0xF, 1);
  EXPECT_EQ(d.qd + d.an + d.ns + d.ar, 0);
}

TEST(DnsParse, ResponseStaysWithin512Bytes) {
  // A maximal name (255 bytes on the wire) and far more addresses than fit.
  auto q = parse_query(header(1, 0, 1) + question({std::string(63, 'a'), std::string(63, 'b'),
                                                   std::string(63, 'c'), std::string(61, 'd')}));
  ASSERT_TRUE(q) << q.error().message();
  std::vector<std::array<uint8_t, 4>> many(100, {1, 2, 3, 4});
  std::string r = build_response(*q, Rcode::kNoError, many);
  EXPECT_LE(r.size(), 512u);
  Decoded d = decode(r);  // ANCOUNT agrees with the records present
  EXPECT_EQ(d.answers.size(), d.an);
  EXPECT_EQ(d.an, (512 - 12 - 259) / 16);
}

TEST(DnsParse, UppercaseIsLowercasedOtherBytesKept) {
  auto q = parse_query(header(1, 0, 1) + question({"MiXeD", std::string("\xC3\xA9Z-_0", 6)}));
  ASSERT_TRUE(q);
  EXPECT_EQ(q->name, std::string("mixed.\xC3\xA9z-_0", 12));
}

TEST(DnsParse, RootName) {
  auto q = parse_query(header(1, 0, 1) + question({}, 2));
  ASSERT_TRUE(q);
  EXPECT_EQ(q->name, "");
  EXPECT_EQ(q->qtype, 2);
}

TEST(DnsParse, TruncatedHeader) {
  std::string full = simple_query();
  for (size_t n = 0; n < 12; ++n) {
    uint16_t id = 0xAAAA;
    auto q = parse_query(std::string_view(full).substr(0, n), &id);
    EXPECT_FALSE(q) << n;
    EXPECT_EQ(q.error().code(), Code::kInvalidArgument);
    EXPECT_EQ(id, 0xAAAA) << "no header, no id";
  }
}

TEST(DnsParse, QdcountMustBeOne) {
  for (uint16_t qd : {0, 2, 0xFFFF}) {
    uint16_t id = 0;
    auto q = parse_query(header(0x4242, 0, qd) + question({"a", "b"}), &id);
    ASSERT_FALSE(q) << qd;
    EXPECT_NE(q.error().message().find("QDCOUNT"), std::string::npos) << q.error().message();
    EXPECT_EQ(id, 0x4242) << "header read: id available for FORMERR";
  }
}

TEST(DnsParse, ResponsesAndOtherOpcodesRefused) {
  EXPECT_FALSE(parse_query(header(1, 0x8000, 1) + question({"a"})));  // QR
  EXPECT_FALSE(parse_query(header(1, 0x8000 | kRd, 1) + question({"a"})));
  EXPECT_FALSE(parse_query(header(1, 5 << 11, 1) + question({"a"})));  // UPDATE
  EXPECT_FALSE(parse_query(header(1, 1 << 11, 1) + question({"a"})));  // IQUERY
}

TEST(DnsParse, AnswerOrAuthorityRecordsRefused) {
  EXPECT_FALSE(parse_query(header(1, 0, 1, 1) + question({"a"})));
  EXPECT_FALSE(parse_query(header(1, 0, 1, 0, 1) + question({"a"})));
}

TEST(DnsParse, CompressionPointerInQuestionRefused) {
  std::string q = header(1, 0, 1) + "\xC0\x0C" + std::string("\x00\x01\x00\x01", 4);
  auto r = parse_query(q);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("compression"), std::string::npos);
  // A pointer after a first label, pointing back at that label.
  std::string q2 = header(1, 0, 1) + wire_name({"abc"}).substr(0, 4) + "\xC0\x0C" +
                   std::string("\x00\x01\x00\x01", 4);
  EXPECT_FALSE(parse_query(q2));
}

TEST(DnsParse, LabelLengthLimit) {
  EXPECT_TRUE(parse_query(header(1, 0, 1) + question({std::string(63, 'x'), "com"})));
  for (size_t len : {64, 100, 191}) {
    // Wire bytes: a length octet of 64..191 followed by that many bytes.
    std::string q = header(1, 0, 1);
    q.push_back(static_cast<char>(len));
    q += std::string(len, 'x') + std::string("\x00\x00\x01\x00\x01", 5);
    auto r = parse_query(q);
    ASSERT_FALSE(r) << len;
    EXPECT_NE(r.error().message().find("over 63"), std::string::npos) << r.error().message();
  }
}

TEST(DnsParse, NameLengthLimit) {
  // 3 * (1 + 63) + (1 + 61) + 1 = 255 bytes on the wire: the longest allowed.
  std::vector<std::string> max = {std::string(63, 'a'), std::string(63, 'b'), std::string(63, 'c'),
                                  std::string(61, 'd')};
  auto ok = parse_query(header(1, 0, 1) + question(max));
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(ok->name.size(), 253u);
  std::vector<std::string> over = max;
  over.back() += 'd';  // 256
  auto r = parse_query(header(1, 0, 1) + question(over));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("255"), std::string::npos);
  // Many short labels add up too.
  std::vector<std::string> shorts(128, "a");  // 128 * 2 + 1 = 257
  EXPECT_FALSE(parse_query(header(1, 0, 1) + question(shorts)));
}

TEST(DnsParse, DotInsideLabelRefused) {
  EXPECT_FALSE(parse_query(header(1, 0, 1) + question({"evil.com", "allowed", "org"})));
}

TEST(DnsParse, TruncatedQuestionRefused) {
  std::string full = simple_query();
  for (size_t n = 12; n < full.size(); ++n) {
    EXPECT_FALSE(parse_query(full.substr(0, n))) << n;
  }
}

TEST(DnsParse, TrailingGarbageRefused) {
  std::string q = simple_query();
  auto r = parse_query(q + "x");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("trailing"), std::string::npos);
  EXPECT_FALSE(parse_query(q + std::string(100, '\0')));
  // After an OPT record as well.
  EXPECT_FALSE(parse_query(header(1, 0, 1, 0, 0, 1) + question({"a"}) + opt_record() + "z"));
}

TEST(DnsParse, EdnsOptTolerated) {
  std::string base = header(9, kRd, 1, 0, 0, 1) + question({"pypi", "org"});
  auto plain = parse_query(base + opt_record());
  ASSERT_TRUE(plain) << plain.error().message();
  EXPECT_EQ(plain->name, "pypi.org");
  EXPECT_EQ(plain->question, question({"pypi", "org"})) << "the OPT record is not echoed";
  // With a cookie option (code 10, 8 bytes).
  std::string cookie = std::string("\x00\x0a\x00\x08", 4) + "12345678";
  auto with_cookie = parse_query(base + opt_record(cookie));
  ASSERT_TRUE(with_cookie) << with_cookie.error().message();
  // The answer carries no OPT record.
  EXPECT_EQ(decode(build_response(*with_cookie, Rcode::kNoError, {{1, 1, 1, 1}})).ar, 0);
}

TEST(DnsParse, BadAdditionalRecordsRefused) {
  std::string base = header(9, 0, 1, 0, 0, 1) + question({"a", "b"});
  std::string opt = opt_record("abcd");
  for (size_t n = 0; n < opt.size(); ++n) {
    EXPECT_FALSE(parse_query(base + opt.substr(0, n))) << "OPT cut at " << n;
  }
  // An A record is not an OPT record; neither is an OPT with an owner name.
  std::string a_rec = wire_name({"x"}) + std::string(
                                             "\x00\x01\x00\x01\x00\x00\x00\x05\x00\x04"
                                             "\x01\x02\x03\x04",
                                             14);
  EXPECT_FALSE(parse_query(base + a_rec));
  std::string named_opt = wire_name({"x"}) + opt_record().substr(1);
  EXPECT_FALSE(parse_query(base + named_opt));
  // Two additional records, and ARCOUNT promising one that is not there.
  EXPECT_FALSE(
      parse_query(header(9, 0, 1, 0, 0, 2) + question({"a"}) + opt_record() + opt_record()));
  EXPECT_FALSE(parse_query(base));
}

// parse_query on a buffer of exactly `data.size()` bytes on the heap, so an over-read lands
// outside the allocation (and a sanitizer build reports it).
Result<Query> parse_exact(std::string_view data, uint16_t* id = nullptr) {
  std::unique_ptr<char[]> buf(new char[data.size() ? data.size() : 1]);
  if (!data.empty()) std::memcpy(buf.get(), data.data(), data.size());
  return parse_query(std::string_view(buf.get(), data.size()), id);
}

TEST(DnsParse, EveryPrefixFailsCleanly) {
  std::string full = header(0x5555, kRd, 1, 0, 0, 1) + question({"api", "github", "com"}, 65) +
                     opt_record(std::string("\x00\x0a\x00\x00", 4));
  ASSERT_TRUE(parse_exact(full));
  for (size_t n = 0; n < full.size(); ++n) {
    uint16_t id = 0;
    auto q = parse_exact(std::string_view(full).substr(0, n), &id);
    EXPECT_FALSE(q) << "prefix of " << n << " bytes parsed";
    if (n >= 12) {
      EXPECT_EQ(id, 0x5555);
    }
  }
}

// Checks what the stub relies on for every query parse_query accepts.
void check_invariants(const Query& q) {
  ASSERT_LE(q.name.size(), 253u);
  ASSERT_LE(q.question.size(), 255u + 4u);
  ASSERT_GE(q.question.size(), 5u);
  size_t start = 0;
  while (start < q.name.size()) {  // no empty label, none over 63
    size_t dot = q.name.find('.', start);
    size_t end = dot == std::string::npos ? q.name.size() : dot;
    ASSERT_GT(end, start) << q.name;
    ASSERT_LE(end - start, 63u);
    if (dot == std::string::npos) break;
    start = dot + 1;
    ASSERT_LT(start, q.name.size()) << "trailing dot";
  }
  for (char c : q.name) ASSERT_FALSE(c >= 'A' && c <= 'Z');
  std::string r = build_response(q, Rcode::kNoError, {{127, 0, 0, 1}});
  ASSERT_LE(r.size(), 512u);
  // The question echoed in the answer re-parses to the same name.
  std::string again = header(q.id, 0, 1) + q.question;
  auto q2 = parse_query(again);
  ASSERT_TRUE(q2);
  ASSERT_EQ(q2->name, q.name);
}

TEST(DnsParse, RandomMutationsNeverBreakInvariants) {
  std::vector<std::string> seeds = {
      simple_query(),
      header(1, 0, 1, 0, 0, 1) + question({"files", "pythonhosted", "org"}, 28) +
          opt_record(std::string("\x00\x0a\x00\x08", 4) + "abcdefgh"),
      header(2, kRd, 1) + question({std::string(63, 'q'), "x"}),
  };
  std::mt19937 rng(20261202);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 6000; ++i) {
    std::string m = seeds[i % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 5) {
        case 0:  // flip a bit
          m[rng() % m.size()] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 1:  // set a byte to an interesting value
          m[rng() % m.size()] = "\x00\x01\x3f\x40\x7f\x80\xc0\xff"[rng() % 8];
          break;
        case 2:  // truncate
          m.resize(rng() % (m.size() + 1));
          if (m.empty()) m.push_back('\0');
          break;
        case 3:  // append junk
          m.append(1 + rng() % 8, static_cast<char>(rng()));
          break;
        case 4:  // set a byte to anything, in the name area
          if (m.size() > 12) m[12 + rng() % (m.size() - 12)] = static_cast<char>(rng());
          break;
      }
    }
    auto q = parse_exact(m);
    if (q) {
      ++accepted;
      check_invariants(*q);
      if (testing::Test::HasFatalFailure()) {
        ADD_FAILURE() << "mutation " << i;
        return;
      }
    } else {
      ++refused;
      EXPECT_EQ(q.error().code(), Code::kInvalidArgument);
    }
  }
  // Both sides of the parser were exercised.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace space::egress::dns
