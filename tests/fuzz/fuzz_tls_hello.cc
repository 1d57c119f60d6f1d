// libFuzzer target: the TLS ClientHello parser the gateway runs on the first bytes of a tunneled
// or transparent connection (src/egress/tls_hello.cc). Properties checked besides "no crash":
//  - only kOk carries anything: a server name exactly when has_sni, 1..255 bytes (the
//    gateway normalizes it next: normalize_host, fuzzed by fuzz_host); kNeedMore, kNotTls and
//    kMalformed carry no name and no ECH flag, so nothing is taken from a refused hello;
//  - a prefix never claims more than the whole: every prefix of an input the parser decided
//    on (kOk, kMalformed) is kNeedMore, kNotTls or the same decision with the same fields,
//    so a peek that saw fewer bytes never accepts what the whole refuses; bytes after a
//    kOk hello change nothing;
//  - kNotTls is decided by the first two bytes alone.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "egress/tls_hello.h"

using space::egress::ClientHelloInfo;
using space::egress::parse_client_hello;
using Status = ClientHelloInfo::Status;

namespace {

bool same(const ClientHelloInfo& a, const ClientHelloInfo& b) {
  return a.status == b.status && a.sni == b.sni && a.has_sni == b.has_sni && a.ech == b.ech;
}

void check_shape(const ClientHelloInfo& info) {
  if (info.status != Status::kOk) {
    if (info.has_sni || !info.sni.empty() || info.ech) std::abort();
    return;
  }
  if (info.has_sni != !info.sni.empty()) std::abort();
  if (info.sni.size() > 255) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  ClientHelloInfo whole = parse_client_hello(in);
  check_shape(whole);
  if (whole.status == Status::kNotTls && size >= 2 &&
      parse_client_hello(in.substr(0, 2)).status != Status::kNotTls)
    std::abort();
  if (whole.status == Status::kOk || whole.status == Status::kMalformed) {
    // Prefixes: up to 16 cut points spread over the input (every one would be quadratic).
    size_t step = size / 16 + 1;
    for (size_t n = 0; n < size; n += step) {
      ClientHelloInfo part = parse_client_hello(in.substr(0, n));
      check_shape(part);
      if (part.status == Status::kOk && !same(part, whole)) std::abort();
      if (part.status == Status::kMalformed && whole.status == Status::kOk) std::abort();
    }
  }
  if (whole.status == Status::kOk) {
    std::string more(in);
    more += "\x16\x03\x01\x00\x05garbage";
    if (!same(parse_client_hello(more), whole)) std::abort();
  }
  return 0;
}
