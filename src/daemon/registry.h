// The registry of live sandboxes: which ids the API reaches, and admission (at most
// max_sandboxes, counted with the creates in flight so that a burst cannot pass the limit).
// One lock, a leaf: nothing else is taken while it is held, and no callback runs under it
// but the reaper's sweep, which only reads.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "daemon/sandbox.h"

namespace space::daemon {

class Registry {
 public:
  // A place for one sandbox, taken before a create does anything and held until the sandbox is
  // registered (add) or the create fails (the Slot's destructor gives it back).
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& o) noexcept : reg_(std::exchange(o.reg_, nullptr)) {}
    Slot& operator=(Slot&& o) noexcept {
      release();
      reg_ = std::exchange(o.reg_, nullptr);
      return *this;
    }
    ~Slot() { release(); }

   private:
    friend class Registry;
    explicit Slot(Registry* r) : reg_(r) {}
    void release();
    Registry* reg_ = nullptr;
  };

  // A slot, or kResourceExhausted naming the limit when `max` sandboxes run or are being made.
  Result<Slot> admit(size_t max);
  // Registers `sb` under its id (replacing what was there: a rollback's new object), using
  // `slot` where a create took one.
  void add(std::shared_ptr<Sandbox> sb, Slot* slot = nullptr);
  // Unregisters `id`, only while it is still `sb` (a rollback may have put a new object there).
  void remove(const std::string& id, const Sandbox* sb);
  std::shared_ptr<Sandbox> find(const std::string& id) const;
  std::vector<std::shared_ptr<Sandbox>> all() const;
  size_t size() const;
  // Sets a registered sandbox's lifetime end (rec.expires_at), which the reaper reads here.
  void set_expiry(Sandbox& sb, double at);
  // Calls `fn` on every registered sandbox under the lock (the reaper): `fn` reads the record's
  // expiry and atomics only, and takes no lock.
  void sweep(const std::function<void(const std::shared_ptr<Sandbox>&)>& fn) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  size_t reserved_ = 0;  // slots admitted, not yet registered or given back
};

}  // namespace space::daemon
