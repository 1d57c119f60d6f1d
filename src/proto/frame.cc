// Frame encoding and the validating decoder for the daemon <-> agent protocol.
#include "proto/frame.h"

#include <cstring>

namespace space::proto {
namespace {

void put_u32(std::string& out, uint32_t v) {
  char b[4] = {static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
               static_cast<char>((v >> 16) & 0xff), static_cast<char>((v >> 24) & 0xff)};
  out.append(b, 4);
}
uint32_t get_u32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(u[0]) | static_cast<uint32_t>(u[1]) << 8 |
         static_cast<uint32_t>(u[2]) << 16 | static_cast<uint32_t>(u[3]) << 24;
}

}  // namespace

const char* frame_type_name(FrameType t) {
  switch (t) {
    case FrameType::kHello:
      return "hello";
    case FrameType::kRequest:
      return "request";
    case FrameType::kResponse:
      return "response";
    case FrameType::kExec:
      return "exec";
    case FrameType::kStarted:
      return "started";
    case FrameType::kStdin:
      return "stdin";
    case FrameType::kStdout:
      return "stdout";
    case FrameType::kStderr:
      return "stderr";
    case FrameType::kExit:
      return "exit";
    case FrameType::kSignal:
      return "signal";
    case FrameType::kCredit:
      return "credit";
    case FrameType::kData:
      return "data";
    case FrameType::kPing:
      return "ping";
    case FrameType::kPong:
      return "pong";
    case FrameType::kConnect:
      return "connect";
    case FrameType::kReset:
      return "reset";
    case FrameType::kDns:
      return "dns";
    case FrameType::kProcExec:
      return "proc_exec";
  }
  return "unknown";
}

bool is_valid_type(uint8_t t) { return t >= 1 && t <= 18; }

Result<void> encode(FrameType type, uint32_t stream, std::string_view payload, std::string& out) {
  if (payload.size() > kMaxPayload)
    return fail(Code::kInvalidArgument, "frame payload of " + std::to_string(payload.size()) +
                                            " bytes exceeds the limit of " +
                                            std::to_string(kMaxPayload));
  out.reserve(out.size() + kHeaderSize + payload.size());
  put_u32(out, static_cast<uint32_t>(payload.size()));
  out.push_back(static_cast<char>(type));
  out.push_back(0);
  out.push_back(0);
  out.push_back(0);
  put_u32(out, stream);
  out.append(payload);
  return {};
}

void Decoder::feed(std::span<const char> bytes) {
  if (failed_) return;
  // Compact consumed bytes before growing.
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(bytes.data(), bytes.size());
}

Result<std::optional<Frame>> Decoder::next() {
  if (failed_) return std::unexpected(*failed_);
  if (buf_.size() - pos_ < kHeaderSize) return std::optional<Frame>{};
  const char* h = buf_.data() + pos_;
  uint32_t length = get_u32(h);
  auto type = static_cast<uint8_t>(h[4]);
  auto flags = static_cast<uint8_t>(h[5]);
  auto r0 = static_cast<uint8_t>(h[6]);
  auto r1 = static_cast<uint8_t>(h[7]);
  uint32_t stream = get_u32(h + 8);
  std::string why;
  if (length > kMaxPayload)
    why = "frame length " + std::to_string(length) + " exceeds " + std::to_string(kMaxPayload);
  else if (!is_valid_type(type))
    why = "unknown frame type " + std::to_string(type);
  else if (flags != 0 || r0 != 0 || r1 != 0)
    why = "reserved frame header bits are set";
  if (!why.empty()) {
    failed_ = Error(Code::kProtocol, "agent protocol: " + why);
    return std::unexpected(*failed_);
  }
  if (buf_.size() - pos_ < kHeaderSize + length) return std::optional<Frame>{};
  Frame f;
  f.type = static_cast<FrameType>(type);
  f.stream = stream;
  f.payload.assign(h + kHeaderSize, length);
  pos_ += kHeaderSize + length;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return std::optional<Frame>(std::move(f));
}

}  // namespace space::proto
