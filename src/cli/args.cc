// CLI11 definitions of every `space` command and option, and the flag -> request conversions.
#include "cli/args.h"

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

#include "cli/client.h"
#include "common/units.h"
#include "proto/runtime_names.h"

namespace space::cli {
namespace {

// Which commands to define: all, or only the one being run (see parse_args).
class Want {
 public:
  explicit Want(std::string only) : only_(std::move(only)) {}
  bool operator()(std::string_view command) {
    bool yes = only_.empty() || only_ == command;
    matched_ = matched_ || yes;
    return yes;
  }
  // With `only` set: whether it named a command.
  bool matched() const { return matched_; }

 private:
  std::string only_;
  bool matched_ = false;
};

void add_sandbox_flags(CLI::App* sub, SandboxFlags& f) {
  sub->add_option("--runtime", f.runtime,
                  proto::runtime_names(" | ", " | ") + " (default " +
                      std::string(proto::kDefaultRuntime) + ")");
  sub->add_option("--image", f.image, "image name (default host)");
  sub->add_option("--profile", f.profile, "profile: egress policy and secrets (default test)");
  sub->add_option("--memory", f.memory, "memory limit, e.g. 512M (default 512M)");
  sub->add_option("--cpus", f.cpus, "CPUs, e.g. 1.5 (default 1)");
  sub->add_option("--pids", f.pids, "process limit (default 256)");
  sub->add_option("--disk", f.disk, "writable layer size, e.g. 2G (default 2G)");
  sub->add_option("--timeout", f.timeout, "lifetime, e.g. 30m; destroyed when it expires");
  sub->add_option("--env", f.env, "K=V environment of every command (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--secret", f.secrets, "credential NAME the sandbox may use (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--allow", f.allow, "HOST[:PORT] the sandbox may reach (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--workdir", f.workdir, "default working directory (default /root)");
  sub->add_option("--snapshot-every", f.snapshot_every,
                  "take a rolling snapshot this often, e.g. 10m (0 = off; default: the profile's)");
}

// Snapshots (docs/snapshots.md). `snapshot` takes a sandbox id, or `rm` and snapshot ids; its
// ID is checked after parsing, since CLI11 cannot require it only without the subcommand.
CLI::App* add_snapshot_commands(CLI::App& app, Args& a, Want& want) {
  CLI::App* snapshot = nullptr;
  if (want("snapshot")) {
    snapshot = app.add_subcommand(
        "snapshot",
        "snapshot a sandbox's files (a VM's whole machine) and print the snapshot id (or: "
        "snapshot rm SNAP...)");
    snapshot->add_option("id", a.id, "sandbox id");
    snapshot->add_option("--name", a.name, "name it (unique in the profile), e.g. before-migrate");
    snapshot->add_flag("--json", a.json, "print the snapshot as JSON");
    snapshot->footer("Usage: space snapshot ID [--name N] [--json] | space snapshot rm SNAP...");
    auto* rm = snapshot->add_subcommand("rm", "delete snapshots");
    rm->add_option("snaps", a.snaps, "snapshot ids or names")->required();
  }
  if (want("snapshots")) {
    auto* snapshots =
        app.add_subcommand("snapshots", "list a sandbox's snapshots (no ID: every snapshot)");
    snapshots->add_option("id", a.id, "sandbox id (also once destroyed)");
    snapshots->add_flag("--json", a.json, "print JSON");
  }
  if (want("rollback")) {
    auto* rollback = app.add_subcommand(
        "rollback",
        "put a sandbox back to a snapshot, in place (processes restart; a VM's resume)");
    rollback->add_option("id", a.id, "sandbox id")->required();
    rollback->add_option("snap", a.snap, "snapshot id or name")->required();
    rollback->add_flag("--json", a.json, "print the sandbox as JSON");
  }
  if (want("restore")) {
    auto* restore = app.add_subcommand("restore", "new sandbox from a snapshot; prints its id");
    restore->add_option("snap", a.snap, "snapshot id or name")->required();
    restore->add_option("--profile", a.sandbox.profile,
                        "profile (must be the snapshot's own; default: the snapshot's)");
    restore->add_flag("--json", a.json, "print the sandbox as JSON");
  }
  return snapshot;
}

void add_audit(CLI::App& app, Args& a, Want& want) {
  if (!want("audit")) return;
  auto* audit = app.add_subcommand("audit", "audit log of a sandbox (also once destroyed)");
  audit->add_option("id", a.id, "sandbox id")->required();
  audit->add_flag("--json", a.json, "print JSON Lines, one event per line");
  audit->add_flag("--follow,-f", a.follow, "keep printing new events until it is destroyed");
  audit->add_flag("--verify", a.verify, "verify the hash chain (exit 1 if it was tampered with)");
}

// API tokens (docs/api-auth.md).
CLI::App* add_token(CLI::App& app, Args& a, Want& want) {
  if (!want("token")) return nullptr;
  auto* token = app.add_subcommand("token", "manage API tokens (docs/api-auth.md)");
  token->require_subcommand(1);
  auto* create = token->add_subcommand("create", "make an API token; its text is shown once");
  create->add_option("--name", a.name, "what the token is for, e.g. ci-runner")->required();
  create->add_option("--profile", a.profiles, "profile it may use (repeatable; * = every profile)")
      ->required()
      ->allow_extra_args(false)
      ->delimiter(',');
  create
      ->add_option("--op", a.ops,
                   "operation it may do (repeatable): read, create, exec, files, lifecycle, "
                   "images, admin")
      ->required()
      ->allow_extra_args(false)
      ->delimiter(',');
  create->add_option("--ttl", a.ttl, "how long it is valid, e.g. 24h or 30d (at most 365d)")
      ->required();
  create->add_flag("--json", a.json, "print the token as JSON");
  create->add_flag("--e2b", a.e2b,
                   "print it as an E2B API key (e2b_...), for E2B_API_KEY with spaced's E2B "
                   "door (docs/e2b.md)");
  auto* ls = token->add_subcommand("ls", "list API tokens (never their secrets)");
  ls->add_flag("--json", a.json, "print JSON");
  auto* rm = token->add_subcommand("rm", "revoke an API token");
  rm->add_option("id", a.id, "token id (see `space token ls`)")->required();
  return token;
}

bool is_command_taking(const std::string& command) { return command == "run" || command == "exec"; }

struct Commands {
  std::unique_ptr<CLI::App> app;  // null: `only` named no command
  CLI::App* image = nullptr;      // the commands with subcommands, where defined
  CLI::App* snapshot = nullptr;
  CLI::App* token = nullptr;
};

// The `space` app with every command, or with `only` set just that one.
Commands define_commands(Args& a, const std::string& only) {
  Commands c;
  Want want(only);
  c.app = std::make_unique<CLI::App>(
      "space: disposable, isolated sandboxes for agent code.\n"
      "Talks to spaced over $SPACE_SOCKET (default /run/space/space.sock), or over\n"
      "$SPACE_API (http://127.0.0.1:PORT, its TCP listener, or https://HOST:PORT with\n"
      "api_tls; $SPACE_CA names a CA file to trust); sends $SPACE_TOKEN if set.",
      "space");
  CLI::App& app = *c.app;
  app.set_version_flag("--version", "space 0.1.0");
  app.require_subcommand(1);
  app.footer(
      "Exit codes: the command's own; 125 when SPACE itself failed; 126/127 when the "
      "command could not be run.");

  if (want("run")) {
    auto* run = app.add_subcommand("run", "create a sandbox, run CMD in it, destroy it");
    add_sandbox_flags(run, a.sandbox);
    run->add_option("cmd", a.cmd,
                    "command and arguments (after --); none: the image's Entrypoint + Cmd");
    run->footer("Usage: space run [OPTIONS] -- CMD [ARGS...]");
  }

  if (want("create")) {
    auto* create = app.add_subcommand("create", "create a sandbox and print its id");
    add_sandbox_flags(create, a.sandbox);
    create->add_flag("--json", a.json, "print the sandbox as JSON");
  }

  if (want("exec")) {
    auto* exec = app.add_subcommand("exec", "run CMD in an existing sandbox");
    exec->add_option("id", a.id, "sandbox id")->required();
    exec->add_option("cmd", a.cmd, "command and arguments (after --)");
    exec->add_option("--timeout", a.timeout, "kill the command after this long, e.g. 30s");
    exec->add_option("--env", a.env, "K=V (repeatable)")->allow_extra_args(false);
    exec->add_option("--cwd", a.cwd, "working directory inside the sandbox");
    exec->add_option("--user,-u", a.user, "run as this user: a name, UID or UID:GID");
    exec->add_flag("--tty,-t", a.tty,
                   "run CMD on a terminal (raw keys, window size, Ctrl-C), e.g. -it -- bash");
    exec->add_flag("--interactive,-i", a.interactive,
                   "send stdin even when it is a terminal (with -t it always is)");
    exec->add_flag("--detach", a.detach,
                   "start in the background and print its pid (see `space logs`, `space wait`)");
    exec->add_flag("--snapshot", a.snapshot, "snapshot the sandbox before running CMD");
    exec->footer("Usage: space exec ID [OPTIONS] -- CMD [ARGS...]");
  }

  if (want("ps")) {
    auto* ps = app.add_subcommand("ps", "list the processes of a sandbox");
    ps->add_option("id", a.id, "sandbox id")->required();
    ps->add_flag("--json", a.json, "print JSON");
  }

  if (want("kill")) {
    auto* kill = app.add_subcommand("kill", "send a signal to a process in a sandbox");
    kill->add_option("id", a.id, "sandbox id")->required();
    kill->add_option("pid", a.pid, "pid inside the sandbox (see `space ps ID`)")->required();
    kill->add_option("--signal,-s", a.signal, "signal number or name (default TERM)");
  }

  if (want("logs")) {
    auto* logs = app.add_subcommand("logs", "print the output of a detached command");
    logs->add_option("id", a.id, "sandbox id")->required();
    logs->add_option("pid", a.pid, "its pid (what `space exec --detach` printed)")->required();
    logs->add_flag("--follow,-f", a.follow, "keep printing new output until the command ends");
  }

  if (want("wait")) {
    auto* wait = app.add_subcommand(
        "wait", "wait for a detached command to end and exit with its exit code");
    wait->add_option("id", a.id, "sandbox id")->required();
    wait->add_option("pid", a.pid, "its pid (what `space exec --detach` printed)")->required();
    wait->add_option("--timeout", a.timeout, "give up after this long (exit 124), e.g. 30s");
  }

  if (want("cp")) {
    auto* cp = app.add_subcommand("cp", "copy files or directories; either side may be ID:/path");
    cp->add_option("src", a.src, "source: a local path or ID:/path")->required();
    cp->add_option("dst", a.dst, "destination: a local path or ID:/path")->required();
  }

  if (want("ls")) {
    auto* ls = app.add_subcommand("ls", "list sandboxes");
    ls->add_flag("--json", a.json, "print JSON");
  }

  if (want("inspect")) {
    auto* inspect = app.add_subcommand("inspect", "show a sandbox as JSON");
    inspect->add_option("id", a.id, "sandbox id")->required();
    inspect->add_flag("--json", a.json, "print JSON (the default)");
  }

  if (want("rm")) {
    auto* rm = app.add_subcommand("rm", "destroy a sandbox");
    rm->add_option("id", a.id, "sandbox id")->required();
    rm->add_flag("--force,-f", a.force,
                 "also while commands run attached to a client (space exec)");
  }

  if (want("port")) {
    auto* port = app.add_subcommand(
        "port", "forward a port of this host to a port of a sandbox (until Ctrl-C)");
    port->add_option("id", a.id, "sandbox id")->required();
    port->add_option("port", a.pid, "the port inside the sandbox (on its 127.0.0.1)")->required();
    port->add_option("--listen", a.path,
                     "where to listen on this host: PORT or 127.0.0.1:PORT (default: the same "
                     "port; 0: any free one)");
  }

  if (want("timeout")) {
    auto* timeout = app.add_subcommand(
        "timeout", "set a sandbox's lifetime: it is destroyed DURATION from now");
    timeout->add_option("id", a.id, "sandbox id")->required();
    timeout->add_option("duration", a.timeout, "e.g. 30m, 2h")->required();
    timeout->add_flag("--json", a.json, "print the sandbox as JSON");
  }

  if (want("pause")) {
    auto* pause = app.add_subcommand("pause", "freeze every process of a sandbox");
    pause->add_option("id", a.id, "sandbox id")->required();
  }
  if (want("resume")) {
    auto* resume = app.add_subcommand("resume", "thaw a paused sandbox");
    resume->add_option("id", a.id, "sandbox id")->required();
  }

  if (want("diff")) {
    auto* diff = app.add_subcommand(
        "diff", "files added (A), changed (C), deleted (D) since creation or --since");
    diff->add_option("id", a.id, "sandbox id")->required();
    diff->add_option("--since", a.since, "compare with this snapshot (id or name) instead");
    diff->add_flag("--json", a.json, "print JSON");
  }

  if (want("mcp")) {
    auto* mcp =
        app.add_subcommand("mcp", "serve sandboxes as MCP tools on stdin/stdout (docs/mcp.md)");
    add_sandbox_flags(mcp, a.sandbox);
    mcp->add_flag("--keep", a.keep, "keep the session's sandboxes when it ends");
    mcp->add_option("--sandbox", a.sandboxes,
                    "also let the tools act on this existing sandbox (repeatable; it is not "
                    "destroyed when the session ends)")
        ->allow_extra_args(false);
    mcp->add_flag("--all-sandboxes", a.all_sandboxes,
                  "let the tools act on every sandbox this caller can reach (with the root "
                  "socket: every sandbox of the host)");
    mcp->footer(
        "The sandbox flags are the defaults of the sandboxes the session creates (lifetime: "
        "--timeout, default 1h). They are destroyed when the client closes stdin, unless --keep. "
        "The tools act only on the sandboxes the session created (and those restored from their "
        "snapshots), unless --sandbox or --all-sandboxes name more.");
  }

  if (want("doctor")) {
    auto* doctor = app.add_subcommand("doctor", "what this host supports");
    doctor->add_flag("--json", a.json, "print the raw JSON report");
    doctor->add_flag("--all", a.all,
                     "print every check (the seccomp table included), not the summary");
  }

  if (want("image")) {
    c.image = app.add_subcommand("image", "manage images");
    c.image->require_subcommand(1);
    auto* image_import = c.image->add_subcommand(
        "import", "import a root filesystem, an OCI image layout or archive, or a docker save");
    image_import->add_option("name", a.name, "image name")->required();
    image_import
        ->add_option("path", a.path,
                     "a directory (a root filesystem or an OCI layout), or a tarball "
                     "(plain, gz, xz, zst: a root filesystem, an oci-archive or a "
                     "`docker save`)")
        ->required();
    auto* image_ls = c.image->add_subcommand("ls", "list images");
    image_ls->add_flag("--json", a.json, "print JSON");
    auto* image_inspect =
        c.image->add_subcommand("inspect", "show an image: its format, digest and config (JSON)");
    image_inspect->add_option("name", a.name, "image name")->required();
    auto* image_rm = c.image->add_subcommand("rm", "remove an image");
    image_rm->add_option("name", a.name, "image name")->required();
    auto* image_vm = c.image->add_subcommand(
        "build-vm", "build (or reuse) the image's ext4 disk for VM runtimes (--runtime qemu)");
    image_vm->add_option("name", a.name, "image name")->required();
    image_vm->add_flag("--json", a.json, "print the disk as JSON");
    auto* build = c.image->add_subcommand(
        "build",
        "build an image from a Dockerfile; each RUN runs in a sandbox of the build profile");
    build->add_option("name", a.name, "image name, e.g. agent-env")->required();
    build->add_option("context", a.path,
                      "the build context: a directory, sent as a tar that honours its "
                      ".dockerignore (default .)");
    build->add_option("--file,-f", a.file, "the Dockerfile (default CONTEXT/Dockerfile)");
    build->add_option("--build-arg", a.build_args, "K=V of an ARG (repeatable; K alone: $K)")
        ->allow_extra_args(false);
    build->add_option("--profile", a.sandbox.profile,
                      "profile of the RUN steps' sandboxes: their egress and secrets (default: "
                      "build if configured, else test)");
    build
        ->add_option("--secret", a.sandbox.secrets,
                     "credential NAME the RUN steps may use through the gateway (repeatable)")
        ->allow_extra_args(false);
    build
        ->add_option("--allow", a.sandbox.allow,
                     "HOST[:PORT] the RUN steps may reach, within the profile (repeatable)")
        ->allow_extra_args(false);
    build->add_flag("--no-cache", a.no_cache, "run every step, even those the cache has");
    build->add_option("--step-timeout", a.step_timeout,
                      "kill a RUN step after this long, e.g. 10m (default 30m)");
    build->add_flag("--json", a.json,
                    "print the build's events on stdout as JSON Lines (the API's stream; the "
                    "last is {\"type\":\"done\",\"image\":{...}} or an \"error\")");
    build->add_flag("--quiet,-q", a.quiet, "do not show the steps' output");
    build->footer(
        "Usage: space image build NAME [-f DOCKERFILE] [CONTEXT] [--build-arg K=V]... "
        "[--profile P] [--secret NAME]... [--allow HOST]... [--no-cache] [--step-timeout DUR] "
        "[--json] [--quiet]\n"
        "A Dockerfile outside CONTEXT is sent along with it. Progress goes to stderr; a failed "
        "build exits 125 naming the failing step (docs/images.md).");
  }

  c.snapshot = add_snapshot_commands(app, a, want);
  add_audit(app, a, want);
  c.token = add_token(app, a, want);
  if (!only.empty() && !want.matched()) c.app.reset();
  return c;
}

}  // namespace

ParseOutcome parse_args(const std::vector<std::string>& argv) {
  ParseOutcome outcome;
  Args a;

  // Everything after the first `--` is the command to run, untouched by option parsing.
  std::vector<std::string> head;
  std::vector<std::string> tail;
  bool dashdash = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    if (!dashdash && argv[i] == "--") {
      dashdash = true;
    } else if (dashdash) {
      tail.push_back(argv[i]);
    } else {
      head.push_back(argv[i]);
    }
  }

