// The `proc_exec` payload: the agent's encoder and the daemon's validating decoder (see
// exec_report.h).
#include "proto/exec_report.h"

#include <limits>

#include "common/json_nesting.h"
#include "proto/frame.h"

namespace space::proto {
using nlohmann::json;

namespace {

// Deepest nesting a payload may have: {"events":[{"argv":[...]}]} is 4; a little room for
// fields a newer agent may add (they are dropped, but must not fail the frame).
constexpr int kMaxReportDepth = 8;

// Cuts `s` to at most `max` bytes without splitting a UTF-8 sequence. True if it was cut.
bool cut_to(std::string& s, size_t max) {
  if (s.size() <= max) return false;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return true;
}

std::optional<int64_t> int_within(const json& v, int64_t min, int64_t max) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (max < 0 || u > static_cast<uint64_t>(max) || static_cast<int64_t>(u) < min)
      return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    if (i < min || i > max) return std::nullopt;
    return i;
  }
  return std::nullopt;
}

// How a field of a record came out.
enum class Field { kAbsent, kOk, kBad };

// An integer field within [min, max]; absent or null is kAbsent.
Field copy_int(const json& r, json& out, const char* key, int64_t min, int64_t max) {
  auto it = r.find(key);
  if (it == r.end() || it->is_null()) return Field::kAbsent;
  auto v = int_within(*it, min, max);
  if (!v) return Field::kBad;
  out[key] = *v;
  return Field::kOk;
}

// A string field cut to `max` bytes (`cut` set when it was); absent or null is kAbsent.
Field copy_string(const json& r, json& out, const char* key, size_t max, bool& cut) {
  auto it = r.find(key);
  if (it == r.end() || it->is_null()) return Field::kAbsent;
  if (!it->is_string()) return Field::kBad;
  std::string s = it->get<std::string>();
  cut = cut_to(s, max);
  out[key] = std::move(s);
  return Field::kOk;
}

// A boolean flag, kept only when true.
Field copy_flag(const json& r, json& out, const char* key) {
  auto it = r.find(key);
  if (it == r.end() || it->is_null()) return Field::kAbsent;
  if (!it->is_boolean()) return Field::kBad;
  if (it->get<bool>()) out[key] = true;
  return Field::kOk;
}

}  // namespace

std::string encode_exec_report(std::span<const std::string> records, uint64_t dropped) {
  size_t size = kExecReportOverhead;
  for (const std::string& r : records) size += r.size() + 1;
  std::string out;
  out.reserve(size);
  out += "{\"events\":[";
  for (size_t i = 0; i < records.size(); ++i) {
    if (i > 0) out += ',';
    out += records[i];
  }
  out += "],\"dropped\":";
  out += std::to_string(dropped);
  out += '}';
  return out;
}

std::optional<json> normalize_exec_record(const json& r) {
  if (!r.is_object()) return std::nullopt;
  json out = json::object();
  auto sc = r.find("syscall");
  if (sc == r.end() || !sc->is_string()) return std::nullopt;
  const std::string syscall = sc->get<std::string>();
  if (syscall != "execve" && syscall != "execveat") return std::nullopt;
  out["syscall"] = syscall;
  if (auto abi = r.find("abi"); abi != r.end() && !abi->is_null()) {
    if (!abi->is_string()) return std::nullopt;
    const std::string name = abi->get<std::string>();
    if (name != "x32" && name != "i386" && name != "arm") return std::nullopt;
    out["abi"] = name;
  }

  constexpr int64_t kPidMax = std::numeric_limits<int32_t>::max();
  constexpr int64_t kUidMax = std::numeric_limits<uint32_t>::max();
  const struct {
    const char* key;
    int64_t min, max;
    bool always;  // written as null when absent
  } ints[] = {{"pid", 1, kPidMax, true},
              {"ppid", 0, kPidMax, true},
              {"uid", 0, kUidMax, true},
              {"fd", std::numeric_limits<int32_t>::min(), kPidMax, false}};
  for (const auto& f : ints) {
    Field got = copy_int(r, out, f.key, f.min, f.max);
    if (got == Field::kBad) return std::nullopt;
    if (got == Field::kAbsent && f.always) out[f.key] = nullptr;
  }

  // cwd and resolved are cut silently (no real path is that long); a cut path says so.
  bool path_cut = false;
  for (auto [key, max] :
       {std::pair{"cwd", kMaxReportedPathBytes}, std::pair{"path", kMaxReportedPathBytes},
        std::pair{"resolved", kMaxReportedResolvedBytes}}) {
    bool c = false;
    Field got = copy_string(r, out, key, max, c);
    if (got == Field::kBad) return std::nullopt;
    if (got == Field::kAbsent) out[key] = nullptr;
    if (std::string_view(key) == "path") path_cut = c;
  }

  for (const char* key : {"at_empty_path", "fileless", "path_truncated", "argv_truncated",
                          "argv_unreadable", "caller_gone"})
    if (copy_flag(r, out, key) == Field::kBad) return std::nullopt;
  if (path_cut) out["path_truncated"] = true;

  json argv = json::array();
  bool argv_cut = false;
  if (auto a = r.find("argv"); a != r.end() && !a->is_null()) {
    if (!a->is_array()) return std::nullopt;
    size_t total = 0;
    for (const json& arg : *a) {
      if (!arg.is_string()) return std::nullopt;
      if (argv.size() == kMaxExecArgs || total == kMaxReportedArgvBytes) {
        argv_cut = true;
        break;
      }
      std::string s = arg.get<std::string>();
      argv_cut |= cut_to(s, std::min(kMaxExecArgBytes, kMaxReportedArgvBytes - total));
      total += s.size();
      argv.push_back(std::move(s));
    }
  }
  out["argv"] = std::move(argv);
  if (argv_cut) out["argv_truncated"] = true;

  if (auto s = r.find("stream"); s != r.end() && !s->is_null()) {
    // The daemon's ids: 1 .. 2^31-1 (the high bit is the agent's range).
    auto id = int_within(*s, 1, static_cast<int64_t>(kAgentStreamBit) - 1);
    if (!id) return std::nullopt;
    out["stream"] = *id;
  } else {
    out["stream"] = nullptr;
  }
  return out;
}

Result<ExecReport> decode_exec_report(std::string_view payload) {
  if (!json_nesting_within(payload, kMaxReportDepth))
    return fail(Code::kProtocol, "proc_exec: the payload is nested too deeply");
  json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return fail(Code::kProtocol, "proc_exec: the payload is not a JSON object");
  auto events = j.find("events");
  if (events == j.end() || !events->is_array())
    return fail(Code::kProtocol, "proc_exec: \"events\" is not an array");
  if (events->size() > kMaxReportEvents)
    return fail(Code::kProtocol, "proc_exec: more than " + std::to_string(kMaxReportEvents) +
                                     " events in one frame");
  ExecReport out;
  if (auto d = j.find("dropped"); d != j.end() && !d->is_null()) {
    if (!d->is_number_unsigned())
      return fail(Code::kProtocol, "proc_exec: \"dropped\" is not a count");
    out.dropped = d->get<uint64_t>();
  }
  out.events.reserve(events->size());
  for (const json& r : *events) {
    if (auto n = normalize_exec_record(r))
      out.events.push_back(std::move(*n));
    else
      ++out.malformed;
  }
  return out;
}

}  // namespace space::proto
