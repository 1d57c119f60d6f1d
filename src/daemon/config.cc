// Loading the JSON config file. Unknown keys are an error (a typo must not silently fall back
// to a default).
#include "daemon/config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/units.h"

namespace space::daemon {

Result<void> Config::load(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return fail_sys("open", file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object())
    return fail(Code::kInvalidArgument, file.string() + ": not a JSON object");
  auto str = [&](const char* k) -> Result<std::string> {
    if (!j[k].is_string()) return fail(Code::kInvalidArgument, std::string(k) + ": expected a string");
    return j[k].get<std::string>();
  };
  for (auto& [k, v] : j.items()) {
    if (k == "state_dir") state_dir = TRY(str("state_dir"));
    else if (k == "socket") socket = TRY(str("socket"));
    else if (k == "agent") agent = TRY(str("agent"));
    else if (k == "cgroup_name") cgroup_name = TRY(str("cgroup_name"));
    else if (k == "log_level") log_level = TRY(str("log_level"));
    else if (k == "max_sandboxes" && v.is_number_unsigned()) max_sandboxes = v.get<size_t>();
    else if (k == "destroyed_retention_days" && v.is_number())
      destroyed_retention_s = v.get<double>() * 86400.0;
    else if (k == "audit_retention_days" && v.is_number())
      audit_retention_s = v.get<double>() * 86400.0;
    else if (k == "audit_execs" && v.is_boolean()) audit_execs = v.get<bool>();
    else if (k == "profiles" && v.is_array()) {
      profiles.clear();
      for (auto& p : v)
        if (p.is_string()) profiles.insert(p.get<std::string>());
    } else if (k == "defaults" && v.is_object()) {
      for (auto& [dk, dv] : v.items()) {
        if (dk == "memory" && dv.is_string())
          default_limits.memory_bytes = TRY_CTX(parse_size(dv.get<std::string>()), "defaults.memory");
        else if (dk == "disk" && dv.is_string())
          default_limits.disk_bytes = TRY_CTX(parse_size(dv.get<std::string>()), "defaults.disk");
        else if (dk == "cpus" && dv.is_number()) default_limits.cpus = dv.get<double>();
        else if (dk == "pids" && dv.is_number_unsigned()) default_limits.pids = dv.get<uint32_t>();
        else
          return fail(Code::kInvalidArgument, file.string() + ": unknown or mistyped key defaults." + dk);
      }
    } else {
      return fail(Code::kInvalidArgument, file.string() + ": unknown or mistyped key \"" + k + "\"");
    }
  }
  return {};
}

}  // namespace space::daemon
