// WebSocket through the gateway (websocket.h): server-to-client frames parsed, masked and
// re-framed; and the relay of an upgraded intercepted connection (internal.h).
#include "egress/websocket.h"

#include <poll.h>

#include "egress/internal.h"

namespace space::egress::websocket {
namespace {

constexpr uint8_t kFin = 0x80, kRsv = 0x70, kOpcodeMask = 0x0f, kMaskBit = 0x80;
constexpr size_t kMaxControlPayload = 125;

std::unexpected<Error> protocol_error(std::string what) {
  return fail(Code::kInvalidArgument, "WebSocket frame from the upstream: " + std::move(what));
}

// How many header bytes a frame needs, given its first two (0 if not known yet).
size_t header_size(std::string_view h) {
  if (h.size() < 2) return 0;
  uint8_t len7 = static_cast<uint8_t>(h[1]) & 0x7f;
  size_t n = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0);
  if (static_cast<uint8_t>(h[1]) & kMaskBit) n += 4;
  return n;
}

}  // namespace

std::string frame_header(bool fin, uint8_t opcode, uint64_t length) {
  std::string h;
  h += static_cast<char>((fin ? kFin : 0) | (opcode & kOpcodeMask));
  if (length < 126) {
    h += static_cast<char>(length);
  } else if (length <= 0xffff) {
    h += static_cast<char>(126);
    h += static_cast<char>(length >> 8);
    h += static_cast<char>(length & 0xff);
  } else {
    h += static_cast<char>(127);
    for (int i = 7; i >= 0; --i) h += static_cast<char>((length >> (8 * i)) & 0xff);
  }
  return h;
}

std::string frame(bool fin, uint8_t opcode, std::string_view payload) {
  return frame_header(fin, opcode, payload.size()) + std::string(payload);
}

std::string close_frame(uint16_t code, std::string_view reason) {
  std::string p;
  p += static_cast<char>(code >> 8);
  p += static_cast<char>(code & 0xff);
  p += reason.substr(0, kMaxControlPayload - 2);
  return frame(true, kClose, p);
}

ServerFrames::ServerFrames(std::shared_ptr<const MaskPatterns> patterns)
    : patterns_(patterns), message_(std::move(patterns)) {}

Result<void> ServerFrames::begin_frame() {
  auto b0 = static_cast<uint8_t>(header_[0]), b1 = static_cast<uint8_t>(header_[1]);
  if (b0 & kRsv)
    return protocol_error("reserved bits set (no extension was negotiated through the gateway)");
  if (b1 & kMaskBit) return protocol_error("a masked frame (servers must not mask)");
  fin_ = b0 & kFin;
  opcode_ = b0 & kOpcodeMask;
  uint8_t len7 = b1 & 0x7f;
  if (len7 == 126) {
    left_ = (uint64_t{static_cast<uint8_t>(header_[2])} << 8) | static_cast<uint8_t>(header_[3]);
    if (left_ < 126) return protocol_error("a 16-bit length under 126 (not minimal)");
  } else if (len7 == 127) {
    left_ = 0;
    for (int i = 2; i < 10; ++i) left_ = (left_ << 8) | static_cast<uint8_t>(header_[i]);
    if (left_ >> 63) return protocol_error("a 64-bit length with its top bit set");
    if (left_ <= 0xffff) return protocol_error("a 64-bit length under 65536 (not minimal)");
  } else {
    left_ = len7;
  }
  switch (opcode_) {
    case kText:
    case kBinary:
      if (message_open_) return protocol_error("a new data frame inside a fragmented message");
      message_open_ = true;
      message_opcode_ = opcode_;
      message_first_sent_ = false;
      break;
    case kContinuation:
      if (!message_open_) return protocol_error("a continuation frame with no message open");
      break;
    case kClose:
    case kPing:
    case kPong:
      if (!fin_) return protocol_error("a fragmented control frame");
      if (left_ > kMaxControlPayload) return protocol_error("a control frame over 125 bytes");
      control_.clear();
      break;
    default:
      return protocol_error("unknown opcode " + std::to_string(opcode_));
  }
  in_payload_ = true;
  return {};
}

