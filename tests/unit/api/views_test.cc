// The JSON of the service's results (api/views.cc) against the shapes of api/openapi.yaml as
// the daemon wrote them before its results were typed: every key, null where the schema says
// nullable, absent where a field exists only in some cases (usage, vm, destroyed_at, problem,
// a drain item's error ...).
#include "api/views.h"

#include <gtest/gtest.h>

namespace space::api {
namespace {

using nlohmann::json;

daemon::SandboxInfo a_sandbox() {
  daemon::SandboxInfo s{
      .id = "sb_1",
      .state = daemon::SandboxState::kRunning,
      .runtime = "linux",
      .image = "host",
      .profile = "test",
      .created_at = 1796205600.25,
      .limits = {.memory = 512u << 20, .cpus = 1.0, .pids = 256, .disk = 1u << 30},
      .workdir = "/root",
      .uid_base = 1u << 30,
      .env = {{"A", "1"}, {"HTTP_PROXY", "http://10.0.0.1:3128"}},
      .egress = {.allow = {"pypi.org"}, .secrets = {}}};
  return s;
}

TEST(Views, SandboxAsCreated) {
  EXPECT_EQ(to_json(a_sandbox()), json::parse(R"({
    "id": "sb_1", "state": "running", "runtime": "linux", "image": "host", "profile": "test",
    "created_at": "2026-12-02T10:00:00.250Z", "expires_at": null,
    "limits": {"memory": 536870912, "cpus": 1.0, "pids": 256, "disk": 1073741824},
    "workdir": "/root", "uid_base": 1073741824,
    "env": {"A": "1", "HTTP_PROXY": "http://10.0.0.1:3128"},
    "egress": {"allow": ["pypi.org"], "secrets": []}})"));
}

TEST(Views, LiveSandboxWithUsageAndVm) {
  daemon::SandboxInfo s = a_sandbox();
  s.env.clear();
  s.expires_at = 1796205660;
  s.host_pid = 4242;
  s.vm_json = R"({"accelerator":"tcg","accelerator_note":"no /dev/kvm"})";
  s.usage = runtime::Usage{
      .memory_bytes = 1, .memory_limit = 2, .oom_kills = 3, .pids = 4, .cpu_usage_ns = 5};
  json j = to_json(s);
  EXPECT_EQ(j["env"], json::object()) << "an empty environment is an object, not null";
  EXPECT_EQ(j["expires_at"], "2026-12-02T10:01:00.000Z");
  EXPECT_EQ(j["host_pid"], 4242);
  EXPECT_EQ(j["vm"], json::parse(R"({"accelerator":"tcg","accelerator_note":"no /dev/kvm"})"));
  EXPECT_EQ(j["usage"], json::parse(R"({"memory_bytes":1,"memory_limit":2,"oom_kills":3,
                                        "pids":4,"cpu_usage_ns":5})"));
  for (const char* absent : {"destroyed_at", "reason", "rollback", "restored_from"})
    EXPECT_FALSE(j.contains(absent)) << absent;
}

TEST(Views, DestroyedRolledBackAndRestored) {
  daemon::SandboxInfo s = a_sandbox();
  s.state = daemon::SandboxState::kDestroyed;
  s.destroyed_at = 1796205600;
  s.reason = "removed by the API";
  json j = to_json(s);
  EXPECT_EQ(j["state"], "destroyed");
  EXPECT_EQ(j["destroyed_at"], "2026-12-02T10:00:00.000Z");
  EXPECT_EQ(j["reason"], "removed by the API");
  for (const char* absent : {"host_pid", "vm", "usage"}) EXPECT_FALSE(j.contains(absent));

  s = a_sandbox();
  s.rollback = {.snapshot = "snap_1", .saved_as = "snap_2", .processes = "restarted"};
  s.restored_from = "snap_0";
  j = to_json(s);
  EXPECT_EQ(j["rollback"],
            json::parse(R"({"snapshot":"snap_1","saved_as":"snap_2","processes":"restarted"})"));
  EXPECT_EQ(j["restored_from"], "snap_0");
  s.rollback->saved_as.reset();
  EXPECT_EQ(to_json(s)["rollback"]["saved_as"], nullptr);
}

TEST(Views, Snapshot) {
  daemon::SnapshotInfo s{.id = "snap_1",
                         .sandbox = "sb_1",
                         .profile = "test",
                         .kind = "manual",
                         .created_at = 1796205600,
                         .expires_at = 1796205600 + 86400,
                         .runtime = "linux",
                         .image = "host",
                         .files = 3,
                         .logical_bytes = 30,
                         .new_bytes = 10,
                         .reused_files = 2,
                         .contents = "filesystem",
                         .processes = "restarted",
                         .skipped = {"dev/x: device node"}};
  EXPECT_EQ(to_json(s), json::parse(R"({
    "id": "snap_1", "sandbox": "sb_1", "profile": "test", "name": null, "kind": "manual",
    "created_at": "2026-12-02T10:00:00.000Z", "expires_at": "2026-12-03T10:00:00.000Z",
    "parent": null, "runtime": "linux", "image": "host", "files": 3, "logical_bytes": 30,
    "new_bytes": 10, "reused_files": 2, "contents": "filesystem", "processes": "restarted",
    "skipped": ["dev/x: device node"]})"));
  s.name = "base";
  s.parent = "snap_0";
  s.skipped.clear();
  json j = to_json(s);
  EXPECT_EQ(j["name"], "base");
  EXPECT_EQ(j["parent"], "snap_0");
  EXPECT_EQ(j["skipped"], json::array());
  EXPECT_EQ(to_json(std::vector<daemon::SnapshotInfo>{}), json::array());
}

TEST(Views, ProcessDiffImageDisk) {
  daemon::ProcessInfo p{.pid = 7, .uid = 0, .state = "S", .argv = {"sleep", "1"}, .stream = 3};
  EXPECT_EQ(to_json(p), json::parse(R"({"pid":7,"ppid":null,"uid":0,"state":"S",
                                        "argv":["sleep","1"],"stream":3})"));
  EXPECT_EQ(to_json(daemon::Diff{.added = {"/a"}}),
            json::parse(R"({"added":["/a"],"changed":[],"deleted":[]})"));
  EXPECT_EQ(to_json(daemon::ImageInfo{.name = "deb",
                                      .kind = "imported",
                                      .created_at = 1796205600,
                                      .size_bytes = 9,
                                      .files = 2}),
            json::parse(R"({"name":"deb","kind":"imported","created_at":"2026-12-02T10:00:00.000Z",
                            "size_bytes":9,"files":2,"config":{"env":[],"working_dir":"",
                            "user":"","entrypoint":[],"cmd":[],"labels":{}}})"));
  daemon::ImageInfo oci{.name = "app", .kind = "imported", .format = "oci", .digest = "sha256:ab"};
  oci.config.env = {"A=1"};
  oci.config.working_dir = "/app";
  oci.config.user = "app";
  oci.config.entrypoint = {"/bin/sh", "-c"};
  oci.config.cmd = {"echo hi"};
  oci.config.labels = {{"org.opencontainers.image.version", "1.0"}};
  json j = to_json(oci);
  EXPECT_EQ(j["format"], "oci");
  EXPECT_EQ(j["digest"], "sha256:ab");
  EXPECT_EQ(j["config"], json::parse(R"({"env":["A=1"],"working_dir":"/app","user":"app",
      "entrypoint":["/bin/sh","-c"],"cmd":["echo hi"],
      "labels":{"org.opencontainers.image.version":"1.0"}})"));
  EXPECT_EQ(to_json(daemon::VmDiskInfo{
                .name = "deb", .path = "/x/vm.ext4", .size_bytes = 8, .cached = true}),
            json::parse(R"({"name":"deb","path":"/x/vm.ext4","size_bytes":8,"cached":true})"));
}

TEST(Views, AuditEventAndVerdict) {
  daemon::AuditEvent e{.sandbox_id = "sb_1",
                       .seq = 2,
                       .ts = 1796205600.5,
                       .kind = "exec.start",
                       .data_json = R"({"argv":["ls"],"pid":9})",
                       .hash = "ab"};
  EXPECT_EQ(to_json(e), json::parse(R"({"sandbox_id":"sb_1","seq":2,"ts":1796205600.5,
                                        "time":"2026-12-02T10:00:00.500Z","kind":"exec.start",
                                        "data":{"argv":["ls"],"pid":9},"hash":"ab"})"));
  EXPECT_EQ(to_json(daemon::AuditVerdict{.ok = true, .events = 4}),
            json::parse(R"({"ok":true,"events":4,"first_bad_seq":null})"));
  EXPECT_EQ(to_json(daemon::AuditVerdict{
                .ok = false, .events = 4, .first_bad_seq = 3, .problem = "hash mismatch"}),
            json::parse(R"({"ok":false,"events":4,"first_bad_seq":3,"problem":"hash mismatch"})"));
}

TEST(Views, HealthNodeDrain) {
  EXPECT_EQ(to_json(daemon::Health{.version = "0.1.0", .sandboxes = 2, .uptime_s = 1.5, .pid = 9}),
            json::parse(R"({"status":"ok","version":"0.1.0","draining":false,"sandboxes":2,
                            "uptime_s":1.5,"pid":9})"));
  daemon::NodeInfo n{.name = "n1", .url = "https://n1:7443", .runtimes = {"linux"}, .version = "v"};
  n.cpus = {.total = 16, .allocated = 1.5};
  n.memory = {.total_bytes = 100, .allocated_bytes = 10};
  n.sandboxes = {.running = 1, .paused = 0, .max = 512};
  n.warm.push_back({.runtime = "linux",
                    .image = "host",
                    .profile = "test",
                    .memory = 64,
                    .cpus = 1.0,
                    .ready = 2});
  EXPECT_EQ(to_json(n), json::parse(R"({
    "name": "n1", "url": "https://n1:7443", "labels": {}, "draining": false,
    "runtimes": ["linux"], "kvm": false, "cpus": {"total": 16, "allocated": 1.5},
    "memory": {"total_bytes": 100, "allocated_bytes": 10},
    "sandboxes": {"running": 1, "paused": 0, "max": 512},
    "warm": [{"runtime": "linux", "image": "host", "profile": "test", "memory": 64,
              "cpus": 1.0, "ready": 2}],
    "snapshot_store": null, "version": "v"})"));

  daemon::DrainResult d{.node = "n1", .left_running = 1};
  d.sandboxes.push_back({.id = "sb_1", .snapshot = "snap_1", .pushed = true, .destroyed = true});
  d.sandboxes.push_back({.id = "sb_2", .destroyed = false, .error = "frozen"});
  EXPECT_EQ(to_json(d), json::parse(R"({"node": "n1", "left_running": 1, "sandboxes": [
    {"id": "sb_1", "snapshot": "snap_1", "pushed": true, "destroyed": true},
    {"id": "sb_2", "destroyed": false, "error": "frozen"}]})"));
}

}  // namespace
}  // namespace space::api
