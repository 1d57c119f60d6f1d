// The agent's end of the byte stream to the daemon: a validating frame decoder on the way in
// and a queue on the way out, over a non-blocking fd, so a slow daemon never blocks the agent.
// The queue's growth is bounded by the flow-control windows (data frames) and by the agent
// pausing its reads from the daemon while the queue is long (control frames).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/fd.h"
#include "proto/frame.h"

namespace space::agent {

class Channel {
 public:
  explicit Channel(UniqueFd fd) : fd_(std::move(fd)) {}

  int fd() const { return fd_.get(); }

  // Queues one frame (payload at most kMaxPayload; callers chunk data) and tries to write.
  void send(proto::FrameType type, uint32_t stream, std::string_view payload);
  // Writes as much of the queue as the fd takes. False if the peer is gone.
  bool flush();
  size_t queued() const { return out_.size() - out_pos_; }

  enum class ReadStatus { kOk, kEof };
  // Reads what is available (up to a few chunks) into the decoder.
  ReadStatus read_some();
  proto::Decoder& decoder() { return decoder_; }

  bool broken() const { return broken_; }

 private:
  UniqueFd fd_;
  proto::Decoder decoder_;
  std::string out_;
  size_t out_pos_ = 0;
  bool broken_ = false;
};

}  // namespace space::agent
