// Non-blocking framed I/O on the agent's channel; see channel.h.
#include "agent/channel.h"

#include <unistd.h>

#include <cerrno>
#include <span>

namespace space::agent {

void Channel::send(proto::FrameType type, uint32_t stream, std::string_view payload) {
  if (broken_) return;
  if (out_pos_ > 0 && out_pos_ >= out_.size() / 2) {
    out_.erase(0, out_pos_);
    out_pos_ = 0;
  }
  // Callers never exceed kMaxPayload; encode() refuses to if one ever did.
  (void)proto::encode(type, stream, payload, out_);
  flush();
}

bool Channel::flush() {
  while (!broken_ && out_pos_ < out_.size()) {
    ssize_t n = ::write(fd_.get(), out_.data() + out_pos_, out_.size() - out_pos_);
    if (n > 0) {
      out_pos_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    broken_ = true;
  }
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
    if (out_.capacity() > (1u << 22)) out_.shrink_to_fit();
  }
  return !broken_;
}

Channel::ReadStatus Channel::read_some() {
  static char buf[64 * 1024];
  for (int i = 0; i < 16; ++i) {
    ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
    if (n > 0) {
      decoder_.feed(std::span<const char>(buf, static_cast<size_t>(n)));
      if (static_cast<size_t>(n) < sizeof(buf)) return ReadStatus::kOk;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadStatus::kOk;
    broken_ = true;
    return ReadStatus::kEof;
  }
  return ReadStatus::kOk;
}

}  // namespace space::agent
