// Tests for the ClientHello SNI parser (src/egress/tls_hello.cc). The main inputs are REAL
// ClientHellos written by OpenSSL's client (TLS 1.2 and 1.3, several names, with and without
// SNI), captured from a memory BIO pair; edge cases the OpenSSL client will not produce (ECH,
// duplicated names, tiny fragments) come from a small hand-built hello. Every prefix is fed
// through an exactly-sized heap buffer so a sanitizer build catches an over-read.
#include "egress/tls_hello.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstring>
#include <memory>
#include <random>

namespace space::egress {
namespace {

using Status = ClientHelloInfo::Status;

const char* status_name(Status s) {
  switch (s) {
    case Status::kNeedMore:
      return "kNeedMore";
    case Status::kOk:
      return "kOk";
    case Status::kNotTls:
      return "kNotTls";
    case Status::kMalformed:
      return "kMalformed";
  }
  return "?";
}

ClientHelloInfo parse_exact(std::string_view data) {
  std::unique_ptr<char[]> buf(new char[data.size() ? data.size() : 1]);
  if (!data.empty()) std::memcpy(buf.get(), data.data(), data.size());
  return parse_client_hello(std::string_view(buf.get(), data.size()));
}

// The bytes OpenSSL's client sends first: one or more records carrying its ClientHello.
std::string openssl_client_hello(const char* sni, int max_version, const char* alpn = nullptr) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  EXPECT_TRUE(ctx);
  SSL_CTX_set_max_proto_version(ctx.get(), max_version);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  BIO* internal = nullptr;
  BIO* network = nullptr;
  EXPECT_EQ(BIO_new_bio_pair(&internal, 0, &network, 0), 1);
  std::unique_ptr<BIO, decltype(&BIO_free)> net(network, BIO_free);
  SSL_set_bio(ssl.get(), internal, internal);  // owned by ssl now
  if (sni) {
    EXPECT_EQ(SSL_set_tlsext_host_name(ssl.get(), sni), 1);
  }
  if (alpn) {
    EXPECT_EQ(SSL_set_alpn_protos(ssl.get(), reinterpret_cast<const unsigned char*>(alpn),
                                  std::strlen(alpn)),
              0);
  }
  SSL_set_connect_state(ssl.get());
  int r = SSL_do_handshake(ssl.get());
  EXPECT_EQ(r, -1);
  EXPECT_EQ(SSL_get_error(ssl.get(), r), SSL_ERROR_WANT_READ);
  std::string out;
  char buf[4096];
  int n;
  while ((n = BIO_read(net.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

void put16(std::string& s, size_t v) {
  s.push_back(static_cast<char>((v >> 8) & 0xFF));
  s.push_back(static_cast<char>(v & 0xFF));
}
void put24(std::string& s, size_t v) {
  s.push_back(static_cast<char>((v >> 16) & 0xFF));
  put16(s, v & 0xFFFF);
}
size_t get16(const std::string& s, size_t at) {
  return static_cast<size_t>(static_cast<uint8_t>(s.at(at))) << 8 |
         static_cast<uint8_t>(s.at(at + 1));
}

// Re-frames a handshake message into records whose payloads have the given sizes (the last
// record takes whatever is left).
std::string frame(const std::string& handshake, const std::vector<size_t>& sizes) {
  std::string out;
  size_t pos = 0;
  for (size_t i = 0; pos < handshake.size(); ++i) {
    size_t n =
        i < sizes.size() ? std::min(sizes[i], handshake.size() - pos) : handshake.size() - pos;
    out += std::string("\x16\x03\x01", 3);
    put16(out, n);
    out += handshake.substr(pos, n);
    pos += n;
  }
  return out;
}

// The handshake message inside a single-record hello.
std::string unframe(const std::string& record) {
  EXPECT_GE(record.size(), 5u);
  EXPECT_EQ(get16(record, 3) + 5, record.size()) << "expected one record";
  return record.substr(5);
}

std::string sni_ext(const std::vector<std::string>& names, uint8_t type = 0) {
  std::string list;
  for (const std::string& n : names) {
    list.push_back(static_cast<char>(type));
    put16(list, n.size());
    list += n;
  }
  std::string data;
  put16(data, list.size());
  return data + list;
}

// A ClientHello built field by field.
struct Hello {
  std::string session_id = std::string(32, '\x11');
  std::string suites = std::string("\x13\x01\x13\x02\xc0\x2f", 6);
  std::string compression = std::string(1, '\0');
  bool has_extensions = true;
  std::vector<std::pair<uint16_t, std::string>> extensions;

  std::string body() const {
    std::string b("\x03\x03", 2);
    b += std::string(32, '\x5a');  // random
    b.push_back(static_cast<char>(session_id.size()));
    b += session_id;
    put16(b, suites.size());
    b += suites;
    b.push_back(static_cast<char>(compression.size()));
    b += compression;
    if (has_extensions) {
      std::string exts;
      for (const auto& [type, data] : extensions) {
        put16(exts, type);
        put16(exts, data.size());
        exts += data;
      }
      put16(b, exts.size());
      b += exts;
    }
    return b;
  }
  std::string handshake() const {
    std::string h(1, '\x01');
    std::string b = body();
    put24(h, b.size());
    return h + b;
  }
  std::string record() const { return frame(handshake(), {}); }
};

// Offsets of the length fields in a hello's handshake message (header at 0).
struct Layout {
  size_t session_id_len, suites_len, compression_len, extensions_len;
  size_t sni_ext_len = 0, sni_list_len = 0, sni_name_len = 0;  // 0: no SNI
  size_t last_ext_len = 0;
};
Layout layout(const std::string& hs) {
  Layout l{};
  l.session_id_len = 4 + 2 + 32;
  l.suites_len = l.session_id_len + 1 + static_cast<uint8_t>(hs.at(l.session_id_len));
  l.compression_len = l.suites_len + 2 + get16(hs, l.suites_len);
  l.extensions_len = l.compression_len + 1 + static_cast<uint8_t>(hs.at(l.compression_len));
  size_t pos = l.extensions_len + 2;
  while (pos < hs.size()) {
    size_t type = get16(hs, pos);
    if (type == 0) {
      l.sni_ext_len = pos + 2;
      l.sni_list_len = pos + 4;
      l.sni_name_len = pos + 7;
    }
    l.last_ext_len = pos + 2;
    pos += 4 + get16(hs, pos + 2);
  }
  EXPECT_EQ(pos, hs.size());
  return l;
}
std::string add16(std::string s, size_t at, int delta) {
  size_t v = get16(s, at) + delta;
  s[at] = static_cast<char>((v >> 8) & 0xFF);
  s[at + 1] = static_cast<char>(v & 0xFF);
  return s;
}

struct RealHello {
  const char* sni;
  int version;
};
const RealHello kRealHellos[] = {
    {"example.com", TLS1_3_VERSION},
    {"example.com", TLS1_2_VERSION},
    {"api.github.com", TLS1_3_VERSION},
    {"files.pythonhosted.org", TLS1_2_VERSION},
    {"a", TLS1_3_VERSION},
    {"xn--bcher-kva.example", TLS1_3_VERSION},
    {"very-long-label-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sub.example.org",
     TLS1_2_VERSION},
};

TEST(ClientHello, RealHellosGiveTheirSni) {
  for (const RealHello& h : kRealHellos) {
    std::string bytes = openssl_client_hello(h.sni, h.version, "\x02h2\x08http/1.1");
    ClientHelloInfo info = parse_exact(bytes);
    ASSERT_EQ(info.status, Status::kOk) << h.sni << " " << status_name(info.status);
    EXPECT_TRUE(info.has_sni);
    EXPECT_EQ(info.sni, h.sni);
    EXPECT_FALSE(info.ech);
    // Bytes after the hello are ignored.
    ClientHelloInfo more = parse_exact(bytes + std::string("\x17\x03\x03\x00\x05hello", 10));
    EXPECT_EQ(more.status, Status::kOk);
    EXPECT_EQ(more.sni, h.sni);
  }
}

TEST(ClientHello, EveryPrefixOfARealHelloNeedsMore) {
  for (const RealHello& h : kRealHellos) {
    std::string bytes = openssl_client_hello(h.sni, h.version);
    ASSERT_EQ(parse_exact(bytes).status, Status::kOk);
    for (size_t n = 0; n < bytes.size(); ++n) {
      ClientHelloInfo info = parse_exact(std::string_view(bytes).substr(0, n));
      ASSERT_EQ(info.status, Status::kNeedMore) << h.sni << ": prefix " << n << "/" << bytes.size()
                                                << " gave " << status_name(info.status);
      EXPECT_FALSE(info.has_sni);
    }
  }
}

TEST(ClientHello, NoSniIsOkWithoutName) {
  for (int version : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    ClientHelloInfo info = parse_exact(openssl_client_hello(nullptr, version));
    EXPECT_EQ(info.status, Status::kOk);
    EXPECT_FALSE(info.has_sni);
    EXPECT_EQ(info.sni, "");
  }
  // A hello without any extensions block (legal before TLS 1.3).
  Hello bare;
  bare.has_extensions = false;
  ClientHelloInfo info = parse_exact(bare.record());
  EXPECT_EQ(info.status, Status::kOk);
  EXPECT_FALSE(info.has_sni);
}

TEST(ClientHello, NotTls) {
  for (std::string s : {"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", "CONNECT a:443 HTTP/1.1",
                        "\x15\x03\x03\x00\x02\x02\x28", "SSH-2.0-OpenSSH_9.2"}) {
    EXPECT_EQ(parse_exact(s).status, Status::kNotTls) << s;
  }
  // SSLv2-compatible hello framing, and a handshake type byte with a non-3.x version.
  EXPECT_EQ(parse_exact(std::string("\x80\x2e\x01\x00\x02", 5)).status, Status::kNotTls);
  EXPECT_EQ(parse_exact(std::string("\x16\x01", 2)).status, Status::kNotTls);
  // Too little to tell.
  EXPECT_EQ(parse_exact("").status, Status::kNeedMore);
  EXPECT_EQ(parse_exact("\x16").status, Status::kNeedMore);
}

TEST(ClientHello, CorruptedLengthsAreMalformed) {
  for (const RealHello& h : kRealHellos) {
    std::string hs = unframe(openssl_client_hello(h.sni, h.version));
    Layout l = layout(hs);
    ASSERT_NE(l.sni_ext_len, 0u);
    auto expect_malformed = [&](const std::string& mutated, const char* what) {
      ClientHelloInfo info = parse_exact(frame(mutated, {}));
      EXPECT_EQ(info.status, Status::kMalformed)
          << h.sni << ": " << what << " gave " << status_name(info.status);
    };
    std::string shorter_hs = hs;
    shorter_hs[3] = static_cast<char>(static_cast<uint8_t>(hs[3]) - 1);  // no borrow: checked
    if (static_cast<uint8_t>(hs[3]) > 0) expect_malformed(shorter_hs, "handshake length - 1");
    std::string sid = hs;
    sid[l.session_id_len] = 33;
    expect_malformed(sid, "session id of 33 bytes");
    expect_malformed(add16(hs, l.extensions_len, 1), "extensions length + 1");
    expect_malformed(add16(hs, l.extensions_len, -1), "extensions length - 1");
    expect_malformed(add16(hs, l.last_ext_len, 1), "last extension length + 1");
    expect_malformed(add16(hs, l.sni_list_len, 1), "server name list length + 1");
    expect_malformed(add16(hs, l.sni_list_len, -1), "server name list length - 1");
    expect_malformed(add16(hs, l.sni_name_len, 1), "host name length + 1");
    std::string zero_suites = hs;
    zero_suites[l.suites_len] = zero_suites[l.suites_len + 1] = 0;
    expect_malformed(zero_suites, "empty cipher suites");
  }
  // Record layer: zero length, over 2^14, and a hello that is not a ClientHello.
  EXPECT_EQ(parse_exact(std::string("\x16\x03\x01\x00\x00", 5)).status, Status::kMalformed);
  EXPECT_EQ(parse_exact(std::string("\x16\x03\x01\x40\x01", 5)).status, Status::kMalformed);
  EXPECT_EQ(parse_exact(std::string("\x16\x03\x01\x00\x04\x02\x00\x00\x00", 9)).status,
            Status::kMalformed);
  // A ClientHello claiming more than fits in kMaxClientHello: refused up front, not awaited.
  EXPECT_EQ(parse_exact(std::string("\x16\x03\x01\x00\x04\x01\xff\xff\xff", 9)).status,
            Status::kMalformed);
}

TEST(ClientHello, SplitAcrossRecordsIsReassembled) {
  for (const RealHello& h : kRealHellos) {
    std::string hs = unframe(openssl_client_hello(h.sni, h.version));
    std::vector<std::vector<size_t>> splits = {
        {1}, {2}, {3}, {4}, {5}, {hs.size() / 2}, {hs.size() - 1}, {40, 40}, {7, 100, 3}};
    for (const auto& sizes : splits) {
      std::string bytes = frame(hs, sizes);
      ASSERT_GT(bytes.size(), hs.size() + 5) << "really more than one record";
      ClientHelloInfo info = parse_exact(bytes);
      ASSERT_EQ(info.status, Status::kOk) << h.sni << " split at " << sizes[0];
      EXPECT_EQ(info.sni, h.sni);
      for (size_t n = 0; n < bytes.size(); ++n) {
        ASSERT_EQ(parse_exact(std::string_view(bytes).substr(0, n)).status, Status::kNeedMore)
            << h.sni << " split at " << sizes[0] << ", prefix " << n;
      }
    }
    // A non-handshake record between the fragments is malformed.
    std::string first = frame(hs.substr(0, 10), {});
    std::string rest = frame(hs.substr(10), {});
    EXPECT_EQ(parse_exact(first + std::string("\x17\x03\x03\x00\x01x", 6) + rest).status,
              Status::kMalformed);
    EXPECT_EQ(parse_exact(first + std::string("\x16\x02\x00\x00\x01x", 6)).status,
              Status::kMalformed);
  }
}

TEST(ClientHello, TinyFragmentsCannotStallTheGateway) {
  // A hello of ~4 KB (padding extension) sent one byte per record needs 6 bytes per byte:
  // past kMaxClientHello, so the parser gives up instead of asking for more forever.
  Hello big;
  big.extensions = {{0, sni_ext({"example.com"})}, {21, std::string(4000, '\0')}};
  std::string hs = big.handshake();
  EXPECT_EQ(parse_exact(frame(hs, {})).status, Status::kOk);
  std::string bytes = frame(hs, std::vector<size_t>(hs.size(), 1));
  ASSERT_GT(bytes.size(), kMaxClientHello);
  EXPECT_EQ(parse_exact(bytes).status, Status::kMalformed);
  // Up to the cap it was a plausible prefix; at the cap it is not.
  size_t within = kMaxClientHello / 6 * 6;
  EXPECT_EQ(parse_exact(std::string_view(bytes).substr(0, within)).status, Status::kNeedMore);
  EXPECT_EQ(parse_exact(std::string_view(bytes).substr(0, within + 6)).status, Status::kMalformed);
}

// ESNI and the ECH drafts' codepoints hide the real name too (found by the security suite's
// egress/tls_ech_extension); a neighbouring unknown extension does not.
TEST(ClientHello, OlderEncryptedNameCodepointsAreDetected) {
  for (uint16_t type : {0xffce, 0xfe08, 0xfe09, 0xfe0a, 0xfe0b, 0xfe0c, 0xfe0d, 0xfe07, 0xfe0e}) {
    Hello h;
    h.extensions = {{0, sni_ext({"public.example"})}, {type, std::string("\x00\x01", 2)}};
    ClientHelloInfo info = parse_exact(h.record());
    ASSERT_EQ(info.status, Status::kOk) << std::hex << type;
    EXPECT_EQ(info.ech, type != 0xfe07 && type != 0xfe0e) << std::hex << type;
  }
}

TEST(ClientHello, EchIsDetected) {
  Hello h;
  h.extensions = {
      {0, sni_ext({"public.example"})},
      {0xfe0d, std::string("\x00\x00\x01\x00\x01\x07\x00\x20", 8) + std::string(32, 'k') +
                   std::string("\x00\x10", 2) + std::string(16, 'p')},
      {43, std::string("\x02\x03\x04", 3)}};
  ClientHelloInfo info = parse_exact(h.record());
  ASSERT_EQ(info.status, Status::kOk);
  EXPECT_TRUE(info.ech);
  EXPECT_TRUE(info.has_sni);
  EXPECT_EQ(info.sni, "public.example");
  // The same hello without ECH.
  h.extensions.erase(h.extensions.begin() + 1);
  info = parse_exact(h.record());
  ASSERT_EQ(info.status, Status::kOk);
  EXPECT_FALSE(info.ech);
  // ECH injected into a real OpenSSL hello (appended as the last extension).
  std::string hs = unframe(openssl_client_hello("cover.example", TLS1_3_VERSION));
  Layout l = layout(hs);
  std::string ech("\xfe\x0d\x00\x04\x00\x00\x01\x00", 8);
  hs += ech;
  hs = add16(hs, l.extensions_len, static_cast<int>(ech.size()));
  size_t body = hs.size() - 4;
  hs[1] = static_cast<char>(body >> 16);
  hs[2] = static_cast<char>(body >> 8);
  hs[3] = static_cast<char>(body);
  info = parse_exact(frame(hs, {}));
  ASSERT_EQ(info.status, Status::kOk);
  EXPECT_TRUE(info.ech);
  EXPECT_EQ(info.sni, "cover.example");
}

TEST(ClientHello, AmbiguousServerNamesAreMalformed) {
  auto status_of = [](std::vector<std::pair<uint16_t, std::string>> exts) {
    Hello h;
    h.extensions = std::move(exts);
    return parse_exact(h.record()).status;
  };
  EXPECT_EQ(status_of({{0, sni_ext({"allowed.com"})}}), Status::kOk);
  // The same extension twice, two host_names in one list, an empty list, an empty name, an
  // unknown name type, a name over 255 bytes.
  EXPECT_EQ(status_of({{0, sni_ext({"allowed.com"})}, {0, sni_ext({"evil.com"})}}),
            Status::kMalformed);
  EXPECT_EQ(status_of({{0, sni_ext({"allowed.com", "evil.com"})}}), Status::kMalformed);
  EXPECT_EQ(status_of({{0, sni_ext({})}}), Status::kMalformed);
  EXPECT_EQ(status_of({{0, ""}}), Status::kMalformed);
  EXPECT_EQ(status_of({{0, sni_ext({""})}}), Status::kMalformed);
  EXPECT_EQ(status_of({{0, sni_ext({"allowed.com"}, 1)}}), Status::kMalformed);
  EXPECT_EQ(status_of({{0, sni_ext({std::string(256, 'a')})}}), Status::kMalformed);
  // Any other extension twice is malformed too (RFC 8446 §4.2).
  EXPECT_EQ(status_of({{43, "\x02\x03\x04"}, {43, "\x02\x03\x04"}}), Status::kMalformed);
  // Trailing bytes after the extensions block, inside the hello.
  Hello h;
  h.extensions = {{0, sni_ext({"allowed.com"})}};
  std::string hs = h.handshake() + "x";
  hs[3] = static_cast<char>(hs[3] + 1);
  EXPECT_EQ(parse_exact(frame(hs, {})).status, Status::kMalformed);
}

TEST(ClientHello, RandomMutationsOfARealHello) {
  std::vector<std::string> seeds = {openssl_client_hello("example.com", TLS1_3_VERSION),
                                    openssl_client_hello("example.org", TLS1_2_VERSION)};
  std::mt19937 rng(4242);
  int counts[4] = {};
  for (int i = 0; i < 5000; ++i) {
    std::string m = seeds[i % 2];
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % m.size();
      switch (rng() % 5) {
        case 0:
          m[at] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 4:
          m[rng() % std::min<size_t>(6, m.size())] = static_cast<char>(rng());
          break;
        case 1:
          m[at] = static_cast<char>(rng());
          break;
        case 2:
          m[at] = "\x00\x01\x7f\x80\xff"[rng() % 5];
          break;
        case 3:
          m.resize(at + 1);
          break;
      }
    }
    ClientHelloInfo info = parse_exact(m);
    ++counts[static_cast<int>(info.status)];
    if (info.status == Status::kOk && info.has_sni) {
      EXPECT_FALSE(info.sni.empty());
      EXPECT_LE(info.sni.size(), 255u);
    }
    if (info.status != Status::kOk) {
      EXPECT_FALSE(info.has_sni);
      EXPECT_FALSE(info.ech);
    }
  }
  // Every outcome shows up: the mutations reach past the record header.
  for (int c : counts) EXPECT_GT(c, 50);
}

}  // namespace
}  // namespace space::egress
