// The daemon <-> agent wire format: one framed, multiplexed protocol over any byte stream
// (a socketpair for the linux runtime, virtio-serial or vsock for microVMs). See
// docs/agent-protocol.md for the frame types and their payloads.
//
// A frame is a 12-byte little-endian header followed by `length` payload bytes:
//   u32 length   payload bytes, at most kMaxPayload
//   u8  type     one of FrameType; anything else is a protocol error
//   u8  flags    must be 0 (reserved)
//   u16 reserved must be 0
//   u32 stream   request/exec/transfer id chosen by the daemon (high bit clear); 0 = control;
//                ids with the high bit set (kAgentStreamBit) are chosen by the agent (egress
//                connections and DNS queries)
// Every field is validated by the decoder; a bad frame poisons the decoder (the channel must be
// closed), it never crashes the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::proto {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kHeaderSize = 12;
inline constexpr uint32_t kMaxPayload = 1u << 20;  // 1 MiB
// Flow control: the agent sends at most this many unacknowledged data bytes per stream
// (stdout+stderr of an exec, or a file read) before it waits for a kCredit frame.
inline constexpr uint32_t kStreamWindow = 1u << 20;
// Streams the agent opens (egress connections, DNS queries) have this bit set in their id; the
// daemon's ids never do, so the two never collide.
inline constexpr uint32_t kAgentStreamBit = 0x80000000u;
// At most this many egress connections are open per agent at once. The agent refuses more
// (closes the guest's connection); a daemon treats more as a protocol violation.
inline constexpr size_t kMaxEgressConns = 256;
// DNS over the channel (kDns, microVMs): a query datagram is 12 (a DNS header) to
// kMaxDnsDatagram bytes, an answer at most kMaxDnsDatagram; the agent keeps at most
// kMaxDnsInFlight queries unanswered (it drops further guest queries until an answer or its
// timeout frees a slot), and the daemon queues no more than that either.
inline constexpr size_t kDnsHeaderSize = 12;
inline constexpr size_t kMaxDnsDatagram = 4096;
inline constexpr size_t kMaxDnsInFlight = 64;
inline constexpr bool is_agent_stream(uint32_t stream) { return (stream & kAgentStreamBit) != 0; }

enum class FrameType : uint8_t {
  kHello = 1,      // a->d, stream 0, JSON {"version","pid"}: first frame after start/reattach
  kRequest = 2,    // d->a, JSON {"op":...}: one-shot operation, answered by kResponse
  kResponse = 3,   // a->d, JSON {"ok":true,...} or {"error":{"code","message","errno"}}
  kExec = 4,       // d->a, JSON exec spec: starts a process on this stream
  kStarted = 5,    // a->d, JSON {"pid"}: the process is running
  kStdin = 6,      // d->a, raw bytes for the process's stdin; empty payload = EOF
  kStdout = 7,     // a->d, raw bytes
  kStderr = 8,     // a->d, raw bytes
  kExit = 9,       // a->d, JSON {"exit_code"} | {"signal","core_dumped"}: stream ends
  kSignal = 10,    // d->a, JSON {"signal"}: signal the exec's whole process tree
  kCredit = 11,    // d->a, JSON {"bytes"}: the daemon consumed this many data bytes
  kData = 12,      // both ways, raw bytes of a file transfer; empty payload = end
  kPing = 13,      // d->a, answered by kPong with the same payload
  kPong = 14,      // a->d
  kConnect = 15,   // a->d, JSON {"port"}, agent stream: a guest connection to the egress
                   // listener; the daemon answers kResponse ok or error on the same stream
  kReset = 16,     // both ways, empty, egress stream: abort the connection
  kDns = 17,       // both ways, raw bytes, agent stream: a guest's DNS query datagram (a->d),
                   // the stub's answer or empty = no answer (d->a); one each per stream
  kProcExec = 18,  // a->d, stream 0, JSON {"events":[...],"dropped":N}: execs a microVM's
                   // agent saw in its guest (proto/exec_report.h)
};

const char* frame_type_name(FrameType t);
bool is_valid_type(uint8_t t);

struct Frame {
  FrameType type = FrameType::kPing;
  uint32_t stream = 0;
  std::string payload;  // raw bytes (JSON text for the JSON-typed frames)
};

// Appends the encoded frame to out. Fails (kInvalidArgument) if the payload is too large.
Result<void> encode(FrameType type, uint32_t stream, std::string_view payload, std::string& out);

// Incremental decoder over untrusted bytes. feed() appends bytes; next() yields complete
// frames. After an error the decoder stays failed.
class Decoder {
 public:
  void feed(std::span<const char> bytes);
  // Returns a frame, std::nullopt if more bytes are needed, or an error (kProtocol).
  Result<std::optional<Frame>> next();
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
  std::optional<Error> failed_;
};

}  // namespace space::proto
