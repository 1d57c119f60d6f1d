// The `space` command line (DESIGN.md §1), parsed with CLI11 into plain structs so parsing can
// be tested without a daemon, and the flag values turned into API request bodies (validated
// here, before anything is sent: `--memory 5Q` fails at once with a clear message).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::cli {

// OPTIONS of run and create, as typed. `profile` is also restore's --profile.
struct SandboxFlags {
  std::string runtime, image, profile, memory, cpus, pids, disk, timeout, workdir;
  std::vector<std::string> env, secrets, allow;
  std::string snapshot_every;  // rolling snapshots: "10m", "0" = off; "" = the profile's default
};

struct Args {
  // "run", "create", "exec", "ps", "kill", "logs", "wait", "cp", "ls", "inspect", "rm", "pause",
  // "resume", "diff", "doctor", "image import", "image ls", "image rm", "image build", "snapshot",
  // "snapshot rm",
  // "snapshots", "rollback", "restore", "audit", "token create", "token ls", "token rm", "mcp".
  std::string command;
  SandboxFlags sandbox;            // run, create; restore --profile is sandbox.profile
  std::string id;                  // sandbox id (most commands; optional for `snapshots`)
  std::string pid, signal;         // kill, logs, wait
  std::string src, dst;            // cp
  std::string name, path;          // image import NAME PATH; image rm NAME; snapshot --name
  std::string snap;                // rollback ID SNAP / restore SNAP
  std::vector<std::string> snaps;  // snapshot rm SNAP...
  std::string since;               // diff --since SNAP
  std::string timeout, cwd;        // exec
  std::string user;                // exec --user
  std::vector<std::string> env;    // exec --env
  std::vector<std::string> cmd;    // run/exec: the command after `--`
  bool json = false, force = false, detach = false, snapshot = false, verify = false;
  bool all = false;                       // doctor: every check, not the summary
  bool follow = false;                    // audit --follow, logs --follow
  bool tty = false, interactive = false;  // exec -t, -i
  bool keep = false;                      // mcp --keep
  std::vector<std::string> sandboxes;     // mcp --sandbox ID (repeatable)
  bool all_sandboxes = false;             // mcp --all-sandboxes
  // token create: --profile and --op (repeatable), --ttl; --name is `name`, token rm's ID `id`
  std::vector<std::string> profiles, ops;
  std::string ttl;
  bool e2b = false;  // token create --e2b: print it as an E2B API key (docs/e2b.md)
  // image build NAME [CONTEXT] (CONTEXT in `path`, default "."): -f, --build-arg (repeatable),
  // --step-timeout, --no-cache, --quiet; --profile, --secret and --allow in `sandbox`.
  std::string file;
  std::vector<std::string> build_args;
  std::string step_timeout;
  bool no_cache = false, quiet = false;
};

struct ParseOutcome {
  std::optional<Args> args;  // set: run the command
  int exit_code = 0;         // otherwise exit with this: 0 after --help, 125 on a usage error
  std::string out, err;      // text to print on stdout / stderr
};

ParseOutcome parse_args(const std::vector<std::string>& argv);

// Body of POST /v1/sandboxes from run/create flags.
Result<nlohmann::json> create_body(const SandboxFlags& flags);
// {"K":"V",...} from repeated K=V flags; `flag` names the option in messages.
Result<nlohmann::json> env_object(const std::vector<std::string>& pairs, std::string_view flag);
// Body of POST .../exec (without "stdin", which the caller decides).
Result<nlohmann::json> exec_body(const Args& args);
// The query of POST /v1/images/{name}/build from `image build`'s flags ("?dockerfile=..."),
// `dockerfile` being the Dockerfile's name inside the context. --build-arg K without "=V" takes
// K's value from our environment (and is left out where it is unset), as docker build does.
Result<std::string> build_query(const Args& args, std::string_view dockerfile);
// "9", "KILL", "SIGKILL", "kill" -> 9.
Result<int> parse_signal(std::string_view text);

}  // namespace space::cli
