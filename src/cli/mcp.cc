// `space mcp`: a Model Context Protocol server on stdio (JSON-RPC 2.0, one message per line),
// exposing sandboxes as tools to an MCP client (Claude Desktop, an agent framework, the MCP
// SDKs). docs/mcp.md describes the tools; tests/integration/test_mcp.py drives it with the
// official TypeScript SDK's client. This file has the protocol, the tools' table and the
// sandbox, file and snapshot tools; mcp.h says where the others are.
//
// A session acts only on the sandboxes it created (and those restored from their snapshots),
// unless its operator names more (--sandbox ID, --all-sandboxes): see Scope in mcp.h. It owns
// the sandboxes it creates: when the client closes stdin (or the process gets
// SIGTERM/SIGINT/SIGHUP) they are destroyed, unless --keep. Each is also created with a lifetime
// (--timeout, default 1h), so a session killed with SIGKILL leaves nothing for long.
#include "cli/mcp.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/signals.h"
#include "common/base64.h"  // read_file and write_file: binary content
#include "common/utf8.h"

namespace space::cli {
namespace mcp {
namespace {

constexpr const char* kServerVersion = "0.1.0";
// Newest first; an initialize asking for another gets the newest.
constexpr const char* kProtocolVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                             "2024-11-05"};
constexpr size_t kMaxMessage = 64u << 20;  // one JSON-RPC message
constexpr size_t kMaxFileRead = 1u << 20;  // read_file

// JSON-RPC error codes.
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;

json text_content(std::string text) {
  return json::array({{{"type", "text"}, {"text", std::move(text)}}});
}

}  // namespace

// ---- tool results and arguments -------------------------------------------------------------

json tool_result(std::string text, json structured) {
  json r = {{"content", text_content(std::move(text))}, {"isError", false}};
  if (!structured.is_null()) r["structuredContent"] = std::move(structured);
  return r;
}

json tool_error(const Error& e) {
  return {{"content", text_content("error (" + std::string(code_name(e.code())) +
                                   "): " + for_model(e.message()))},
          {"isError", true}};
}

std::string printable(const std::string& s) {
  if (!invalid_utf8_at(s)) return s;
  return "[" + std::to_string(s.size()) + " bytes of binary output, not shown]";
}

Result<std::string> str_arg(const json& a, const char* key, bool required, std::string fallback) {
  if (!a.contains(key) || a[key].is_null()) {
    if (required) return fail(Code::kInvalidArgument, std::string("\"") + key + "\" is required");
    return fallback;
  }
  if (!a[key].is_string())
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must be a string");
  return a[key].get<std::string>();
}

Result<double> number_arg(const json& a, const char* key, double fallback, double lo, double hi) {
  if (!a.contains(key) || a[key].is_null()) return fallback;
  double v = a[key].is_number() ? a[key].get<double>() : NAN;
  if (!(v >= lo && v <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "from %g to %g", lo, hi);
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must be a number " + range);
  }
  return v;
}

Result<int> int_arg(const json& a, const char* key, int lo, int hi) {
  if (!a.contains(key) || a[key].is_null())
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" is required");
  const json& v = a[key];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    return fail(Code::kInvalidArgument, std::string("\"") + key +
                                            "\" must be a whole number from " + std::to_string(lo) +
                                            " to " + std::to_string(hi));
  return static_cast<int>(v.get<int64_t>());
}

Result<bool> bool_arg(const json& a, const char* key) {
  if (!a.contains(key) || a[key].is_null()) return false;
  if (!a[key].is_boolean())
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must be true or false");
  return a[key].get<bool>();
}

