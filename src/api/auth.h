// Authentication and authorization of REST API requests (docs/api-auth.md).
//
// Every route declares the operation it needs (router.cc). For each request dispatch() asks
// authenticate() who is calling, authorize() whether that caller may do the route's
// operation, and then, for a token limited to some profiles, runs the handler against a
// ScopedService: a SandboxService through which sandboxes and snapshots of other profiles do
// not exist (404 with the very message an unknown id gets, so their existence does not leak)
// and cannot be created or restored into (403).
//
// Callers (principals):
//   - the root operator: a request on the Unix socket (mode 0600; the server also checks the
//     peer's uid with SO_PEERCRED) without an Authorization header. May do everything.
//   - a token: "Authorization: Bearer spt_<id>_<secret>" on either transport; on the TCP
//     listener every request needs one. Limited to its profiles and operations.
#pragma once

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "daemon/service.h"
#include "daemon/tokens.h"

namespace space::api {

// The closed set of operations a token may be granted. kNone marks a route any authenticated
// caller may use (GET /v1/health); it cannot be granted.
enum class Op { kNone, kRead, kCreate, kExec, kFiles, kLifecycle, kImages, kAdmin };

std::string_view op_name(Op op);  // "read", ...; "none" for kNone
std::optional<Op> parse_op(std::string_view name);
// The grantable operations, in the order of the docs: read, create, exec, files, lifecycle,
// images, admin.
const std::vector<Op>& all_ops();
// "read, create, exec, files, lifecycle, images, admin"
std::string op_list();

// How a request reached the server. kMutualTls: the TCP listener with api_tls.client_ca, whose
// every client presented a certificate of the cluster CA (a gateway or a node, docs/cluster.md).
enum class Transport { kUnix, kTcp, kMutualTls };

// The header a gateway names the caller it acts for with, on a mutual-TLS connection:
// {"id": "<12 hex>", "name": "...", "profiles": [...], "ops": [...], "expires_at": unix s}.
inline constexpr std::string_view kPrincipalHeader = "Space-Principal";

struct Principal {
  bool root = false;
  daemon::TokenRecord token;  // when !root
  // A gateway's caller (kPrincipalHeader): the gateway checked the token; this node enforces
  // its profiles, operations and expiry again, but cannot look it up (it is not in this node's
  // token store).
  bool forwarded = false;

  bool allows_op(Op op) const;
  bool all_profiles() const;  // root, or a token with profile "*"
  bool allows_profile(std::string_view profile) const;
  // "root" or "token 1a2b3c4d5e6f (ci)": for messages and logs, never a secret.
  std::string describe() const;
  // The token's id, "" for root.
  std::string token_id() const { return root ? "" : token.id; }
};

// Who sends a request. `authorization` is the Authorization header, "" when absent. Without a
// header a Unix-socket request is the root operator; on TCP it is refused. A header must be
// "Bearer <token>" naming a valid token of `tokens` (null: this server has no tokens).
// Failures are kUnauthenticated and never repeat the header. On kMutualTls a request without
// one is the cluster (a gateway's own calls, GET /v1/node): root, like the Unix socket's owner.
Result<Principal> authenticate(Transport transport, std::string_view authorization,
                               daemon::TokenStore* tokens, double now);
// The principal a gateway forwards (kPrincipalHeader's value): profiles and ops as a token
// holds them, checked like one (ops known, profiles configured or "*"), not expired.
Result<Principal> forwarded_principal(std::string_view header,
                                      const std::set<std::string>& profiles, double now);

// kPermissionDenied naming the operation `route` needs, unless `p` has it.
Result<void> authorize(const Principal& p, Op op, std::string_view route);

// A request is authenticated once, when it arrives; a stream can outlive that by hours (an
// audit log followed, an exec's output, a file download or upload, a VM build's progress).
// Each such handler keeps one StreamAuth and calls check() as it goes (before each write, and
// at least once a second while it waits), and ends the stream when check() fails, so revoking
// or expiring a token cuts off every stream opened with it within about a second.
//
// The root operator never fails. A token's expiry is checked on every call; the token store
// (revocation) at most once per `interval`. A failure is kUnauthenticated with
// authenticate()'s message ("... was revoked at ..."), and sticks. Safe to call from several
// threads (exec checks from a watcher thread).
class StreamAuth {
 public:
  StreamAuth(const Principal* principal, daemon::TokenStore* tokens,
             std::chrono::milliseconds interval = std::chrono::seconds(1))
      : principal_(principal), tokens_(tokens), interval_(interval) {}
  StreamAuth(const StreamAuth&) = delete;
  StreamAuth& operator=(const StreamAuth&) = delete;

  Result<void> check();
  // Whether there is anything to check (a token); false for the root operator.
  bool watching() const { return principal_ != nullptr && !principal_->root; }

