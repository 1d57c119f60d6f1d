// Runs `undo` on scope exit unless dismissed: one per step of a recipe (the runtimes' create),
// so that a failure at any step unwinds the steps before it in reverse order.
#pragma once

#include <utility>

namespace space {

template <class F>
class Guard {
 public:
  explicit Guard(F undo) : undo_(std::move(undo)) {}
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
  ~Guard() {
    if (armed_) undo_();
  }
  void dismiss() { armed_ = false; }

 private:
  F undo_;
  bool armed_ = true;
};

}  // namespace space
