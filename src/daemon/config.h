// spaced's configuration: command-line flags over an optional JSON config file over defaults.
// The file format is documented in docs/configuration.md.
#pragma once

#include <filesystem>
#include <set>
#include <string>

#include "common/error.h"
#include "runtime/runtime.h"

namespace space::daemon {

struct Config {
  std::filesystem::path state_dir = "/var/lib/space";
  std::filesystem::path socket = "/run/space/space.sock";
  std::filesystem::path agent;            // space-agent binary; default: next to spaced
  std::string cgroup_name = "space";      // cgroups live at <controller root>/<name>/<id>
  runtime::Limits default_limits;
  size_t max_sandboxes = 512;
  double destroyed_retention_s = 7 * 86400.0;  // how long destroyed sandboxes stay listed
  double audit_retention_s = 90 * 86400.0;     // how long a destroyed sandbox's audit log stays
  bool audit_execs = true;  // log every execve inside sandboxes (seccomp user notification)
  std::set<std::string> profiles = {"test", "live"};
  std::string log_level = "info";

  // Reads a JSON config file over the current values.
  Result<void> load(const std::filesystem::path& file);
};

}  // namespace space::daemon
