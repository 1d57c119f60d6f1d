// libFuzzer target: the agent frame decoder (src/proto/frame.cc) over untrusted bytes.
// The input is cut into chunks (sizes from its own bytes) fed one by one, as a socket would
// deliver them. Properties checked besides "no crash": every decoded frame re-encodes to
// exactly the bytes it was decoded from; a failed decoder stays failed; the decoder never
// yields more payload than it was fed.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "proto/frame.h"

using space::proto::Decoder;
using space::proto::Frame;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // First byte: chunk size (1..256) for feeding.
  const size_t chunk = static_cast<size_t>(data[0]) + 1;
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;
  Decoder dec;
  size_t fed = 0, consumed = 0;
  bool failed = false;
  while (fed < n || !failed) {
    if (fed < n) {
      size_t len = std::min(chunk, n - fed);
      dec.feed(std::span<const char>(bytes + fed, len));
      fed += len;
    }
    bool progress = false;
    for (;;) {
      auto r = dec.next();
      if (!r) {
        failed = true;
        if (dec.next().has_value()) std::abort();  // must stay failed
        break;
      }
      if (!r->has_value()) break;
      const Frame& f = **r;
      std::string again;
      if (!space::proto::encode(f.type, f.stream, f.payload, again)) std::abort();
      if (consumed + again.size() > fed) std::abort();
      if (std::memcmp(again.data(), bytes + consumed, again.size()) != 0) std::abort();
      consumed += again.size();
      progress = true;
    }
    if (failed || (fed == n && !progress)) break;
  }
  if (!failed && dec.buffered() != fed - consumed) std::abort();
  return 0;
}
