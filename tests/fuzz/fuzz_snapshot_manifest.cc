// libFuzzer target: snapshot manifests read back from the store (src/snapshot/manifest.cc). A
// manifest file is untrusted: the store may be shared, and even one whose MAC holds is parsed
// as hostile. The first byte picks the path:
//   0: the rest is the manifest's JSON; it is sealed with the fuzzer's key first, so the MAC
//      holds and unseal() parses and validates it (the streaming entry parser, the header);
//   1: the rest is a whole sealed file, MAC and all (layout and MAC checks, which hostile
//      bytes almost never pass);
//   2: the rest is parsed as JSON and read with from_json() (the unstreamed reader).
// Properties checked besides "no crash": an accepted manifest validates; its canonical dump is
// byte for byte to_json().dump(); sealed again it unseals to the same manifest (and fails under
// another key); from_json(to_json()) gives the same manifest.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "snapshot/internal.h"

namespace sd = space::snapshot::detail;
using nlohmann::json;
using space::snapshot::Manifest;
using space::snapshot::StoreOptions;

namespace {

const std::string kKey(32, 'k');
const std::string kOtherKey(32, 'K');
constexpr const char* kId = "snap_fuzz";

StoreOptions options() {
  StoreOptions o;
  o.max_entries = 64;
  o.max_path = 512;
  o.max_depth = 16;
  return o;
}

size_t nesting(std::string_view text) {
  size_t depth = 0, max = 0;
  for (char c : text) {
    if (c == '[' || c == '{') max = std::max(max, ++depth);
    if ((c == ']' || c == '}') && depth > 0) --depth;
  }
  return max;
}

void check_accepted(const Manifest& m, const StoreOptions& o) {
  if (!sd::validate(m, o)) std::abort();
  std::string canonical = sd::canonical_dump(m);
  if (canonical != sd::to_json(m).dump()) std::abort();
  std::string sealed = sd::seal(m, kKey);
  auto again = sd::unseal(sealed, m.id, kKey, o);
  if (!again || sd::canonical_dump(*again) != canonical) std::abort();
  if (sd::unseal(sealed, m.id, kOtherKey, o)) std::abort();
  auto read = sd::from_json(json::parse(canonical), o);
  if (!read || sd::canonical_dump(*read) != canonical) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 3;
  std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const StoreOptions o = options();
  if (mode == 0) {
    std::string text =
        R"({"mac":")" + sd::hmac_sha256_hex(kKey, rest) + R"(","manifest":)" + rest + "}";
    if (auto m = sd::unseal(text, kId, kKey, o)) {
      if (m->id != kId) std::abort();
      check_accepted(*m, o);
    }
  } else if (mode == 1) {
    if (auto m = sd::unseal(rest, kId, kKey, o)) check_accepted(*m, o);
  } else {
    if (nesting(rest) > 64) return 0;
    json j = json::parse(rest, nullptr, false);
    if (j.is_discarded()) return 0;
    if (auto m = sd::from_json(j, o)) check_accepted(*m, o);
  }
  return 0;
}
