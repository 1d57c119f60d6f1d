#include "daemon/egress_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

namespace space::daemon {

namespace {

void add_counters(egress::Gateway::Stats& to, const egress::Gateway::Stats& s) {
  to.connections += s.connections;
  to.requests += s.requests;
  to.denied += s.denied;
  to.bytes_up += s.bytes_up;
  to.bytes_down += s.bytes_down;
  to.credential_uses += s.credential_uses;
  to.dns_queries += s.dns_queries;
}

}  // namespace

Result<std::unique_ptr<EgressPool>> EgressPool::start(Options options) {
  std::unique_ptr<EgressPool> p(new EgressPool(std::move(options)));
  if (p->o_.sandboxes_per_process == 0) {
    auto proc = TRY(EgressProcess::start(p->o_.process));
    p->slots_.push_back(Slot{std::shared_ptr<EgressProcess>(std::move(proc)), {}, 0});
  } else {
    // The first spare now, so that a start-up that cannot run space-egress fails here, as it
    // does with one shared process.
    auto proc = TRY(EgressProcess::start(p->o_.process));
    p->spares_.push_back(std::move(proc));
    p->refiller_ = std::thread([raw = p.get()] { raw->refill(); });
  }
  return p;
}

EgressPool::~EgressPool() { stop(); }

void EgressPool::stop() {
  std::vector<std::shared_ptr<EgressProcess>> procs;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& s : slots_) procs.push_back(s.proc);
    slots_.clear();
    for (auto& s : spares_) procs.push_back(s);
    spares_.clear();
  }
  cv_.notify_all();
  if (refiller_.joinable()) refiller_.join();
  // Every process is told first, so that they exit together rather than one after another.
  for (auto& p : procs) p->begin_stop();
  for (auto& p : procs) p->stop();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return retiring_ == 0; });
}

Result<std::shared_ptr<EgressProcess>> EgressPool::claim(const std::string& id) {
  const size_t per = o_.sandboxes_per_process;
  std::shared_ptr<EgressProcess> proc;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return fail(Code::kUnavailable, "the egress gateway is stopping");
    for (auto& s : slots_)
      if (per == 0 || s.served < per) {
        ++s.served;
        s.ids.push_back(id);
        proc = s.proc;
        break;
      }
    if (!proc && !spares_.empty()) {
      proc = std::move(spares_.back());
      spares_.pop_back();
      slots_.push_back(Slot{proc, {id}, 1});
      cv_.notify_all();  // the refiller starts another
    }
  }
  if (!proc) {
    // A new process, started outside the lock so that creates in parallel do not queue on it.
    proc = TRY_CTX(EgressProcess::start(o_.process), "starting a gateway process for " + id);
    std::lock_guard lock(mu_);
    if (stopping_) {
      proc->stop();
      return fail(Code::kUnavailable, "the egress gateway is stopping");
    }
    slots_.push_back(Slot{proc, {id}, 1});
  }
  if (per != 0) spdlog::info("egress: {} is served by gateway process {}", id, proc->pid());
  return proc;
}

void EgressPool::refill() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || spares_.size() < kSpares; });
    if (stopping_) return;
    lock.unlock();
    auto started = EgressProcess::start(o_.process);
    lock.lock();
    if (!started) {
      spdlog::error("egress: starting a spare gateway process: {}", started.error().message());
      // Creates start their own meanwhile; try again in a while.
      cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stopping_; });
      continue;
    }
    if (stopping_) {
      lock.unlock();
      (*started)->stop();
      return;
    }
    spares_.push_back(std::move(*started));
  }
}

void EgressPool::unclaim(const std::string& id) {
  std::shared_ptr<EgressProcess> done;
  {
    std::lock_guard lock(mu_);
    for (auto it = slots_.begin(); it != slots_.end(); ++it) {
      auto pos = std::find(it->ids.begin(), it->ids.end(), id);
      if (pos == it->ids.end()) continue;
      it->ids.erase(pos);
      const size_t per = o_.sandboxes_per_process;
      // A process that has served its N ends with its last sandbox; the shared one never does.
      if (per != 0 && it->ids.empty() && it->served >= per) {
        done = std::move(it->proc);
        slots_.erase(it);
      }
      break;
    }
  }
  if (done) retire(std::move(done));
}

void EgressPool::retire(std::shared_ptr<EgressProcess> p) {
  auto counters = p->stats();
  {
    std::lock_guard lock(mu_);
    add_counters(retired_, counters);
    old_restarts_ += p->restarts();
    old_refused_ += p->refused_messages();
    ++retiring_;
  }
  // Off the caller's path (a destroy): the process exits when its channel closes, and stop()
  // waits for that and reaps it.
  std::thread([this, p = std::move(p)]() mutable {
    p->stop();
    p.reset();
    std::lock_guard lock(mu_);
    --retiring_;
    cv_.notify_all();
  }).detach();
}

Result<void> EgressPool::attach(egress::SandboxEgress sandbox, int netns_fd) {
  std::string id = sandbox.id;
  auto proc = TRY(claim(id));
  auto r = proc->attach(std::move(sandbox), netns_fd);
  if (!r) unclaim(id);
  return r;
}

Result<void> EgressPool::attach(egress::SandboxEgress sandbox, egress::BoundListeners listeners) {
  std::string id = sandbox.id;
  auto proc = TRY(claim(id));
  auto r = proc->attach(std::move(sandbox), std::move(listeners));
  if (!r) unclaim(id);
  return r;
}

void EgressPool::detach(const std::string& id) {
  std::shared_ptr<EgressProcess> proc;
  {
    std::lock_guard lock(mu_);
    for (auto& s : slots_)
      if (std::find(s.ids.begin(), s.ids.end(), id) != s.ids.end()) proc = s.proc;
  }
  if (!proc) return;
  proc->detach(id);
  unclaim(id);
}

egress::Gateway::Stats EgressPool::stats() {
  std::vector<std::shared_ptr<EgressProcess>> procs;
  egress::Gateway::Stats total;
  {
    std::lock_guard lock(mu_);
    for (auto& s : slots_) procs.push_back(s.proc);
    total = retired_;
  }
  for (auto& p : procs) {
    auto s = p->stats();
    add_counters(total, s);
    total.active_connections += s.active_connections;
    total.sandboxes += s.sandboxes;
  }
  return total;
}

uint64_t EgressPool::restarts() const {
  std::lock_guard lock(mu_);
  uint64_t n = old_restarts_;
  for (auto& s : slots_) n += s.proc->restarts();
  for (auto& s : spares_) n += s->restarts();
  return n;
}

uint64_t EgressPool::refused_messages() const {
  std::lock_guard lock(mu_);
  uint64_t n = old_refused_;
  for (auto& s : slots_) n += s.proc->refused_messages();
  for (auto& s : spares_) n += s->refused_messages();
  return n;
}

size_t EgressPool::processes() const {
  std::lock_guard lock(mu_);
  return slots_.size() + spares_.size();
}

}  // namespace space::daemon
