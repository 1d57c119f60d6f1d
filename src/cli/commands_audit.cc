// `space audit ID [--json] [--follow] [--verify]`: a sandbox's audit log (docs/audit.md), one
// line per event, or JSON Lines (--json), or a check of its hash chain (--verify: exit 0 when
// intact, 1 when not). Every byte of sandbox-controlled text is escaped before it reaches the
// terminal (escape_text, dump_json), so newlines, escape sequences and bidi controls in argv
// or paths cannot forge, hide or reorder lines.
#include <unistd.h>

#include <cstdio>
#include <ctime>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/signals.h"
#include "common/clock.h"

namespace space::cli {
using nlohmann::json;

namespace {

constexpr size_t kMaxLine = 64u << 20;

void print_out(std::string_view s) { write_all(STDOUT_FILENO, s); }

std::string when(const json& ev) { return rfc3339(ev.value("ts", 0.0)); }

std::string field(const json& d, const char* key) {
  if (!d.is_object() || !d.contains(key)) return "-";
  const json& v = d[key];
  if (v.is_string()) return escape_text(v.get<std::string>());
  if (v.is_null()) return "-";
  return dump_json(v);
}

std::string argv_text(const json& d) {
  std::string s;
  if (!d.is_object() || !d.contains("argv") || !d["argv"].is_array()) return "-";
  for (auto& a : d["argv"]) {
    if (!s.empty()) s += ' ';
    std::string t = a.is_string() ? a.get<std::string>() : dump_json(a);
    bool plain = !t.empty() && t.find_first_of(" '\"\\") == std::string::npos;
    std::string e = escape_text(t);
    s += plain && e == t ? t : "'" + e + "'";
  }
  if (d.value("argv_truncated", false)) s += " …(truncated)";
  return s;
}

}  // namespace

std::string format_audit_event(const json& ev) {
  const json d = ev.value("data", json::object());
  std::string kind = ev.value("kind", std::string("?"));
  std::string line =
      when(ev) + "  " + std::to_string(ev.value("seq", 0)) + "  " + escape_text(kind) + "  ";
  if (kind == "proc.exec") {
    line += "pid=" + field(d, "pid") + " ppid=" + field(d, "ppid") + " uid=" + field(d, "uid") +
            " exe=" + field(d, "path") + " cwd=" + field(d, "cwd") + " argv: " + argv_text(d);
    if (d.value("guest_reported", false)) line += " (guest-reported)";
  } else if (kind == "proc.exec_dropped") {
    line += "count=" + field(d, "count") + " rate_limited=" + field(d, "rate_limited") +
            " dropped_by_guest=" + field(d, "dropped_by_guest") +
            " malformed=" + field(d, "malformed");
  } else if (kind == "exec.start") {
    line += "stream=" + field(d, "stream") + " cwd=" + field(d, "cwd") + " argv: " + argv_text(d);
  } else if (kind == "exec.end") {
    line += "stream=" + field(d, "stream") + " pid=" + field(d, "pid");
    if (d.contains("exit_code") && !d["exit_code"].is_null())
      line += " exit=" + field(d, "exit_code");
    else if (d.contains("signal") && !d["signal"].is_null())
      line += " signal=" + field(d, "signal");
    if (d.contains("lost")) line += " lost=\"" + field(d, "lost") + "\"";
    if (d.value("timed_out", false)) line += " timed_out";
    if (d.value("oom_killed", false)) line += " oom_killed";
    char dur[32];
    snprintf(dur, sizeof dur, "%.3fs", d.value("duration_s", 0.0));
    line += std::string(" duration=") + dur;
    for (const char* s : {"stdout", "stderr"})
      if (d.contains(s) && d[s].is_object())
        line += std::string(" ") + s + "=" + field(d[s], "bytes") + "B";
  } else if (kind == "egress.request") {
    line += field(d, "method") + " " + field(d, "host") + ":" + field(d, "port") +
            field(d, "path") + " -> " + field(d, "status") + " up=" + field(d, "bytes_up") +
            "B down=" + field(d, "bytes_down") + "B via=" + field(d, "via");
    if (d.contains("secrets")) line += " secrets=" + field(d, "secrets");
    if (d.contains("redactions")) line += " redactions=" + field(d, "redactions");
  } else if (kind == "egress.tunnel") {
    line += field(d, "host") + ":" + field(d, "port") + " address=" + field(d, "address") +
            " up=" + field(d, "bytes_up") + "B down=" + field(d, "bytes_down") +
            "B via=" + field(d, "via");
  } else if (kind == "egress.denied") {
    line += field(d, "host") + ":" + field(d, "port");
    if (d.contains("method")) line += " " + field(d, "method") + " " + field(d, "path");
    line += " via=" + field(d, "via") + " reason=\"" + field(d, "reason") + "\"";
  } else if (kind == "credential.use") {
    line += "secret=" + field(d, "secret") + " " + field(d, "method") + " " + field(d, "host") +
            field(d, "path");
  } else if (kind.starts_with("file.")) {
    line += "path=" + field(d, "path") + " bytes=" + field(d, "bytes") + " ok=" + field(d, "ok");
  } else if (d.is_object() && !d.empty()) {
    line += dump_json(d);
  }
  return line + "\n";
}

Result<int> cmd_audit(const Args& a, const Client& c) {
  if (a.verify) {
    json rep = TRY(c.call("GET", sandbox_target(a.id, "/audit?verify=true")));
    if (a.json) {
      print_json(rep);
    } else if (rep.value("ok", false)) {
      print_out("ok: " + std::to_string(rep.value("events", 0)) + " events, hash chain intact\n");
    } else {
      print_out("FAILED: " + field(rep, "problem") +
                " (first bad event: " + field(rep, "first_bad_seq") + ")\n");
    }
    return rep.value("ok", false) ? 0 : 1;
  }
  auto show = [&](const json& ev) {
    print_out(a.json ? dump_json(ev) + "\n" : format_audit_event(ev));
  };
  if (!a.follow) {
    json res = TRY(c.call("GET", sandbox_target(a.id, "/audit")));
    for (auto& ev : res.value("events", json::array())) show(ev);
    return 0;
  }
  auto conn = TRY(c.connect());
  TRY_VOID(conn.send("GET", sandbox_target(a.id, "/audit?follow=true"), ""));
  auto status = conn.read_head();
  if (!status) {
    if (int sig = received_signal(); sig != 0) return 128 + sig;
    return fail(std::move(status.error()));
  }
  if (*status != 200) return fail(api_error(*status, conn.read_body(1 << 20).value_or("")));
  std::string pending;
  char buf[64 * 1024];
  for (;;) {
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::string text = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (text.empty()) continue;  // keep-alive
      auto ev = json::parse(text, nullptr, false);
      if (!ev.is_object()) return fail(Code::kProtocol, "the daemon sent a malformed event");
      // The daemon ends a stream whose token was revoked or expired with an error line (an
      // event always has a kind): report it as the error it is.
      if (ev.contains("error") && !ev.contains("kind")) {
        const json& e = ev["error"];
        std::string msg = e.is_object() && e.value("message", json()).is_string()
                              ? e["message"].get<std::string>()
                              : "the daemon ended the stream";
        bool auth = e.is_object() && e.value("code", json()) == "unauthenticated";
        return fail(auth ? Code::kUnauthenticated : Code::kProtocol, msg);
      }
      show(ev);
    }
    if (pending.size() > kMaxLine)
      return fail(Code::kProtocol, "the daemon sent an audit event larger than 64 MiB");
    auto n = conn.read_some(buf, sizeof buf);
    if (!n) {
      if (int sig = received_signal(); sig != 0) return 128 + sig;
      return fail(std::move(n.error()));
    }
    if (*n == 0) return 0;  // the sandbox was destroyed: its log is complete
    pending.append(buf, *n);
  }
}

}  // namespace space::cli
