// Warm pools (docs/pools.md): per template (runtime, image, profile, limits), `size` sandboxes
// started ahead up to the user-facing step by one background thread. A create request for that
// template claims one and personalizes it (daemon.cc, create_sandbox); the filler then makes a
// replacement. A claimed sandbox is never given back: `space rm` tears it down like any other.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ostream>

#include "daemon/daemon.h"

namespace space::daemon {

std::optional<Daemon::Prepared> Daemon::claim_pooled(const Template& t) {
  std::optional<Prepared> out;
  {
    std::lock_guard lock(pool_mu_);
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
  // Not woken here: create_sandbox wakes the filler once the claim is registered, and the
  // filler still waits for a pause in creates (pool_loop), so that making the replacement does
  // not compete with this create for the CPU and the store.
  return out;
}

void Daemon::pool_loop() {
  std::unique_lock lock(pool_mu_);
  while (!pools_stopping_) {
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
      pool_cv_.wait_for(lock, std::chrono::duration<double>(std::max(0.001, wake - now)));
      continue;
    }
    Pool& pool = *next;
    pool.filling++;
    Template t = pool.t;
    auto rt_it = runtimes_.find(t.runtime);
    lock.unlock();

    auto t0 = std::chrono::steady_clock::now();
    StepTimes times;
    Result<Prepared> made =
        fail(Code::kUnavailable, "runtime \"" + t.runtime + "\" is not available in this spaced");
    if (rt_it != runtimes_.end())
      made = prepare_sandbox(t, rt_it->second.get(), {}, std::chrono::seconds(365 * 86400),
                             SandboxState::kPooled, times);
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
    if (pools_stopping_) {
      lock.unlock();
      discard_prepared(*made, "warm pool: spaced stopped before it was used");
      lock.lock();
      continue;
    }
    pool.ready.push_back(std::move(*made));
    spdlog::debug("warm pool {}/{}: {} ready ({:.2f} ms: {})", t.profile, t.image,
                  pool.ready.size(), static_cast<double>(ns) / 1e6, times.summary());
  }
}

void Daemon::drain_pools() {
  std::vector<Prepared> unused;
  {
    std::lock_guard lock(pool_mu_);
    pools_stopping_ = true;
  }
  pool_cv_.notify_all();
  if (pool_filler_.joinable()) pool_filler_.join();
  {
    std::lock_guard lock(pool_mu_);
    for (auto& pool : pools_)
      while (!pool.ready.empty()) {
        unused.push_back(std::move(pool.ready.front()));
        pool.ready.pop_front();
      }
  }
  for (auto& p : unused) discard_prepared(p, "warm pool: spaced stopped before it was used");
}

nlohmann::json Daemon::pool_report() {
  std::lock_guard lock(pool_mu_);
  nlohmann::json out = nlohmann::json::array();
  for (auto& p : pools_) {
    nlohmann::json j = {{"runtime", p.t.runtime},
                        {"image", p.t.image},
                        {"profile", p.t.profile},
                        {"memory", p.t.limits.memory_bytes},
                        {"cpus", p.t.limits.cpus},
                        {"pids", p.t.limits.pids},
                        {"disk", p.t.limits.disk_bytes},
                        {"size", p.cfg.size},
                        {"ready", p.ready.size()},
                        {"hits", p.hits},
                        {"misses", p.misses},
                        {"refill_failures", p.refill_failures},
                        {"default", p.cfg.is_default}};
    if (!p.last_error.empty()) j["last_error"] = p.last_error;
    out.push_back(std::move(j));
  }
  return out;
}

void Daemon::pool_metrics(std::ostream& o) {
  std::lock_guard lock(pool_mu_);
  if (pools_.empty()) return;
  auto label = [](const Pool& p) {
    return "{profile=\"" + p.t.profile + "\",image=\"" + p.t.image + "\",runtime=\"" + p.t.runtime +
           "\",memory=\"" + std::to_string(p.t.limits.memory_bytes) + "\"}";
  };
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
    for (auto& p : pools_) o << name << label(p) << ' ' << value(p) << '\n';
  };
  family("space_pool_size", "gauge", "Configured size of each warm pool.",
         [](const Pool& p) { return p.cfg.size; });
  family("space_pool_ready", "gauge", "Sandboxes ready to claim in each warm pool.",
         [](const Pool& p) { return p.ready.size(); });
  family("space_pool_hits_total", "counter", "Creates served from a warm pool.",
         [](const Pool& p) { return p.hits; });
  family("space_pool_misses_total", "counter",
         "Creates of a pooled template that found the pool empty (cold path).",
         [](const Pool& p) { return p.misses; });
  family("space_pool_refills_total", "counter", "Sandboxes the pool filler started.",
         [](const Pool& p) { return p.refills; });
  family("space_pool_refill_failures_total", "counter", "Refills that failed.",
         [](const Pool& p) { return p.refill_failures; });
  family("space_pool_refill_seconds_sum", "counter", "Time spent starting pool sandboxes.",
         [](const Pool& p) { return static_cast<double>(p.refill_ns) / 1e9; });
}

}  // namespace space::daemon
