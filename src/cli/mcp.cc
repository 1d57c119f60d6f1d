// `space mcp`: a Model Context Protocol server on stdio (JSON-RPC 2.0, one message per line),
// exposing sandboxes as tools to an MCP client (Claude Desktop, an agent framework, the MCP
// SDKs). docs/mcp.md describes the tools; tests/integration/test_mcp.py drives it with the
// official TypeScript SDK's client.
//
// The session owns the sandboxes it creates: when the client closes stdin (or the process
// gets SIGTERM/SIGINT/SIGHUP) they are destroyed, unless --keep. Each is also created with a
// lifetime (--timeout, default 1h), so a session killed with SIGKILL leaves nothing for long.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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
namespace {

using nlohmann::json;

constexpr const char* kServerVersion = "0.1.0";
// Newest first; an initialize asking for another gets the newest.
constexpr const char* kProtocolVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                             "2024-11-05"};
constexpr size_t kMaxMessage = 64u << 20;       // one JSON-RPC message
constexpr size_t kMaxOutputShown = 32u << 10;   // per stream, in a tool's text answer
constexpr size_t kMaxFileRead = 1u << 20;       // read_file
constexpr const char* kDefaultLifetime = "1h";  // of sandboxes this session creates

// JSON-RPC error codes.
constexpr int kParseError = -32700;
constexpr int kInvalidRequest = -32600;
constexpr int kMethodNotFound = -32601;
constexpr int kInvalidParams = -32602;

struct Session {
  const Args& args;
  const Client& client;
  std::vector<std::string> owned;  // created here, destroyed at the end (unless --keep)
  int code_files = 0;
};

// ---- tool results ---------------------------------------------------------------------------

json text_content(std::string text) {
  return json::array({{{"type", "text"}, {"text", std::move(text)}}});
}

json tool_result(std::string text, json structured = nullptr) {
  json r = {{"content", text_content(std::move(text))}, {"isError", false}};
  if (!structured.is_null()) r["structuredContent"] = std::move(structured);
  return r;
}

// A failed tool call: a result the model sees (isError), not a protocol error.
json tool_error(const Error& e) {
  return {
      {"content", text_content("error (" + std::string(code_name(e.code())) + "): " + e.message())},
      {"isError", true}};
}

// A command's output as a tool shows it: the first and the last kMaxOutputShown / 2 bytes,
// with how much was cut in between.
class Capture {
 public:
  void add(std::string_view d) {
    total_ += d.size();
    if (head_.size() < kHalf) {
      size_t take = std::min(kHalf - head_.size(), d.size());
      head_.append(d.substr(0, take));
      d.remove_prefix(take);
    }
    tail_.append(d);
    if (tail_.size() > 2 * kHalf) tail_.erase(0, tail_.size() - kHalf);
  }
  std::string str() const {
    std::string tail = tail_.size() > kHalf ? tail_.substr(tail_.size() - kHalf) : tail_;
    size_t cut = total_ - head_.size() - tail.size();
    if (cut == 0) return head_ + tail;
    return head_ + "\n[... " + std::to_string(cut) + " bytes not shown ...]\n" + tail;
  }

 private:
  static constexpr size_t kHalf = kMaxOutputShown / 2;
  std::string head_, tail_;
  size_t total_ = 0;
};

// Text for the model: valid UTF-8 as is, anything else as a note.
std::string printable(const std::string& s) {
  if (!invalid_utf8_at(s)) return s;
  return "[" + std::to_string(s.size()) + " bytes of binary output, not shown]";
}

// ---- arguments ------------------------------------------------------------------------------

Result<std::string> str_arg(const json& a, const char* key, bool required = true,
                            std::string fallback = "") {
  if (!a.contains(key) || a[key].is_null()) {
    if (required) return fail(Code::kInvalidArgument, std::string("\"") + key + "\" is required");
    return fallback;
  }
  if (!a[key].is_string())
    return fail(Code::kInvalidArgument, std::string("\"") + key + "\" must be a string");
  return a[key].get<std::string>();
}

// ---- API helpers ----------------------------------------------------------------------------

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
  s.owned.push_back(id);
  return id;
}

// The sandbox a tool acts on: "sandbox_id", else the session's newest, else a new one.
Result<std::string> target_sandbox(Session& s, const json& a) {
  if (a.contains("sandbox_id") && !a["sandbox_id"].is_null()) return str_arg(a, "sandbox_id");
  if (!s.owned.empty()) return s.owned.back();
  return create_sandbox(s, json::object());
}

struct ExecOutcome {
  Capture out, err;
  json exit;
};