namespace {

// ---- sandboxes ------------------------------------------------------------------------------

// Makes the session own a sandbox it just made (created or restored).
void adopt(Session& s, const std::string& id) {
  s.scope.add_created(id);
  s.owned.push_back(id);
}

Result<std::string> create_sandbox(Session& s, const json& a) {
  SandboxFlags f = s.args.sandbox;
  if (a.contains("image")) f.image = TRY(str_arg(a, "image"));
  if (a.contains("memory")) f.memory = TRY(str_arg(a, "memory"));
  if (a.contains("timeout")) f.timeout = TRY(str_arg(a, "timeout"));
  if (f.timeout.empty()) f.timeout = kDefaultLifetime;
  json body = TRY(create_body(f));
  if (a.contains("cpus")) {
    if (!a["cpus"].is_number()) return fail(Code::kInvalidArgument, "\"cpus\" must be a number");
    body["cpus"] = a["cpus"];
  }
  if (a.contains("env")) {
    if (!a["env"].is_object()) return fail(Code::kInvalidArgument, "\"env\" must be an object");
    body["env"] = a["env"];
  }
  json sb = TRY(s.client.call("POST", "/v1/sandboxes", body));
  std::string id = sb.value("id", "");
  if (id.empty()) return fail(Code::kProtocol, "the daemon's create answer has no id");
  adopt(s, id);
  return id;
}

}  // namespace

Result<std::string> target_sandbox(Session& s, const json& a) {
  if (a.contains("sandbox_id") && !a["sandbox_id"].is_null()) {
    std::string id = TRY(str_arg(a, "sandbox_id"));
    TRY_VOID(s.scope.check(id));
    return id;
  }
  if (!s.owned.empty()) return s.owned.back();
  if (!s.scope.named().empty()) return s.scope.named().front();
  return create_sandbox(s, json::object());
}