void ServerFrames::emit_data(std::string_view bytes, bool fin, std::string& out) {
  uint8_t op = message_first_sent_ ? uint8_t{kContinuation} : message_opcode_;
  message_first_sent_ = true;
  out += frame_header(fin, op, bytes.size());
  out.append(bytes);
}

Result<std::string> ServerFrames::feed(std::string_view in) {
  std::string out;
  while (!in.empty() || (in_payload_ && left_ == 0)) {
    if (!in_payload_) {
      size_t need = header_size(header_);
      size_t take = need ? need - header_.size() : 2 - header_.size();
      take = std::min(take, in.size());
      header_.append(in.substr(0, take));
      in.remove_prefix(take);
      need = header_size(header_);
      if (!need || header_.size() < need) continue;
      TRY_VOID(begin_frame());
      header_.clear();
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(left_, in.size()));
    std::string_view chunk = in.substr(0, n);
    in.remove_prefix(n);
    left_ -= n;
    bool control = opcode_ >= kClose;
    if (control) {
      control_.append(chunk);
    } else if (!chunk.empty()) {
      std::string released = message_.feed(chunk);
      if (!released.empty()) emit_data(released, false, out);
    }
    if (left_ > 0) continue;
    // The frame is complete.
    in_payload_ = false;
    if (control) {
      Redactor r(patterns_);
      std::string p = r.mask(control_);
      control_redactions_ += r.redactions();
      out += frame(true, opcode_, p);
    } else if (fin_) {
      emit_data(message_.finish(), true, out);
      message_open_ = false;
    }
  }
  return out;
}

}  // namespace space::egress::websocket

namespace space::egress {

WebSocketRelayed relay_websocket(Shared& g, Gateway::State& st, AnyStream& client,
                                 AnyStream& upstream, std::string_view client_first,
                                 std::string_view upstream_first) {
  WebSocketRelayed r;
  websocket::ServerFrames frames(g.secrets->mask_patterns());
  TlsStream* c = client.tls();
  TlsStream* u = upstream.tls();
  if (!c || !u) {
    r.error = "not TLS on both sides";
    return r;
  }
  // Client to server: the bytes as they come (the client masks its frames; the gateway reads
  // no secret into them). Server to client: through `frames`.
  auto up = [&](std::string_view bytes) {
    r.up += bytes.size();
    st.up.take(bytes.size(), st.cancel.get());
    return !upstream.write_all(bytes);
  };
  auto down = [&](std::string_view bytes) {
    auto out = frames.feed(bytes);
    if (!out) {
      r.error = out.error().message();
      (void)client.write_all(websocket::close_frame(1002, "protocol error from the upstream"));
      return false;
    }
    r.down += out->size();
    st.down.take(out->size(), st.cancel.get());
    return !client.write_all(*out);
  };
  bool ok = (client_first.empty() || up(client_first)) &&
            (upstream_first.empty() || down(upstream_first));
  std::string buf(st.down.chunk(64 * 1024), '\0');
  const int idle_ms = static_cast<int>(g.options.idle_timeout.count());
  while (ok) {
    bool moved = false;
    for (auto [from, to_up] : {std::pair{c, true}, std::pair{u, false}}) {
      boost::system::error_code ec;
      size_t n = from->read_now(buf.data(), buf.size(), ec);
      if (n > 0) {
        moved = true;
        ok = to_up ? up(std::string_view(buf.data(), n)) : down(std::string_view(buf.data(), n));
      } else if (ec != boost::asio::error::would_block) {
        ok = false;  // a side closed or failed: the relay ends
      }
      if (!ok) break;
    }
    if (!ok || moved) continue;
    pollfd p[3] = {{c->fd(), POLLIN, 0}, {u->fd(), POLLIN, 0}, {st.cancel.get(), POLLIN, 0}};
    int n = ::poll(p, 3, idle_ms > 0 ? idle_ms : -1);
    if (n == 0 || (n > 0 && p[2].revents)) break;  // idle for too long, or detached
    if (n < 0 && errno != EINTR) break;
  }
  r.redactions = frames.redactions();
  return r;
}

}  // namespace space::egress