  // Only the command being run is defined: CLI11 builds every option up front, and all ~25
  // commands cost ~100 us of each `space` start. Parsing is the same (the app takes exactly one
  // command, so no token after it can select another). Without a command first (--help,
  // --version, a typo) every command is defined, for the full help and the usual errors.
  Commands defined = define_commands(a, head.empty() ? "" : head.front());
  if (!defined.app && !head.empty() && !head.front().starts_with("-")) {
    // A word no command is (a typo): say so, rather than CLI11's "A subcommand is required".
    outcome.err = "space: unknown command \"" + head.front().substr(0, 64) +
                  "\"; `space --help` lists the commands\n";
    outcome.exit_code = kExitSpaceFailed;
    return outcome;
  }
  if (!defined.app) defined = define_commands(a, "");
  CLI::App& app = *defined.app;
  CLI::App* image = defined.image;
  CLI::App* snapshot = defined.snapshot;
  CLI::App* token = defined.token;

  std::vector<std::string> reversed(head.rbegin(), head.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    int code = app.exit(e, out, err);
    outcome.out = out.str();
    if (code == 0) {
      outcome.exit_code = 0;
      return outcome;
    }
    std::string what = e.what();
    std::string sub = head.empty() ? "" : head.front();
    std::string hint = "see `space " + (sub.empty() || sub[0] == '-' ? "" : sub + " ") + "--help`";
    if (is_command_taking(sub) && what.find("not expected") != std::string::npos) {
      hint = "put the command after `--`: space " + sub + (sub == "exec" ? " ID" : "") +
             " [OPTIONS] -- CMD [ARGS...]";
    }
    outcome.err = "space: " + what + "; " + hint + "\n";
    if (head.empty()) outcome.err = app.help() + "\n" + outcome.err;
    outcome.exit_code = kExitSpaceFailed;
    return outcome;
  }

