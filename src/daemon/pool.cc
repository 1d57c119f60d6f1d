// Warm pools (pool.h).
#include "daemon/pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/clock.h"

namespace space::daemon {

WarmPools::WarmPools(const std::vector<PoolConfig>& configs) {
  for (auto& pc : configs) {
    Pool pool;
    pool.cfg = pc;
    pool.t = Template{pc.runtime, pc.image, pc.profile, pc.limits, pc.workdir};
    pools_.push_back(std::move(pool));
  }
}

void WarmPools::start(Make make, Discard discard) {
  make_ = std::move(make);
  discard_ = std::move(discard);
  if (!pools_.empty()) filler_ = std::thread([this] { fill_loop(); });
}

std::optional<Prepared> WarmPools::claim(const Template& t) {
  std::optional<Prepared> out;
  {
    std::lock_guard lock(mu_);
    for (auto& pool : pools_) {
      if (!pool.t.same_kind(t)) continue;
      if (pool.ready.empty()) {
        pool.misses++;
        break;
      }
      out = std::move(pool.ready.front());
      pool.ready.pop_front();
      pool.hits++;
      last_claim_ = std::chrono::steady_clock::now();
      break;
    }
  }
  // Not woken here: create_sandbox wakes the filler (claimed()) once the claim is registered; the
  // filler still waits for a pause in creates (pool_loop), so that making the replacement does
  // not compete with this create for the CPU and the store.
  return out;
}

void WarmPools::fill_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    // Refills wait until creates pause for kRefillDelay (or a pool is at most half full):
    // a claim should not share the CPU and the store with the making of its replacement.
    constexpr auto kRefillDelay = std::chrono::milliseconds(5);
    auto quiet_at = last_claim_ + kRefillDelay;
    bool quiet = std::chrono::steady_clock::now() >= quiet_at;
    // The pool furthest below its size (relative to it) is filled first.
    Pool* next = nullptr;
    double now = now_s();
    double wake = now + (quiet ? 1 : 0.005);
    for (auto& pool : pools_) {
      if (pool.ready.size() + pool.filling >= pool.cfg.size) continue;
      if (!quiet && pool.ready.size() * 2 > pool.cfg.size) continue;
      if (pool.retry_at > now) {
        wake = std::min(wake, pool.retry_at);
        continue;
      }
      auto short_of = [](const Pool& p) {
        return static_cast<double>(p.cfg.size - p.ready.size() - p.filling) /
               static_cast<double>(p.cfg.size);
      };
      if (!next || short_of(pool) > short_of(*next)) next = &pool;
    }
    if (!next) {
      cv_.wait_for(lock, std::chrono::duration<double>(std::max(0.001, wake - now)));
      continue;
    }
    Pool& pool = *next;
    pool.filling++;
    Template t = pool.t;
    lock.unlock();

    auto t0 = std::chrono::steady_clock::now();
    Result<Prepared> made = make_(t);
    int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();

    lock.lock();
    pool.filling--;
    if (!made) {
      // Retries back off from 5 s to a minute while they keep failing (a host where the
      // default pool cannot work should not log every 5 s; an image imported later is still
      // picked up within the minute); a new error is always logged.
      pool.refill_failures++;
      pool.failing++;
      double wait = std::min(60.0, 5.0 * static_cast<double>(1u << std::min(pool.failing - 1, 4u)));
      pool.retry_at = now_s() + wait;
      bool same = pool.last_error == made.error().message();
      pool.last_error = made.error().message();
      if (same)
        spdlog::debug("warm pool {}/{}: still failing (retrying in {:.0f} s)", t.profile, t.image,
                      wait);
      else
        spdlog::warn(
            "warm pool {}/{}: could not start a sandbox (retrying in {:.0f} s; `space "
            "doctor` shows the pool): {}",
            t.profile, t.image, wait, pool.last_error);
      continue;
    }
    pool.failing = 0;
    pool.refills++;
    pool.refill_ns += ns;
    pool.last_error.clear();
    if (stopping_) {
      lock.unlock();
      discard_(*made, "warm pool: spaced stopped before it was used");
      lock.lock();
      continue;
    }
    pool.ready.push_back(std::move(*made));
    spdlog::debug("warm pool {}/{}: {} ready ({:.2f} ms)", t.profile, t.image, pool.ready.size(),
                  static_cast<double>(ns) / 1e6);
  }
}

void WarmPools::stop() {
  std::vector<Prepared> unused;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (filler_.joinable()) filler_.join();
  {
    std::lock_guard lock(mu_);
    for (auto& pool : pools_)
      while (!pool.ready.empty()) {
        unused.push_back(std::move(pool.ready.front()));
        pool.ready.pop_front();
      }
  }
  for (auto& p : unused)
    if (discard_) discard_(p, "warm pool: spaced stopped before it was used");
}

std::optional<std::string> WarmPools::using_image(const std::string& image) {
  std::lock_guard lock(mu_);
  for (auto& pool : pools_)
    if (pool.t.image == image) return pool.t.profile;
  return std::nullopt;
}

std::vector<WarmPools::Status> WarmPools::status() {
  std::lock_guard lock(mu_);
  std::vector<Status> out;
  for (auto& p : pools_)
    out.push_back(Status{p.t, p.cfg.size, p.ready.size(), p.hits, p.misses, p.refills,
                         p.refill_failures, p.refill_ns, p.last_error, p.cfg.is_default});
  return out;
}

}  // namespace space::daemon
