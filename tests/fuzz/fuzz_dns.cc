// libFuzzer target: the DNS stub's query parser and answer builder (src/egress/dns.cc), which
// read datagrams a sandbox sends. Properties checked besides "no crash":
//  - an accepted query's name is lower-case, has no empty label, no label over 63 bytes and at
//    most 253 bytes of text; its raw question is a prefix-free copy of the datagram's bytes
//    after the header;
//  - the answer built for an accepted query (NOERROR with addresses, NXDOMAIN, REFUSED) is a
//    well-formed DNS response: at most 512 bytes, the same ID, QR set, RD echoed, the rcode
//    asked for, one question byte for byte the query's, and as many A records (each a pointer
//    to the question's name, class IN, 4 bytes of data) as ANCOUNT says, nothing after them.
//    With QR cleared it parses as a query again, to the same name, type and class;
//  - an error answer is a 12-byte header with the id asked for.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "egress/dns.h"

namespace dns = space::egress::dns;

namespace {

uint16_t u16_at(std::string_view s, size_t i) {
  return static_cast<uint16_t>(static_cast<uint8_t>(s[i]) << 8 | static_cast<uint8_t>(s[i + 1]));
}

void check_name(const std::string& name) {
  if (name.size() > 253) std::abort();
  if (name.empty()) return;  // the root
  size_t start = 0;
  for (;;) {
    size_t dot = name.find('.', start);
    size_t len = (dot == std::string::npos ? name.size() : dot) - start;
    if (len == 0 || len > 63) std::abort();
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (char c : name)
    if (c >= 'A' && c <= 'Z') std::abort();
}

void check_answer(const dns::Query& q, dns::Rcode rcode, size_t addresses, const std::string& out) {
  if (out.size() > 512 || out.size() < 12 + q.question.size()) std::abort();
  if (u16_at(out, 0) != q.id) std::abort();
  uint16_t flags = u16_at(out, 2);
  if (!(flags & 0x8000) || (flags & 0x000F) != static_cast<uint16_t>(rcode)) std::abort();
  if (((flags & 0x0100) != 0) != q.recursion_desired) std::abort();
  if (u16_at(out, 4) != 1 || u16_at(out, 8) != 0 || u16_at(out, 10) != 0) std::abort();
  size_t an = u16_at(out, 6);
  if (an > addresses) std::abort();
  if (out.compare(12, q.question.size(), q.question) != 0) std::abort();
  size_t pos = 12 + q.question.size();
  for (size_t i = 0; i < an; ++i) {
    if (out.size() - pos < 16) std::abort();
    if (u16_at(out, pos) != 0xC00C || u16_at(out, pos + 2) != 1 || u16_at(out, pos + 4) != 1 ||
        u16_at(out, pos + 10) != 4)
      std::abort();
    pos += 16;
  }
  if (pos != out.size()) std::abort();
  // The question parses again as the same query.
  std::string again = out;
  again[2] = static_cast<char>(again[2] & 0x7F);  // QR off
  again[6] = again[7] = 0;                        // no answers
  again.resize(12 + q.question.size());
  auto q2 = dns::parse_query(again);
  if (!q2 || q2->id != q.id || q2->name != q.name || q2->qtype != q.qtype ||
      q2->qclass != q.qclass || q2->question != q.question)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  uint16_t id = 0xFFFF;
  auto q = dns::parse_query(in, &id);
  if (size >= 12 && id != u16_at(in, 0)) std::abort();
  std::string err = dns::build_error(id, dns::Rcode::kFormErr);
  if (err.size() != 12 || u16_at(err, 0) != id) std::abort();
  if (!q) return 0;
  if (q->id != id) std::abort();
  check_name(q->name);
  if (q->question.size() < 5 || q->question.size() > 255 + 4) std::abort();
  if (in.compare(12, q->question.size(), q->question) != 0) std::abort();
  // Addresses: from 0 up to more than fit in 512 bytes (the builder leaves the rest out).
  std::vector<std::array<uint8_t, 4>> a;
  for (uint8_t i = 0; i < 40; ++i) a.push_back({127, 0, 0, static_cast<uint8_t>(i + 1)});
  for (size_t n : {size_t{0}, size_t{1}, size_t{40}}) {
    std::vector<std::array<uint8_t, 4>> some(a.begin(), a.begin() + static_cast<long>(n));
    check_answer(*q, dns::Rcode::kNoError, n, dns::build_response(*q, dns::Rcode::kNoError, some));
  }
  check_answer(*q, dns::Rcode::kNxDomain, 0, dns::build_response(*q, dns::Rcode::kNxDomain));
  check_answer(*q, dns::Rcode::kRefused, 0, dns::build_response(*q, dns::Rcode::kRefused));
  return 0;
}