  CLI::App* sub = app.get_subcommands().front();
  a.command = sub->get_name();
  if (sub == image) a.command += " " + image->get_subcommands().front()->get_name();
  if (sub == token) a.command += " " + token->get_subcommands().front()->get_name();
  if (sub == snapshot && !snapshot->get_subcommands().empty()) a.command += " rm";

  auto usage_error = [&](std::string message) {
    outcome.err = "space: " + message + "\n";
    outcome.exit_code = kExitSpaceFailed;
    return outcome;
  };
  if (is_command_taking(a.command)) {
    if (dashdash) {
      if (!a.cmd.empty()) {
        return usage_error("put the whole command after `--`: space " + a.command +
                           (a.command == "exec" ? " ID" : "") + " [OPTIONS] -- CMD [ARGS...]");
      }
      a.cmd = tail;
    }
    // `space run` without a command runs the image's default command (Entrypoint + Cmd); the
    // daemon refuses it where the image has none.
    if (a.cmd.empty() && a.command == "exec") {
      return usage_error("no command given: space " + a.command +
                         (a.command == "exec" ? " ID" : "") + " [OPTIONS] -- CMD [ARGS...]");
    }
  } else if (dashdash) {
    return usage_error("`space " + a.command + "` takes no command after `--`");
  }
  if (a.command == "snapshot" && a.id.empty()) {
    return usage_error(
        "id is required: space snapshot ID [--name N] [--json], or space snapshot rm SNAP...");
  }
  outcome.args = std::move(a);
  return outcome;
}

