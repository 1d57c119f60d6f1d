// The per-thread current caller (see caller.h).
#include "daemon/caller.h"

namespace space::daemon {
namespace {

thread_local const Caller* t_current = nullptr;

}  // namespace

const Caller* current_caller() { return t_current; }

CallerScope::CallerScope(Caller caller) : caller_(std::move(caller)), previous_(t_current) {
  t_current = &caller_;
}

CallerScope::~CallerScope() { t_current = previous_; }

}  // namespace space::daemon
