// libFuzzer target: the upper-layer listing parser (src/runtime/upper_listing.cc), which spaced
// runs on what space-upper-reader printed after parsing a disk the guest wrote. Properties
// checked besides "no crash": every accepted entry has a path with no empty, ".", ".." or NUL
// part and at most kMaxUpperPath bytes, a size >= 0, and at most `max` entries are accepted;
// encoding the accepted entries again gives a listing that parses to the same entries.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/upper_listing.h"

using space::runtime::UpperEntry;

namespace {

void check_path(const std::string& p) {
  if (p.empty() || p.size() > space::runtime::kMaxUpperPath) std::abort();
  if (p.find('\0') != std::string::npos) std::abort();
  size_t start = 0;
  for (;;) {
    size_t slash = p.find('/', start);
    std::string_view part(p.data() + start,
                          (slash == std::string::npos ? p.size() : slash) - start);
    if (part.empty() || part == "." || part == "..") std::abort();
    if (slash == std::string::npos) return;
    start = slash + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // First byte: the entry limit (0..255).
  const size_t max = data[0];
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = space::runtime::parse_listing(text, max);
  if (!r) return 0;
  if (r->size() > max) std::abort();
  std::string again = std::string(space::runtime::kListingHeader) + "\n";
  for (const UpperEntry& e : *r) {
    check_path(e.path);
    if (e.size < 0) std::abort();
    again += space::runtime::encode_entry(e);
  }
  again += "end " + std::to_string(r->size()) + "\n";
  auto r2 = space::runtime::parse_listing(again, max);
  if (!r2 || r2->size() != r->size()) std::abort();
  for (size_t i = 0; i < r->size(); ++i) {
    const UpperEntry &a = (*r)[i], &b = (*r2)[i];
    if (a.path != b.path || a.type != b.type || a.opaque != b.opaque || a.size != b.size ||
        a.mtime_ns != b.mtime_ns)
      std::abort();
  }
  return 0;
}