Result<nlohmann::json> env_object(const std::vector<std::string>& pairs, std::string_view flag) {
  nlohmann::json env = nlohmann::json::object();
  for (const auto& kv : pairs) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return fail(Code::kInvalidArgument,
                  "invalid " + std::string(flag) + " \"" + kv + "\": expected K=V, e.g. DEBUG=1");
    }
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

Result<nlohmann::json> create_body(const SandboxFlags& f) {
  nlohmann::json body = nlohmann::json::object();
  auto bad = [](std::string_view flag, Error e) {
    return fail(std::move(e).wrap("--" + std::string(flag)));
  };
  if (!f.runtime.empty()) {
    if (!proto::is_runtime_name(f.runtime)) {
      return fail(Code::kInvalidArgument,
                  "--runtime must be " + proto::runtime_names() + ", not \"" + f.runtime + "\"");
    }
    body["runtime"] = f.runtime;
  }
  if (!f.image.empty()) body["image"] = f.image;
  if (!f.profile.empty()) body["profile"] = f.profile;
  if (!f.memory.empty()) {
    auto v = parse_size(f.memory);
    if (!v) return bad("memory", std::move(v.error()));
    body["memory"] = *v;
  }
  if (!f.disk.empty()) {
    auto v = parse_size(f.disk);
    if (!v) return bad("disk", std::move(v.error()));
    body["disk"] = *v;
  }
  if (!f.cpus.empty()) {
    char* end = nullptr;
    double cpus = std::strtod(f.cpus.c_str(), &end);
    if (end == f.cpus.c_str() || *end != '\0' || !(cpus > 0) || cpus > 1024) {
      return fail(Code::kInvalidArgument,
                  "--cpus must be a number greater than 0 and at most 1024, e.g. 1.5; got \"" +
                      f.cpus + "\"");
    }
    body["cpus"] = cpus;
  }
  if (!f.pids.empty()) {
    char* end = nullptr;
    errno = 0;
    long long pids = std::strtoll(f.pids.c_str(), &end, 10);
    if (end == f.pids.c_str() || *end != '\0' || errno != 0 || pids < 8 || pids > 4194304) {
      return fail(Code::kInvalidArgument,
                  "--pids must be a whole number from 8 to 4194304; got \"" + f.pids + "\"");
    }
    body["pids"] = pids;
  }
  if (!f.timeout.empty()) {
    auto v = parse_duration(f.timeout);
    if (!v) return bad("timeout", std::move(v.error()));
    if (*v <= 0) return fail(Code::kInvalidArgument, "--timeout must be greater than 0");
    body["timeout"] = *v;
  }
  if (!f.env.empty()) body["env"] = TRY(env_object(f.env, "--env"));
  if (!f.secrets.empty()) body["secrets"] = f.secrets;
  if (!f.allow.empty()) body["allow"] = f.allow;
  if (!f.workdir.empty()) body["workdir"] = f.workdir;
  if (!f.snapshot_every.empty()) {
    auto v = parse_duration(f.snapshot_every);
    if (!v) return bad("snapshot-every", std::move(v.error()));
    if (*v != 0 && *v < 1) {
      return fail(Code::kInvalidArgument,
                  "--snapshot-every must be 0 (off) or at least 1s, e.g. 10m; got \"" +
                      f.snapshot_every + "\"");
    }
    body["snapshot_every"] = *v;
  }
  return body;
}

