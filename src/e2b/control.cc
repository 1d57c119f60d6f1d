// E2B's control plane (the REST API at E2B_API_URL) over the SandboxService: the routes E2B's
// SDKs call for a sandbox's lifecycle (create, get, list, kill, timeout, pause, connect/resume,
// metrics, snapshots, fork), in E2B's shapes, and a clear error naming SPACE's equivalent for
// the parts of E2B's API that SPACE does not serve (template builds, teams, volumes, secrets,
// network updates). docs/e2b.md has the table.
//
// E2B's words in SPACE's terms: a template is a SPACE image (Door::image_for) or a snapshot
// (Sandbox.create(snapshotId) restores it); metadata is CreateRequest::metadata; autoPause is
// CreateRequest::pause_on_timeout; a paused sandbox is a SPACE paused sandbox (frozen, kept
// with its memory) and connect resumes it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "common/clock.h"
#include "e2b/handlers.h"

namespace space::e2b {

namespace {

using nlohmann::json;

constexpr double kDefaultTimeoutS = 300;  // E2B's default lifetime
constexpr double kMaxTimeoutS = 7 * 24 * 3600;
constexpr size_t kDefaultPage = 100, kMaxPage = 100;  // E2B's list limits
constexpr int kMaxForks = 16;

Result<json> read_object(api::Exchange& ex) {
  auto body = TRY(ex.read_json(json::object()));
  if (!body.is_object()) return fail(Code::kInvalidArgument, "the body must be a JSON object");
  return body;
}

// The field `name` of `body` as seconds of a lifetime; `fallback` when absent or null.
Result<double> timeout_field(const json& body, double fallback, const char* name = "timeout") {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return fallback;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0)
    return fail(Code::kInvalidArgument,
                std::string(name) + " must be a positive number of seconds");
  double t = it->get<double>();
  if (t > kMaxTimeoutS)
    return fail(Code::kInvalidArgument, std::string(name) + " " + std::to_string(int64_t(t)) +
                                            " s is over a week; SPACE keeps a sandbox at most "
                                            "7 days through the E2B door");
  return t;
}

bool flag_field(const json& body, const char* name) {
  auto it = body.find(name);
  return it != body.end() && it->is_boolean() && it->get<bool>();
}

// The profile a caller's sandboxes are made in: its token's only profile, else the door's.
std::string profile_for(const Call& call) {
  const auto& profiles = call.principal->token.profiles;
  if (!call.principal->root && profiles.size() == 1 && profiles[0] != "*") return profiles[0];
  return call.door.options().profile;
}

std::string state_of(const daemon::SandboxInfo& info) {
  return info.state == daemon::SandboxState::kPaused ? "paused" : "running";
}

// E2B's Sandbox: what create, connect and fork answer.
json created_json(const daemon::SandboxInfo& info, const Call& call,
                  const std::string& template_id) {
  const Door& door = call.door;
  return {{"sandboxID", info.id},
          {"templateID", template_id},
          {"clientID", "space"},
          {"envdVersion", std::string(kEnvdVersion)},
          {"envdAccessToken", door.envd_token(info.id, call.principal->token_id())},
          // @e2b/code-interpreter's context calls send only this one (door.cc takes either).
          {"trafficAccessToken", door.envd_token(info.id, call.principal->token_id())},
          {"domain", door.options().domain.empty() ? json(nullptr) : json(door.options().domain)}};
}

// A live sandbox the caller may see (404 for a destroyed one, as E2B answers).
Result<daemon::SandboxInfo> live(Call& call) {
  daemon::SandboxInfo info = TRY(call.service.inspect(call.sandbox_id));
  if (info.destroyed_at)
    return fail(Code::kNotFound,
                "sandbox " + call.sandbox_id + " was destroyed (" + info.reason + ")");
  return info;
}

// --- query strings and pagination ----------------------------------------------------------

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoding that keeps a '%' not followed by two hex digits; `plus`: '+' is a space.
std::string unescape(std::string_view s, bool plus) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += char(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else if (plus && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

// E2B's metadata filter: "k1=v1&k2=v2", each key and value URL-encoded inside the (already
// decoded once) query parameter, as the SDKs send it (the JS SDK encodes each with
// encodeURIComponent and joins them as a form, so they are decoded twice).
Result<std::map<std::string, std::string>> metadata_filter(std::string_view q) {
  std::map<std::string, std::string> want;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view item = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return fail(Code::kInvalidArgument,
                  "metadata filter \"" + std::string(item.substr(0, 64)) +
                      "\" is not key=value (the filter is \"k1=v1&k2=v2\", each URL-encoded)");
    want[unescape(unescape(item.substr(0, eq), true), false)] =
        unescape(unescape(item.substr(eq + 1), true), false);
  }
  return want;
}

Result<size_t> limit_param(const api::Target& t) {
  auto it = t.query.find("limit");
  if (it == t.query.end() || it->second.empty()) return kDefaultPage;
  const std::string& s = it->second;
  size_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9' || n > kMaxPage) return fail(Code::kInvalidArgument, "bad limit");
    n = n * 10 + size_t(c - '0');
  }
  if (n < 1 || n > kMaxPage)
    return fail(Code::kInvalidArgument,
                "limit must be 1 to " + std::to_string(kMaxPage) + ", not " + s.substr(0, 20));
  return n;
}

// A position in a list ordered by (created_at, id): the cursor of X-Next-Token.
struct Cursor {
  int64_t micros = 0;
  std::string id;
  auto operator<=>(const Cursor&) const = default;
};

Cursor cursor_of(double created_at, const std::string& id) {
  return {int64_t(std::llround(created_at * 1e6)), id};
}

std::string token_of(const Cursor& c) { return std::to_string(c.micros) + "." + c.id; }

Result<std::optional<Cursor>> cursor_param(const api::Target& t) {
  auto it = t.query.find("nextToken");
  if (it == t.query.end() || it->second.empty()) return std::optional<Cursor>();
  const std::string& s = it->second;
  size_t dot = s.find('.');
  Cursor c;
  bool ok = dot != std::string::npos && dot > 0 && dot < 20 && dot + 1 < s.size();
  for (size_t i = 0; ok && i < dot; ++i) {
    if (s[i] < '0' || s[i] > '9') ok = false;
    c.micros = c.micros * 10 + (s[i] - '0');
  }
  if (!ok)
    return fail(Code::kInvalidArgument,
                "nextToken \"" + s.substr(0, 64) +
                    "\" is not one this door gave (pass the X-Next-Token of the previous page)");
  c.id = s.substr(dot + 1);
  return std::optional<Cursor>(std::move(c));
}

// One page of `items` (sorted by `key`, newest first unless `ascending`): those after `after`,
// at most `limit`; the token of the next page, or "" when this is the last.
template <class T, class Key>
std::pair<std::vector<T>, std::string> page_of(std::vector<T> items, bool ascending,
                                               const std::optional<Cursor>& after, size_t limit,
                                               Key key) {
  std::sort(items.begin(), items.end(),
            [&](const T& a, const T& b) { return ascending ? key(a) < key(b) : key(b) < key(a); });
  auto first = items.begin();
  if (after)
    first = std::find_if(items.begin(), items.end(),
                         [&](const T& x) { return ascending ? *after < key(x) : key(x) < *after; });
  std::vector<T> page;
  std::string next;
  for (auto it = first; it != items.end(); ++it) {
    if (page.size() == limit) {
      next = token_of(key(page.back()));
      break;
    }
    page.push_back(*it);
  }
  return {std::move(page), std::move(next)};
}

Result<void> respond_page(api::Exchange& ex, const json& items, const std::string& next) {
  api::Headers headers;
  if (!next.empty()) headers.emplace_back("X-Next-Token", next);
  return ex.respond(http::status::ok, "application/json", api::json_text(items) + "\n", headers);
}

// --- sandboxes -----------------------------------------------------------------------------

// A snapshot `template_id` names, if it names one the caller may see: E2B's SDKs create a
// sandbox from a snapshot by passing its id (or name) as the template.
std::optional<daemon::SnapshotInfo> snapshot_template(Call& call, const std::string& template_id) {
  if (call.door.options().templates.count(template_id)) return std::nullopt;
  auto snap = call.service.get_snapshot(template_id);
  if (!snap) return std::nullopt;
  return std::move(*snap);
}

Result<std::map<std::string, std::string>> metadata_field(const json& body) {
  std::map<std::string, std::string> out;
  auto it = body.find("metadata");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_object())
    return fail(Code::kInvalidArgument, "metadata must be an object of strings");
  for (auto& [k, v] : it->items()) {
    if (!v.is_string())
      return fail(Code::kInvalidArgument,
                  "metadata: the value of \"" + k.substr(0, 64) + "\" must be a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

// What of E2B's NewSandbox SPACE does not do: refused, saying what SPACE has instead.
Result<void> refuse_unsupported(const json& body) {
  auto set = [&](const char* k) {  // present, and not null, {} or []
    auto it = body.find(k);
    return it != body.end() && !it->is_null() && !(it->is_structured() && it->empty());
  };
  if (set("network"))
    return fail(Code::kUnimplemented,
                "network rules per sandbox are not served through the E2B door: SPACE's egress "
                "allowlist is the profile's (the config's \"profiles\"; docs/egress.md), which the "
                "door's profile or your token's profile sets");
  if (auto it = body.find("allow_internet_access");
      it != body.end() && it->is_boolean() && !it->get<bool>())
    return fail(Code::kUnimplemented,
                "allow_internet_access: false is not served through the E2B door: make the "
                "sandbox in a SPACE profile whose allowlist is empty (docs/egress.md)");
  if (set("mcp"))
    return fail(Code::kUnimplemented,
                "mcp is not served through the E2B door: SPACE's MCP server is `space mcp`");
  if (set("volumeMounts"))
    return fail(Code::kUnimplemented,
                "volumes are not served through the E2B door: copy files in with the files API "
                "or `space cp`, or bake them into an image (`space image import`)");
  if (set("iam"))
    return fail(Code::kUnimplemented,
                "iam workload tokens are not served through the E2B door: SPACE grants "
                "credentials as secrets the egress gateway injects (docs/egress.md)");
  if (auto it = body.find("autoResume");
      it != body.end() && it->is_object() && it->value("enabled", false))
    return fail(Code::kUnimplemented,
                "autoResume is not served through the E2B door: a paused sandbox resumes on "
                "Sandbox.connect() (or `space resume`), not on traffic");
  return {};
}

Result<void> create(Call& call) {
  json body = TRY(read_object(call.ex));
  TRY_VOID(refuse_unsupported(body));
  std::string template_id = "base";
  if (auto it = body.find("templateID"); it != body.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>().empty())
      return fail(Code::kInvalidArgument, "templateID must be a template's name or id");
    template_id = it->get<std::string>();
  }
  const double timeout = TRY(timeout_field(body, kDefaultTimeoutS));
  daemon::CreateRequest req;
  req.metadata = TRY(metadata_field(body));
  req.pause_on_timeout = flag_field(body, "autoPause");
  if (auto it = body.find("envVars"); it != body.end() && !it->is_null()) {
    if (!it->is_object())
      return fail(Code::kInvalidArgument, "envVars must be an object of strings");
    for (auto& [k, v] : it->items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
        return fail(Code::kInvalidArgument,
                    "envVars: \"" + k + "\" must be a name without '=' with a string value");
      req.env.push_back(k + "=" + v.get<std::string>());
    }
  }
  if (auto snap = snapshot_template(call, template_id)) {
    // A new sandbox holding the snapshot's files, with the settings it was taken with.
    if (!req.env.empty() || !req.metadata.empty() || req.pause_on_timeout)
      return fail(Code::kInvalidArgument,
                  "templateID " + template_id + " is a snapshot (" + snap->id +
                      "): a sandbox made from it has the snapshot's environment and metadata; "
                      "leave out envs, metadata and onTimeout");
    daemon::SandboxInfo info = TRY(call.service.restore(snap->id, std::nullopt));
    if (auto t = call.service.set_timeout(info.id, timeout); !t) {
      (void)call.service.destroy(info.id, true, false);
      return fail(std::move(t.error()));
    }
    return call.ex.respond_json(http::status::created, created_json(info, call, template_id));
  }
  req.image = call.door.image_for(template_id);
  req.profile = profile_for(call);
  req.timeout_s = timeout;
  // As in E2B's sandboxes (envd adds E2B_SANDBOX_ID to what it starts).
  req.env.push_back("E2B_SANDBOX=true");
  daemon::SandboxInfo info = TRY(call.service.create(req));
  return call.ex.respond_json(http::status::created, created_json(info, call, template_id));
}

Result<void> get(Call& call) {
  daemon::SandboxInfo info = TRY(live(call));
  json j = sandbox_json(info, call.door);
  j["lifecycle"] = {{"onTimeout", info.pause_on_timeout ? "pause" : "kill"}, {"autoResume", false}};
  return call.ex.respond_json(http::status::ok, j);
}

Result<void> kill(Call& call) {
  TRY(live(call));
  TRY_VOID(call.service.destroy(call.sandbox_id, /*force=*/true, /*wait=*/true));
  return call.ex.respond_no_content();
}

Result<void> set_timeout(Call& call) {
  json body = TRY(read_object(call.ex));
  if (!body.contains("timeout"))
    return fail(Code::kInvalidArgument, "the body must be {\"timeout\": SECONDS}");
  double t = TRY(timeout_field(body, 0));
  TRY(live(call));
  TRY(call.service.set_timeout(call.sandbox_id, t));
  return call.ex.respond_no_content();
}

// POST /sandboxes/{id}/refreshes {"duration": S}: keeps it alive at least that long more.
Result<void> refresh(Call& call) {
  json body = TRY(read_object(call.ex));
  double t = TRY(timeout_field(body, 60, "duration"));
  daemon::SandboxInfo info = TRY(live(call));
  if (info.expires_at && *info.expires_at < now_s() + t)
    TRY(call.service.set_timeout(call.sandbox_id, t));
  return call.ex.respond_no_content();
}

Result<void> list_sandboxes(Call& call, bool v2) {
  const api::Target& t = call.ex.target();
  std::map<std::string, std::string> want;
  if (auto it = t.query.find("metadata"); it != t.query.end())
    want = TRY(metadata_filter(it->second));
  // E2B's v1 lists running sandboxes; v2 running and paused unless `state` says.
  bool running = true, paused = v2;
  if (auto it = t.query.find("state"); v2 && it != t.query.end() && !it->second.empty()) {
    running = paused = false;
    std::string_view s = it->second;
    while (!s.empty()) {
      size_t comma = s.find(',');
      std::string_view one = s.substr(0, comma);
      s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
      if (one == "running")
        running = true;
      else if (one == "paused")
        paused = true;
      else
        return fail(Code::kInvalidArgument,
                    "state \"" + std::string(one.substr(0, 32)) + "\" is not running or paused");
    }
  }
  std::string templ;
  if (auto it = t.query.find("template"); it != t.query.end()) templ = it->second;
  bool ascending = false;
  if (auto it = t.query.find("order"); it != t.query.end() && !it->second.empty()) {
    if (it->second != "asc" && it->second != "desc")
      return fail(Code::kInvalidArgument, "order must be asc or desc");
    ascending = it->second == "asc";
  }
  size_t limit = std::numeric_limits<size_t>::max();  // v1 has no pages
  std::optional<Cursor> after;
  if (v2) {
    limit = TRY(limit_param(t));
    after = TRY(cursor_param(t));
  }

  std::vector<daemon::SandboxInfo> matching;
  for (auto& info : TRY(call.service.list())) {
    if (info.destroyed_at) continue;
    bool is_paused = info.state == daemon::SandboxState::kPaused;
    if (is_paused ? !paused : !running) continue;
    if (!templ.empty() && info.image != templ && info.image != call.door.image_for(templ)) continue;
    bool ok = true;
    for (auto& [k, v] : want) {
      auto m = info.metadata.find(k);
      if (m == info.metadata.end() || m->second != v) ok = false;
    }
    if (ok) matching.push_back(std::move(info));
  }
  auto [page, next] =
      page_of(std::move(matching), ascending, after, limit,
              [](const daemon::SandboxInfo& i) { return cursor_of(i.created_at, i.id); });
  json out = json::array();
  for (const auto& info : page) out.push_back(sandbox_json(info, call.door));
  return respond_page(call.ex, out, next);
}

Result<void> list_v1(Call& call) { return list_sandboxes(call, false); }
Result<void> list_v2(Call& call) { return list_sandboxes(call, true); }

// POST /sandboxes/{id}/pause: 409 when it is paused already (the SDK's pause() answers false).
Result<void> pause(Call& call) {
  (void)TRY(read_object(call.ex));  // {"memory": bool}: SPACE's pause always keeps memory
  daemon::SandboxInfo info = TRY(live(call));
  if (info.state == daemon::SandboxState::kPaused)
    return fail(Code::kConflict, "sandbox " + info.id + " is already paused");
  TRY_VOID(call.service.pause(call.sandbox_id));
  return call.ex.respond_no_content();
}

// Resumes a paused sandbox; gives it `timeout` seconds more to live (a running one only gets
// more, never less: E2B's connect only extends). 201 if it was paused, 200 if it ran.
Result<void> connect_to(Call& call, double timeout, bool conflict_if_running) {
  daemon::SandboxInfo info = TRY(live(call));
  const bool was_paused = info.state == daemon::SandboxState::kPaused;
  if (!was_paused && conflict_if_running)
    return fail(Code::kConflict, "sandbox " + info.id + " is already running");
  if (was_paused) TRY_VOID(call.service.resume(call.sandbox_id));
  if (was_paused || (info.expires_at && *info.expires_at < now_s() + timeout))
    info = TRY(call.service.set_timeout(call.sandbox_id, timeout));
  return call.ex.respond_json(was_paused ? http::status::created : http::status::ok,
                              created_json(info, call, info.image));
}

// POST /v2/sandboxes/{id}/connect (and the older /sandboxes/{id}/connect).
Result<void> connect(Call& call) {
  json body = TRY(read_object(call.ex));
  if (auto it = body.find("memory"); it != body.end() && it->is_boolean() && !it->get<bool>())
    return fail(Code::kUnimplemented,
                "resuming without memory (onResume \"reboot\") is not served through the E2B "
                "door: a SPACE sandbox resumes where it was paused; to start afresh from its "
                "files, snapshot it and create a sandbox from the snapshot");
  return connect_to(call, TRY(timeout_field(body, kDefaultTimeoutS)), false);
}

// POST /sandboxes/{id}/resume (E2B's older API): 409 if it is running.
Result<void> resume(Call& call) {
  json body = TRY(read_object(call.ex));
  return connect_to(call, TRY(timeout_field(body, kDefaultTimeoutS)), true);
}

// GET /sandboxes/{id}/metrics: one sample, now (SPACE keeps no history of usage). CPU is the
// average since creation over the sandbox's CPUs; disk use is not measured (0).
Result<void> metrics(Call& call) {
  daemon::SandboxInfo info = TRY(live(call));
  json out = json::array();
  if (info.usage) {
    const double now = now_s();
    const double cpus = info.limits.cpus > 0 ? info.limits.cpus : 1;
    const double elapsed = std::max(now - info.created_at, 1e-3);
    double pct = double(info.usage->cpu_usage_ns) / 1e9 / elapsed / cpus * 100;
    pct = std::clamp(pct, 0.0, 100.0);
    out.push_back(
        {{"timestamp", rfc3339(now)},
         {"timestampUnix", int64_t(now)},
         {"cpuCount", int(std::ceil(cpus))},
         {"cpuUsedPct", std::round(pct * 100) / 100},
         {"memUsed", info.usage->memory_bytes},
         {"memTotal", info.usage->memory_limit ? info.usage->memory_limit : info.limits.memory},
         {"memCache", 0},
         {"diskUsed", 0},
         {"diskTotal", info.limits.disk}});
  }
  return call.ex.respond_json(http::status::ok, out);
}

// --- snapshots and forks -------------------------------------------------------------------

json snapshot_json(const daemon::SnapshotInfo& s) {
  json names = json::array();
  if (s.name) names.push_back(*s.name);
  return {{"snapshotID", s.id}, {"names", names}};
}

// POST /sandboxes/{id}/snapshots {"name"?}: a SPACE snapshot (docs/snapshots.md); the
// sandbox's processes are frozen while it is taken, then go on.
Result<void> create_snapshot(Call& call) {
  json body = TRY(read_object(call.ex));
  daemon::SnapshotRequest req;
  if (auto it = body.find("name"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return fail(Code::kInvalidArgument, "name must be a string");
    req.name = it->get<std::string>();
  }
  TRY(live(call));
  daemon::SnapshotInfo snap = TRY(call.service.snapshot(call.sandbox_id, req));
  return call.ex.respond_json(http::status::created, snapshot_json(snap));
}

// GET /snapshots?sandboxID=&name=&limit=&nextToken=: newest first.
Result<void> list_snapshots(Call& call) {
  const api::Target& t = call.ex.target();
  const size_t limit = TRY(limit_param(t));
  const auto after = TRY(cursor_param(t));
  std::string sandbox, name;
  if (auto it = t.query.find("sandboxID"); it != t.query.end()) sandbox = it->second;
  if (auto it = t.query.find("name"); it != t.query.end()) name = it->second;
  std::vector<daemon::SnapshotInfo> all;
  if (sandbox.empty())
    all = TRY(call.service.all_snapshots());
  else
    all = TRY(call.service.list_snapshots(sandbox));
  std::erase_if(all, [&](const daemon::SnapshotInfo& s) {
    return !name.empty() && s.name.value_or("") != name && s.id != name;
  });
  auto [page, next] =
      page_of(std::move(all), false, after, limit,
              [](const daemon::SnapshotInfo& s) { return cursor_of(s.created_at, s.id); });
  json out = json::array();
  for (const auto& s : page) out.push_back(snapshot_json(s));
  return respond_page(call.ex, out, next);
}

// DELETE /templates/{templateID}: the SDK's deleteSnapshot. Templates proper are images.
Result<void> delete_template(Call& call) {
  const std::string& id = call.ex.target().segments.at(1);  // /templates/{templateID}
  auto snap = call.service.get_snapshot(id);
  if (!snap) {
    if (snap.error().code() == Code::kNotFound && !call.door.options().templates.count(id))
      return fail(Code::kNotFound,
                  "no snapshot " + id.substr(0, 80) +
                      "; templates are SPACE images, removed with `space image rm NAME`");
    return fail(Code::kUnimplemented,
                "template " + id.substr(0, 80) +
                    " is a SPACE image: remove it with `space image rm NAME` (the E2B door "
                    "deletes snapshots only)");
  }
  TRY_VOID(call.service.delete_snapshot(snap->id));
  return call.ex.respond_no_content();
}

// POST /sandboxes/{id}/fork {"timeout"?, "count"?}: one snapshot of it (it goes on running),
// then `count` new sandboxes from that snapshot; each result is a sandbox or an error.
Result<void> fork(Call& call) {
  json body = TRY(read_object(call.ex));
  const double timeout = TRY(timeout_field(body, kDefaultTimeoutS));
  int count = 1;
  if (auto it = body.find("count"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxForks)
      return fail(Code::kInvalidArgument,
                  "count must be a whole number from 1 to " + std::to_string(kMaxForks));
    count = it->get<int>();
  }
  TRY(live(call));
  daemon::SnapshotInfo snap = TRY(call.service.snapshot(call.sandbox_id, {}));
  json out = json::array();
  for (int i = 0; i < count; ++i) {
    auto made = call.service.restore(snap.id, std::nullopt);
    if (made) {
      if (auto t = call.service.set_timeout(made->id, timeout); !t) {
        (void)call.service.destroy(made->id, true, false);
        made = fail(std::move(t.error()));
      }
    }
    if (made) {
      out.push_back({{"sandbox", created_json(*made, call, made->image)}});
    } else {
      out.push_back(
          {{"error", {{"code", status_for(made.error())}, {"message", made.error().message()}}}});
    }
  }
  // The forks hold their own copies of the files: the snapshot taken for them is not kept.
  (void)call.service.delete_snapshot(snap.id);
  return call.ex.respond_json(http::status::created, out);
}

// --- what is not served ----------------------------------------------------------------------

Result<void> no_templates(Call&) {
  return fail(Code::kUnimplemented,
              "template builds are not served through the E2B door: SPACE's templates are "
              "images (`space image import NAME ROOTFS.tar`, `space image ls`), mapped to "
              "templateIDs by the config's \"e2b\": {\"templates\": {...}} (docs/e2b.md)");
}
Result<void> no_teams(Call&) {
  return fail(Code::kUnimplemented,
              "teams are not served through the E2B door: SPACE scopes API tokens to profiles "
              "(`space token create`, docs/api-auth.md)");
}
Result<void> no_team_metrics(Call&) {
  return fail(Code::kUnimplemented,
              "team and all-sandbox metrics are not served through the E2B door: SPACE's are "
              "at GET /metrics on its own API (Prometheus text)");
}
Result<void> no_volumes(Call&) {
  return fail(Code::kUnimplemented,
              "volumes are not served through the E2B door: copy files with the sandbox's files "
              "API or `space cp`, or keep them in an image (`space image import`)");
}
Result<void> no_secrets(Call&) {
  return fail(Code::kUnimplemented,
              "secrets are not served through the E2B door: SPACE's secrets live in spaced's "
              "config and are injected by its egress gateway (docs/egress.md)");
}
Result<void> no_network(Call&) {
  return fail(Code::kUnimplemented,
              "changing a sandbox's network is not served through the E2B door: its egress "
              "allowlist is its SPACE profile's (docs/egress.md)");
}
Result<void> no_logs(Call& call) {
  return fail(Code::kUnimplemented,
              "sandbox logs are not served through the E2B door: SPACE's audit log has every "
              "command and process run (`space audit " +
                  call.sandbox_id + "`)");
}

}  // namespace

nlohmann::json sandbox_json(const daemon::SandboxInfo& info, const Door& door) {
  json metadata = json::object();
  for (const auto& [k, v] : info.metadata) metadata[k] = v;
  // A sandbox without a lifetime (SPACE's own, or one paused by its autoPause) says a week on.
  json j = {{"sandboxID", info.id},
            {"templateID", info.image},
            {"clientID", "space"},
            {"startedAt", rfc3339(info.created_at)},
            {"endAt", rfc3339(info.expires_at.value_or(now_s() + kMaxTimeoutS))},
            {"cpuCount", int(std::ceil(info.limits.cpus > 0 ? info.limits.cpus : 1))},
            {"memoryMB", int64_t(info.limits.memory >> 20)},
            {"diskSizeMB", int64_t(info.limits.disk >> 20)},
            {"metadata", metadata},
            {"state", state_of(info)},
            {"envdVersion", std::string(kEnvdVersion)}};
  if (!door.options().domain.empty()) j["domain"] = door.options().domain;
  return j;
}

const std::vector<ControlRoute>& control_routes() {
  using V = http::verb;
  using api::Op;
  // First match wins: fixed segments ("/templates/tags") before a {placeholder} in their place.
  static const std::vector<ControlRoute> routes = {
      {V::post, "/sandboxes", create, Op::kCreate},
      {V::post, "/v2/sandboxes", create, Op::kCreate},
      {V::get, "/sandboxes", list_v1, Op::kRead},
      {V::get, "/v2/sandboxes", list_v2, Op::kRead},
      {V::get, "/sandboxes/metrics", no_team_metrics, Op::kRead},
      {V::get, "/sandboxes/{sandboxID}", get, Op::kRead},
      {V::delete_, "/sandboxes/{sandboxID}", kill, Op::kLifecycle},
      {V::post, "/sandboxes/{sandboxID}/timeout", set_timeout, Op::kLifecycle},
      {V::post, "/sandboxes/{sandboxID}/refreshes", refresh, Op::kLifecycle},
      {V::post, "/sandboxes/{sandboxID}/pause", pause, Op::kLifecycle},
      {V::post, "/sandboxes/{sandboxID}/resume", resume, Op::kLifecycle},
      {V::post, "/sandboxes/{sandboxID}/connect", connect, Op::kLifecycle},
      {V::post, "/v2/sandboxes/{sandboxID}/connect", connect, Op::kLifecycle},
      {V::get, "/sandboxes/{sandboxID}/metrics", metrics, Op::kRead},
      {V::post, "/sandboxes/{sandboxID}/snapshots", create_snapshot, Op::kLifecycle},
      {V::get, "/snapshots", list_snapshots, Op::kRead},
      {V::post, "/sandboxes/{sandboxID}/fork", fork, Op::kCreate},
      {V::put, "/sandboxes/{sandboxID}/network", no_network, Op::kNone},
      {V::get, "/sandboxes/{sandboxID}/logs", no_logs, Op::kNone},
      {V::get, "/v2/sandboxes/{sandboxID}/logs", no_logs, Op::kNone},
      {V::delete_, "/templates/tags", no_templates, Op::kNone},
      {V::delete_, "/templates/{templateID}", delete_template, Op::kLifecycle},
      {V::get, "/templates", no_templates, Op::kNone},
      {V::post, "/templates", no_templates, Op::kNone},
      {V::post, "/v2/templates", no_templates, Op::kNone},
      {V::post, "/v3/templates", no_templates, Op::kNone},
      {V::post, "/templates/tags", no_templates, Op::kNone},
      {V::get, "/templates/aliases/{alias}", no_templates, Op::kNone},
      {V::get, "/templates/{templateID}", no_templates, Op::kNone},
      {V::post, "/templates/{templateID}", no_templates, Op::kNone},
      {V::patch, "/templates/{templateID}", no_templates, Op::kNone},
      {V::patch, "/v2/templates/{templateID}", no_templates, Op::kNone},
      {V::get, "/templates/{templateID}/tags", no_templates, Op::kNone},
      {V::get, "/templates/{templateID}/files/{hash}", no_templates, Op::kNone},
      {V::post, "/templates/{templateID}/builds/{buildID}", no_templates, Op::kNone},
      {V::post, "/v2/templates/{templateID}/builds/{buildID}", no_templates, Op::kNone},
      {V::get, "/templates/{templateID}/builds/{buildID}/status", no_templates, Op::kNone},
      {V::get, "/templates/{templateID}/builds/{buildID}/logs", no_templates, Op::kNone},
      {V::get, "/teams", no_teams, Op::kNone},
      {V::get, "/teams/{teamID}/metrics", no_team_metrics, Op::kNone},
      {V::get, "/teams/{teamID}/metrics/max", no_team_metrics, Op::kNone},
      {V::get, "/volumes", no_volumes, Op::kNone},
      {V::post, "/volumes", no_volumes, Op::kNone},
      {V::get, "/volumes/{volumeID}", no_volumes, Op::kNone},
      {V::delete_, "/volumes/{volumeID}", no_volumes, Op::kNone},
      {V::get, "/secrets", no_secrets, Op::kNone},
      {V::post, "/secrets", no_secrets, Op::kNone},
      {V::get, "/secrets/{secretID}", no_secrets, Op::kNone},
      {V::post, "/secrets/{secretID}", no_secrets, Op::kNone},
      {V::delete_, "/secrets/{secretID}", no_secrets, Op::kNone},
  };
  return routes;
}

}  // namespace space::e2b
