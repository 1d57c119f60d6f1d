// The registry of live sandboxes (registry.h).
#include "daemon/registry.h"

namespace space::daemon {

void Registry::Slot::release() {
  if (!reg_) return;
  std::lock_guard lock(reg_->mu_);
  reg_->reserved_--;
  reg_ = nullptr;
}

Result<Registry::Slot> Registry::admit(size_t max) {
  std::lock_guard lock(mu_);
  if (sandboxes_.size() + reserved_ >= max)
    return fail(Code::kResourceExhausted,
                "this spaced already runs " + std::to_string(sandboxes_.size()) + " sandboxes" +
                    (reserved_ ? " and is making " + std::to_string(reserved_) + " more" : "") +
                    " (max_sandboxes " + std::to_string(max) + "); remove some first");
  reserved_++;
  return Slot(this);
}

void Registry::add(std::shared_ptr<Sandbox> sb, Slot* slot) {
  std::lock_guard lock(mu_);
  if (slot && slot->reg_ == this) {
    reserved_--;
    slot->reg_ = nullptr;
  }
  std::string id = sb->rec.id;
  sandboxes_[id] = std::move(sb);
}

void Registry::remove(const std::string& id, const Sandbox* sb) {
  std::lock_guard lock(mu_);
  if (auto it = sandboxes_.find(id); it != sandboxes_.end() && it->second.get() == sb)
    sandboxes_.erase(it);
}

std::shared_ptr<Sandbox> Registry::find(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Sandbox>> Registry::all() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Sandbox>> out;
  out.reserve(sandboxes_.size());
  for (auto& [id, sb] : sandboxes_) out.push_back(sb);
  return out;
}

size_t Registry::size() const {
  std::lock_guard lock(mu_);
  return sandboxes_.size();
}

void Registry::set_expiry(Sandbox& sb, double at) {
  std::lock_guard lock(mu_);
  sb.rec.expires_at = at;
}

void Registry::sweep(const std::function<void(const std::shared_ptr<Sandbox>&)>& fn) const {
  std::lock_guard lock(mu_);
  for (auto& [id, sb] : sandboxes_) fn(sb);
}

}  // namespace space::daemon
