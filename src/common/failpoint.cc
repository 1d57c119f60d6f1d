// The failpoint table and the switch (common/failpoint.h).
#include "common/failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

namespace space {
namespace {

constexpr FailpointInfo kTable[] = {
    {"create.after_record", "create: its record (creating or pooled) written, nothing made yet"},
    {"create.after_runtime", "create: cgroups, namespaces and the agent made, agent not yet met"},
    {"create.after_agent", "create: the agent answered, egress not yet attached"},
    {"create.after_attach", "create: egress attached, record not yet running"},
    {"create.after_running", "create: record running, not yet audited or listed"},
    {"destroy.after_intent", "destroy: record destroying, nothing torn down yet"},
    {"destroy.after_teardown",
     "destroy: processes, cgroups and layer gone, record not yet destroyed"},
    {"snapshot.after_freeze", "snapshot: the sandbox frozen, its files not yet read"},
    {"snapshot.after_manifest", "snapshot: chunks and manifest written, record not yet written"},
    {"rollback.after_save", "rollback: the state before saved as a snapshot, intent not recorded"},
    {"rollback.after_intent", "rollback: record rolling_back, the old instance still running"},
    {"rollback.after_stop", "rollback: the old instance gone, the new one not yet started"},
    {"rollback.after_start", "rollback: the new instance running, record not yet running"},
    {"pause.after_freeze", "pause: the sandbox frozen, record not yet paused"},
    {"resume.after_thaw", "resume: the sandbox thawed, record not yet running"},
    {"image.after_unpack", "image import: the archive unpacked in staging, not yet installed"},
    {"image.after_install", "image import: the directory in place, record not yet written"},
    {"image.remove_after_record", "image rm: the record deleted, the directory not yet removed"},
    {"image.build.after_run",
     "image build: a RUN step's command ended, its changes not yet read, its sandbox alive"},
    {"image.build.after_step",
     "image build: a step's tree in place in the cache, its record not yet written"},
    {"image.build.after_install", "image build: the image's tree in place, record not yet written"},
};

struct Armed {
  std::once_flag once;
  std::vector<std::string> names;
  std::atomic<bool> any{false};
};

Armed& armed() {
  static Armed a;
  std::call_once(a.once, [] {
    const char* env = std::getenv("SPACE_FAILPOINTS");
    std::string s = env ? env : "";
    size_t pos = 0;
    while (pos <= s.size() && !s.empty()) {
      size_t comma = s.find(',', pos);
      std::string name =
          s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      if (!name.empty()) a.names.push_back(name);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    a.any = !a.names.empty();
  });
  return a;
}

}  // namespace

std::span<const FailpointInfo> failpoints() { return kTable; }

void failpoint(std::string_view name) {
  Armed& a = armed();
  if (!a.any.load(std::memory_order_relaxed)) return;
  if (std::none_of(std::begin(kTable), std::end(kTable),
                   [&](const FailpointInfo& f) { return f.name == name; }))
    std::abort();  // a point missing from the table: a programming error
  if (std::find(a.names.begin(), a.names.end(), name) == a.names.end()) return;
  std::string line = "failpoint " + std::string(name) + ": killing the process (SIGKILL)\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  ::kill(::getpid(), SIGKILL);
  ::pause();
}

}  // namespace space
