// Who the API request served on this thread acts for, so that what the daemon records about
// it (audit events) can name the API token without every SandboxService method taking another
// parameter. The API's dispatcher sets it for the duration of a handler (CallerScope); threads
// that serve no request (the reaper, the exec observer) have none. It names a token by its id
// only, never its secret.
#pragma once

#include <string>

namespace space::daemon {

struct Caller {
  std::string token_id;  // empty: the root operator on the Unix socket
};

// The caller of the request this thread is serving; null outside a request.
const Caller* current_caller();

// Makes `caller` the current caller of this thread until destroyed (nests).
class CallerScope {
 public:
  explicit CallerScope(Caller caller);
  ~CallerScope();
  CallerScope(const CallerScope&) = delete;
  CallerScope& operator=(const CallerScope&) = delete;

 private:
  Caller caller_;
  const Caller* previous_;
};

}  // namespace space::daemon
