// DNS wire format for the gateway's stub resolver (RFC 1035 §4, RFC 6891 for the OPT record).
// parse_query reads one untrusted query datagram with a bounds-checked cursor: every read
// checks the remaining length first, compression pointers and the reserved label types are
// refused, and nothing after the records is accepted. build_response / build_error write the
// answers the stub sends back: the question echoed byte for byte (so 0x20-randomized case
// survives), the answer names as a pointer to that question.
#include "egress/dns.h"

#include <algorithm>
#include <cstddef>
#include <optional>

namespace space::egress::dns {
namespace {

constexpr size_t kHeaderSize = 12;
constexpr size_t kMaxLabel = 63;
constexpr size_t kMaxNameWire = 255;  // length octets and the final zero included
constexpr size_t kMaxUdpAnswer = 512;
constexpr uint16_t kTypeOpt = 41;

constexpr uint16_t kFlagQr = 0x8000;
constexpr uint16_t kFlagRd = 0x0100;
constexpr uint16_t kFlagRa = 0x0080;

// A read-only cursor over untrusted bytes; every accessor fails instead of reading past the end.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}

  size_t offset() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }

  std::optional<uint8_t> u8() {
    if (remaining() < 1) return std::nullopt;
    return static_cast<uint8_t>(data_[pos_++]);
  }
  std::optional<uint16_t> u16() {
    if (remaining() < 2) return std::nullopt;
    uint16_t v = static_cast<uint16_t>(static_cast<uint8_t>(data_[pos_]) << 8 |
                                       static_cast<uint8_t>(data_[pos_ + 1]));
    pos_ += 2;
    return v;
  }
  bool skip(size_t n) {
    if (remaining() < n) return false;
    pos_ += n;
    return true;
  }
  std::string_view bytes(size_t n) {  // caller checked remaining() >= n
    std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

std::unexpected<Error> bad(std::string message) {
  return fail(Code::kInvalidArgument, "dns query: " + std::move(message));
}

// Reads an uncompressed name into `out` (lower-cased, dot-separated, no trailing dot).
Result<void> read_name(Reader& r, std::string* out) {
  size_t wire = 0;
  out->clear();
  for (;;) {
    std::optional<uint8_t> len = r.u8();
    if (!len) return bad("truncated name");
    ++wire;
    if (*len == 0) break;
    if ((*len & 0xC0) == 0xC0) return bad("compression pointer in question");
    // 64..191 would be the reserved (0x40, 0x80) label types of RFC 6891 §5: no such thing as
    // a label over 63 bytes.
    if (*len > kMaxLabel) {
      return bad("label length " + std::to_string(*len) + " over 63 (reserved label type)");
    }
    if (r.remaining() < *len) return bad("truncated label");
    wire += *len;
    if (wire + 1 > kMaxNameWire) return bad("name longer than 255 bytes");
    std::string_view label = r.bytes(*len);
    if (!out->empty()) out->push_back('.');
    for (char c : label) {
      if (c == '.') return bad("label contains '.'");
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      out->push_back(c);
    }
  }
  return {};
}

// Checks the one additional record a query may carry: an EDNS OPT pseudo-record (RFC 6891
// §6.1.2: owner name root, type 41), whose contents are ignored.
Result<void> skip_opt(Reader& r) {
  std::optional<uint8_t> owner = r.u8();
  if (!owner) return bad("truncated additional record");
  if (*owner != 0) return bad("additional record is not an EDNS OPT record");
  std::optional<uint16_t> type = r.u16();
  if (!type) return bad("truncated additional record");
  if (*type != kTypeOpt) return bad("additional record is not an EDNS OPT record");
  // CLASS (UDP payload size) and TTL (extended rcode, version, flags): not used.
  if (!r.skip(2 + 4)) return bad("truncated OPT record");
  std::optional<uint16_t> rdlength = r.u16();
  if (!rdlength || !r.skip(*rdlength)) return bad("truncated OPT record data");
  return {};
}

void put16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xFF));
}
void put32(std::string& out, uint32_t v) {
  put16(out, static_cast<uint16_t>(v >> 16));
  put16(out, static_cast<uint16_t>(v & 0xFFFF));
}

