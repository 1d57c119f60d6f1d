// A sandbox's own ports through the E2B door: what E2B's `sandbox.getHost(port)` gives its users,
// "<port>-<sandboxId>.<domain>" (or the headers E2b-Sandbox-Id and E2b-Sandbox-Port), as an
// HTTP/1.1 reverse proxy to 127.0.0.1:<port> inside the sandbox, over the same
// SandboxService::connect_port as `space port`.
//
// Access: E2B's URLs are public unless the sandbox was created with network.allowPublicTraffic
// false, in which case a request must carry E2B's e2b-traffic-access-token header (its SDK does
// not send it for you; there is no query parameter). The door never stores such a flag (it
// refuses `network` at create, control.cc), so it always asks, as for allowPublicTraffic: false:
// the sandbox's envd access token (which create also answers as trafficAccessToken) in
// X-Access-Token or E2B-Traffic-Access-Token; door.cc checks it, with the exec operation.
//
// One request per connection: the request goes upstream with "Connection: close", its head
// minus the hop-by-hop fields and the door's own (E2b-Sandbox-*, the tokens), Host kept, its
// body (decoded by the Exchange) with its Content-Length or re-chunked; the upstream's response
// comes back raw after its head, whose hop-by-hop fields give way to "Connection: close", and
// the client's connection closes after it. A WebSocket upgrade (Upgrade: websocket) goes up with
// its Connection and Upgrade fields; the upstream answers the 101 itself, and then bytes move
// both ways until both sides end. Nothing moving for the listener's body timeout ends either,
// and so does the server's stop.
//
// Errors: a bad port is 400; a sandbox gone, paused or with nothing listening on the port, and
// an upstream that answers no HTTP, are 502 in E2B's shape ({"code": 502, "message"}, plus
// "sandboxId" and "port" as E2B's edge answers for a closed port).
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd_stream.h"
#include "e2b/handlers.h"