Result<ExecOutcome> run_exec(const Session& s, const std::string& id, const json& body) {
  Connection conn = TRY(s.client.connect());
  TRY_VOID(conn.send("POST", sandbox_target(id, "/exec"), body.dump()));
  int status = TRY(conn.read_head());
  if (status >= 400) return fail(api_error(status, TRY(conn.read_body(1 << 20))));
  ExecOutcome o;
  TRY_VOID(conn.for_each_line([&](std::string_view line) -> Result<bool> {
    json ev = json::parse(line, nullptr, false);
    if (!ev.is_object()) return fail(Code::kProtocol, "the daemon sent a malformed exec event");
    std::string type = ev.value("type", "");
    if (type == "stdout" || type == "stderr") {
      (type == "stdout" ? o.out : o.err).add(TRY(exec_event_data(ev)));
    } else if (type == "exit") {
      o.exit = ev;
      return false;
    } else if (type == "error") {
      return fail(api_error(500, json{{"error", ev.value("error", json::object())}}.dump()));
    }
    return true;
  }));
  if (o.exit.is_null())
    return fail(Code::kUnavailable,
                "the command's output ended without its exit (the sandbox was "
                "destroyed, or spaced stopped)");
  return o;
}

json exec_result(const ExecOutcome& o) {
  const json& e = o.exit;
  json structured = {
      {"exit_code", e.value("exit_code", json())}, {"signal", e.value("signal", json())},
      {"timed_out", e.value("timed_out", false)},  {"oom_killed", e.value("oom_killed", false)},
      {"stdout", printable(o.out.str())},          {"stderr", printable(o.err.str())}};
  std::string text;
  if (e.contains("exit_code") && e["exit_code"].is_number_integer()) {
    text = "exit code " + std::to_string(e["exit_code"].get<int>());
  } else if (e.contains("signal") && e["signal"].is_number_integer()) {
    text = "killed by signal " + std::to_string(e["signal"].get<int>());
  } else {
    text = "ended";
  }
  if (e.value("timed_out", false)) text += " (timed out and killed)";
  if (e.value("oom_killed", false)) text += " (out of memory: a process was killed)";
  if (e.contains("error") && e["error"].is_string()) text += ": " + e["error"].get<std::string>();
  text += "\n--- stdout ---\n" + structured["stdout"].get<std::string>();
  text += "\n--- stderr ---\n" + structured["stderr"].get<std::string>();
  return tool_result(text, structured);
}

Result<json> exec_body(const json& a, json cmd) {
  json body = {{"cmd", std::move(cmd)}};
  if (a.contains("cwd")) {
    auto cwd = TRY(str_arg(a, "cwd"));
    body["cwd"] = cwd;
  }
  if (a.contains("timeout_seconds")) {
    if (!a["timeout_seconds"].is_number() || a["timeout_seconds"].get<double>() <= 0)
      return fail(Code::kInvalidArgument, "\"timeout_seconds\" must be a positive number");
    body["timeout"] = a["timeout_seconds"];
  } else {
    body["timeout"] = 300;  // a tool call should not hang forever
  }
  if (a.contains("env")) {
    if (!a["env"].is_object()) return fail(Code::kInvalidArgument, "\"env\" must be an object");
    body["env"] = a["env"];
  }
  if (a.contains("user")) body["user"] = TRY(str_arg(a, "user"));
  return body;
}

Result<void> put_file(const Session& s, const std::string& id, const std::string& path,
                      const std::string& data) {
  Connection conn = TRY(s.client.connect());
  TRY_VOID(conn.send("PUT", sandbox_target(id, "/files?parents=true&path=" + url_encode(path)),
                     data, "application/octet-stream"));
  int status = TRY(conn.read_head());
  std::string body = TRY(conn.read_body(1 << 20));
  if (status >= 400) return fail(api_error(status, body));
  return {};
}

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
     "The sandbox (from create_sandbox). Default: the newest sandbox of this "
     "session, created if there is none."}};

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
           "Network access goes through the sandbox's egress allowlist.",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"command", {{"type", "string"}, {"description", "The shell command"}}},
                   {"cwd", {{"type", "string"}, {"description", "Working directory"}}},
                   {"timeout_seconds",
                    {{"type", "number"}, {"description", "Kill it after this long (default 300)"}}},
                   {"user",
                    {{"type", "string"},
                     {"description", "Run as this user of the sandbox (default root)"}}},
                   {"env", env}},
                  {"command"}),
           false, true, false, true),
      tool(
          "run_code", "Run code",
          "Run a program in a sandbox: the code is saved to a file and run with the language's "
          "interpreter (python: python3, javascript: node, bash, sh). Each call is a new "
          "process: variables do not survive between calls, files do.",
          schema({{"sandbox_id", kSandboxIdProp},
                  {"code", {{"type", "string"}, {"description", "The program"}}},
                  {"language",
                   {{"type", "string"},
                    {"enum", {"python", "javascript", "bash", "sh"}},
                    {"description", "Default: python"}}},
                  {"timeout_seconds",
                   {{"type", "number"}, {"description", "Kill it after this long (default 300)"}}}},
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
      tool("snapshot", "Snapshot a sandbox",
           "Save the sandbox's files as a snapshot, to roll back to later.",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"name", {{"type", "string"}, {"description", "A name for the snapshot"}}}}),
           false, false, false, false),
      tool("rollback", "Roll back a sandbox",
           "Put the sandbox's files back to a snapshot. Its running processes are stopped; the "
           "state just before is saved as a snapshot too.",
           schema({{"sandbox_id", kSandboxIdProp},
                   {"snapshot", {{"type", "string"}, {"description", "Snapshot id or name"}}}},
                  {"snapshot"}),
           false, true, false, false),
      tool("list_sandboxes", "List sandboxes",
           "The sandboxes this session created and their state.", schema(json::object()), true,
           false, true, false),
      tool("destroy_sandbox", "Destroy a sandbox",
           "Destroy a sandbox: its processes and files are gone (its audit log stays).",
           schema({{"sandbox_id", kSandboxIdProp}}, {"sandbox_id"}), false, true, true, false),
  });
}

