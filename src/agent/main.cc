// space-agent: PID 1 of every sandbox. See agent.h for what it does and options.h for its
// command line; the wire protocol is docs/agent-protocol.md.
#include <cstdio>

#include "agent/agent.h"
#include "agent/options.h"

int main(int argc, char** argv) {
  using namespace space::agent;
  auto opts = parse_options(argc, argv);
  if (!opts) {
    log_line(opts.error().message());
    log_line(kUsage);
    return 2;
  }
  Agent agent(std::move(*opts));
  if (auto r = agent.init(); !r) {
    log_line("start-up failed: " + r.error().message());
    return 1;
  }
  auto r = agent.run();
  log_line("event loop failed: " + r.error().message());
  return 1;
}
