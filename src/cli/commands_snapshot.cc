// `space snapshot`, `snapshot rm`, `snapshots`, `rollback` and `restore` (docs/snapshots.md):
// each one or two REST calls. A SNAP argument is a snapshot id (snap_...) or its name; the
// daemon resolves it. Snapshots hold files only: rollback and restore restart the processes,
// and the messages say so.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "cli/commands.h"
#include "cli/output.h"
#include "common/clock.h"
#include "common/units.h"

namespace space::cli {
namespace {

using nlohmann::json;

std::string bytes_cell(const json& v) {
  if (v.is_number_unsigned()) return format_size(v.get<uint64_t>());
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return format_size(static_cast<uint64_t>(v.get<int64_t>()));
  return "-";
}

// "in 6h" for an RFC 3339 time still to come, "now" for one past, "never" for null.
std::string expires_cell(const json& when, double now) {
  if (when.is_null()) return "never";
  if (!when.is_string()) return "-";
  auto parsed = parse_rfc3339(when.get_ref<const std::string&>(), /*strict=*/false);
  if (!parsed) return "-";
  double at = *parsed;
  if (at <= now) return "now";
  // age() measures from its first argument to its second.
  return "in " + age(json(now), at);
}

std::string snapshot_table(const json& list) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "KIND", "CREATED", "FILES", "SIZE", "NEW", "EXPIRES"}};
  double now = now_s();
  for (const auto& s : list) {
    if (!s.is_object()) continue;
    json created = s.value("created_at", json());
    rows.push_back(
        {cell(s.value("id", json())), cell(s.value("name", json())), cell(s.value("kind", json())),
         created.is_null() ? "-" : age(created, now) + " ago", cell(s.value("files", json())),
         bytes_cell(s.value("logical_bytes", json())), bytes_cell(s.value("new_bytes", json())),
         expires_cell(s.value("expires_at", json()), now)});
  }
  return format_table(rows);
}

}  // namespace

Result<int> cmd_snapshot(const Args& a, const Client& c) {
  json body = json::object();
  if (!a.name.empty()) body["name"] = a.name;
  json snap = TRY(c.call("POST", sandbox_target(a.id, "/snapshots"), body));
  if (a.json) {
    print_json(snap);
  } else {
    print(escape_text(snap.value("id", "")) + "\n");
  }
  return 0;
}

Result<int> cmd_snapshot_rm(const Args& a, const Client& c) {
  // Every snapshot named is tried; each failure is reported, and any makes the exit code 125.
  int code = 0;
  for (const auto& snap : a.snaps) {
    auto r = c.call("DELETE", snapshot_target(snap));
    if (!r) code = report(r.error());
  }
  return code;
}

Result<int> cmd_snapshots(const Args& a, const Client& c) {
  json res =
      TRY(c.call("GET", a.id.empty() ? "/v1/snapshots" : sandbox_target(a.id, "/snapshots")));
  json list = res.value("snapshots", json::array());
  if (a.json) {
    print_json(list);
    return 0;
  }
  print(snapshot_table(list));
  return 0;
}

Result<int> cmd_rollback(const Args& a, const Client& c) {
  json sandbox = TRY(c.call("POST", sandbox_target(a.id, "/rollback"), json{{"snapshot", a.snap}}));
  if (a.json) {
    print_json(sandbox);
    return 0;
  }
  json rb = sandbox.value("rollback", json::object());
  std::string to = rb.is_object() ? rb.value("snapshot", a.snap) : a.snap;
  json saved = rb.is_object() ? rb.value("saved_as", json()) : json();
  std::string before = saved.is_string()
                           ? "the state before is snapshot " + saved.get<std::string>()
                           : "the state before was not saved";
  bool resumed = rb.is_object() && rb.value("processes", "") == "resumed";
  print("rolled back " + a.id + " to " + escape_text(to) + "; " + escape_text(before) +
        (resumed ? "; its processes went on from the snapshot\n" : "; processes were restarted\n"));
  return 0;
}

Result<int> cmd_restore(const Args& a, const Client& c) {
  json body = json::object();
  if (!a.sandbox.profile.empty()) body["profile"] = a.sandbox.profile;
  json sandbox = TRY(c.call("POST", snapshot_target(a.snap, "/restore"), body));
  if (a.json) {
    print_json(sandbox);
  } else {
    print(escape_text(sandbox.value("id", "")) + "\n");
  }
  return 0;
}

}  // namespace space::cli
