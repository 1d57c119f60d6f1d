// Sandbox commands: create, ls, inspect, rm, pause, resume, diff, ps, kill, doctor.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/daemon_start.h"
#include "cli/output.h"
#include "common/clock.h"

namespace space::cli {
namespace {

using nlohmann::json;

// Human rendering of the doctor report: nested objects as indented sections, booleans as
// yes/no, arrays of scalars on one line; keys and values escaped.
void render_report(const json& j, int indent, std::string& out) {
  for (const auto& [name, value] : j.items()) {
    std::string pad(static_cast<size_t>(indent), ' ');
    std::string key = escape_text(name);
    if (value.is_object()) {
      out += pad + key + ":\n";
      render_report(value, indent + 2, out);
    } else if (value.is_boolean()) {
      out += pad + key + ": " + (value.get<bool>() ? "yes" : "no") + "\n";
    } else if (value.is_array()) {
      std::string items;
      bool scalars = true;
      for (const auto& item : value) {
        if (item.is_structured()) scalars = false;
        items += (items.empty() ? "" : ", ") + escape_text(cell(item));
      }
      if (scalars) {
        out += pad + key + ": " + (items.empty() ? "-" : items) + "\n";
      } else {
        // A list of objects: "- first: value" then the other fields aligned under it.
        out += pad + key + ":\n";
        for (const auto& item : value) {
          std::string sub;
          if (item.is_object()) {
            render_report(item, indent + 4, sub);
          } else {
            sub =
                std::string(static_cast<size_t>(indent) + 4, ' ') + escape_text(cell(item)) + "\n";
          }
          sub.replace(static_cast<size_t>(indent) + 2, 1, "-");
          out += sub;
        }
      }
    } else {
      out += pad + key + ": " + escape_text(cell(value)) + "\n";
    }
  }
}

// `space doctor` without --all: a dozen lines saying what works and, where something does not,
// why; every check is in --all and --json.
void render_doctor_summary(const json& r, std::string& out) {
  auto str = [](const json& j, const char* key) {
    return j.is_object() && j.contains(key) && !j[key].is_null() ? escape_text(cell(j[key]))
                                                                 : std::string();
  };
  out += "spaced " + str(r, "version") + ", state " + str(r, "state_dir") + "\n";
  out += "runtimes:\n";
  const json rts = r.value("runtimes", json::object());
  for (const auto& [name, rt] : rts.items()) {
    std::string line =
        "  " + escape_text(name) + std::string(name.size() < 12 ? 12 - name.size() : 1, ' ');
    if (name == "linux") {
      // Each facility a linux sandbox needs, and whether the host has it.
      std::vector<std::string> bad;
      for (const auto& [check, v] : rt.items())
        if (v.is_object() && v.contains("ok") && v["ok"].is_boolean() && !v["ok"].get<bool>())
          bad.push_back(escape_text(check) +
                        (v.contains("reason") ? " (" + str(v, "reason") + ")" : ""));
      if (rt.contains("agent") && !rt["agent"].value("found", true))
        bad.push_back("space-agent not found");
      const json cg = rt.value("cgroups", json::object());
      line += bad.empty() ? "available" : "NOT available";
      line += ": kernel " + str(rt, "kernel") + ", cgroups " + str(cg, "mode") +
              ", user namespaces, Landlock ABI " + str(rt.value("landlock", json::object()), "abi");
      for (auto& b : bad) line += "; missing: " + b;
    } else if (rt.value("available", false)) {
      line += "available";
      // Under TCG the KVM line below says why.
      if (std::string acc = str(rt, "accelerator"); !acc.empty())
        line += acc == "tcg" ? " (TCG emulation: correct but slow; KVM below says why)"
                             : " (" + acc + ")";
    } else {
      line += "not available: " + str(rt, "reason");
    }
    out += line + "\n";
  }
  const json kvm = r.value("host", json::object()).value("kvm", json::object());
  out += std::string("KVM: ") +
         (kvm.value("usable", false) ? "usable" : "not usable: " + str(kvm, "reason")) + "\n";
  const json snaps = r.value("snapshots", json::object());
  const json by_runtime = snaps.value("by_runtime", json::object());
  const json stores = snaps.value("stores", json::object());
  const json criu = r.value("host", json::object()).value("criu", json::object());
  out += "snapshots:";
  for (const auto& [name, sn] : by_runtime.items())
    out += " " + escape_text(name) + " " + str(sn, "contents") + " (processes " +
           str(sn, "processes") + ");";
  out +=
      criu.value("found", false) ? " CRIU " + str(criu, "version") + "\n" : " CRIU not installed\n";
  for (const auto& [profile, st] : stores.items()) {
    if (st.value("quarantined_chunks", 0) > 0 || !st.value("gc_blocked", json()).is_null())
      out += "  store of profile " + escape_text(profile) + ": " +
             std::to_string(st.value("quarantined_chunks", 0)) + " corrupt chunks moved aside" +
             (st["gc_blocked"].is_null() ? "" : "; gc blocked: " + str(st, "gc_blocked")) + "\n";
  }
  const json pools = r.value("pools", json::array());
  if (pools.empty()) out += "warm pools: none\n";
  for (const auto& p : pools) {
    out += "warm pool " + str(p, "profile") + "/" + str(p, "image") + " (" + str(p, "runtime") +
           "): " + str(p, "ready") + " of " + str(p, "size") + " ready";
    if (std::string e = str(p, "last_error"); !e.empty()) out += "; last refill failed: " + e;
    out += "\n";
  }
  out += "(`space doctor --all` shows every check, `--json` the report as JSON)\n";
}

}  // namespace

Result<int> cmd_create(const Args& a, const Client& c) {
  json body = TRY(create_body(a.sandbox));
  Connection conn = TRY(ensure_daemon(c));
  json sandbox = TRY(conn.call("POST", "/v1/sandboxes", body));
  if (a.json) {
    print_json(sandbox);
  } else {
    print(escape_text(sandbox.value("id", "")) + "\n");
  }
  return 0;
}

Result<int> cmd_ls(const Args& a, const Client& c) {
  json res = TRY(c.call("GET", "/v1/sandboxes"));
  json list = res.value("sandboxes", json::array());
  if (a.json) {
    print_json(list);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "STATE", "RUNTIME", "IMAGE", "PROFILE", "AGE"}};
  double now = now_s();
  for (const auto& s : list) {
    rows.push_back({cell(s.value("id", json())), cell(s.value("state", json())),
                    cell(s.value("runtime", json())), cell(s.value("image", json())),
                    cell(s.value("profile", json())), age(s.value("created_at", json()), now)});
  }
  print(format_table(rows));
  return 0;
}

