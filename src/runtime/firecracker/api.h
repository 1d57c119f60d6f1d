// A client of Firecracker's REST API (its Unix "API socket"; Swagger 2.0 specification in
// Firecracker's src/firecracker/swagger/firecracker.yaml). One HTTP/1.1 keep-alive connection,
// one request at a time. The bodies it sends are exactly the shapes of Firecracker 1.16's
// specification, checked by tests/unit/runtime/firecracker against a transcription of it:
// never a field that release does not know, optional fields only when they differ from the
// default (so that older releases, which lack some of them, still accept the common case).
// Everything Firecracker answers is untrusted: bounded, parsed without exceptions, and its
// error text sanitized before it goes into an Error.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/fd.h"

namespace space::runtime::firecracker {

// Definitions "TokenBucket" and "RateLimiter". refill_time_ms is sent as "refill_time".
struct TokenBucket {
  uint64_t size = 0;
  uint64_t refill_time_ms = 0;
  std::optional<uint64_t> one_time_burst;
};
struct RateLimiter {
  std::optional<TokenBucket> bandwidth, ops;
  bool empty() const { return !bandwidth && !ops; }
};

// "MachineConfiguration" (PUT /machine-config).
struct MachineConfig {
  int vcpu_count = 1;
  uint64_t mem_size_mib = 128;
  bool smt = false;
  bool track_dirty_pages = false;
};

// "BootSource" (PUT /boot-source); initrd_path and boot_args are omitted when empty.
struct BootSource {
  std::string kernel_image_path, initrd_path, boot_args;
};

// "Drive" (PUT /drives/{drive_id}), a virtio-block device backed by a host file. A rate
// limiter that is empty is not sent.
struct Drive {
  std::string drive_id, path_on_host;
  bool is_root_device = false;
  bool is_read_only = false;
  std::optional<RateLimiter> rate_limiter;
};

// "Vsock" (PUT /vsock): Firecracker listens on uds_path for host-initiated connections.
struct Vsock {
  uint32_t guest_cid = 3;
  std::string uds_path;
};

// "Balloon" (PUT /balloon). stats_polling_interval_s > 0 enables statistics.
struct Balloon {
  uint64_t amount_mib = 0;
  bool deflate_on_oom = true;
  int stats_polling_interval_s = 0;
};

// "SnapshotCreateParams" (PUT /snapshot/create): snapshot_type "Diff" if diff, else "Full".
struct SnapshotCreate {
  std::string snapshot_path, mem_file_path;
  bool diff = false;
};

// "SnapshotLoadParams" (PUT /snapshot/load). Memory always goes as "mem_backend" (the
// deprecated top-level mem_file_path is never sent): backend_type "File" with mem_file_path,
// or "Uffd" when `uffd`, mem_file_path then being the UDS of the page-fault handler.
// track_dirty_pages, clock_realtime and vsock_override are sent only when set.
struct SnapshotLoad {
  std::string snapshot_path, mem_file_path;
  bool uffd = false;
  bool track_dirty_pages = false;
  bool resume_vm = true;
  bool clock_realtime = false;  // x86_64 only
  std::optional<std::string> vsock_uds_override;
};

// "InstanceInfo" (GET /). state: "Not started", "Running" or "Paused".
struct InstanceInfo {
  std::string id, state, vmm_version, app_name;
};

// The JSON bodies, exposed for the tests.
nlohmann::json to_json_body(const TokenBucket& b);
nlohmann::json to_json_body(const RateLimiter& r);
nlohmann::json to_json_body(const MachineConfig& m);
nlohmann::json to_json_body(const BootSource& b);
nlohmann::json to_json_body(const Drive& d);
nlohmann::json to_json_body(const Vsock& v);
nlohmann::json to_json_body(const Balloon& b);
nlohmann::json to_json_body(const SnapshotCreate& s);
nlohmann::json to_json_body(const SnapshotLoad& s);

// True for a drive id this client puts into a request path: [A-Za-z0-9_-]{1,64}.
bool valid_drive_id(std::string_view id);

class ApiClient {
 public:
  using Clock = std::chrono::steady_clock;

  // Wraps a connected stream socket (made non-blocking here): the API socket in a jail is
  // reached with connect_jailed (vsock.h), which retries while Firecracker starts and checks
  // that the socket's peer is the jail's uid (a compromised Firecracker could have swapped it
  // for a link to another service's socket).
  explicit ApiClient(UniqueFd fd);
  ApiClient(ApiClient&&) noexcept;
  ApiClient& operator=(ApiClient&&) noexcept;
  ~ApiClient();

  // One request; `body` nullopt sends none. Returns the response's JSON body (null when it is
  // empty, as for 204). Errors:
  //  - a non-2xx answer: "Firecracker refused PUT /drives/disk (400): <fault_message>",
  //    kInvalidArgument for 400, kInternal otherwise (fault_message sanitized and capped);
  //  - no complete answer within `timeout`: kTimeout;
  //  - the connection fails or closes: kUnavailable;
  //  - a malformed answer, a body over 1 MiB, or a body that is not JSON: kProtocol.
  // After a transport or protocol error, or a timeout, the connection is out of step and every
  // later call fails with kUnavailable: reconnecting is the caller's decision.
  Result<nlohmann::json> request(std::string_view method, std::string_view path,
                                 const std::optional<nlohmann::json>& body,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(10));

  Result<void> put_machine_config(const MachineConfig& m);
  Result<void> put_boot_source(const BootSource& b);
  // PUT /drives/{drive_id}; an id that is not valid_drive_id() fails before anything is sent.
  Result<void> put_drive(const Drive& d);
  // PATCH /drives/{id} ("PartialDrive"): only the fields given (and a non-empty limiter).
  Result<void> patch_drive(const std::string& id, const std::optional<std::string>& path_on_host,
                           const std::optional<RateLimiter>& rate_limiter);
  Result<void> put_vsock(const Vsock& v);
  Result<void> put_entropy(const std::optional<RateLimiter>& rate_limiter = std::nullopt);
  Result<void> put_balloon(const Balloon& b);
  Result<void> patch_balloon(uint64_t amount_mib);
  // GET /balloon/statistics: the "BalloonStats" object as Firecracker sent it.
  Result<nlohmann::json> balloon_statistics();
  Result<void> instance_start();  // PUT /actions {"action_type":"InstanceStart"}
  Result<void> pause();           // PATCH /vm {"state":"Paused"}
  Result<void> resume();          // PATCH /vm {"state":"Resumed"}
  Result<void> create_snapshot(const SnapshotCreate& s, std::chrono::milliseconds timeout);
  Result<void> load_snapshot(const SnapshotLoad& s, std::chrono::milliseconds timeout);
  // GET /; an answer without one of the required string fields is a kProtocol error.
  Result<InstanceInfo> describe();
  // GET /version -> its "firecracker_version" ("1.16.0").
  Result<std::string> version();

 private:
  struct Conn;  // the socket stream and its read buffer (Beast types stay in api.cc)
  Result<void> call(std::string_view method, std::string_view path, const nlohmann::json& body,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10));

  std::unique_ptr<Conn> conn_;
  bool broken_ = false;
};

}  // namespace space::runtime::firecracker
