// The CLI's entry point: signal handling, argument parsing, dispatch to a command, and the one
// place that turns an Error into "space: ..." and exit code 125.
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/signals.h"

namespace space::cli {

std::string sandbox_target(const std::string& id, std::string_view suffix) {
  return "/v1/sandboxes/" + url_encode(id) + std::string(suffix);
}

std::string snapshot_target(const std::string& snap, std::string_view suffix) {
  return "/v1/snapshots/" + url_encode(snap) + std::string(suffix);
}

Result<int> run_command(const Args& a, const Client& c) {
  const std::string& cmd = a.command;
  if (cmd == "run") return cmd_run(a, c);
  if (cmd == "create") return cmd_create(a, c);
  if (cmd == "exec") return a.tty ? cmd_exec_terminal(a, c) : cmd_exec(a, c);
  if (cmd == "ps") return cmd_ps(a, c);
  if (cmd == "kill") return cmd_kill(a, c);
  if (cmd == "logs") return cmd_logs(a, c);
  if (cmd == "wait") return cmd_wait(a, c);
  if (cmd == "cp") return cmd_cp(a, c);
  if (cmd == "ls") return cmd_ls(a, c);
  if (cmd == "inspect") return cmd_inspect(a, c);
  if (cmd == "rm") return cmd_rm(a, c);
  if (cmd == "pause") return cmd_pause(a, c);
  if (cmd == "timeout") return cmd_timeout(a, c);
  if (cmd == "port") return cmd_port(a, c);
  if (cmd == "resume") return cmd_resume(a, c);
  if (cmd == "diff") return cmd_diff(a, c);
  if (cmd == "doctor") return cmd_doctor(a, c);
  if (cmd == "mcp") return cmd_mcp(a, c);
  if (cmd == "image import") return cmd_image_import(a, c);
  if (cmd == "image ls") return cmd_image_ls(a, c);
  if (cmd == "image inspect") return cmd_image_inspect(a, c);
  if (cmd == "image rm") return cmd_image_rm(a, c);
  if (cmd == "image build-vm") return cmd_image_build_vm(a, c);
  if (cmd == "image build") return cmd_image_build(a, c);
  if (cmd == "snapshot") return cmd_snapshot(a, c);
  if (cmd == "snapshot rm") return cmd_snapshot_rm(a, c);
  if (cmd == "snapshots") return cmd_snapshots(a, c);
  if (cmd == "rollback") return cmd_rollback(a, c);
  if (cmd == "restore") return cmd_restore(a, c);
  if (cmd == "audit") return cmd_audit(a, c);
  if (cmd == "token create") return cmd_token_create(a, c);
  if (cmd == "token ls") return cmd_token_ls(a, c);
  if (cmd == "token rm") return cmd_token_rm(a, c);
  // parse_args() only produces the commands above.
  return fail(Code::kInternal, "no handler for `space " + cmd + "`");
}

int main(int argc, char** argv) {
  install_signal_handling();
  std::vector<std::string> args(argv, argv + argc);
  ParseOutcome parsed = parse_args(args);
  if (!parsed.args) {
    write_all(STDOUT_FILENO, parsed.out);
    write_all(STDERR_FILENO, parsed.err);
    return parsed.exit_code;
  }
  Client client(address_from_env(), interrupt_fd(), token_from_env());
  Result<int> r = run_command(*parsed.args, client);
  std::fflush(stdout);
  if (!r) {
    if (int sig = received_signal(); sig != 0) return 128 + sig;
    return report(r.error());
  }
  return *r;
}

}  // namespace space::cli
