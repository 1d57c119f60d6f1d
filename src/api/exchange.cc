// Request-body reading and response writing for one HTTP exchange (see exchange.h).
#include "api/exchange.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/relay.h"

namespace space::api {
namespace {

constexpr size_t kReadChunk = 64 * 1024;

Error body_read_error(const boost::system::error_code& ec, size_t buffer_limit) {
  if (ec == http::error::buffer_overflow) {
    return Error(Code::kInvalidArgument,
                 "a line of the chunked request body (a chunk size with its extensions, or a "
                 "trailer field) is longer than " +
                     std::to_string(buffer_limit >> 10) +
                     " KiB; send chunk sizes without long extensions, or a Content-Length");
  }
  if (ec == boost::asio::error::timed_out) {
    return Error(Code::kTimeout, "timed out waiting for the request body");
  }
  if (ec == boost::asio::error::operation_aborted) {
    return Error(Code::kUnavailable, "reading the request body was interrupted");
  }
  if (ec == boost::asio::error::eof || ec == http::error::partial_message ||
      ec == http::error::end_of_stream) {
    return Error(Code::kInvalidArgument, "the request body ended early (connection closed)");
  }
  return Error(Code::kInvalidArgument, "malformed request body: " + ec.message());
}

}  // namespace

nlohmann::json error_body(const Error& e) {
  return {{"error", {{"code", code_name(e.code())}, {"message", e.message()}}}};
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Exchange::Exchange(FdStream& stream, boost::beast::flat_buffer& buffer, RequestParser& parser,
                   Target target, std::chrono::milliseconds body_timeout)
    : stream_(stream),
      buffer_(buffer),
      parser_(parser),
      target_(std::move(target)),
      body_timeout_(body_timeout) {
  auto expect = parser_.get()[http::field::expect];
  expect_continue_ = !parser_.is_done() && boost::beast::iequals(expect, "100-continue");
  keep_alive_ = parser_.get().keep_alive();
}

std::string_view Exchange::header(http::field f) const {
  auto v = parser_.get()[f];
  return std::string_view(v.data(), v.size());
}

std::string_view Exchange::header(std::string_view name) const {
  auto v = parser_.get()[boost::beast::string_view(name.data(), name.size())];
  return std::string_view(v.data(), v.size());
}

const std::string& Exchange::param(std::string_view name) const {
  static const std::string kEmpty;
  for (const auto& [k, v] : params_) {
    if (k == name) return v;
  }
  return kEmpty;
}

Result<size_t> Exchange::read_some(char* out, size_t n) {
  if (parser_.is_done() || n == 0) return 0;
  if (broken_) return fail(Code::kInvalidArgument, "the request body could not be read");
  if (expect_continue_) {
    expect_continue_ = false;
    if (status_ == 0) TRY_VOID(write_raw("HTTP/1.1 100 Continue\r\n\r\n"));
  }
  stream_.set_read_deadline(body_deadline_);
  stream_.set_read_timeout(body_timeout_);
  for (;;) {
    auto& body = parser_.get().body();
    body.data = out;
    body.size = n;
    body.more = true;
    boost::system::error_code ec;
    http::read_some(stream_, buffer_, parser_, ec);
    size_t got = n - body.size;
    body.data = nullptr;
    body.size = 0;
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      broken_ = true;
      return fail(body_read_error(ec, buffer_.max_size()));
    }
    if (got > 0 || parser_.is_done()) return got;
  }
}

Result<std::string> Exchange::read_body(size_t limit) {
  auto too_large = [&] {
    keep_alive_ = false;
    return fail(Code::kPayloadTooLarge,
                limit >= (1u << 20)
                    ? "request body is larger than " + std::to_string(limit >> 20) +
                          " MiB; JSON bodies are limited to 1 MiB (send files with PUT .../files)"
                    : "request body is larger than " + std::to_string(limit) +
                          " bytes, the most this route takes");
  };
  if (auto len = parser_.content_length(); len && *len > limit) return too_large();
  // A bounded body must also arrive in bounded time: a client dripping a byte every few
  // seconds cannot hold this thread for longer than one body timeout.
  if (body_timeout_.count() > 0) body_deadline_ = FdStream::Clock::now() + body_timeout_;
  std::string body;
  char buf[kReadChunk];
  for (;;) {
    auto n = read_some(buf, sizeof buf);
    if (!n) {
      body_deadline_ = FdStream::Clock::time_point::max();
      return fail(std::move(n.error()));
    }
    if (*n == 0) break;
    if (body.size() + *n > limit) return too_large();
    body.append(buf, *n);
  }
  body_deadline_ = FdStream::Clock::time_point::max();
  return body;
}

Result<nlohmann::json> Exchange::read_json(std::optional<nlohmann::json> empty_as) {
  std::string body = TRY(read_body(kMaxJsonBody));
  bool blank = body.find_first_not_of(" \t\r\n") == std::string::npos;
  if (blank) {
    if (empty_as) return std::move(*empty_as);
    return fail(Code::kInvalidArgument, "the request body is empty; send a JSON object");
  }
  return parse_json(body);
}

daemon::ChunkSource Exchange::body_source() {
  return [this](std::string& out) -> Result<void> {
    out.resize(kReadChunk);
    size_t n = TRY(read_some(out.data(), out.size()));
    out.resize(n);
    return {};
  };
}

template <class Message>
void Exchange::prepare(Message& m, http::status status, std::string_view content_type,
                       const Headers& headers) {
  status_ = static_cast<int>(status);
  m.version(11);
  m.result(status);
  m.set(http::field::server, "spaced");
  if (!content_type.empty()) {
    m.set(http::field::content_type,
          boost::beast::string_view(content_type.data(), content_type.size()));
  }
  for (const auto& [k, v] : headers) m.set(k, v);
  // A request whose body we did not read to the end leaves the connection unusable.
  if (!parser_.is_done()) keep_alive_ = false;
  m.keep_alive(keep_alive_);
}

Result<void> Exchange::write_raw(std::string_view data) {
  auto ec = stream_.write_all(data);
  if (ec) {
    broken_ = true;
    return fail(Code::kUnavailable, "writing the response: " + ec.message());
  }
  return {};
}

Result<void> Exchange::respond(http::status status, std::string_view content_type, std::string body,
                               const Headers& headers) {
  http::response<http::string_body> res;
  prepare(res, status, content_type, headers);
  res.body() = std::move(body);
  res.prepare_payload();
  boost::system::error_code ec;
  http::write(stream_, res, ec);
  if (ec) {
    broken_ = true;
    return fail(Code::kUnavailable, "writing the response: " + ec.message());
  }
  return {};
}

Result<void> Exchange::respond_json(http::status status, const nlohmann::json& body) {
  return respond(status, "application/json", json_text(body) + "\n");
}

Result<void> Exchange::respond_no_content() { return respond(http::status::no_content, "", ""); }

Result<void> Exchange::respond_error(const Error& e) {
  if (e.code() == Code::kPayloadTooLarge) keep_alive_ = false;
  return respond_json(static_cast<http::status>(http_status(e.code())), error_body(e));
}

Result<void> Exchange::begin_chunked(http::status status, std::string_view content_type,
                                     const Headers& headers) {
  http::response<http::empty_body> res;
  prepare(res, status, content_type, headers);
  res.chunked(true);
  http::response_serializer<http::empty_body> sr(res);
  boost::system::error_code ec;
  http::write_header(stream_, sr, ec);
  if (ec) {
    broken_ = true;
    return fail(Code::kUnavailable, "writing the response: " + ec.message());
  }
  return {};
}

bool Exchange::wants_upgrade(std::string_view protocol) const {
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  return lower(header(http::field::connection)).find("upgrade") != std::string::npos &&
         lower(header(http::field::upgrade)) == lower(protocol);
}

Result<void> Exchange::tunnel(std::string_view protocol, int peer,
                              std::function<Result<void>()> still_allowed) {
  RelayOptions o;
  // Bytes the client sent after its request head are the tunnel's first.
  o.a_pending = TRY(switch_protocols(protocol));
  o.stop_fd = stream_.stop_fd();
  o.still_allowed = std::move(still_allowed);
  return relay(stream_.fd(), peer, std::move(o));
}

Result<std::string> Exchange::switch_protocols(std::string_view protocol) {
  keep_alive_ = false;
  status_ = 101;
  broken_ = true;  // nothing more goes on this connection as HTTP
  TRY_VOID(
      write_raw("HTTP/1.1 101 Switching Protocols\r\nServer: spaced\r\nConnection: Upgrade\r\n"
                "Upgrade: " +
                std::string(protocol) + "\r\n\r\n"));
  std::string early(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  buffer_.consume(buffer_.size());
  stream_.set_read_deadline(FdStream::Clock::time_point::max());
  stream_.set_read_timeout(std::chrono::milliseconds(0));
  return early;
}

Result<void> Exchange::relay_response(int status, std::string first, int peer, bool both_ways,
                                      std::chrono::milliseconds idle,
                                      std::function<Result<void>()> still_allowed) {
  keep_alive_ = false;
  status_ = status;
  if (both_ways) {
    broken_ = true;  // nothing more goes on this connection as HTTP
    RelayOptions o;
    o.a_pending.assign(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    buffer_.consume(buffer_.size());
    o.b_pending = std::move(first);
    o.stop_fd = stream_.stop_fd();
    o.idle_timeout = idle;
    o.still_allowed = std::move(still_allowed);
    return relay(stream_.fd(), peer, std::move(o));
  }
  stream_.set_write_timeout(idle);
  TRY_VOID(write_raw(first));
  std::string buf(kReadChunk, '\0');
  auto idle_since = FdStream::Clock::now();
  for (;;) {
    // The client hanging up (POLLRDHUP: it may have sent more, which stays unread) ends it too,
    // rather than a silent upstream (a stream of events) holding this thread.
    pollfd fds[3] = {
        {peer, POLLIN, 0}, {stream_.stop_fd(), POLLIN, 0}, {stream_.fd(), POLLRDHUP, 0}};
    // Woken at least once a second to ask still_allowed; the idle time counts across wakes.
    int wait = -1;
    if (idle.count() > 0)
      wait = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(idle_since + idle -
                                                                   FdStream::Clock::now())
                 .count()));
    if (still_allowed && (wait < 0 || wait > 1000)) wait = 1000;
    int r = ::poll(fds, 3, wait);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      broken_ = true;
      return fail_sys("poll");
    }
    if (fds[1].revents != 0 || fds[2].revents != 0) {  // the server stops, the client left
      broken_ = true;
      return {};
    }
    if (still_allowed) {
      if (auto allowed = still_allowed(); !allowed) {
        broken_ = true;  // cut short: the client sees a truncated response
        return allowed;
      }
    }
    if (r == 0 && (idle.count() <= 0 || FdStream::Clock::now() < idle_since + idle)) continue;
    if (r == 0) {
      broken_ = true;
      return fail(Code::kTimeout,
                  "the response stalled for " + std::to_string(idle.count() / 1000) + " s");
    }
    ssize_t n = ::read(peer, buf.data(), buf.size());
    if (n == 0) return {};
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      broken_ = true;
      return fail_sys("read", "the response");
    }
    idle_since = FdStream::Clock::now();
    TRY_VOID(write_raw(std::string_view(buf.data(), static_cast<size_t>(n))));
  }
}

Result<size_t> Exchange::raw_read(char* out, size_t n) {
  boost::system::error_code ec;
  size_t got = stream_.read_some(boost::asio::mutable_buffer(out, n), ec);
  if (ec == boost::asio::error::eof) return size_t{0};
  if (ec) return fail(Code::kUnavailable, "reading from the client: " + ec.message());
  return got;
}

Result<void> Exchange::write_chunk(std::string_view data) {
  if (data.empty()) return {};  // an empty chunk would end the body
  char size_line[24];
  int len = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
  std::string chunk;
  chunk.reserve(static_cast<size_t>(len) + data.size() + 2);
  chunk.append(size_line, static_cast<size_t>(len));
  chunk.append(data);
  chunk.append("\r\n");
  return write_raw(chunk);
}

Result<void> Exchange::end_chunked() { return write_raw("0\r\n\r\n"); }

bool Exchange::server_stopping() const {
  if (stream_.stop_fd() < 0) return false;
  pollfd p{stream_.stop_fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace space::api
