// libFuzzer target: REST request parsing (src/api/request.cc) — request targets and query
// parameters, the JSON body parser with its depth limit, the exec body scanner, and the typed
// create/exec requests — plus the size/duration units they use.
// The first byte picks what the rest of the input is. Properties checked besides "no crash":
// a parsed target's segments hold no '/', NUL, "." or ".."; the incremental JSON scanner finds
// the same object end however the input is chunked; a parsed path passes check_sandbox_path's
// own rules.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/request.h"
#include "common/units.h"

namespace api = space::api;

namespace {

void fuzz_target(std::string_view s) {
  auto t = api::parse_target(s);
  if (!t) return;
  for (const auto& seg : t->segments) {
    if (seg.empty() || seg == "." || seg == ".." || seg.find('/') != std::string::npos ||
        seg.find('\0') != std::string::npos) {
      std::abort();
    }
  }
  (void)api::parse_bool_param(*t, "force", false);
  (void)api::parse_bool_param(*t, "stat", false);
  (void)api::parse_mode_param(*t, "mode", 0644);
  (void)api::parse_signal_param(*t, "signal", 15);
  if (auto it = t->query.find("path"); it != t->query.end()) {
    if (api::check_sandbox_path(it->second)) {
      if (it->second.empty() || it->second[0] != '/' || it->second.size() > api::kMaxSandboxPath ||
          it->second.find('\0') != std::string::npos) {
        std::abort();
      }
    }
  }
  for (const auto& seg : t->segments) {
    (void)api::check_sandbox_id(seg);
    (void)api::check_image_name(seg);
    (void)api::parse_pid(seg);
  }
}

void fuzz_body(std::string_view s, bool exec) {
  auto j = api::parse_json(s);
  if (!j) return;
  if (exec) {
    (void)api::parse_exec_request(*j);
  } else {
    (void)api::parse_create_request(*j);
  }
}

void fuzz_scanner(std::string_view s, size_t chunk) {
  api::JsonValueScanner whole;
  auto a = whole.feed(s);
  api::JsonValueScanner parts;
  auto b = api::JsonValueScanner::State::kIncomplete;
  for (size_t end = std::min(chunk, s.size());; end = std::min(end + chunk, s.size())) {
    b = parts.feed(s.substr(0, end));
    if (b != api::JsonValueScanner::State::kIncomplete || end == s.size()) break;
  }
  if (a != b) std::abort();
  if (a == api::JsonValueScanner::State::kComplete) {
    if (whole.end() != parts.end() || whole.end() > s.size()) std::abort();
    // What the scanner delimits is what the exec handler parses.
    auto j = api::parse_json(s.substr(0, whole.end()));
    if (j && j->is_object()) (void)api::parse_exec_request(*j);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view s(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 6) {
    case 0:
      fuzz_target(s);
      break;
    case 1:
      fuzz_body(s, false);
      break;
    case 2:
      fuzz_body(s, true);
      break;
    case 3:
      fuzz_scanner(s, (data[0] >> 3) + 1);
      break;
    case 4:
      (void)space::parse_size(s);
      break;
    case 5:
      (void)space::parse_duration(s);
      break;
  }
  return 0;
}