Result<int> cmd_inspect(const Args& a, const Client& c) {
  json sandbox = TRY(c.call("GET", sandbox_target(a.id)));
  print_json(sandbox);
  return 0;
}

Result<int> cmd_rm(const Args& a, const Client& c) {
  TRY(c.call("DELETE", sandbox_target(a.id, a.force ? "?force=true" : "")));
  return 0;
}

Result<int> cmd_pause(const Args& a, const Client& c) {
  TRY(c.call("POST", sandbox_target(a.id, "/pause")));
  return 0;
}

Result<int> cmd_timeout(const Args& a, const Client& c) {
  json sb = TRY(c.call("POST", sandbox_target(a.id, "/timeout"), json{{"timeout", a.timeout}}));
  if (a.json) {
    write_all(STDOUT_FILENO, sb.dump() + "\n");
  } else {
    write_all(STDOUT_FILENO, "sandbox " + escape_text(a.id) + " now expires at " +
                                 escape_text(sb.value("expires_at", "?")) + "\n");
  }
  return 0;
}

Result<int> cmd_resume(const Args& a, const Client& c) {
  TRY(c.call("POST", sandbox_target(a.id, "/resume")));
  return 0;
}

Result<int> cmd_diff(const Args& a, const Client& c) {
  std::string query = a.since.empty() ? "" : "?since=" + url_encode(a.since);
  json diff = TRY(c.call("GET", sandbox_target(a.id, "/diff" + query)));
  if (a.json) {
    print_json(diff);
    return 0;
  }
  std::vector<std::pair<std::string, char>> lines;
  for (auto [key, mark] :
       {std::pair{"added", 'A'}, std::pair{"changed", 'C'}, std::pair{"deleted", 'D'}}) {
    for (const auto& p : diff.value(key, json::array())) {
      if (p.is_string()) lines.emplace_back(p.get<std::string>(), mark);
    }
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& [path, mark] : lines) {
    out += std::string(1, mark) + " " + escape_text(path) + "\n";
  }
  print(out);
  return 0;
}

Result<int> cmd_ps(const Args& a, const Client& c) {
  json res = TRY(c.call("GET", sandbox_target(a.id, "/processes")));
  json procs = res.value("processes", json::array());
  if (a.json) {
    print_json(procs);
    return 0;
  }
  // format_table escapes the cells: argv is whatever the process wrote there.
  std::vector<std::vector<std::string>> rows = {{"PID", "PPID", "UID", "STATE", "COMMAND"}};
  for (const auto& p : procs) {
    std::string command;
    for (const auto& arg : p.value("argv", json::array())) {
      command += (command.empty() ? "" : " ") + cell(arg);
    }
    rows.push_back({cell(p.value("pid", json())), cell(p.value("ppid", json())),
                    cell(p.value("uid", json())), cell(p.value("state", json())), command});
  }
  print(format_table(rows));
  return 0;
}

Result<int> cmd_kill(const Args& a, const Client& c) {
  int sig = TRY(parse_signal(a.signal));
  if (a.pid.empty() || a.pid.find_first_not_of("0123456789") != std::string::npos) {
    return fail(Code::kInvalidArgument,
                "bad pid \"" + a.pid + "\"; `space ps " + a.id + "` lists the processes");
  }
  TRY(c.call("DELETE",
             sandbox_target(a.id, "/processes/" + a.pid + "?signal=" + std::to_string(sig))));
  return 0;
}

Result<int> cmd_doctor(const Args& a, const Client& c) {
  json report = TRY(c.call("GET", "/v1/doctor"));
  if (a.json) {
    print_json(report);
    return 0;
  }
  std::string out;
  if (a.all)
    render_report(report, 0, out);
  else
    render_doctor_summary(report, out);
  print(out);
  return 0;
}

}  // namespace space::cli
