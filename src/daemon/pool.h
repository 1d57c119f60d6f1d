// Warm pools (docs/pools.md): per template (runtime, image, profile, limits), `size` sandboxes
// started ahead up to the user-facing step by one background thread. A create request for that
// template claims one and personalizes it (create.cc); the filler then makes a replacement. A
// claimed sandbox is never given back: `space rm` tears it down like any other.
//
// One lock, guarding the pools' queues and counters. The filler makes and discards sandboxes
// (the Make and Discard callbacks, which take the lifecycle's locks) with it released.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <iosfwd>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "daemon/config.h"
#include "daemon/sandbox.h"

namespace space::daemon {

class WarmPools {
 public:
  // Makes a sandbox of a template up to the user-facing step (state "pooled").
  using Make = std::function<Result<Prepared>(const Template&)>;
  // Removes a prepared sandbox nobody claimed, saying why.
  using Discard = std::function<void(Prepared&, const std::string& why)>;

  explicit WarmPools(const std::vector<PoolConfig>& configs);
  ~WarmPools() { stop(); }
  // Starts the filler (where there is a pool).
  void start(Make make, Discard discard);
  // A ready sandbox of `t`'s kind, or nullopt (counted as a miss where `t` has a pool).
  std::optional<Prepared> claim(const Template& t);
  // A claim was registered: the filler may make its replacement.
  void claimed() { cv_.notify_all(); }
  // Stops the filler and discards what is ready (shutdown, a drain). Later claims find
  // nothing. Idempotent.
  void stop();
  // The profile of a pool made of `image`, if any.
  std::optional<std::string> using_image(const std::string& image);

  struct Status {
    Template t;
    size_t size = 0, ready = 0;
    uint64_t hits = 0, misses = 0, refills = 0, refill_failures = 0;
    int64_t refill_ns = 0;   // sum over refills
    std::string last_error;  // of the last refill, if it failed
    bool is_default = false;
  };
  std::vector<Status> status();

 private:
  struct Pool {
    PoolConfig cfg;
    Template t;
    std::deque<Prepared> ready;
    size_t filling = 0;
    double retry_at = 0;  // after a failed refill
    uint64_t hits = 0, misses = 0, refills = 0, refill_failures = 0;
    int64_t refill_ns = 0;
    std::string last_error;
    unsigned failing = 0;  // refills failed in a row
  };
  void fill_loop();

  Make make_;
  Discard discard_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pool> pools_;  // filled at construction, never resized after
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_claim_{};
  std::thread filler_;
};

}  // namespace space::daemon
