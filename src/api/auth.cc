// Authentication, authorization and profile scoping of API requests (see auth.h).
#include "api/auth.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "api/views.h"
#include "common/clock.h"
#include "common/units.h"

namespace space::api {
namespace {

using nlohmann::json;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "(none)" : out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// 1 to 64 characters: letters, digits and " _.-@:/+", starting with a letter or digit.
bool valid_token_name(std::string_view name) {
  if (name.empty() || name.size() > 64 || !std::isalnum(static_cast<unsigned char>(name[0])))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view(" _.-@:/+").find(c) != std::string_view::npos;
  });
}

// What the daemon answers for a sandbox or snapshot it never saw: a hidden one gets exactly
// this, so a token cannot tell the two apart.
std::unexpected<Error> unknown_sandbox(const std::string& id) {
  return fail(Code::kNotFound,
              "unknown sandbox " + id.substr(0, 80) + "; `space ls` lists sandboxes");
}
std::unexpected<Error> unknown_snapshot(const std::string& ref) {
  return fail(Code::kNotFound, "unknown snapshot " + ref.substr(0, 80) +
                                   "; `space snapshots ID` lists a sandbox's snapshots");
}

std::string profile_list(const std::set<std::string>& profiles) {
  std::string out;
  for (const auto& p : profiles) out += (out.empty() ? "" : ", ") + p;
  return out + (out.empty() ? "" : ", or ") + "\"*\" for every profile";
}

// A JSON array of strings named `key`, non-empty, deduplicated.
Result<std::vector<std::string>> string_array(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_array() || it->empty())
    return fail(Code::kInvalidArgument,
                std::string("\"") + key + "\" must be a non-empty array of names");
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string())
      return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must hold strings only");
    std::string s = v.get<std::string>();
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kNone:
      return "none";
    case Op::kRead:
      return "read";
    case Op::kCreate:
      return "create";
    case Op::kExec:
      return "exec";
    case Op::kFiles:
      return "files";
    case Op::kLifecycle:
      return "lifecycle";
    case Op::kImages:
      return "images";
    case Op::kAdmin:
      return "admin";
  }
  return "none";
}

const std::vector<Op>& all_ops() {
  static const std::vector<Op> kAll = {Op::kRead,      Op::kCreate, Op::kExec, Op::kFiles,
                                       Op::kLifecycle, Op::kImages, Op::kAdmin};
  return kAll;
}

std::optional<Op> parse_op(std::string_view name) {
  for (Op op : all_ops())
    if (op_name(op) == name) return op;
  return std::nullopt;
}

std::string op_list() {
  std::string out;
  for (Op op : all_ops()) out += (out.empty() ? "" : ", ") + std::string(op_name(op));
  return out;
}

// --- principals -----------------------------------------------------------------------------

bool Principal::allows_op(Op op) const {
  if (root || op == Op::kNone) return true;
  auto name = op_name(op);
  return std::find(token.ops.begin(), token.ops.end(), name) != token.ops.end();
}

bool Principal::all_profiles() const {
  return root ||
         std::find(token.profiles.begin(), token.profiles.end(), "*") != token.profiles.end();
}

bool Principal::allows_profile(std::string_view profile) const {
  if (all_profiles()) return true;
  return std::find(token.profiles.begin(), token.profiles.end(), profile) != token.profiles.end();
}

std::string Principal::describe() const {
  if (root) return "root";
  return "token " + token.id + " (" + token.name + ")" + (forwarded ? " via a gateway" : "");
}

