// What the files of `space mcp` share. mcp.cc: the JSON-RPC loop, the tools' table and the
// sandbox, file and snapshot tools; mcp_scope.cc: which sandboxes and snapshots a session may act
// on, and errors phrased for a model; mcp_exec.cc: commands and code, with or without a
// terminal; mcp_ports.cc: a sandbox's ports, waited for and asked over HTTP.
//
// Everything lives in namespace space::cli::mcp: the CLI compiles in unity batches, and its
// files' internal names must not meet (CMakeLists.txt, "Unity builds").
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "cli/client.h"
#include "common/error.h"

namespace space::cli::mcp {

using nlohmann::json;

inline constexpr size_t kMaxOutputShown = 32u << 10;   // per stream, in a tool's text answer
inline constexpr const char* kDefaultLifetime = "1h";  // of sandboxes this session creates

// The sandboxes a session may act on: those it created (create_sandbox, restore_snapshot, or a
// tool's first use), the ones its operator named (--sandbox), or every one (--all-sandboxes). A
// snapshot is in scope when the sandbox it was taken of is. A model that guesses an id, or is
// fed one (a file, a web page, another tool's output), reaches nothing else: the refusal comes
// before spaced is asked, the same for an id that exists and one that does not.
class Scope {
 public:
  Scope(std::vector<std::string> named, bool all) : named_(std::move(named)), all_(all) {}

  // A sandbox this session made. It stays in scope once destroyed: its snapshots can still be
  // listed and restored.
  void add_created(const std::string& id) { created_.push_back(id); }
  bool created_here(std::string_view id) const;
  bool allows(std::string_view id) const;
  // Nothing, or the refusal a tool answers for a sandbox out of scope: why, and what to do.
  Result<void> check(std::string_view id) const;
  // The refusal for a snapshot of a sandbox out of scope.
  Result<void> check_snapshot(std::string_view snap, std::string_view sandbox) const;

  bool all() const { return all_; }
  const std::vector<std::string>& named() const { return named_; }

 private:
  std::vector<std::string> created_;  // oldest first
  std::vector<std::string> named_;    // --sandbox
  bool all_;                          // --all-sandboxes
};

struct Session {
  const Args& args;
  const Client& client;
  Scope scope;
  std::vector<std::string> owned;  // created here and still there: destroyed at the end
  int code_files = 0;              // run_code's file names
};

// ---- results and arguments (mcp.cc) ----------------------------------------------------------

json tool_result(std::string text, json structured = nullptr);
// A failed tool call: a result the model sees (isError), not a protocol error; the message goes
// through for_model().
json tool_error(const Error& e);

Result<std::string> str_arg(const json& a, const char* key, bool required = true,
                            std::string fallback = "");
// A number from lo to hi, `fallback` when absent.
Result<double> number_arg(const json& a, const char* key, double fallback, double lo, double hi);
// A whole number from lo to hi; required.
Result<int> int_arg(const json& a, const char* key, int lo, int hi);
Result<bool> bool_arg(const json& a, const char* key);

// Text for the model: valid UTF-8 as is, anything else as a note.
std::string printable(const std::string& s);

// A command's output as a tool shows it: the first and the last kMaxOutputShown / 2 bytes,
// with how much was cut in between.
class Capture {
 public:
  void add(std::string_view d);
  std::string str() const;

 private:
  static constexpr size_t kHalf = kMaxOutputShown / 2;
  std::string head_, tail_;
  size_t total_ = 0;
};

// The sandbox a tool acts on: "sandbox_id" if in scope; else the session's newest, else the
// first --sandbox, else a new one.
Result<std::string> target_sandbox(Session& s, const json& a);

// ---- scope (mcp_scope.cc) --------------------------------------------------------------------

// The snapshot `snap` (an id or a name) if it was taken of a sandbox in scope: its record, whose
// "id" the caller uses from then on (a name could be given to another snapshot in between).
Result<json> scoped_snapshot(const Session& s, const std::string& snap);
// An error message of spaced or of this CLI, phrased for the model: hints that name `space`
// commands name this server's tools instead, and a hint only the operator can follow says so.
std::string for_model(std::string message);

// ---- commands (mcp_exec.cc) ------------------------------------------------------------------

Result<json> tool_run_command(Session& s, const json& a);
Result<json> tool_run_code(Session& s, const json& a);
// PUT a file into the sandbox, with its parent directories.
Result<void> put_file(const Session& s, const std::string& id, const std::string& path,
                      const std::string& data);

// ---- ports (mcp_ports.cc) --------------------------------------------------------------------

Result<json> tool_wait_for_port(Session& s, const json& a);
Result<json> tool_http_request(Session& s, const json& a);

}  // namespace space::cli::mcp
