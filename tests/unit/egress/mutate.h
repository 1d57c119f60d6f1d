// Random edits of a seed string for the egress tests' invariant loops (host_test.cc,
// policy_test.cc): 1-4 edits, each inserting one of `pieces`, erasing 1-3 bytes, or replacing a
// byte with a piece's first byte.
#pragma once

#include <random>
#include <string>
#include <vector>

namespace space::egress::test {

inline std::string mutate(std::mt19937& rng, std::string s,
                          const std::vector<std::string>& pieces) {
  int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits; ++i) {
    size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 3) {
      case 0:
        s.insert(pos, pieces[rng() % pieces.size()]);
        break;
      case 1:
        if (pos < s.size()) s.erase(pos, 1 + rng() % 3);
        break;
      default:
        if (pos < s.size()) s[pos] = pieces[rng() % pieces.size()][0];
        break;
    }
  }
  return s;
}

}  // namespace space::egress::test
