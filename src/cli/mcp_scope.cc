// `space mcp`: which sandboxes and snapshots a session may act on (mcp.h, Scope), and the
// errors a model reads, phrased for it. spaced's messages end with hints for the CLI ("`space ls`
// lists sandboxes"); a model has tools, not a shell on the host, so those hints are rewritten
// to name tools, and one that only the operator can follow is marked as such.
#include <algorithm>
#include <string>

#include "cli/commands.h"
#include "cli/mcp.h"

namespace space::cli::mcp {
namespace {

// An id as shown back in a message: it came from the model.
std::string shown_id(std::string_view id) {
  std::string s(id.substr(0, 80));
  if (id.size() > 80) s += "...";
  return s;
}

bool contains(const std::vector<std::string>& v, std::string_view id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

// How the operator widens the scope: the end of both refusals.
std::string widen_hint(std::string_view sandbox) {
  return "If this session is meant to work in " + shown_id(sandbox) +
         ", its operator has to start the server (space mcp) with --sandbox " + shown_id(sandbox) +
         " (or --all-sandboxes)";
}

// Every "`space VERB ARG`" followed by `tail` in `m` becomes make(ARG).
template <class Make>
void rewrite_command(std::string& m, std::string_view verb, std::string_view tail, Make make) {
  const std::string open = "`space " + std::string(verb) + " ";
  for (size_t at = m.find(open); at != std::string::npos; at = m.find(open, at)) {
    size_t arg = at + open.size();
    size_t close = m.find('`', arg);
    if (close == std::string::npos || m.compare(close + 1, tail.size(), tail) != 0) {
      at = arg;
      continue;
    }
    std::string with = make(m.substr(arg, close - arg));
    m.replace(at, close + 1 + tail.size() - at, with);
    at += with.size();
  }
}

void replace_all(std::string& m, std::string_view from, std::string_view to) {
  for (size_t at = m.find(from); at != std::string::npos; at = m.find(from, at + to.size()))
    m.replace(at, from.size(), to);
}

}  // namespace

bool Scope::created_here(std::string_view id) const { return contains(created_, id); }

bool Scope::allows(std::string_view id) const {
  return all_ || contains(created_, id) || contains(named_, id);
}

Result<void> Scope::check(std::string_view id) const {
  if (allows(id)) return {};
  return fail(Code::kPermissionDenied,
              "sandbox " + shown_id(id) +
                  " is not one of this session's sandboxes. This MCP server acts only on the "
                  "sandboxes its session created (and any its operator named), so that an id "
                  "seen in a file, a web page or another task's output cannot reach another "
                  "task's sandbox. Use one of this session's sandboxes (list_sandboxes lists "
                  "them) or make one with create_sandbox. " +
                  widen_hint(id) + ".");
}

Result<void> Scope::check_snapshot(std::string_view snap, std::string_view sandbox) const {
  if (allows(sandbox)) return {};
  return fail(Code::kPermissionDenied,
              "snapshot " + shown_id(snap) + " was taken of sandbox " + shown_id(sandbox) +
                  ", which is not one of this session's sandboxes; this MCP server only rolls "
                  "back to and restores snapshots of its session's sandboxes. list_snapshots "
                  "lists those. " +
                  widen_hint(sandbox) + ".");
}

Result<json> scoped_snapshot(const Session& s, const std::string& snap) {
  // With every sandbox in scope there is nothing to check; spaced resolves the name itself.
  if (s.scope.all()) return json{{"id", snap}};
  json rec = TRY(s.client.call("GET", snapshot_target(snap)));
  std::string id = rec.value("id", ""), sandbox = rec.value("sandbox", "");
  if (id.empty()) return fail(Code::kProtocol, "the daemon's snapshot record has no id");
  TRY_VOID(s.scope.check_snapshot(snap, sandbox));
  return rec;
}

std::string for_model(std::string m) {
  // spaced's hints (src/api, src/daemon), each as the model can follow it.
  struct Rewrite {
    std::string_view from, to;
  };
  static constexpr Rewrite kRewrites[] = {
      {"`space ls` lists sandboxes", "list_sandboxes lists this session's sandboxes"},
      {"`space snapshots ID` lists a sandbox's snapshots",
       "list_snapshots lists the snapshots of this session's sandboxes"},
      {"`space snapshots ID` lists them", "list_snapshots lists them"},
      {"name it by its id (`space snapshots ID`)", "name it by its id (list_snapshots shows it)"},
      {"create a new one with `space create`", "create_sandbox makes a new one"},
      {"reach its servers with space exec, e.g. curl",
       "reach its servers with run_command, e.g. curl"},
      {"`space image ls` lists images, `space image import NAME PATH` adds one",
       "leave \"image\" out for the default one, or ask the user which images this host has"},
      {" (`space doctor` explains what the host supports)", ""},
  };
  for (const auto& r : kRewrites) replace_all(m, r.from, r.to);
  rewrite_command(m, "restore", "` makes a sandbox of its own", [](const std::string& snap) {
    return "restore_snapshot with snapshot " + snap + " makes a sandbox of its own";
  });
  rewrite_command(m, "restore", "` brings back its state before", [](const std::string& snap) {
    return "restore_snapshot with snapshot " + snap + " brings back its state before";
  });
  rewrite_command(m, "resume", "` first", [](const std::string&) {
    return "it was paused from outside this session, and only the user can resume it";
  });
  // A hint left that names the CLI: only whoever runs spaced's host can follow it.
  if (m.find("`space ") != std::string::npos)
    m += " (a `space ...` command above is the command line on the host, for the user; this "
         "session's tools cannot run it)";
  return m;
}

}  // namespace space::cli::mcp