Result<Principal> forwarded_principal(std::string_view header,
                                      const std::set<std::string>& profiles, double now) {
  auto bad = [](std::string why) {
    return fail(Code::kUnauthenticated,
                std::string(kPrincipalHeader) + " is not valid: " + std::move(why) +
                    " (expected {\"id\", \"name\", \"profiles\": [...], \"ops\": [...], "
                    "\"expires_at\"})");
  };
  if (header.size() > 8192) return bad("longer than 8 KiB");
  json j = json::parse(header, nullptr, false);
  if (!j.is_object()) return bad("not a JSON object");
  Principal p;
  p.forwarded = true;
  daemon::TokenRecord& t = p.token;
  if (!j.contains("id") || !j["id"].is_string() || !daemon::is_token_id(j["id"].get<std::string>()))
    return bad("\"id\" is not a token id (12 hex digits)");
  t.id = j["id"].get<std::string>();
  t.name = j.value("name", std::string());
  if (!j.contains("expires_at") || !j["expires_at"].is_number()) return bad("no \"expires_at\"");
  t.expires_at = j["expires_at"].get<double>();
  for (const char* key : {"profiles", "ops"}) {
    if (!j.contains(key) || !j[key].is_array() || j[key].empty())
      return bad(std::string("\"") + key + "\" is not a non-empty array");
    for (auto& v : j[key]) {
      if (!v.is_string()) return bad(std::string("\"") + key + "\" holds a non-string");
      std::string s = v.get<std::string>();
      if (std::string_view(key) == "ops") {
        if (!parse_op(s) || s == "none")
          return bad("unknown operation \"" + s.substr(0, 32) + "\"");
        t.ops.push_back(s);
      } else {
        if (s != "*" && !profiles.count(s))
          return bad("profile \"" + s.substr(0, 64) + "\" is not configured on this node");
        t.profiles.push_back(s);
      }
    }
  }
  if (t.expired(now))
    return fail(Code::kUnauthenticated, "API token " + t.id + " (" + t.name + ") expired at " +
                                            rfc3339(t.expires_at) + "; create a new one");
  return p;
}

Result<Principal> authenticate(Transport transport, std::string_view authorization,
                               daemon::TokenStore* tokens, double now) {
  authorization = trim(authorization);
  if (authorization.empty()) {
    if (transport == Transport::kUnix || transport == Transport::kMutualTls)
      return Principal{.root = true};
    return fail(Code::kUnauthenticated,
                "this API listener needs an API token: send \"Authorization: Bearer spt_...\" "
                "(`space token create` makes one; the CLI sends $SPACE_TOKEN)");
  }
  size_t sp = authorization.find_first_of(" \t");
  std::string_view scheme = authorization.substr(0, sp);
  std::string_view credentials =
      sp == std::string_view::npos ? std::string_view() : trim(authorization.substr(sp));
  // The header itself is never repeated in a message: it may be someone's secret.
  if (!iequals(scheme, "Bearer"))
    return fail(Code::kUnauthenticated,
                "unsupported Authorization scheme; spaced takes \"Authorization: Bearer spt_...\"");
  if (tokens == nullptr) return fail(Code::kUnauthenticated, "this spaced has no API token store");
  daemon::TokenRecord rec = TRY(tokens->authenticate(credentials, now));
  return Principal{.root = false, .token = std::move(rec)};
}

Result<void> authorize(const Principal& p, Op op, std::string_view route) {
  if (p.allows_op(op)) return {};
  return fail(Code::kPermissionDenied, p.describe() + " may not " + std::string(route) +
                                           ": that needs the \"" + std::string(op_name(op)) +
                                           "\" operation, and the token has " + join(p.token.ops));
}

// --- streams --------------------------------------------------------------------------------

Result<void> StreamAuth::check() {
  if (!watching()) return {};
  std::lock_guard lock(mu_);
  if (failed_) return fail(*failed_);
  const daemon::TokenRecord& t = principal_->token;
  double now = now_s();
  Result<void> ok;
  if (t.expired(now)) {
    ok = fail(Code::kUnauthenticated, "API token " + t.id + " (" + t.name + ") expired at " +
                                          rfc3339(t.expires_at) +
                                          "; create a new one with `space token create`");
  } else if (principal_->forwarded) {
    // Not in this node's store: the gateway that forwarded it ends the stream on revocation.
  } else if (auto at = std::chrono::steady_clock::now(); at >= next_store_check_) {
    next_store_check_ = at + interval_;
    if (tokens_ == nullptr) {
      ok = fail(Code::kUnauthenticated, "this spaced has no API token store");
    } else {
      ok = tokens_->check_still_valid(t.id, now);
    }
  }
  if (!ok) {
    failed_ = ok.error();
    spdlog::info("api: ending a stream of {}: {}", principal_->describe(), failed_->message());
  }
  return ok;
}