void put_header(std::string& out, uint16_t id, uint16_t flags, uint16_t qdcount, uint16_t ancount) {
  put16(out, id);
  put16(out, flags);
  put16(out, qdcount);
  put16(out, ancount);
  put16(out, 0);  // NSCOUNT
  put16(out, 0);  // ARCOUNT
}

}  // namespace

Result<Query> parse_query(std::string_view datagram, uint16_t* id_out) {
  if (datagram.size() < kHeaderSize) return bad("shorter than the 12-byte header");
  Reader r(datagram);
  Query q;
  q.id = *r.u16();
  if (id_out) *id_out = q.id;
  uint16_t flags = *r.u16();
  uint16_t qdcount = *r.u16();
  uint16_t ancount = *r.u16();
  uint16_t nscount = *r.u16();
  uint16_t arcount = *r.u16();

  if (flags & kFlagQr) return bad("QR set (a response, not a query)");
  if (((flags >> 11) & 0xF) != 0) return bad("opcode is not QUERY");
  if (qdcount != 1) return bad("QDCOUNT is " + std::to_string(qdcount) + ", not 1");
  if (ancount != 0 || nscount != 0) return bad("answer or authority records in a query");
  if (arcount > 1) return bad("more than one additional record");
  q.recursion_desired = (flags & kFlagRd) != 0;

  size_t question_start = r.offset();
  TRY_VOID(read_name(r, &q.name));
  std::optional<uint16_t> qtype = r.u16();
  std::optional<uint16_t> qclass = r.u16();
  if (!qtype || !qclass) return bad("truncated question");
  q.qtype = *qtype;
  q.qclass = *qclass;
  q.question = std::string(datagram.substr(question_start, r.offset() - question_start));

  if (arcount == 1) TRY_VOID(skip_opt(r));
  if (r.remaining() != 0) {
    return bad(std::to_string(r.remaining()) + " trailing bytes after the records");
  }
  return q;
}

std::string build_response(const Query& q, Rcode rcode,
                           const std::vector<std::array<uint8_t, 4>>& a, uint32_t ttl) {
  constexpr size_t kAnswerSize = 2 + 2 + 2 + 4 + 2 + 4;  // pointer, type, class, TTL, len, addr
  // The question of a parsed query is at most 255 + 4 bytes, so at least 15 answers fit in a
  // 512-byte datagram; addresses beyond what fits are left out rather than truncating.
  size_t room = kMaxUdpAnswer > kHeaderSize + q.question.size()
                    ? (kMaxUdpAnswer - kHeaderSize - q.question.size()) / kAnswerSize
                    : 0;
  size_t count = std::min(a.size(), room);

  uint16_t flags = kFlagQr | kFlagRa | static_cast<uint16_t>(rcode);
  if (q.recursion_desired) flags |= kFlagRd;

  std::string out;
  out.reserve(kHeaderSize + q.question.size() + count * kAnswerSize);
  put_header(out, q.id, flags, 1, static_cast<uint16_t>(count));
  out += q.question;
  for (size_t i = 0; i < count; ++i) {
    put16(out, 0xC000 | kHeaderSize);  // the name: a pointer to the question's
    put16(out, static_cast<uint16_t>(Type::kA));
    put16(out, 1);  // class IN
    put32(out, ttl);
    put16(out, 4);
    for (uint8_t b : a[i]) out.push_back(static_cast<char>(b));
  }
  return out;
}

std::string build_error(uint16_t id, Rcode rcode) {
  std::string out;
  out.reserve(kHeaderSize);
  put_header(out, id, kFlagQr | kFlagRa | static_cast<uint16_t>(rcode), 0, 0);
  return out;
}

}  // namespace space::egress::dns
