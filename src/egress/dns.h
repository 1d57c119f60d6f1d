// The DNS stub's wire format (RFC 1035): parsing one query datagram from a sandbox and building
// the answer. The stub (answer_dns() in gateway.cc) answers every well-formed name, allowed or
// not, with the address of the transparent gateway inside the sandbox (127.0.0.1), so that a
// client that resolves before connecting (node's fetch, say) reaches the gateway and gets its
// refusal; malformed names and address literals get NXDOMAIN. Nothing goes to a resolver.
// Untrusted input: every length and offset is checked; compression pointers in the question
// are refused (a query has no reason to use them).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::egress::dns {

enum class Type : uint16_t {
  kA = 1,
  kNs = 2,
  kCname = 5,
  kSoa = 6,
  kPtr = 12,
  kMx = 15,
  kTxt = 16,
  kAaaa = 28,
  kSrv = 33,
  kHttps = 65,
  kAny = 255
};
enum class Rcode : uint8_t {
  kNoError = 0,
  kFormErr = 1,
  kServFail = 2,
  kNxDomain = 3,
  kNotImp = 4,
  kRefused = 5
};

struct Query {
  uint16_t id = 0;
  bool recursion_desired = false;
  std::string name;  // as sent, lower-cased, dot-separated, no trailing dot ("" = root)
  uint16_t qtype = 0;
  uint16_t qclass = 0;   // 1 = IN
  std::string question;  // the raw question section bytes, echoed in the answer
};

// Parses a query: QR=0, OPCODE=0 (QUERY), exactly one question, no answer/authority records
// (an OPT additional record for EDNS is tolerated and ignored). Labels are 1..63 bytes of any
// value except '.', the name at most 255 bytes on the wire. Errors are kInvalidArgument; when
// the header could be read, `id_out` is set so the caller can answer FORMERR.
Result<Query> parse_query(std::string_view datagram, uint16_t* id_out = nullptr);

// Builds a response to `q`: the question echoed, RA set, `rcode`, and one A record per address
// in `a` (TTL `ttl`). Answers are at most 512 bytes (no EDNS): callers pass few addresses.
std::string build_response(const Query& q, Rcode rcode,
                           const std::vector<std::array<uint8_t, 4>>& a = {}, uint32_t ttl = 5);
// A bare error response (FORMERR, say) to a datagram that could not be parsed: header only.
std::string build_error(uint16_t id, Rcode rcode);

}  // namespace space::egress::dns