// --- token requests -------------------------------------------------------------------------

Result<TokenRequest> parse_token_request(const json& body, const std::set<std::string>& profiles) {
  if (!body.is_object())
    return fail(Code::kInvalidArgument,
                "the body must be a JSON object, e.g. {\"name\": \"ci\", \"profiles\": "
                "[\"test\"], \"ops\": [\"read\", \"exec\"], \"ttl\": \"24h\"}");
  for (const auto& [k, v] : body.items()) {
    if (k != "name" && k != "profiles" && k != "ops" && k != "ttl")
      return fail(Code::kInvalidArgument, "unknown key \"" + k.substr(0, 64) +
                                              "\"; a token request has name, profiles, ops "
                                              "and ttl");
  }
  TokenRequest req;
  auto name = body.find("name");
  if (name == body.end() || !name->is_string() || !valid_token_name(name->get<std::string>()))
    return fail(Code::kInvalidArgument,
                "\"name\" must be 1 to 64 characters (letters, digits, \" _.-@:/+\"), starting "
                "with a letter or digit, e.g. \"ci-runner\"");
  req.name = name->get<std::string>();

  std::vector<std::string> ps = TRY(string_array(body, "profiles"));
  for (const auto& p : ps) {
    if (p != "*" && !profiles.count(p))
      return fail(Code::kInvalidArgument, "unknown profile \"" + p.substr(0, 64) +
                                              "\"; valid profiles: " + profile_list(profiles));
  }
  if (std::find(ps.begin(), ps.end(), "*") != ps.end()) ps = {"*"};
  std::sort(ps.begin(), ps.end());
  req.profiles = std::move(ps);

  std::vector<std::string> os = TRY(string_array(body, "ops"));
  for (const auto& o : os) {
    if (!parse_op(o))
      return fail(Code::kInvalidArgument,
                  "unknown operation \"" + o.substr(0, 64) + "\"; valid operations: " + op_list());
  }
  for (Op op : all_ops())
    if (std::find(os.begin(), os.end(), op_name(op)) != os.end()) req.ops.emplace_back(op_name(op));

  auto ttl = body.find("ttl");
  const std::string ttl_hint =
      "\"ttl\" is required: how long the token is valid, e.g. \"24h\", \"30m\" or \"90d\" "
      "(at most 365 days)";
  if (ttl == body.end()) return fail(Code::kInvalidArgument, ttl_hint);
  if (ttl->is_string()) {
    auto v = parse_duration(ttl->get<std::string>());
    if (!v) return fail(Code::kInvalidArgument, v.error().message() + "; " + ttl_hint);
    req.ttl_s = *v;
  } else if (ttl->is_number()) {
    req.ttl_s = ttl->get<double>();
  } else {
    return fail(Code::kInvalidArgument, ttl_hint);
  }
  if (!(req.ttl_s > 0) || req.ttl_s > kMaxTokenTtl)
    return fail(Code::kInvalidArgument, "\"ttl\" must be greater than 0 and at most 365 days");
  return req;
}

bool covers(const Principal& p, const std::vector<std::string>& profiles,
            const std::vector<std::string>& ops) {
  if (p.root) return true;
  for (const auto& profile : profiles) {
    if (profile == "*" ? !p.all_profiles() : !p.allows_profile(profile)) return false;
  }
  for (const auto& o : ops) {
    auto op = parse_op(o);
    if (!op || !p.allows_op(*op)) return false;
  }
  return true;
}

Result<void> check_can_issue(const Principal& p, const TokenRequest& req, double now) {
  if (p.root) return {};
  if (!covers(p, req.profiles, req.ops))
    return fail(Code::kPermissionDenied,
                p.describe() + " may only create tokens within its own scope (profiles " +
                    join(p.token.profiles) + "; operations " + join(p.token.ops) + ")");
  if (now + req.ttl_s > p.token.expires_at)
    return fail(Code::kPermissionDenied,
                p.describe() + " expires at " + rfc3339(p.token.expires_at) +
                    "; a token it creates may not outlive it (ttl at most " +
                    format_duration(std::max(0.0, p.token.expires_at - now)) + ")");
  return {};
}

