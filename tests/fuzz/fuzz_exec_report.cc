// libFuzzer target: the `proc_exec` payload a microVM's agent sends (src/proto/exec_report.cc),
// decoded as the daemon does. Properties checked besides "no crash": every accepted record is
// within the documented bounds, normalizing it again changes nothing, and re-encoding the
// accepted records decodes to the same records and drop count.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "proto/exec_report.h"

using nlohmann::json;
namespace proto = space::proto;

namespace {

void check_bounds(const json& r) {
  if (!r.is_object() || !r.contains("syscall") || !r["syscall"].is_string()) std::abort();
  const json& argv = r["argv"];
  if (!argv.is_array() || argv.size() > space::kMaxExecArgs) std::abort();
  size_t total = 0;
  for (const json& a : argv) {
    if (!a.is_string() || a.get_ref<const std::string&>().size() > space::kMaxExecArgBytes)
      std::abort();
    total += a.get_ref<const std::string&>().size();
  }
  if (total > proto::kMaxReportedArgvBytes) std::abort();
  for (auto [key, max] : {std::pair{"cwd", proto::kMaxReportedPathBytes},
                          std::pair{"path", proto::kMaxReportedPathBytes},
                          std::pair{"resolved", proto::kMaxReportedResolvedBytes}}) {
    const json& v = r[key];
    if (!v.is_null() && (!v.is_string() || v.get_ref<const std::string&>().size() > max))
      std::abort();
  }
  // What the daemon decides is never taken from the guest.
  if (r.contains("guest_reported") || r.contains("host_pid")) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view payload(reinterpret_cast<const char*>(data), size);
  auto report = proto::decode_exec_report(payload);
  if (!report) return 0;
  std::vector<std::string> again;
  for (const json& r : report->events) {
    check_bounds(r);
    auto twice = proto::normalize_exec_record(r);
    if (!twice || *twice != r) std::abort();
    again.push_back(r.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  auto round = proto::decode_exec_report(proto::encode_exec_report(again, report->dropped));
  if (!round || round->dropped != report->dropped || round->malformed != 0 ||
      round->events != report->events)
    std::abort();
  return 0;
}