Result<json> call_tool(Session& s, const std::string& name, const json& a) {
  if (name == "create_sandbox") {
    std::string id = TRY(create_sandbox(s, a));
    return tool_result("created sandbox " + id, {{"sandbox_id", id}});
  }
  if (name == "run_command") {
    std::string cmd = TRY(str_arg(a, "command"));
    std::string id = TRY(target_sandbox(s, a));
    json body = TRY(exec_body(a, json::array({"sh", "-c", cmd})));
    return exec_result(TRY(run_exec(s, id, body)));
  }
  if (name == "run_code") {
    std::string code = TRY(str_arg(a, "code"));
    std::string lang = TRY(str_arg(a, "language", false, "python"));
    std::string interp, ext;
    if (lang == "python")
      interp = "python3", ext = ".py";
    else if (lang == "javascript")
      interp = "node", ext = ".js";
    else if (lang == "bash")
      interp = "bash", ext = ".sh";
    else if (lang == "sh")
      interp = "sh", ext = ".sh";
    else
      return fail(Code::kInvalidArgument,
                  "\"language\" must be python, javascript, bash or sh, not \"" + lang + "\"");
    std::string id = TRY(target_sandbox(s, a));
    std::string path = "/tmp/.space-mcp/code-" + std::to_string(++s.code_files) + ext;
    TRY_VOID(put_file(s, id, path, code));
    json body = TRY(exec_body(a, json::array({interp, path})));
    return exec_result(TRY(run_exec(s, id, body)));
  }
  if (name == "read_file") {
    std::string path = TRY(str_arg(a, "path"));
    std::string id = TRY(target_sandbox(s, a));
    json st =
        TRY(s.client.call("GET", sandbox_target(id, "/files?stat=true&path=" + url_encode(path))));
    if (st.value("type", "") != "file")
      return fail(Code::kInvalidArgument,
                  path + " is a " + st.value("type", "?") +
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
  if (name == "write_file") {
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
  if (name == "list_files") {
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
  if (name == "snapshot") {
    std::string id = TRY(target_sandbox(s, a));
    json body = json::object();
    if (a.contains("name")) body["name"] = TRY(str_arg(a, "name"));
    json snap = TRY(s.client.call("POST", sandbox_target(id, "/snapshots"), body));
    std::string sid = snap.value("id", "");
    return tool_result("snapshot " + sid + " of " + id, {{"snapshot_id", sid}, {"sandbox_id", id}});
  }
  if (name == "rollback") {
    std::string snap = TRY(str_arg(a, "snapshot"));
    std::string id = TRY(target_sandbox(s, a));
    json r = TRY(s.client.call("POST", sandbox_target(id, "/rollback"), json{{"snapshot", snap}}));
    json rb = r.value("rollback", json::object());
    std::string saved = rb.contains("saved_as") && rb["saved_as"].is_string()
                            ? rb["saved_as"].get<std::string>()
                            : "";
    return tool_result("rolled " + id + " back to " + rb.value("snapshot", snap) +
                           (saved.empty() ? "" : "; the state before is snapshot " + saved),
                       {{"sandbox_id", id},
                        {"snapshot", rb.value("snapshot", snap)},
                        {"saved_as", saved.empty() ? json() : json(saved)}});
  }
  if (name == "list_sandboxes") {
    json all = TRY(s.client.call("GET", "/v1/sandboxes"));
    std::string text;
    json mine = json::array();
    for (const json& sb : all.value("sandboxes", json::array())) {
      std::string id = sb.value("id", "");
      if (std::find(s.owned.begin(), s.owned.end(), id) == s.owned.end()) continue;
      text += id + "  " + sb.value("state", "") + "  " + sb.value("image", "") + "\n";
      mine.push_back({{"sandbox_id", id}, {"state", sb.value("state", "")}});
    }
    if (text.empty()) text = "(no sandboxes in this session; create_sandbox makes one)\n";
    return tool_result(text, {{"sandboxes", mine}});
  }
  if (name == "destroy_sandbox") {
    std::string id = TRY(str_arg(a, "sandbox_id"));
    TRY(s.client.call("DELETE", sandbox_target(id, "?force=true")));
    std::erase(s.owned, id);
    return tool_result("destroyed " + id);
  }
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
              "in it; read_file, write_file and list_files move files; snapshot and rollback "
              "undo changes. Sandboxes are destroyed when this session ends."}});
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

Result<int> cmd_mcp(const Args& a, const Client& c) {
  Session s{a, c, {}, 0};
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