json token_json(const daemon::TokenRecord& r, double now) {
  auto time_or_null = [](const std::optional<double>& t) {
    return t ? json(rfc3339(*t)) : json(nullptr);
  };
  return {{"id", r.id},
          {"name", r.name},
          {"profiles", r.profiles},
          {"ops", r.ops},
          {"created_at", rfc3339(r.created_at)},
          {"expires_at", rfc3339(r.expires_at)},
          {"revoked_at", time_or_null(r.revoked_at)},
          {"last_used_at", time_or_null(r.last_used_at)},
          {"state", r.revoked()      ? "revoked"
                    : r.expired(now) ? "expired"
                                     : "active"}};
}

// --- the scoped service ---------------------------------------------------------------------

Result<daemon::SandboxInfo> ScopedService::visible(const std::string& id, Missing how) {
  auto info = inner_.inspect(id);
  if (info) {
    if (principal_.allows_profile(info->profile)) return info;
  } else if (info.error().code() != Code::kNotFound) {
    return info;
  } else if (how == Missing::kAuditLog) {
    // A destroyed sandbox whose record was pruned still has its audit log; the first event
    // (sandbox.create) names its profile.
    auto events = inner_.audit_events(id, 0, 1);
    if (events && !events->empty()) {
      json data = audit_data(events->front());
      std::string profile = data.is_object() ? data.value("profile", "") : "";
      if (!profile.empty() && principal_.allows_profile(profile))
        return daemon::SandboxInfo{.id = id, .profile = profile};
    }
  }
  // Exactly what the daemon answers for an id it never saw.
  if (how == Missing::kAuditLog)
    return fail(Code::kNotFound, "no sandbox " + id + " (and no audit log for it)");
  return unknown_sandbox(id);
}

Result<daemon::SnapshotInfo> ScopedService::visible_snapshot(const std::string& snap,
                                                             const std::string& sandbox) {
  if (snap.starts_with("snap_")) {
    auto info = inner_.get_snapshot(snap);
    if (info) {
      if (principal_.allows_profile(info->profile)) return info;
    } else if (info.error().code() != Code::kNotFound) {
      return info;
    }
    return unknown_snapshot(snap);
  }
  // A name belongs to its sandbox; snapshots of profiles this token may not use are neither
  // found nor named in an error.
  std::vector<daemon::SnapshotInfo> named;
  for (auto& s : TRY(inner_.all_snapshots()))
    if (s.name == snap && principal_.allows_profile(s.profile)) named.push_back(std::move(s));
  if (!sandbox.empty()) {
    for (auto& s : named)
      if (s.sandbox == sandbox) return std::move(s);
    if (named.empty()) return unknown_snapshot(snap);
    return fail(Code::kNotFound,
                "sandbox " + sandbox + " has no snapshot named \"" + snap.substr(0, 64) +
                    "\"; a snapshot's name belongs to its sandbox (" + named.front().sandbox +
                    " has one: to use another sandbox's snapshot, give its id, " +
                    named.front().id + ")");
  }
  if (named.empty()) return unknown_snapshot(snap);
  if (named.size() > 1)
    return fail(Code::kInvalidArgument, std::to_string(named.size()) + " snapshots are named \"" +
                                            snap.substr(0, 64) + "\" (" + named[0].id + " of " +
                                            named[0].sandbox + ", " + named[1].id + " of " +
                                            named[1].sandbox + (named.size() > 2 ? ", ..." : "") +
                                            "); give the one you mean by its id");
  return std::move(named.front());
}

Result<daemon::SandboxInfo> ScopedService::create(const daemon::CreateRequest& req) {
  if (!principal_.allows_profile(req.profile))
    return fail(Code::kPermissionDenied, principal_.describe() + " may not use profile " +
                                             req.profile.substr(0, 64) + " (it is limited to " +
                                             join(principal_.token.profiles) + ")");
  return inner_.create(req);
}

