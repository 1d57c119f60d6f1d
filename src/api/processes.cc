// Handlers for the processes of a sandbox: list them, signal one.
#include <csignal>

#include "api/handlers.h"

namespace space::api::handlers {

Result<void> list_processes(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  nlohmann::json procs = TRY(ctx.service.processes(id));
  return ex.respond_json(http::status::ok, {{"processes", std::move(procs)}});
}

Result<void> kill_process(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  int pid = TRY(parse_pid(ex.param("pid")));
  int sig = TRY(parse_signal_param(ex.target(), "signal", SIGTERM));
  TRY_VOID(ctx.service.kill(id, pid, sig));
  return ex.respond_no_content();
}

}  // namespace space::api::handlers