namespace {

// ---- the tools ------------------------------------------------------------------------------

json schema(json properties, std::vector<std::string> required = {}) {
  json s = {
      {"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) s["required"] = required;
  return s;
}

const json kSandboxIdProp = {
    {"type", "string"},
    {"description",
     "The sandbox (from create_sandbox or list_sandboxes). Default: the newest sandbox of this "
     "session, created if there is none."}};

const json kPortProp = {{"type", "integer"},
                        {"minimum", 1},
                        {"maximum", 65535},
                        {"description", "A TCP port on 127.0.0.1 inside the sandbox"}};

json tool(const char* name, const char* title, const char* description, json input, bool read_only,
          bool destructive, bool idempotent, bool open_world) {
  return {{"name", name},
          {"title", title},
          {"description", description},
          {"inputSchema", std::move(input)},
          {"annotations",
           {{"title", title},
            {"readOnlyHint", read_only},
            {"destructiveHint", destructive},
            {"idempotentHint", idempotent},
            {"openWorldHint", open_world}}}};
}

json tools_list() {
  json env = {{"type", "object"},
              {"additionalProperties", {{"type", "string"}}},
              {"description", "Environment variables"}};
  json timeout = {{"type", "number"}, {"description", "Kill it after this long (default 300)"}};
  return json::array({
      tool("create_sandbox", "Create a sandbox",
           "Create a fresh, isolated Linux sandbox and return its id. It is destroyed when this "
           "session ends, or when its lifetime (default 1h) expires.",
           schema({{"image", {{"type", "string"}, {"description", "Image (default: host)"}}},
                   {"memory", {{"type", "string"}, {"description", "Memory limit, e.g. 1G"}}},
                   {"cpus", {{"type", "number"}, {"description", "CPUs, e.g. 1.5"}}},
                   {"timeout", {{"type", "string"}, {"description", "Lifetime, e.g. 30m"}}},
                   {"env", env}}),
           false, false, false, false),
      tool("run_command", "Run a shell command",
           "Run a shell command (sh -c) in a sandbox and return its exit code, stdout and stderr. "
           "Network access goes through the sandbox's egress allowlist. A server started in the "
           "background (\"cmd > /tmp/log 2>&1 &\") keeps running after the call.",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"command", {{"type", "string"}, {"description", "The shell command"}}},
                   {"cwd", {{"type", "string"}, {"description", "Working directory"}}},
                   {"timeout_seconds", timeout},
                   {"user",
                    {{"type", "string"},
                     {"description", "Run as this user of the sandbox (default root)"}}},
                   {"env", env},
                   {"input",
                    {{"type", "string"},
                     {"description",
                      "Text for its stdin (default: none; with tty: typed on "
                      "the terminal, then end of input)"}}},
                   {"tty",
                    {{"type", "boolean"},
                     {"description",
                      "Run it on a terminal, for programs that act differently without one "
                      "(prompts, pagers, colours). Its output is then one stream, with escape "
                      "sequences removed. Default false."}}}},
                  {"command"}),
           false, true, false, true),
      tool("run_code", "Run code",
           "Run a program in a sandbox: the code is saved to a file and run with the language's "
           "interpreter (python: python3, javascript: node, bash, sh). Each call is a new "
           "process: variables do not survive between calls, files do.",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"code", {{"type", "string"}, {"description", "The program"}}},
                   {"language",
                    {{"type", "string"},
                     {"enum", {"python", "javascript", "bash", "sh"}},
                     {"description", "Default: python"}}},
                   {"timeout_seconds", timeout}},
                  {"code"}),
           false, true, false, true),
      tool("read_file", "Read a file",
           "Read a text file from a sandbox (at most 1 MiB; binary files are returned as base64).",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"path", {{"type", "string"}, {"description", "Absolute path"}}}},
                  {"path"}),
           true, false, true, false),
      tool("write_file", "Write a file",
           "Write a file in a sandbox (created with its parent directories, or replaced).",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"path", {{"type", "string"}, {"description", "Absolute path"}}},
                   {"content", {{"type", "string"}, {"description", "The content"}}},
                   {"encoding",
                    {{"type", "string"},
                     {"enum", {"utf-8", "base64"}},
                     {"description", "How content is encoded (default utf-8)"}}}},
                  {"path", "content"}),
           false, true, true, false),
      tool("list_files", "List a directory",
           "List the entries of a directory in a sandbox (name, type, size).",
           schema(
               {{"sandbox_id", kSandboxIdProp},
                {"path", {{"type", "string"}, {"description", "Absolute path (default /root)"}}}}),
           true, false, true, false),
      tool("wait_for_port", "Wait for a port",
           "Wait until a server listens on a TCP port inside a sandbox (on 127.0.0.1 or "
           "0.0.0.0), e.g. after starting it in the background with run_command.",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"port", kPortProp},
                   {"timeout_seconds",
                    {{"type", "number"},
                     {"description", "Give up after this long (default 30; 0: check once)"}}}},
                  {"port"}),
           true, false, true, false),
      tool("http_request", "HTTP request to a sandbox port",
           "Send one HTTP request to a server inside a sandbox (http://localhost:PORT/PATH) and "
           "return its status, headers and body (the first max_bytes). Waits for the port to "
           "listen first (wait_seconds).",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"port", kPortProp},
                   {"path",
                    {{"type", "string"},
                     {"description", "Path and query, e.g. /api/items?page=2 (default /)"}}},
                   {"method",
                    {{"type", "string"},
                     {"enum", {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}},
                     {"description", "Default GET"}}},
                   {"headers",
                    {{"type", "object"},
                     {"additionalProperties", {{"type", "string"}}},
                     {"description", "Request headers"}}},
                   {"body",
                    {{"type", "string"},
                     {"description",
                      "Request body (Content-Type: application/json if it is JSON, else "
                      "text/plain, unless headers say)"}}},
                   {"wait_seconds",
                    {{"type", "number"},
                     {"description", "How long to wait for the port to listen (default 10)"}}},
                   {"timeout_seconds",
                    {{"type", "number"},
                     {"description", "How long to wait for the answer (default 30)"}}},
                   {"max_bytes",
                    {{"type", "integer"},
                     {"description", "Most body bytes returned (default 32768, at most 1 MiB)"}}}},
                  {"port"}),
           false, true, false, false),
      tool("snapshot", "Snapshot a sandbox",
           "Save the sandbox's files as a snapshot, to roll back to later.",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"name", {{"type", "string"}, {"description", "A name for the snapshot"}}}}),
           false, false, false, false),
      tool("list_snapshots", "List snapshots",
           "The snapshots of this session's sandboxes, newest first (also of sandboxes since "
           "destroyed).",
           schema({{"sandbox_id",
                    {{"type", "string"},
                     {"description", "Only this sandbox's (default: every sandbox's)"}}}}),
           true, false, true, false),
      tool("rollback", "Roll back a sandbox",
           "Put the sandbox's files back to a snapshot. Its running processes are stopped; the "
           "state just before is saved as a snapshot too.",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"snapshot", {{"type", "string"}, {"description", "Snapshot id or name"}}}},
                  {"snapshot"}),
           false, true, false, false),
      tool("restore_snapshot", "Restore a snapshot",
           "Make a new sandbox from a snapshot (its files; processes start afresh) and return "
           "its id. The snapshot's own sandbox is left as it is: restoring twice forks.",
           schema({{"snapshot", {{"type", "string"}, {"description", "Snapshot id or name"}}}},
                  {"snapshot"}),
           false, false, false, false),
      tool("list_sandboxes", "List sandboxes",
           "The sandboxes this session may use (those it created) and their state.",
           schema(json::object()), true, false, true, false),
      tool("destroy_sandbox", "Destroy a sandbox",
           "Destroy a sandbox: its processes and files are gone (its audit log stays).",
           schema({{"sandbox_id", kSandboxIdProp}}, {"sandbox_id"}), false, true, true, false),
  });
}