Result<std::vector<daemon::SandboxInfo>> ScopedService::list() {
  std::vector<daemon::SandboxInfo> all = TRY(inner_.list());
  std::vector<daemon::SandboxInfo> out;
  for (auto& s : all)
    if (principal_.allows_profile(s.profile)) out.push_back(std::move(s));
  return out;
}

Result<daemon::SandboxInfo> ScopedService::inspect(const std::string& id) {
  return visible(id, Missing::kSandbox);
}

Result<void> ScopedService::destroy(const std::string& id, bool force, bool wait) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.destroy(id, force, wait);
}

Result<std::unique_ptr<daemon::ExecSession>> ScopedService::exec(const std::string& id,
                                                                 const daemon::ExecRequest& req) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.exec(id, req);
}

Result<std::vector<daemon::ProcessInfo>> ScopedService::processes(const std::string& id) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.processes(id);
}

Result<void> ScopedService::kill(const std::string& id, int pid, int sig) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.kill(id, pid, sig);
}

Result<std::shared_ptr<daemon::ExecLog>> ScopedService::exec_log(const std::string& id, int pid) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.exec_log(id, pid);
}

Result<daemon::FileStat> ScopedService::stat(const std::string& id, const std::string& path) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.stat(id, path);
}

Result<UniqueFd> ScopedService::connect_port(const std::string& id, uint16_t port) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.connect_port(id, port);
}

Result<daemon::SandboxInfo> ScopedService::set_timeout(const std::string& id, double timeout_s) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.set_timeout(id, timeout_s);
}

Result<std::vector<daemon::DirEntry>> ScopedService::list_dir(const std::string& id,
                                                              const std::string& path) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.list_dir(id, path);
}

Result<void> ScopedService::read_file(const std::string& id, const std::string& path,
                                      const daemon::ChunkSink& sink) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.read_file(id, path, sink);
}

Result<void> ScopedService::read_tar(const std::string& id, const std::string& path,
                                     const daemon::ChunkSink& sink) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.read_tar(id, path, sink);
}

Result<void> ScopedService::write_file(const std::string& id, const std::string& path,
                                       uint32_t mode, const daemon::ChunkSource& source,
                                       bool parents) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.write_file(id, path, mode, source, parents);
}

Result<void> ScopedService::write_tar(const std::string& id, const std::string& path,
                                      const daemon::ChunkSource& source) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.write_tar(id, path, source);
}

Result<void> ScopedService::remove(const std::string& id, const std::string& path, bool recursive) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.remove(id, path, recursive);
}

Result<daemon::Diff> ScopedService::diff(const std::string& id) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.diff(id);
}

Result<void> ScopedService::pause(const std::string& id) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.pause(id);
}

Result<void> ScopedService::resume(const std::string& id) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.resume(id);
}

Result<daemon::SnapshotInfo> ScopedService::snapshot(const std::string& id,
                                                     const daemon::SnapshotRequest& req) {
  TRY_VOID(visible(id, Missing::kSandbox));
  return inner_.snapshot(id, req);
}

Result<std::vector<daemon::SnapshotInfo>> ScopedService::list_snapshots(const std::string& id) {
  auto keep_visible = [this](std::vector<daemon::SnapshotInfo> list) {
    std::erase_if(list, [this](const daemon::SnapshotInfo& s) {
      return !principal_.allows_profile(s.profile);
    });
    return list;
  };
  auto info = inner_.inspect(id);
  if (info) {
    if (!principal_.allows_profile(info->profile)) return unknown_sandbox(id);
    return keep_visible(TRY(inner_.list_snapshots(id)));
  }
  if (info.error().code() != Code::kNotFound) return fail(std::move(info.error()));
  // A destroyed sandbox whose record was pruned: its snapshots outlive it and name its profile.
  auto list = inner_.list_snapshots(id);
  if (list && !list->empty() && principal_.allows_profile(list->front().profile))
    return keep_visible(std::move(*list));
  return unknown_sandbox(id);
}

