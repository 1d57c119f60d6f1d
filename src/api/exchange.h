// One HTTP request and its response on a server connection, as a handler sees it: the parsed
// target, the request body as a stream (or as size-limited JSON), and the response as either a
// complete message or a chunked stream written piece by piece. Reading (the request body) and
// writing (the response) may happen on two threads at once, which is what exec's full-duplex
// stdin needs; each side touches only its own state.
#pragma once

#include <atomic>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/request.h"
#include "common/error.h"
#include "common/fd_stream.h"
#include "daemon/service.h"

namespace space::api {

namespace http = boost::beast::http;
using Headers = std::vector<std::pair<std::string, std::string>>;
using RequestParser = http::request_parser<http::buffer_body>;

// {"error":{"code":"not_found","message":"..."}}
nlohmann::json error_body(const Error& e);
// JSON text for the wire, and the only way the API serializes: it never throws. Requests are
// validated as UTF-8 up front (request.h), but text from a sandbox (file names, process
// arguments, audit data) may be anything; each invalid byte becomes U+FFFD instead of making
// nlohmann's dump() throw type_error 316 halfway through a response.
std::string json_text(const nlohmann::json& j);

class Exchange {
 public:
  Exchange(FdStream& stream, boost::beast::flat_buffer& buffer, RequestParser& parser,
           Target target, std::chrono::milliseconds body_timeout);

  // --- the request
  http::verb method() const { return parser_.get().method(); }
  std::string_view method_string() const {
    auto m = parser_.get().method_string();
    return std::string_view(m.data(), m.size());
  }
  const Target& target() const { return target_; }
  std::string_view header(http::field f) const;
  std::string_view header(std::string_view name) const;  // a field Beast has no enum for
  // A placeholder of the matched route ("id" for /v1/sandboxes/{id}); set by the router.
  const std::string& param(std::string_view name) const;
  void set_params(std::vector<std::pair<std::string, std::string>> params) {
    params_ = std::move(params);
  }

  // Reads up to `n` body bytes into `out`; 0 means the body has ended. Each read must make
  // progress within the body timeout (set_body_timeout(0) waits forever, for exec stdin).
  Result<size_t> read_some(char* out, size_t n);
  bool body_done() const { return parser_.is_done(); }
  void set_body_timeout(std::chrono::milliseconds t) { body_timeout_ = t; }
  std::chrono::milliseconds body_timeout() const { return body_timeout_; }
  // An absolute deadline for the rest of the body (time_point::max() = none).
  void set_body_deadline(FdStream::Clock::time_point t) { body_deadline_ = t; }
  // The whole body, refused with 413 beyond `limit` bytes; it must arrive within one body
  // timeout in total.
  Result<std::string> read_body(size_t limit);
  // The whole body as JSON (<= kMaxJsonBody). An empty body is `empty_as` if given, else 400.
  Result<nlohmann::json> read_json(std::optional<nlohmann::json> empty_as = std::nullopt);
  // The body as a ChunkSource for the service (file and image uploads: no size limit).
  daemon::ChunkSource body_source();
  // Aborts a read_some blocked on another thread (exec's stdin pump).
  void set_read_interrupt_fd(int fd) { stream_.set_read_interrupt_fd(fd); }
  // Waits (without reading) until the client hangs up or `read_interrupt` fires.
  bool wait_client_hangup() { return !stream_.wait_hangup(); }
  // Whether the server is stopping (spaced got SIGTERM): its stop fd has fired.
  bool server_stopping() const;

  // --- the response
  Result<void> respond(http::status status, std::string_view content_type, std::string body,
                       const Headers& headers = {});
  Result<void> respond_json(http::status status, const nlohmann::json& body);
  Result<void> respond_no_content();
  Result<void> respond_error(const Error& e);
  // Chunked streaming: headers now, then any number of chunks, then the end. If a handler
  // fails after begin_chunked() the connection is closed without the final chunk, so the
  // client sees a truncated body rather than a complete-looking one.
  Result<void> begin_chunked(http::status status, std::string_view content_type,
                             const Headers& headers = {});
  Result<void> write_chunk(std::string_view data);
  Result<void> end_chunked();
  // Whether the request asks to switch to `protocol` (Connection: Upgrade, Upgrade: protocol).
  bool wants_upgrade(std::string_view protocol) const;
  // Answers 101 Switching Protocols (Upgrade: `protocol`) and relays raw bytes between the
  // client and `peer` until both have ended, the server stops, or `still_allowed` fails (the
  // caller's token went bad). The connection is closed afterwards.
  Result<void> tunnel(std::string_view protocol, int peer,
                      std::function<Result<void>()> still_allowed);

  // Answers 101 Switching Protocols (Upgrade: `protocol`) and leaves the connection's bytes to
  // the handler (raw_read, raw_write; one thread each may run at once): returns what the client
  // sent past its request. The connection is closed after the handler.
  Result<std::string> switch_protocols(std::string_view protocol);
  // 0: the client closed its side. Aborted by the read interrupt fd or the server's stop.
  Result<size_t> raw_read(char* out, size_t n);
  Result<void> raw_write(std::string_view data) { return write_raw(data); }
  void raw_shutdown_write() { stream_.shutdown(SHUT_WR); }

  // --- a response made by another server (the E2B door's proxy to a sandbox's ports)
  // The request's target as sent, and all its header fields.
  std::string_view raw_target() const {
    auto t = parser_.get().target();
    return std::string_view(t.data(), t.size());
  }
  const http::fields& fields() const { return parser_.get(); }
  // The server's stop eventfd (-1 = none), for a handler that waits on fds of its own.
  int stop_fd() const { return stream_.stop_fd(); }
  // Answers with a response another server made: `first` (its head, as the caller rewrote it,
  // and whatever of its body came with it), then the bytes read from `peer`, raw, until `peer`
  // ends. With `both_ways` (the head is a 101: the connection was upgraded) the client's bytes
  // go to `peer` too (those it sent past its request first) until both sides have ended, as in
  // tunnel(). `status` is the response's, for the logs and metrics. The server's stop and (one
  // way) the client's hang-up end it, cut short, not as an error; so does nothing moving for
  // `idle` (0 = no limit; a kTimeout error one way, an end both ways). The connection closes
  // afterwards.
  Result<void> relay_response(int status, std::string first, int peer, bool both_ways,
                              std::chrono::milliseconds idle,
                              std::function<Result<void>()> still_allowed = {});

  bool responded() const { return status_ != 0; }
  int status() const { return status_; }
  // Whether the connection can carry another request after this one.
  bool keep_alive() const { return keep_alive_ && body_done() && !broken_; }
  void close_after() { keep_alive_ = false; }
  // Set when the response was cut short (mid-stream failure).
  void mark_broken() { broken_ = true; }

 private:
  template <class Message>
  void prepare(Message& m, http::status status, std::string_view content_type,
               const Headers& headers);
  Result<void> write_raw(std::string_view data);

  FdStream& stream_;
  boost::beast::flat_buffer& buffer_;
  RequestParser& parser_;
  Target target_;
  std::vector<std::pair<std::string, std::string>> params_;
  std::chrono::milliseconds body_timeout_;
  FdStream::Clock::time_point body_deadline_ = FdStream::Clock::time_point::max();
  bool expect_continue_ = false;
  bool keep_alive_ = true;
  std::atomic<bool> broken_{false};  // set by the reader or the writer thread
  int status_ = 0;
};

}  // namespace space::api
