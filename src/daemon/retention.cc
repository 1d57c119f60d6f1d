#include "daemon/retention.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

namespace space::daemon {

std::vector<std::string> retention_drops(const std::vector<SnapshotAge>& snapshots,
                                         const SnapshotConfig& policy, double now) {
  std::vector<std::string> drops;
  // Automatic snapshots of each sandbox, newest first.
  std::map<std::string, std::vector<const SnapshotAge*>> automatic;
  for (const SnapshotAge& s : snapshots) {
    double age = now - s.created_at;
    if (s.manual) {
      if (age > policy.keep_manual_s) drops.push_back(s.id);
      continue;
    }
    automatic[s.sandbox].push_back(&s);
  }
  for (auto& [sandbox, list] : automatic) {
    std::sort(list.begin(), list.end(), [](const SnapshotAge* a, const SnapshotAge* b) {
      return std::tie(a->created_at, a->id) > std::tie(b->created_at, b->id);
    });
    std::set<std::pair<size_t, int64_t>> seen;  // (tier, window) already holding a keeper
    for (const SnapshotAge* s : list) {
      double age = now - s->created_at;
      if (age < 0) continue;
      size_t tier = 0;
      while (tier < policy.retention.size() && age > policy.retention[tier].for_s) ++tier;
      if (tier == policy.retention.size()) {
        drops.push_back(s->id);
        continue;
      }
      double every = policy.retention[tier].every_s;
      if (every <= 0) continue;
      auto window = static_cast<int64_t>(std::floor(s->created_at / every));
      if (!seen.insert({tier, window}).second) drops.push_back(s->id);
    }
  }
  return drops;
}

double retention_deadline(bool manual, double created_at, const SnapshotConfig& policy) {
  if (manual) return created_at + policy.keep_manual_s;
  double longest = policy.retention.empty() ? 0 : policy.retention.back().for_s;
  return created_at + longest;
}

}  // namespace space::daemon