Result<std::vector<daemon::SnapshotInfo>> ScopedService::all_snapshots() {
  std::vector<daemon::SnapshotInfo> all = TRY(inner_.all_snapshots());
  std::erase_if(
      all, [this](const daemon::SnapshotInfo& s) { return !principal_.allows_profile(s.profile); });
  return all;
}

Result<daemon::SnapshotInfo> ScopedService::get_snapshot(const std::string& snap) {
  return visible_snapshot(snap);
}

Result<void> ScopedService::delete_snapshot(const std::string& snap) {
  daemon::SnapshotInfo s = TRY(visible_snapshot(snap));
  return inner_.delete_snapshot(s.id);
}

Result<daemon::SandboxInfo> ScopedService::rollback(const std::string& id,
                                                    const std::string& snap) {
  TRY_VOID(visible(id, Missing::kSandbox));
  daemon::SnapshotInfo s = TRY(visible_snapshot(snap, id));
  return inner_.rollback(id, s.id);
}

Result<daemon::SandboxInfo> ScopedService::restore(const std::string& snap,
                                                   const std::optional<std::string>& profile) {
  // A visible snapshot is of a profile this token may use, so it may create there; a profile
  // named explicitly must be one too (the daemon then refuses any but the snapshot's own).
  daemon::SnapshotInfo s = TRY(visible_snapshot(snap));
  if (profile && !principal_.allows_profile(*profile))
    return fail(Code::kPermissionDenied, principal_.describe() + " may not use profile " +
                                             profile->substr(0, 64) + " (it is limited to " +
                                             join(principal_.token.profiles) + ")");
  return inner_.restore(s.id, profile);
}

Result<daemon::Diff> ScopedService::diff_since(const std::string& id, const std::string& snap) {
  TRY_VOID(visible(id, Missing::kSandbox));
  daemon::SnapshotInfo s = TRY(visible_snapshot(snap, id));
  return inner_.diff_since(id, s.id);
}

Result<std::vector<daemon::AuditEvent>> ScopedService::audit_events(const std::string& id,
                                                                    int64_t after, size_t limit) {
  TRY_VOID(visible(id, Missing::kAuditLog));
  return inner_.audit_events(id, after, limit);
}

Result<daemon::AuditVerdict> ScopedService::audit_verify(const std::string& id) {
  TRY_VOID(visible(id, Missing::kAuditLog));
  return inner_.audit_verify(id);
}

// Images and the daemon itself are not per profile: the route's operation is the whole check.
Result<daemon::ImageInfo> ScopedService::import_image(const std::string& name,
                                                      const daemon::ChunkSource& source) {
  return inner_.import_image(name, source);
}
Result<daemon::ImageInfo> ScopedService::build_image(
    const std::string& name, const daemon::BuildRequest& req, const daemon::ChunkSource& context,
    const std::function<void(const daemon::BuildEvent&)>& progress) {
  if (req.profile.empty() || !principal_.allows_profile(req.profile))
    return fail(Code::kPermissionDenied,
                principal_.describe() + " may not build with profile " +
                    (req.profile.empty() ? "(the default)" : req.profile.substr(0, 64)) +
                    " (it is limited to " + join(principal_.token.profiles) +
                    "); name one of those with profile=");
  return inner_.build_image(name, req, context, progress);
}
Result<std::vector<daemon::ImageInfo>> ScopedService::list_images() { return inner_.list_images(); }
Result<void> ScopedService::remove_image(const std::string& name) {
  return inner_.remove_image(name);
}
daemon::Health ScopedService::health() {
  // The sandbox count, too, is of the sandboxes this token can see.
  daemon::Health h = inner_.health();
  if (auto l = list(); l) h.sandboxes = l->size();
  return h;
}
std::string ScopedService::metrics() { return inner_.metrics(); }
json ScopedService::doctor() { return inner_.doctor(); }
Result<daemon::DrainResult> ScopedService::drain() {
  // A drain ends sandboxes of every profile: only a caller who sees them all may ask.
  return fail(Code::kPermissionDenied,
              principal_.describe() +
                  " is limited to some profiles; draining a node ends the sandboxes of every "
                  "profile and needs a token for all of them (\"*\")");
}

}  // namespace space::api
