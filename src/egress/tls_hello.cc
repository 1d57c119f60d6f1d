// ClientHello parsing for the SNI check (RFC 8446 §4.1.2 and §5.1, RFC 6066 §3). Two stages:
// the record layer is unwrapped first (the handshake message may be fragmented over several
// consecutive handshake records, each bounded by 2^14 bytes), then the reassembled ClientHello
// is walked field by field with a cursor that refuses to read past its container. A prefix of
// a well-formed hello is kNeedMore; anything that can never become a well-formed hello is
// kMalformed, including a hello whose records would not fit in kMaxClientHello (so a client
// cannot keep the gateway waiting with tiny fragments). Being strict here is the point: a
// duplicated server_name extension or two host_name entries would let the client show the
// gateway one name and the server another, so both are refused.
#include "egress/tls_hello.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace space::egress {
namespace {

using Status = ClientHelloInfo::Status;

constexpr uint8_t kContentHandshake = 22;
constexpr uint8_t kHandshakeClientHello = 1;
constexpr size_t kRecordHeader = 5;
constexpr size_t kMaxRecordPayload = 1 << 14;  // TLSPlaintext.length limit
constexpr size_t kHandshakeHeader = 4;
constexpr uint16_t kExtServerName = 0;
constexpr uint16_t kExtEncryptedClientHello = 0xfe0d;
// Earlier codepoints that also hide the real server name: ESNI, and the ECH drafts' 0xfe08..
// 0xfe0c. A server that still speaks one would receive a name the gateway never saw.
constexpr uint16_t kExtEncryptedServerName = 0xffce;
constexpr uint16_t kExtEchDraftFirst = 0xfe08;
constexpr uint16_t kExtEchDraftLast = 0xfe0c;
constexpr uint8_t kNameTypeHostName = 0;
constexpr size_t kMaxHostName = 255;

// A cursor over untrusted bytes: every read checks the remaining length first.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool empty() const { return data_.empty(); }
  size_t remaining() const { return data_.size(); }

  std::optional<uint32_t> uint(size_t width) {  // big-endian, 1..3 bytes
    if (data_.size() < width) return std::nullopt;
    uint32_t v = 0;
    for (size_t i = 0; i < width; ++i) v = v << 8 | static_cast<uint8_t>(data_[i]);
    data_.remove_prefix(width);
    return v;
  }
  std::optional<std::string_view> bytes(size_t n) {
    if (data_.size() < n) return std::nullopt;
    std::string_view out = data_.substr(0, n);
    data_.remove_prefix(n);
    return out;
  }
  // A vector with a `width`-byte length prefix (TLS's opaque<..> and lists).
  std::optional<std::string_view> vec(size_t width) {
    std::optional<uint32_t> len = uint(width);
    if (!len) return std::nullopt;
    return bytes(*len);
  }

 private:
  std::string_view data_;
};

ClientHelloInfo with_status(Status s) {
  ClientHelloInfo info;
  info.status = s;
  return info;
}

// server_name extension data: ServerNameList, exactly one host_name entry.
bool parse_server_name(std::string_view data, ClientHelloInfo* info) {
  Reader ext(data);
  std::optional<std::string_view> list = ext.vec(2);
  if (!list || !ext.empty() || list->empty()) return false;
  Reader r(*list);
  while (!r.empty()) {
    std::optional<uint32_t> type = r.uint(1);
    std::optional<std::string_view> name = r.vec(2);
    if (!type || !name) return false;
    // Only host_name is defined; an unknown type has no agreed encoding to skip safely.
    if (*type != kNameTypeHostName) return false;
    if (info->has_sni) return false;  // two host_names: which one would the server use?
    if (name->empty() || name->size() > kMaxHostName) return false;
    info->sni = std::string(*name);
    info->has_sni = true;
  }
  return info->has_sni;
}

