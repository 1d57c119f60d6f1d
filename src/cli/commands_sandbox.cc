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
  render_report(report, 0, out);
  print(out);
  return 0;
}

}  // namespace space::cli
