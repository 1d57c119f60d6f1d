// Requests in progress per API token, streams included (an attached exec, a follower of a
// detached command's logs): one token cannot hold all of spaced's connections and their
// threads, whatever its holder does. The root operator (Unix socket, no token) is not counted.
// One lock, a leaf.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/error.h"

namespace space::api {

class TokenLoad {
 public:
  explicit TokenLoad(size_t max_per_token) : max_(max_per_token) {}

  // Held while a request runs; given back when it ends.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept
        : load_(std::exchange(o.load_, nullptr)), token_(std::move(o.token_)) {}
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket() {
      if (load_) load_->leave(token_);
    }

   private:
    friend class TokenLoad;
    Ticket(TokenLoad* l, std::string t) : load_(l), token_(std::move(t)) {}
    TokenLoad* load_ = nullptr;
    std::string token_;
  };

  // A ticket for one more request of `token_id` ("" = root: always), or kResourceExhausted
  // when it has max_per_token in progress.
  Result<Ticket> enter(const std::string& token_id) {
    if (token_id.empty()) return Ticket();
    std::lock_guard lock(mu_);
    size_t& n = in_[token_id];
    if (n >= max_)
      return fail(Code::kResourceExhausted,
                  "token " + token_id + " has " + std::to_string(n) +
                      " requests in progress (streams and followers included), the most one "
                      "token may; end some (or use another token) and try again");
    ++n;
    return Ticket(this, token_id);
  }
  size_t in_progress(const std::string& token_id) {
    std::lock_guard lock(mu_);
    auto it = in_.find(token_id);
    return it == in_.end() ? 0 : it->second;
  }

 private:
  void leave(const std::string& token_id) {
    std::lock_guard lock(mu_);
    if (auto it = in_.find(token_id); it != in_.end() && --it->second == 0) in_.erase(it);
  }

  const size_t max_;
  std::mutex mu_;
  std::unordered_map<std::string, size_t> in_;
};

}  // namespace space::api