// ---- snapshot tools -------------------------------------------------------------------------

json snapshot_entry(const json& snap) {
  return {{"snapshot_id", snap.value("id", json())},
          {"name", snap.value("name", json())},
          {"sandbox_id", snap.value("sandbox", json())},
          {"kind", snap.value("kind", json())},
          {"created_at", snap.value("created_at", json())}};
}

Result<json> list_snapshots(Session& s, const json& a) {
  json res;
  if (a.contains("sandbox_id") && !a["sandbox_id"].is_null()) {
    std::string id = TRY(str_arg(a, "sandbox_id"));
    TRY_VOID(s.scope.check(id));
    res = TRY(s.client.call("GET", sandbox_target(id, "/snapshots")));
  } else {
    res = TRY(s.client.call("GET", "/v1/snapshots"));
  }
  std::string text;
  json list = json::array();
  for (const json& snap : res.value("snapshots", json::array())) {
    if (!snap.is_object() || !s.scope.allows(snap.value("sandbox", ""))) continue;
    json e = snapshot_entry(snap);
    std::string name = e["name"].is_string() ? e["name"].get<std::string>() : "";
    text += snap.value("id", "") + (name.empty() ? "" : " (" + name + ")") + " of " +
            snap.value("sandbox", "") + ", " + snap.value("kind", "") + ", taken " +
            snap.value("created_at", "") + "\n";
    list.push_back(std::move(e));
  }
  if (text.empty()) text = "(no snapshots; the snapshot tool takes one)\n";
  return tool_result(text, {{"snapshots", list}});
}

Result<json> restore_snapshot(Session& s, const json& a) {
  std::string snap = TRY(str_arg(a, "snapshot"));
  json rec = TRY(scoped_snapshot(s, snap));
  std::string snap_id = rec.value("id", snap);
  json sb = TRY(s.client.call("POST", snapshot_target(snap_id, "/restore"), json::object()));
  std::string id = sb.value("id", "");
  if (id.empty()) return fail(Code::kProtocol, "the daemon's restore answer has no id");
  adopt(s, id);
  // Like a created one, it ends with its lifetime if the session is killed.
  if (sb.value("expires_at", json()).is_null()) {
    std::string lifetime =
        s.args.sandbox.timeout.empty() ? kDefaultLifetime : s.args.sandbox.timeout;
    TRY(s.client.call("POST", sandbox_target(id, "/timeout"), json{{"timeout", lifetime}}));
  }
  return tool_result(
      "restored snapshot " + snap_id + " as sandbox " + id + " (its files; processes start afresh)",
      {{"sandbox_id", id}, {"snapshot_id", snap_id}});
}

