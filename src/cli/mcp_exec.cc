// `space mcp`: run_command and run_code. A command runs through POST .../exec and its events
// are gathered into one answer: exit code, stdout, stderr (each bounded, see Capture). With
// "tty" it runs on a terminal instead (the exec upgraded to space-terminal, as `space exec -t`
// does): "input" is typed, then end of input, and the answer is the terminal's text, with its
// escape sequences taken out, since a model reads text, not a screen.
#include <string>

#include "cli/commands.h"
#include "cli/mcp.h"
#include "common/base64.h"

namespace space::cli::mcp {
namespace {

constexpr int kTermRows = 50, kTermCols = 160;  // wide enough for most tables

struct ExecOutcome {
  Capture out, err;
  json exit;
};

// Folds one exec event into `o`; false once it is the last.
Result<bool> take_event(ExecOutcome& o, std::string_view line) {
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
}

Error ended_early() {
  return Error(Code::kUnavailable,
               "the command's output ended without its exit (the sandbox was destroyed, or "
               "spaced stopped)");
}

// Without a terminal: one request, the exec events as the body of its answer. `input` goes as
// the request's stdin (the body's second part, after the JSON and a newline).
Result<ExecOutcome> exec_plain(const Session& s, const std::string& id, json body,
                               const std::optional<std::string>& input) {
  Connection conn = TRY(s.client.connect());
  if (input) {
    body["stdin"] = true;
    TRY_VOID(conn.send("POST", sandbox_target(id, "/exec"), body.dump() + "\n" + *input,
                       "application/octet-stream"));
  } else {
    TRY_VOID(conn.send("POST", sandbox_target(id, "/exec"), body.dump()));
  }
  int status = TRY(conn.read_head());
  if (status >= 400) return fail(api_error(status, TRY(conn.read_body(1 << 20))));
  ExecOutcome o;
  TRY_VOID(conn.for_each_line([&](std::string_view line) { return take_event(o, line); }));
  if (o.exit.is_null()) return fail(ended_early());
  return o;
}

// On a terminal: JSON lines both ways over the upgraded connection (api/openapi.yaml, exec).
Result<ExecOutcome> exec_terminal(const Session& s, const std::string& id, json body,
                                  const std::optional<std::string>& input) {
  body["rows"] = kTermRows;
  body["cols"] = kTermCols;
  Connection conn = TRY(s.client.connect());
  std::string pending =
      TRY(conn.upgrade(sandbox_target(id, "/exec"), "space-terminal", body.dump()));
  FdStream& stream = conn.stream();
  std::string up;
  if (input && !input->empty())
    up += json{{"type", "stdin"}, {"data", base64_encode(*input)}}.dump() + "\n";
  up += json{{"type", "eof"}}.dump() + "\n";  // a command that reads more gets end of input
  if (auto ec = stream.write_all(up))
    return fail(Code::kUnavailable, "sending the input to the terminal: " + ec.message());
  ExecOutcome o;
  char buf[64 * 1024];
  for (;;) {
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty() && !TRY(take_event(o, line))) return o;
    }
    boost::system::error_code ec;
    size_t n = stream.read_some(boost::asio::mutable_buffer(buf, sizeof buf), ec);
    if (ec) return fail(ended_early());
    pending.append(buf, n);
    if (pending.size() > (64u << 20))
      return fail(Code::kProtocol, "the daemon sent a line longer than 64 MiB");
  }
}

