// The upstream side of the gateway's HTTP/2 streams (h2_server.h): one TLS connection to the
// intercepted host offering ALPN "h2,http/1.1"; if the upstream picks h2, every stream of the
// sandbox's connection is forwarded over one HTTP/2 client session (H2Client, driven by the
// connection's poll loop, trailers carried); if it picks HTTP/1.1, each stream becomes one
// HTTP/1.1 exchange (H1Exchange) on a worker thread with blocking I/O, over a small pool of
// kept-alive connections, and its response comes back without trailers. Both hand what they
// receive to a ResponseSink on the loop thread and never hold more than a bounded amount.
#pragma once

#include <nghttp2/nghttp2.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "egress/internal.h"

namespace space::egress {

using Fields = std::vector<std::pair<std::string, std::string>>;

// nghttp2's view of `fields` (pointers into it: keep `fields` alive while nghttp2 reads them).
std::vector<nghttp2_nv> nv_of(const Fields& fields);

// What a stream receives from its upstream, and where the upstream takes the request body from.
// Called on the loop thread only.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // Copies up to `max` bytes of request body to `out`; sets *end once the body is complete.
  // Returns 0 with *end false when no bytes are there yet (the upstream waits for resume()).
  virtual size_t pull_body(uint8_t* out, size_t max, bool* end) = 0;
  // The final response's status and fields (names lower-case for HTTP/2; interim 1xx dropped).
  virtual void on_head(int status, Fields fields) = 0;
  virtual void on_data(std::string_view raw) = 0;  // body bytes as the upstream sent them
  virtual void on_trailers(Fields fields) = 0;
  // The exchange is over: `error` empty when complete, else why it failed (`status` is the
  // status to answer with if no response head was passed on yet: 403 or 502).
  virtual void on_end(int status, std::string error) = 0;
};

// A TLS connection to an upstream, blocking with the gateway's timeouts.
struct UpConn {
  std::unique_ptr<FdStream> fd;
  std::unique_ptr<TlsStream> tls;
  std::unique_ptr<AnyStream> stream;
  std::string alpn;  // what the upstream chose: "h2", "http/1.1" or ""
};
// Dials host:port (policy-checked addresses, dial()) and completes TLS offering ALPN
// "h2,http/1.1" (`offer_h2`) or "http/1.1". kPermissionDenied when policy refused the addresses.
Result<std::unique_ptr<UpConn>> connect_upstream(const Shared& g, const Gateway::State& st,
                                                 const Host& host, uint16_t port, bool offer_h2);

// An HTTP/2 client session over one upstream connection, driven without blocking.
class H2Client {
 public:
  explicit H2Client(std::unique_ptr<UpConn> conn);
  ~H2Client();
  H2Client(const H2Client&) = delete;
  H2Client& operator=(const H2Client&) = delete;

  // Opens a stream: `headers` starts with the pseudo-header fields. Returns its id, or <0.
  int32_t submit(const Fields& headers, bool has_body, ResponseSink* sink);
  void resume(int32_t id);              // more request body is there
  void consumed(int32_t id, size_t n);  // n response bytes went on: the window reopens
  void cancel(int32_t id);              // RST_STREAM(CANCEL); the sink is not called again
  int fd() const { return conn_->fd->fd(); }
  bool wants_write() const { return !out_.empty() || nghttp2_session_want_write(session_); }
  // Reads and writes what it can without blocking. False once the connection is over; every
  // open stream's sink has then been told (on_end).
  bool pump();
  bool usable() const { return alive_ && !goaway_; }
  size_t open_streams() const { return sinks_.size(); }

 private:
  static int on_header(nghttp2_session*, const nghttp2_frame*, const uint8_t*, size_t,
                       const uint8_t*, size_t, uint8_t, void*);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_data_chunk(nghttp2_session*, uint8_t, int32_t, const uint8_t*, size_t, void*);
  static int on_stream_close(nghttp2_session*, int32_t, uint32_t, void*);
  static ssize_t read_body(nghttp2_session*, int32_t, uint8_t*, size_t, uint32_t*,
                           nghttp2_data_source*, void*);
  void fail_all(const std::string& why);

  std::unique_ptr<UpConn> conn_;
  nghttp2_session* session_ = nullptr;
  std::string out_;  // serialized frames not yet accepted by SSL_write
  struct Pending {
    ResponseSink* sink;
    int status = 0;
    Fields fields;
    size_t field_bytes = 0;  // of the header block being received
    bool head_done = false;
  };
  std::map<int32_t, Pending> sinks_;
  bool alive_ = true, goaway_ = false;
};

// Kept-alive HTTP/1.1 connections to one host:port, shared by the exchanges of one sandbox
// connection.
struct H1Pool {
  std::mutex mu;
  std::vector<std::unique_ptr<UpConn>> idle;  // at most kMax
  static constexpr size_t kMax = 4;
};

// One stream translated to an HTTP/1.1 request, run on its own thread with blocking I/O. The
// loop hands it request body (bounded: at most what the sandbox's flow-control window let in)
// and takes its response in pieces (bounded: the worker waits while kMaxPending bytes are
// waiting to be taken).
class H1Exchange {
 public:
  struct Request {
    Host host;
    uint16_t port;
    std::string head;  // request line and fields, CRLF CRLF included
    bool chunked;      // the body is sent with chunked coding (no Content-Length was given)
    bool head_method;  // HEAD: the response has no body
  };
  H1Exchange(const Shared& g, std::shared_ptr<Gateway::State> st, std::shared_ptr<H1Pool> pool,
             Request req, std::unique_ptr<UpConn> conn, int wake_fd);
  ~H1Exchange();  // cancels and joins the worker
  H1Exchange(const H1Exchange&) = delete;
  H1Exchange& operator=(const H1Exchange&) = delete;

  bool wants_body();  // the worker has taken what it was given
  void push_body(std::string_view data, bool end);
  // Passes what the worker produced to `sink` (at most `room` body bytes). True if it passed
  // anything on (the caller tries again: more may be waiting that no wake-up will announce).
  bool deliver(ResponseSink& sink, size_t room);
  bool over() {
    std::lock_guard l(mu_);
    return delivered_end_;
  }

  static constexpr size_t kMaxPending = 256 * 1024;

 private:
  void run();
  void finish(int status, std::string error);  // worker: posts the end
  void wake();

  const Shared& g_;
  std::shared_ptr<Gateway::State> st_;
  std::shared_ptr<H1Pool> pool_;
  Request req_;
  std::unique_ptr<UpConn> conn_;
  int wake_fd_;
  int sock_ = -1;  // the upstream socket while the worker uses it: cancel() shuts it down

  std::mutex mu_;
  std::condition_variable cv_;
  std::string body_;  // request body waiting for the worker
  bool body_end_ = false, cancelled_ = false;
  std::optional<std::pair<int, Fields>> head_;
  std::string data_;  // response body waiting for the loop
  bool ended_ = false, delivered_end_ = false;
  int end_status_ = 0;
  std::string end_error_;
  std::thread worker_;
};

}  // namespace space::egress
