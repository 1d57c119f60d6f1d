// Which snapshots retention keeps (docs/snapshots.md): a pure function of the snapshots, the
// policy and the time, so that it can be tested with any clock.
#pragma once

#include <string>
#include <vector>

#include "daemon/config.h"

namespace space::daemon {

struct SnapshotAge {
  std::string id;
  std::string sandbox;
  bool manual = false;  // taken by `space snapshot`; otherwise automatic
  double created_at = 0;
};

// The ids retention drops at `now`. Manual snapshots go once older than keep_manual_s.
// Automatic snapshots are taken per sandbox through the tiers: a snapshot of age A belongs to
// the first tier with A <= for_s; in that tier the newest snapshot of each `every_s` window
// (windows aligned to the epoch) is kept and the others dropped (every_s = 0 keeps all); older
// than the last tier, it is dropped. Snapshots from the future (clock steps) are kept.
std::vector<std::string> retention_drops(const std::vector<SnapshotAge>& snapshots,
                                         const SnapshotConfig& policy, double now);

// The latest time retention may keep a snapshot taken at `created_at` (an automatic one may
// go earlier, when a newer one takes its window).
double retention_deadline(bool manual, double created_at, const SnapshotConfig& policy);

}  // namespace space::daemon
