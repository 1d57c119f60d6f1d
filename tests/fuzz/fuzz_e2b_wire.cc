// libFuzzer target: the E2B door's parsers of untrusted bytes (src/e2b/wire.cc): Connect
// envelopes, Host routing, API keys in E2B's form and multipart/form-data bodies. The first
// byte picks which; for multipart, the rest is "boundary\n" then the body.
// Properties beyond "no crash": envelopes decoded one after another re-encode to exactly the
// bytes they came from, and a decoded message is never over the limit; a routed Host gives a
// port of 1-65535 and a non-empty id that, written back as "<port>-<id>.<domain>", routes the
// same; a key accepted converts to a token that converts back to the same key; multipart parts
// are views inside the body, in order, never overlapping.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "e2b/wire.h"

namespace e2b = space::e2b;

namespace {

void fuzz_envelopes(std::string_view s) {
  std::string again;
  size_t off = 0;
  while (off < s.size()) {
    size_t used = 0;
    uint8_t flags = 0;
    auto m = e2b::parse_envelope(s.substr(off), &used, &flags);
    if (!m || !*m) break;
    if ((*m)->size() > e2b::kMaxConnectMessage || used != 5 + (*m)->size() || (flags & 0x01))
      std::abort();
    again += e2b::envelope(flags, **m);
    off += used;
  }
  if (again != s.substr(0, off)) std::abort();
}

void fuzz_host(std::string_view s) {
  constexpr std::string_view kDomain = "sandbox.example.test";
  auto r = e2b::route_host(s, kDomain);
  if (!r) return;
  if (r->first == 0 || r->second.empty()) std::abort();
  std::string back = std::to_string(r->first) + "-" + r->second + "." + std::string(kDomain);
  auto again = e2b::route_host(back, kDomain);
  if (!again || *again != *r) std::abort();
  (void)e2b::parse_port(s);
}

void fuzz_key(std::string_view s) {
  auto t = e2b::token_from_e2b_key(s);
  if (!t) return;
  if (e2b::e2b_key_from_token(*t) != s) std::abort();
}

void fuzz_multipart(std::string_view s) {
  size_t nl = s.find('\n');
  if (nl == std::string_view::npos) return;
  std::string_view boundary = s.substr(0, nl), body = s.substr(nl + 1);
  (void)e2b::header_param(boundary, "boundary");
  auto parts = e2b::parse_multipart(body, boundary);
  if (!parts) return;
  const char* prev_end = body.data();
  for (const auto& p : *parts) {
    if (p.data.data() < prev_end || p.data.data() + p.data.size() > body.data() + body.size())
      std::abort();
    prev_end = p.data.data() + p.data.size();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view s(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0:
      fuzz_envelopes(s);
      break;
    case 1:
      fuzz_host(s);
      break;
    case 2:
      fuzz_key(s);
      break;
    case 3:
      fuzz_multipart(s);
      break;
  }
  return 0;
}