// A terminal's output as text: escape sequences (CSI, OSC, and the two-byte ones) removed,
// CRLF as LF, and a line rewritten after a carriage return (a progress bar) shown as it ends.
std::string terminal_text(std::string_view t) {
  std::string out, line;
  auto end_line = [&] {
    out += line;
    line.clear();
  };
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (c == '\x1b' && i + 1 < t.size()) {
      char k = t[++i];
      if (k == '[') {  // CSI: parameters, then a final byte 0x40..0x7e
        while (i + 1 < t.size() && !(t[i + 1] >= 0x40 && t[i + 1] <= 0x7e)) ++i;
        ++i;
      } else if (k == ']') {  // OSC: up to BEL or ESC backslash
        while (i + 1 < t.size() && t[i + 1] != '\x07' && t[i + 1] != '\x1b') ++i;
        ++i;
        if (i < t.size() && t[i] == '\x1b') ++i;
      } else if ((k == '(' || k == ')') && i + 1 < t.size()) {  // a character set: one more
        ++i;
      }
      continue;
    }
    if (c == '\r') {
      if (i + 1 < t.size() && t[i + 1] == '\n') continue;
      line.clear();  // the line is written again from its start
      continue;
    }
    if (c == '\n') {
      line += '\n';
      end_line();
      continue;
    }
    if (c == '\x07') continue;  // BEL
    line += c;
  }
  end_line();
  return out;
}

json exec_result(const ExecOutcome& o, bool tty) {
  const json& e = o.exit;
  std::string out = printable(tty ? terminal_text(o.out.str()) : o.out.str());
  json structured = {{"exit_code", e.value("exit_code", json())},
                     {"signal", e.value("signal", json())},
                     {"timed_out", e.value("timed_out", false)},
                     {"oom_killed", e.value("oom_killed", false)},
                     {"stdout", out},
                     {"stderr", printable(o.err.str())}};
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
  if (tty) {
    text += "\n--- terminal ---\n" + out;
  } else {
    text += "\n--- stdout ---\n" + out;
    text += "\n--- stderr ---\n" + structured["stderr"].get<std::string>();
  }
  return tool_result(text, structured);
}

Result<json> exec_body(const json& a, json cmd) {
  json body = {{"cmd", std::move(cmd)}};
  if (a.contains("cwd")) body["cwd"] = TRY(str_arg(a, "cwd"));
  body["timeout"] = TRY(number_arg(a, "timeout_seconds", 300, 0.001, 86400));
  if (a.contains("env")) {
    if (!a["env"].is_object()) return fail(Code::kInvalidArgument, "\"env\" must be an object");
    body["env"] = a["env"];
  }
  if (a.contains("user")) body["user"] = TRY(str_arg(a, "user"));
  return body;
}

// Runs `cmd` as the tool's arguments say (tty, input) and answers its result.
Result<json> run(const Session& s, const std::string& id, const json& a, json cmd) {
  json body = TRY(exec_body(a, std::move(cmd)));
  bool tty = a.contains("tty") && TRY(bool_arg(a, "tty"));
  std::optional<std::string> input;
  if (a.contains("input")) input = TRY(str_arg(a, "input"));
  ExecOutcome o =
      tty ? TRY(exec_terminal(s, id, std::move(body), input)) : TRY(exec_plain(s, id, body, input));
  return exec_result(o, tty);
}

}  // namespace

void Capture::add(std::string_view d) {
  total_ += d.size();
  if (head_.size() < kHalf) {
    size_t take = std::min(kHalf - head_.size(), d.size());
    head_.append(d.substr(0, take));
    d.remove_prefix(take);
  }
  tail_.append(d);
  if (tail_.size() > 2 * kHalf) tail_.erase(0, tail_.size() - kHalf);
}

std::string Capture::str() const {
  std::string tail = tail_.size() > kHalf ? tail_.substr(tail_.size() - kHalf) : tail_;
  size_t cut = total_ - head_.size() - tail.size();
  if (cut == 0) return head_ + tail;
  return head_ + "\n[... " + std::to_string(cut) + " bytes not shown ...]\n" + tail;
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

Result<json> tool_run_command(Session& s, const json& a) {
  std::string cmd = TRY(str_arg(a, "command"));
  std::string id = TRY(target_sandbox(s, a));
  return run(s, id, a, json::array({"sh", "-c", cmd}));
}

Result<json> tool_run_code(Session& s, const json& a) {
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
  return run(s, id, a, json::array({interp, path}));
}

}  // namespace space::cli::mcp
