// WebSocket (RFC 6455) through an intercepted host: after the upgrade request was authorized
// and its credentials injected like any request, and the upstream answered 101, the gateway
// relays frames both ways. Client-to-server frames pass as they are (a placeholder in a message
// travels as the meaningless string it is, like one in a body). Server-to-client frames go
// through ServerFrames, which reads every frame (untrusted input), masks each data message's
// payload with the streaming masker (so a secret value split across the fragments of a message
// is found) and each control frame's payload on its own, and refuses what it cannot read
// safely: reserved bits (an extension the gateway took out of the handshake), masked server
// frames, unknown opcodes, fragmented or oversized control frames, a continuation with no
// message open. A refusal ends the connection with close code 1002 to the client.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "egress/mask.h"

namespace space::egress::websocket {

enum Opcode : uint8_t {
  kContinuation = 0,
  kText = 1,
  kBinary = 2,
  kClose = 8,
  kPing = 9,
  kPong = 10,
};

// One frame's header as sent (the payload follows it).
std::string frame_header(bool fin, uint8_t opcode, uint64_t length);
// A whole unmasked frame (server to client).
std::string frame(bool fin, uint8_t opcode, std::string_view payload);
// A close frame with `code` and a short reason.
std::string close_frame(uint16_t code, std::string_view reason);

// Server-to-client frames, re-framed with masked payloads. Data payloads are passed on as the
// masker releases them: one input frame may become several output frames of the same message
// (RFC 6455 §5.4 lets an intermediary re-fragment when no extension is in use, which the
// gateway ensures), and the message's bytes are the input's with every secret value starred.
// Memory: at most one header and one control payload (125 bytes) buffered, plus what the
// masker holds back.
class ServerFrames {
 public:
  explicit ServerFrames(std::shared_ptr<const MaskPatterns> patterns);
  // The bytes to send to the client for `in`, or an error (kInvalidArgument, the message says
  // what was wrong) after which the connection must end with close_frame(1002, ...).
  Result<std::string> feed(std::string_view in);
  // Occurrences of secret values masked so far.
  size_t redactions() const { return message_.redactions() + control_redactions_; }

 private:
  Result<void> begin_frame();
  void emit_data(std::string_view bytes, bool fin, std::string& out);

  std::shared_ptr<const MaskPatterns> patterns_;
  Redactor message_;    // the data message being relayed
  std::string header_;  // bytes of the frame header read so far
  bool in_payload_ = false;
  bool fin_ = false;
  uint8_t opcode_ = 0;
  uint64_t left_ = 0;           // payload bytes of the current frame still to come
  std::string control_;         // the current control frame's payload
  bool message_open_ = false;   // a data message started and not finished
  uint8_t message_opcode_ = 0;  // its opcode, until its first frame is sent
  bool message_first_sent_ = false;
  size_t control_redactions_ = 0;
};

}  // namespace space::egress::websocket