namespace space::e2b {

namespace {

using nlohmann::json;

constexpr size_t kChunk = 64 << 10;
// The most of the upstream's response head the door reads before relaying it.
constexpr uint32_t kMaxResponseHead = 64 << 10;

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The comma-separated tokens of a Connection field, trimmed and lower-cased.
std::vector<std::string> connection_tokens(std::string_view v) {
  std::vector<std::string> out;
  while (!v.empty()) {
    size_t comma = v.find(',');
    std::string_view t = v.substr(0, comma);
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (!t.empty()) out.push_back(lower(t));
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return out;
}

// Hop-by-hop fields (RFC 9110 §7.6.1), plus those the proxy sets itself.
bool hop_by_hop(std::string_view name) {
  for (std::string_view h :
       {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
        "upgrade", "proxy-authorization", "proxy-authenticate"})
    if (iequal(name, h)) return true;
  return false;
}

// The door's own request fields, which stay at the door.
bool door_field(std::string_view name) {
  for (std::string_view h : {"e2b-sandbox-id", "e2b-sandbox-port", "x-access-token",
                             "e2b-traffic-access-token", "content-length", "expect"})
    if (iequal(name, h)) return true;
  return false;
}

bool named_in(const std::vector<std::string>& tokens, std::string_view name) {
  for (const auto& t : tokens)
    if (iequal(t, name)) return true;
  return false;
}

Result<void> respond_502(Call& call, std::string message) {
  json body = {{"code", 502},
               {"message", std::move(message)},
               {"sandboxId", call.sandbox_id},
               {"port", call.port}};
  return call.ex.respond(http::status::bad_gateway, "application/json",
                         api::json_text(body) + "\n");
}

Error upstream_error(const Call& call, std::string_view what, const boost::system::error_code& ec) {
  return Error(ec == boost::asio::error::timed_out ? Code::kTimeout : Code::kProtocol,
               std::string(what) + " port " + std::to_string(call.port) + " in sandbox " +
                   call.sandbox_id + ": " + ec.message());
}

// The request head for the upstream.
std::string request_head(const api::Exchange& ex, bool websocket, bool chunked,
                         std::optional<uint64_t> length) {
  std::string head;
  head += ex.method_string();
  head += ' ';
  head += ex.raw_target();
  head += " HTTP/1.1\r\n";
  const auto tokens = connection_tokens(ex.header(http::field::connection));
  for (const auto& f : ex.fields()) {
    std::string_view name(f.name_string().data(), f.name_string().size());
    if (hop_by_hop(name) || door_field(name) || named_in(tokens, name)) continue;
    head.append(name);
    head += ": ";
    head.append(f.value().data(), f.value().size());
    head += "\r\n";
  }
  if (websocket) {
    head += "Connection: Upgrade\r\nUpgrade: ";
    head += ex.header(http::field::upgrade);
    head += "\r\n";
  } else {
    head += "Connection: close\r\n";
  }
  if (chunked)
    head += "Transfer-Encoding: chunked\r\n";
  else if (length)
    head += "Content-Length: " + std::to_string(*length) + "\r\n";
  head += "\r\n";
  return head;
}

// The upstream's response head for the client: hop-by-hop fields out (Transfer-Encoding kept:
// the body goes raw, as it came), "Connection: close" in; a 101 as it came.
std::string response_head(const http::response_header<>& h) {
  const bool upgraded = h.result_int() == 101;
  const auto tokens = connection_tokens(
      std::string_view(h[http::field::connection].data(), h[http::field::connection].size()));
  std::string head = "HTTP/1.1 " + std::to_string(h.result_int()) + " ";
  head.append(h.reason().data(), h.reason().size());
  head += "\r\n";
  for (const auto& f : h) {
    std::string_view name(f.name_string().data(), f.name_string().size());
    if (!upgraded && !iequal(name, "transfer-encoding") &&
        (hop_by_hop(name) || named_in(tokens, name)))
      continue;
    head.append(name);
    head += ": ";
    head.append(f.value().data(), f.value().size());
    head += "\r\n";
  }
  if (!upgraded) head += "Connection: close\r\n";
  head += "\r\n";
  return head;
}

}  // namespace

Result<void> serve_port(Call& call) {
  api::Exchange& ex = call.ex;
  if (call.port == 0)
    return fail(Code::kInvalidArgument,
                "E2b-Sandbox-Port must be a port 1-65535, not \"" +
                    std::string(ex.header("E2b-Sandbox-Port")).substr(0, 16) + "\"");
  const bool websocket = ex.wants_upgrade("websocket");
  if (websocket && !ex.body_done())
    return fail(Code::kInvalidArgument, "a WebSocket upgrade request takes no body");
  const std::chrono::milliseconds idle = ex.body_timeout();

  auto fd = call.service.connect_port(call.sandbox_id, call.port);
  if (!fd) {
    const Error& e = fd.error();
    // Nothing listening (kUnavailable), the sandbox gone (kNotFound) or paused (kConflict):
    // E2B's edge answers 502 for a port it cannot reach.
    if (e.code() == Code::kUnavailable || e.code() == Code::kNotFound ||
        e.code() == Code::kConflict)
      return respond_502(call, e.message());
    return fail(Error(e));
  }
  FdStream up(std::move(*fd));
  up.set_stop_fd(ex.stop_fd());
  up.set_write_timeout(idle);
  up.set_read_timeout(idle);

  // The request: head, then the body as the client framed it (decoded, re-framed).
  const bool chunked = !ex.body_done() && ex.header(http::field::content_length).empty();
  std::optional<uint64_t> length;
  if (auto cl = ex.header(http::field::content_length); !cl.empty() && !chunked)
    length = std::strtoull(std::string(cl).c_str(), nullptr, 10);  // the parser checked it
  boost::system::error_code ec = up.write_all(request_head(ex, websocket, chunked, length));
  if (!ec && !ex.body_done()) {
    std::string buf(kChunk, '\0');
    for (;;) {
      size_t n = TRY(ex.read_some(buf.data(), buf.size()));  // the client's errors: 4xx
      if (n == 0) {
        if (chunked) ec = up.write_all("0\r\n\r\n");
        break;
      }
      std::string_view piece(buf.data(), n);
      if (chunked) {
        char size_line[24];
        int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", n);
        ec = up.write_all(std::string_view(size_line, static_cast<size_t>(len)));
        if (!ec) ec = up.write_all(piece);
        if (!ec) ec = up.write_all("\r\n");
      } else {
        ec = up.write_all(piece);
      }
      // An upstream that stopped reading (it answered early, e.g. 413) may still have
      // answered: its response, if any, is read below.
      if (ec) break;
    }
  }
  if (ec == boost::asio::error::operation_aborted)
    return fail(Code::kUnavailable, "the server is stopping");

  // The response head; interim 1xx responses (other than 101) are dropped: the door answered
  // the client's 100-continue itself and sent no Expect upstream.
  boost::beast::flat_buffer rbuf(2 * size_t{kMaxResponseHead});
  std::optional<http::response_parser<http::empty_body>> parser;
  for (;;) {
    parser.emplace();
    parser->header_limit(kMaxResponseHead);
    // The body is relayed, not parsed: no limit (and not boost::none, which Boost 1.74 takes
    // as smaller than any Content-Length).
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    boost::system::error_code rec;
    http::read_header(up, rbuf, *parser, rec);
    if (rec == boost::asio::error::operation_aborted)
      return fail(Code::kUnavailable, "the server is stopping");
    if (rec == http::error::end_of_stream || rec == boost::asio::error::eof ||
        rec == boost::asio::error::connection_reset)
      return respond_502(call, "port " + std::to_string(call.port) + " in sandbox " +
                                   call.sandbox_id +
                                   " closed the connection without an HTTP response");
    if (rec == boost::asio::error::timed_out)
      return fail(Code::kTimeout, "port " + std::to_string(call.port) + " in sandbox " +
                                      call.sandbox_id + " sent no response within " +
                                      std::to_string(idle.count() / 1000) + " s");
    if (rec)
      return respond_502(call,
                         upstream_error(call, "a malformed HTTP response from", rec).message());
    int status = parser->get().result_int();
    if (status >= 200 || status == 101) break;
  }
  const auto& head = parser->get();
  const int status = head.result_int();
  if (status == 101 && !websocket)
    return respond_502(call, "port " + std::to_string(call.port) + " in sandbox " +
                                 call.sandbox_id + " switched protocols unasked");
  std::string first = response_head(head);
  first.append(static_cast<const char*>(rbuf.data().data()), rbuf.size());
  return ex.relay_response(status, std::move(first), up.fd(), status == 101, idle,
                           call.still_allowed);
}

}  // namespace space::e2b