Result<json> rollback(Session& s, const json& a) {
  std::string snap = TRY(str_arg(a, "snapshot"));
  std::string id = TRY(target_sandbox(s, a));
  json rec = TRY(scoped_snapshot(s, snap));
  std::string snap_id = rec.value("id", snap);
  json r = TRY(s.client.call("POST", sandbox_target(id, "/rollback"), json{{"snapshot", snap_id}}));
  json rb = r.value("rollback", json::object());
  std::string saved = rb.contains("saved_as") && rb["saved_as"].is_string()
                          ? rb["saved_as"].get<std::string>()
                          : "";
  return tool_result("rolled " + id + " back to " + rb.value("snapshot", snap_id) +
                         (saved.empty() ? "" : "; the state before is snapshot " + saved),
                     {{"sandbox_id", id},
                      {"snapshot", rb.value("snapshot", snap_id)},
                      {"saved_as", saved.empty() ? json() : json(saved)}});
}

// ---- the other tools ------------------------------------------------------------------------

Result<json> read_file(Session& s, const json& a) {
  std::string path = TRY(str_arg(a, "path"));
  std::string id = TRY(target_sandbox(s, a));
  json st =
      TRY(s.client.call("GET", sandbox_target(id, "/files?stat=true&path=" + url_encode(path))));
  if (st.value("type", "") != "file")
    return fail(Code::kInvalidArgument, path + " is a " + st.value("type", "?") +
                                            ", not a regular file (list_files lists directories)");
  if (st.value("size", uint64_t{0}) > kMaxFileRead)
    return fail(Code::kResourceExhausted,
                path + " is " + std::to_string(st.value("size", uint64_t{0})) +
                    " bytes, more than read_file returns (1 MiB); use run_command with head, "
                    "tail or grep");
  Connection conn = TRY(s.client.connect());
  TRY_VOID(conn.send("GET", sandbox_target(id, "/files?path=" + url_encode(path)), ""));
  int status = TRY(conn.read_head());
  std::string data = TRY(conn.read_body(kMaxFileRead + 1));
  if (status >= 400) return fail(api_error(status, data));
  if (!invalid_utf8_at(data)) return tool_result(data);
  return tool_result("[binary file, " + std::to_string(data.size()) + " bytes, base64]\n" +
                     base64_encode(data));
}

Result<json> write_file(Session& s, const json& a) {
  std::string path = TRY(str_arg(a, "path"));
  std::string content = TRY(str_arg(a, "content"));
  std::string enc = TRY(str_arg(a, "encoding", false, "utf-8"));
  if (enc == "base64") {
    auto raw = base64_decode(content);
    if (!raw) return fail(Code::kInvalidArgument, "\"content\" is not valid base64");
    content = std::move(*raw);
  } else if (enc != "utf-8") {
    return fail(Code::kInvalidArgument, "\"encoding\" must be utf-8 or base64");
  }
  std::string id = TRY(target_sandbox(s, a));
  TRY_VOID(put_file(s, id, path, content));
  return tool_result("wrote " + std::to_string(content.size()) + " bytes to " + path);
}

Result<json> list_files(Session& s, const json& a) {
  std::string path = TRY(str_arg(a, "path", false, "/root"));
  std::string id = TRY(target_sandbox(s, a));
  json l =
      TRY(s.client.call("GET", sandbox_target(id, "/files?list=true&path=" + url_encode(path))));
  std::string text;
  json entries = json::array();
  for (const json& e : l.value("entries", json::array())) {
    std::string n = e.value("name", ""), t = e.value("type", "");
    text += n + (t == "dir" ? "/" : "") +
            (t == "file" ? "  " + std::to_string(e.value("size", 0)) + " bytes" : "") +
            (t == "symlink" ? " -> " + e.value("target", "") : "") + "\n";
    entries.push_back({{"name", n}, {"type", t}, {"size", e.value("size", 0)}});
  }
  if (text.empty()) text = "(empty directory)\n";
  return tool_result(text, {{"path", path}, {"entries", entries}});
}