 private:
  const Principal* principal_;  // null: the root operator (a handler run without dispatch())
  daemon::TokenStore* tokens_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point next_store_check_;  // guarded by mu_
  std::optional<Error> failed_;                             // guarded by mu_
};

// Body of POST /v1/tokens: {"name", "profiles": [...], "ops": [...], "ttl": "24h"}.
struct TokenRequest {
  std::string name;
  std::vector<std::string> profiles;  // sorted, unique; may be {"*"}
  std::vector<std::string> ops;       // sorted by all_ops() order, unique
  double ttl_s = 0;
};
inline constexpr double kMaxTokenTtl = 365 * 86400.0;
// Validates names, profiles (each one of `profiles` or "*"), ops and ttl (required, at most
// 365 days); messages list what is valid.
Result<TokenRequest> parse_token_request(const nlohmann::json& body,
                                         const std::set<std::string>& profiles);
// Whether `p` could have made a token with this scope: root always; a token only within its
// own profiles and operations (a token cannot mint a stronger one).
bool covers(const Principal& p, const std::vector<std::string>& profiles,
            const std::vector<std::string>& ops);
// kPermissionDenied unless `p` may create the token `req` describes: within its scope (see
// covers()) and expiring no later than `p` itself.
Result<void> check_can_issue(const Principal& p, const TokenRequest& req, double now);
// A token as GET /v1/tokens shows it (schema Token in api/openapi.yaml): no secret.
nlohmann::json token_json(const daemon::TokenRecord& r, double now);

// The sandbox service as seen by a token limited to some profiles (see the top of this file).
class ScopedService : public daemon::SandboxService {
 public:
  ScopedService(daemon::SandboxService& inner, const Principal& principal)
      : inner_(inner), principal_(principal) {}

  Result<daemon::SandboxInfo> create(const daemon::CreateRequest& req) override;
  Result<std::vector<daemon::SandboxInfo>> list() override;
  Result<daemon::SandboxInfo> inspect(const std::string& id) override;
  Result<void> destroy(const std::string& id, bool force, bool wait = true) override;
  Result<std::unique_ptr<daemon::ExecSession>> exec(const std::string& id,
                                                    const daemon::ExecRequest& req) override;
  Result<std::vector<daemon::ProcessInfo>> processes(const std::string& id) override;
  Result<void> kill(const std::string& id, int pid, int sig) override;
  Result<std::shared_ptr<daemon::ExecLog>> exec_log(const std::string& id, int pid) override;
  Result<daemon::FileStat> stat(const std::string& id, const std::string& path) override;
  Result<daemon::SandboxInfo> set_timeout(const std::string& id, double timeout_s) override;
  Result<UniqueFd> connect_port(const std::string& id, uint16_t port) override;
  Result<std::vector<daemon::DirEntry>> list_dir(const std::string& id,
                                                 const std::string& path) override;
  Result<void> read_file(const std::string& id, const std::string& path,
                         const daemon::ChunkSink& sink) override;
  Result<void> read_tar(const std::string& id, const std::string& path,
                        const daemon::ChunkSink& sink) override;
  Result<void> write_file(const std::string& id, const std::string& path, uint32_t mode,
                          const daemon::ChunkSource& source, bool parents = false) override;
  Result<void> write_tar(const std::string& id, const std::string& path,
                         const daemon::ChunkSource& source) override;
  Result<void> remove(const std::string& id, const std::string& path, bool recursive) override;
  Result<daemon::Diff> diff(const std::string& id) override;
  Result<void> pause(const std::string& id) override;
  Result<void> resume(const std::string& id) override;
  Result<daemon::SnapshotInfo> snapshot(const std::string& id,
                                        const daemon::SnapshotRequest& req) override;
  Result<std::vector<daemon::SnapshotInfo>> list_snapshots(const std::string& id) override;
  Result<std::vector<daemon::SnapshotInfo>> all_snapshots() override;
  Result<daemon::SnapshotInfo> get_snapshot(const std::string& snap) override;
  Result<void> delete_snapshot(const std::string& snap) override;
  Result<daemon::SandboxInfo> rollback(const std::string& id, const std::string& snap) override;
  Result<daemon::SandboxInfo> restore(const std::string& snap,
                                      const std::optional<std::string>& profile) override;
  Result<daemon::Diff> diff_since(const std::string& id, const std::string& snap) override;
  Result<daemon::ImageInfo> import_image(const std::string& name,
                                         const daemon::ChunkSource& source) override;
  Result<std::vector<daemon::ImageInfo>> list_images() override;
  Result<void> remove_image(const std::string& name) override;
  // A build runs sandboxes of its profile (its egress, its secrets): only a profile the token
  // may use (the handler names the default one).
  Result<daemon::ImageInfo> build_image(
      const std::string& name, const daemon::BuildRequest& req, const daemon::ChunkSource& context,
      const std::function<void(const daemon::BuildEvent&)>& progress) override;
  Result<daemon::VmDiskInfo> build_image_vm(
      const std::string& name, const std::function<void(const std::string&)>& progress) override {
    return inner_.build_image_vm(name, progress);
  }
  Result<std::vector<daemon::AuditEvent>> audit_events(const std::string& id, int64_t after,
                                                       size_t limit) override;
  Result<daemon::AuditVerdict> audit_verify(const std::string& id) override;
  daemon::Health health() override;
  std::string metrics() override;
  nlohmann::json doctor() override;
  Result<daemon::NodeInfo> node_info() override { return inner_.node_info(); }
  Result<daemon::DrainResult> drain() override;

 private:
  enum class Missing { kSandbox, kAuditLog };
  // The sandbox's info if the principal may see it; otherwise the service's own "unknown
  // sandbox" error for `id`.
  Result<daemon::SandboxInfo> visible(const std::string& id, Missing how);
  // The snapshot `snap` (id or name) if it belongs to a profile the principal may use;
  // otherwise the daemon's own "unknown snapshot" error. A name is looked up among the
  // principal's profiles only (names are unique per profile, not across profiles).
  // A snapshot by id, or by name: among `sandbox`'s snapshots where one is given (rollback,
  // diff --since), else a name unique among the snapshots this token sees.
  Result<daemon::SnapshotInfo> visible_snapshot(const std::string& snap,
                                                const std::string& sandbox = "");

  daemon::SandboxService& inner_;
  const Principal& principal_;
};

}  // namespace space::api
