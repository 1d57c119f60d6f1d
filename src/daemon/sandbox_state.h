// A sandbox's lifecycle state (docs/architecture.md, "Lifecycle"), typed, with the one place
// that names each state and the one table of the transitions the daemon makes. The record in
// SQLite holds the name; everything else holds the enum.
//
//   creating ───────────▶ running ◀────▶ paused
//      │    pooled ─claim─▶  │  ▲             │
//      │      │              ▼  │             │
//      │      │          rolling_back         │
//      ▼      ▼              ▼                ▼
//   destroyed ◀──────── destroying ◀──────────┘
//
// (A record moving to the state it has is a re-save, always allowed; a restart that finds a
// sandbox gone moves any live state straight to destroyed.)
//
// `creating`, `pooled`, `rolling_back` and `destroying` are intents: a record in one of them
// says what a restarted spaced must finish or undo (daemon.cc reconcile(), the recovery rules
// in docs/crash-safety.md).
#pragma once

#include <optional>
#include <string_view>

namespace space::daemon {

enum class SandboxState {
  kPooled,    // made ahead by a warm pool, nobody's yet
  kCreating,  // being made for a request
  kRunning,
  kPaused,       // frozen
  kRollingBack,  // being restarted on a snapshot's files under the same id
  kDestroying,   // cut off; its processes and resources being removed
  kDestroyed,    // gone; the record stays for `space inspect` and the audit log
};

constexpr std::string_view to_string(SandboxState s) {
  switch (s) {
    case SandboxState::kPooled:
      return "pooled";
    case SandboxState::kCreating:
      return "creating";
    case SandboxState::kRunning:
      return "running";
    case SandboxState::kPaused:
      return "paused";
    case SandboxState::kRollingBack:
      return "rolling_back";
    case SandboxState::kDestroying:
      return "destroying";
    case SandboxState::kDestroyed:
      return "destroyed";
  }
  return "destroyed";
}

constexpr std::optional<SandboxState> parse_sandbox_state(std::string_view name) {
  for (auto s : {SandboxState::kPooled, SandboxState::kCreating, SandboxState::kRunning,
                 SandboxState::kPaused, SandboxState::kRollingBack, SandboxState::kDestroying,
                 SandboxState::kDestroyed})
    if (to_string(s) == name) return s;
  return std::nullopt;
}

// Whether the daemon may move a sandbox from `from` to `to` (the diagram above). Reconcile's
// moves after a restart are the same ones.
constexpr bool can_move(SandboxState from, SandboxState to) {
  using enum SandboxState;
  if (from == to) return from != kDestroyed;
  if (to == kDestroyed) return true;
  switch (from) {
    case kPooled:
      return to == kRunning;
    case kCreating:
      return to == kRunning;
    case kRunning:
      return to == kPaused || to == kRollingBack || to == kDestroying;
    case kPaused:
      return to == kRunning || to == kRollingBack || to == kDestroying;
    case kRollingBack:
      return to == kRunning || to == kPaused || to == kDestroying;
    case kDestroying:
      return false;
    case kDestroyed:
      return false;
  }
  return false;
}

}  // namespace space::daemon