Result<json> list_sandboxes(Session& s) {
  json all = TRY(s.client.call("GET", "/v1/sandboxes"));
  std::string text;
  json mine = json::array();
  for (const json& sb : all.value("sandboxes", json::array())) {
    std::string id = sb.value("id", "");
    if (!s.scope.allows(id)) continue;
    bool here = s.scope.created_here(id);
    text += id + "  " + sb.value("state", "") + "  " + sb.value("image", "") +
            (here ? "" : "  (not created by this session)") + "\n";
    mine.push_back({{"sandbox_id", id},
                    {"state", sb.value("state", "")},
                    {"image", sb.value("image", "")},
                    {"created_by_this_session", here}});
  }
  if (text.empty()) text = "(no sandboxes in this session; create_sandbox makes one)\n";
  return tool_result(text, {{"sandboxes", mine}});
}

Result<json> destroy_sandbox(Session& s, const json& a) {
  std::string id = TRY(str_arg(a, "sandbox_id"));
  TRY_VOID(s.scope.check(id));
  TRY(s.client.call("DELETE", sandbox_target(id, "?force=true")));
  std::erase(s.owned, id);
  return tool_result("destroyed " + id);
}

Result<json> call_tool(Session& s, const std::string& name, const json& a) {
  if (name == "create_sandbox") {
    std::string id = TRY(create_sandbox(s, a));
    return tool_result("created sandbox " + id, {{"sandbox_id", id}});
  }
  if (name == "run_command") return tool_run_command(s, a);
  if (name == "run_code") return tool_run_code(s, a);
  if (name == "read_file") return read_file(s, a);
  if (name == "write_file") return write_file(s, a);
  if (name == "list_files") return list_files(s, a);
  if (name == "wait_for_port") return tool_wait_for_port(s, a);
  if (name == "http_request") return tool_http_request(s, a);
  if (name == "snapshot") {
    std::string id = TRY(target_sandbox(s, a));
    json body = json::object();
    if (a.contains("name")) body["name"] = TRY(str_arg(a, "name"));
    json snap = TRY(s.client.call("POST", sandbox_target(id, "/snapshots"), body));
    std::string sid = snap.value("id", "");
    return tool_result("snapshot " + sid + " of " + id, {{"snapshot_id", sid}, {"sandbox_id", id}});
  }
  if (name == "list_snapshots") return list_snapshots(s, a);
  if (name == "rollback") return rollback(s, a);
  if (name == "restore_snapshot") return restore_snapshot(s, a);
  if (name == "list_sandboxes") return list_sandboxes(s);
  if (name == "destroy_sandbox") return destroy_sandbox(s, a);
  return fail(Code::kNotFound, "unknown tool \"" + name + "\"");
}

// ---- JSON-RPC -------------------------------------------------------------------------------

json rpc_error(const json& id, int code, std::string message) {
  return {
      {"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", std::move(message)}}}};
}