Result<nlohmann::json> exec_body(const Args& a) {
  nlohmann::json body = {{"cmd", a.cmd}};
  if (!a.env.empty()) body["env"] = TRY(env_object(a.env, "--env"));
  if (!a.cwd.empty()) body["cwd"] = a.cwd;
  if (!a.timeout.empty()) {
    auto v = parse_duration(a.timeout);
    if (!v) return fail(std::move(v.error()).wrap("--timeout"));
    if (*v <= 0) return fail(Code::kInvalidArgument, "--timeout must be greater than 0");
    body["timeout"] = *v;
  }
  if (a.detach) body["detach"] = true;
  if (a.snapshot) body["snapshot"] = true;
  if (!a.user.empty()) body["user"] = a.user;
  return body;
}

Result<std::string> build_query(const Args& a, std::string_view dockerfile) {
  auto no_comma = [](const std::vector<std::string>& items, std::string_view flag) -> Result<void> {
    for (const auto& item : items) {
      if (item.empty() || item.find(',') != std::string::npos) {
        return fail(Code::kInvalidArgument, "invalid " + std::string(flag) + " \"" + item +
                                                "\": give one name per flag, without commas");
      }
    }
    return {};
  };
  std::string q = "?dockerfile=" + url_encode(dockerfile);
  if (!a.sandbox.profile.empty()) q += "&profile=" + url_encode(a.sandbox.profile);
  if (a.no_cache) q += "&no_cache=true";
  if (!a.step_timeout.empty()) {
    auto v = parse_duration(a.step_timeout);
    if (!v) return fail(std::move(v.error()).wrap("--step-timeout"));
    if (*v <= 0 || *v > 86400) {
      return fail(Code::kInvalidArgument,
                  "--step-timeout must be greater than 0 and at most 24h, e.g. 10m; got \"" +
                      a.step_timeout + "\"");
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", *v);
    q += "&step_timeout=" + std::string(secs);
  }
  if (!a.build_args.empty()) {
    nlohmann::json args = nlohmann::json::object();
    for (const auto& kv : a.build_args) {
      size_t eq = kv.find('=');
      if (eq == 0) {
        return fail(Code::kInvalidArgument,
                    "invalid --build-arg \"" + kv + "\": expected K=V, e.g. PIP_VERSION=24.0");
      }
      if (eq != std::string::npos) {
        args[kv.substr(0, eq)] = kv.substr(eq + 1);
      } else if (const char* v = std::getenv(kv.c_str()); v != nullptr) {
        args[kv] = v;
      }
    }
    if (!args.empty()) {
      q += "&build_args=" +
           url_encode(args.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
  auto join = [](const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
    return out;
  };
  TRY_VOID(no_comma(a.sandbox.secrets, "--secret"));
  TRY_VOID(no_comma(a.sandbox.allow, "--allow"));
  if (!a.sandbox.secrets.empty()) q += "&secrets=" + url_encode(join(a.sandbox.secrets));
  if (!a.sandbox.allow.empty()) q += "&allow=" + url_encode(join(a.sandbox.allow));
  return q;
}

Result<int> parse_signal(std::string_view text) {
  if (text.empty()) return SIGTERM;
  char* end = nullptr;
  std::string s(text);
  long n = std::strtol(s.c_str(), &end, 10);
  if (end != s.c_str() && *end == '\0') {
    if (n >= 1 && n <= 64) return static_cast<int>(n);
  } else {
    std::string name;
    for (char c : s) name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (name.rfind("SIG", 0) == 0) name.erase(0, 3);
    for (int sig = 1; sig < NSIG; ++sig) {
      const char* abbrev = sigabbrev_np(sig);
      if (abbrev != nullptr && name == abbrev) return sig;
    }
  }
  return fail(Code::kInvalidArgument, "unknown signal \"" + s +
                                          "\"; use a number (1-64) or a name such as TERM, KILL, "
                                          "INT, HUP");
}

}  // namespace space::cli