// The ClientHello body (after the 4-byte handshake header), complete. On kMalformed nothing
// else is set, so a caller cannot act on a name from a hello that was refused.
ClientHelloInfo parse_body(std::string_view body) {
  const ClientHelloInfo malformed = with_status(Status::kMalformed);
  Reader r(body);
  std::optional<uint32_t> legacy_version = r.uint(2);
  if (!legacy_version || (*legacy_version >> 8) != 3) return malformed;
  if (!r.bytes(32)) return malformed;  // random
  std::optional<std::string_view> session_id = r.vec(1);
  if (!session_id || session_id->size() > 32) return malformed;
  std::optional<std::string_view> suites = r.vec(2);
  if (!suites || suites->empty() || suites->size() % 2 != 0) return malformed;
  std::optional<std::string_view> compression = r.vec(1);
  if (!compression || compression->empty()) return malformed;
  ClientHelloInfo info;
  info.status = Status::kOk;
  if (r.empty()) return info;  // no extensions at all (allowed before TLS 1.3): no SNI
  std::optional<std::string_view> extensions = r.vec(2);
  if (!extensions || !r.empty()) return malformed;

  std::vector<bool> seen(1 << 16, false);
  Reader ext(*extensions);
  while (!ext.empty()) {
    std::optional<uint32_t> type = ext.uint(2);
    std::optional<std::string_view> data = ext.vec(2);
    if (!type || !data) return malformed;
    if (seen[*type]) return malformed;  // RFC 8446 §4.2: at most one of each type
    seen[*type] = true;
    if (*type == kExtServerName) {
      if (!parse_server_name(*data, &info)) return malformed;
    } else if (*type == kExtEncryptedClientHello || *type == kExtEncryptedServerName ||
               (*type >= kExtEchDraftFirst && *type <= kExtEchDraftLast)) {
      info.ech = true;
    }
  }
  return info;
}

}  // namespace

ClientHelloInfo parse_client_hello(std::string_view bytes) {
  // Stage 1: gather handshake bytes from consecutive handshake records until the ClientHello's
  // length is known and covered.
  std::string handshake;
  size_t pos = 0;
  std::optional<size_t> hello_size;  // handshake header + body
  while (!hello_size || handshake.size() < *hello_size) {
    std::string_view rest = bytes.substr(pos);
    if (rest.empty()) return with_status(Status::kNeedMore);
    if (static_cast<uint8_t>(rest[0]) != kContentHandshake) {
      return with_status(pos == 0 ? Status::kNotTls : Status::kMalformed);
    }
    if (rest.size() < 2) return with_status(Status::kNeedMore);
    if (static_cast<uint8_t>(rest[1]) != 3) {  // legacy_record_version 3.x
      return with_status(pos == 0 ? Status::kNotTls : Status::kMalformed);
    }
    if (rest.size() < kRecordHeader) return with_status(Status::kNeedMore);
    size_t length =
        static_cast<size_t>(static_cast<uint8_t>(rest[3])) << 8 | static_cast<uint8_t>(rest[4]);
    // Zero-length handshake fragments are forbidden (RFC 8446 §5.1); the rest bounds the wait.
    if (length == 0 || length > kMaxRecordPayload) return with_status(Status::kMalformed);
    if (pos + kRecordHeader + length > kMaxClientHello) return with_status(Status::kMalformed);
    std::string_view payload = rest.substr(kRecordHeader, length);  // may be partial
    handshake.append(payload);
    if (!handshake.empty() && static_cast<uint8_t>(handshake[0]) != kHandshakeClientHello) {
      return with_status(Status::kMalformed);
    }
    if (!hello_size && handshake.size() >= kHandshakeHeader) {
      size_t body = static_cast<size_t>(static_cast<uint8_t>(handshake[1])) << 16 |
                    static_cast<size_t>(static_cast<uint8_t>(handshake[2])) << 8 |
                    static_cast<uint8_t>(handshake[3]);
      if (kHandshakeHeader + body > kMaxClientHello) return with_status(Status::kMalformed);
      hello_size = kHandshakeHeader + body;
    }
    if (hello_size && handshake.size() >= *hello_size) break;  // bytes after it are ignored
    if (payload.size() < length) return with_status(Status::kNeedMore);
    pos += kRecordHeader + length;
  }
  // Stage 2: the complete ClientHello.
  return parse_body(
      std::string_view(handshake).substr(kHandshakeHeader, *hello_size - kHandshakeHeader));
}

}  // namespace space::egress