json rpc_result(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

// The answer to one message, or null for a notification.
json handle(Session& s, const json& msg) {
  if (!msg.is_object() || msg.value("jsonrpc", "") != "2.0" || !msg.contains("method") ||
      !msg["method"].is_string()) {
    // A response to a request of ours (we send none) or garbage.
    if (msg.is_object() && (msg.contains("result") || msg.contains("error"))) return nullptr;
    return rpc_error(msg.is_object() ? msg.value("id", json()) : json(), kInvalidRequest,
                     "not a JSON-RPC 2.0 request");
  }
  const std::string method = msg["method"].get<std::string>();
  if (!msg.contains("id")) return nullptr;  // notifications: initialized, cancelled, ...
  const json& id = msg["id"];
  const json params = msg.value("params", json::object());
  if (method == "initialize") {
    std::string asked = params.is_object() ? params.value("protocolVersion", "") : "";
    std::string version = kProtocolVersions[0];
    for (const char* v : kProtocolVersions)
      if (asked == v) version = v;
    return rpc_result(
        id, {{"protocolVersion", version},
             {"capabilities", {{"tools", {{"listChanged", false}}}}},
             {"serverInfo",
              {{"name", "space"}, {"title", "SPACE sandboxes"}, {"version", kServerVersion}}},
             {"instructions",
              "Tools to run code in disposable, isolated Linux sandboxes. create_sandbox makes "
              "one (or any tool makes one on first use); run_command and run_code run programs "
              "in it; read_file, write_file and list_files move files; wait_for_port and "
              "http_request reach a server started in it; snapshot, rollback and "
              "restore_snapshot undo or fork changes. The tools act only on this session's "
              "sandboxes (list_sandboxes), which are destroyed when it ends."}});
  }
  if (method == "ping") return rpc_result(id, json::object());
  if (method == "tools/list") return rpc_result(id, {{"tools", tools_list()}});
  if (method == "tools/call") {
    if (!params.is_object() || !params.contains("name") || !params["name"].is_string())
      return rpc_error(id, kInvalidParams, "tools/call needs a \"name\"");
    std::string name = params["name"].get<std::string>();
    json args = params.value("arguments", json::object());
    if (!args.is_object()) return rpc_error(id, kInvalidParams, "\"arguments\" must be an object");
    bool known = false;
    for (const json& t : tools_list()) known = known || t["name"] == name;
    if (!known) return rpc_error(id, kInvalidParams, "unknown tool \"" + name + "\"");
    auto r = call_tool(s, name, args);
    return rpc_result(id, r ? *r : tool_error(r.error()));
  }
  return rpc_error(id, kMethodNotFound, "method \"" + method + "\" is not supported");
}

bool send_line(const json& msg) {
  return write_all(STDOUT_FILENO, msg.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
}

void end_session(Session& s) {
  if (s.args.keep) {
    for (const auto& id : s.owned)
      write_all(STDERR_FILENO, "space mcp: keeping sandbox " + id + " (--keep)\n");
    return;
  }
  // A fresh client: the interrupt fd may be readable already (a signal ended the session).
  Client quiet(s.client.socket_path(), -1, s.client.token());
  for (const auto& id : s.owned)
    (void)quiet.call("DELETE", sandbox_target(id, "?force=true&wait=false"));
}

}  // namespace
}  // namespace mcp

Result<int> cmd_mcp(const Args& a, const Client& c) {
  using namespace mcp;
  // The sandboxes the operator named must be there: a typo would otherwise show only as the
  // model being refused.
  for (const auto& id : a.sandboxes)
    TRY_VOID_CTX(c.call("GET", sandbox_target(id)), "--sandbox " + id);
  Session s{a, c, Scope(a.sandboxes, a.all_sandboxes), {}, 0};
  std::string pending;
  char buf[64 * 1024];
  int rc = 0;
  for (;;) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
    if (::poll(fds, interrupt_fd() >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (interrupt_fd() >= 0 && fds[1].revents != 0) {
      rc = 128 + received_signal();
      break;
    }
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // the client closed stdin: the session is over
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json msg = json::parse(line, nullptr, false);
      json answer =
          msg.is_discarded() ? rpc_error(nullptr, kParseError, "not valid JSON") : handle(s, msg);
      if (!answer.is_null() && !send_line(answer)) {
        end_session(s);
        return rc;  // nobody reads our answers any more
      }
    }
    if (pending.size() > kMaxMessage) {
      send_line(rpc_error(nullptr, kInvalidRequest, "a message longer than 64 MiB"));
      pending.clear();
    }
  }
  end_session(s);
  return rc;
}

}  // namespace space::cli
