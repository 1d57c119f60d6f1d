// The CLI's HTTP/1.1 client for the daemon's REST API over its Unix socket, or over its TCP
// listener when $SPACE_API names one (Beast on a raw fd, see common/fd_stream.h): plain
// http:// on loopback, or https:// with api_tls. For https the helper executable space-https
// (next to space, else /usr/lib/space; src/cli/https_main.cc) ends TLS next to the connection
// and the HTTP code reads and writes plaintext on a socketpair to it, so exec's full duplex and
// the ports' raw relay work unchanged and `space` links no OpenSSL; the daemon's certificate is
// verified against $SPACE_CA (a PEM file) if set, else the system's trust store, and must
// name the host of $SPACE_API. With
// $SPACE_TOKEN set every request carries "Authorization: Bearer $SPACE_TOKEN"
// (docs/api-auth.md). Two levels: Connection sends one request and reads its response
// incrementally (streams: exec events, file bodies, chunked uploads, and full duplex for exec
// stdin); Client::call does a whole JSON round trip and turns an API error body
// {"error":{"code","message"}} back into a space::Error.
#pragma once

#include <sys/types.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/error.h"
#include "common/fd_stream.h"

namespace space::cli {

inline constexpr const char* kDefaultSocket = "/run/space/space.sock";

// $SPACE_SOCKET, or /run/space/space.sock.
std::string socket_path_from_env();
// Where the daemon is: $SPACE_API ("http://127.0.0.1:7070" or "https://host:7443", the TCP
// listener) if set, else socket_path_from_env().
std::string address_from_env();
// $SPACE_TOKEN, "" when unset.
std::string token_from_env();
// Whether `address` is an http:// or https:// URL rather than a socket path.
bool is_tcp_address(std::string_view address);

// Percent-encodes a query value or path segment.
std::string url_encode(std::string_view s);

// The Error an API error response stands for (its code from the body's code name; a body that
// is not an API error gives a message with the HTTP status).
Error api_error(int status, std::string_view body);

class Connection {
 public:
  // Connects to the daemon at `address` (a socket path, "http://HOST:PORT" or
  // "https://HOST:PORT"). No daemon ->
  // kUnavailable naming the address and what to do. `stop_fd` (an eventfd, -1 = none) aborts
  // any wait once readable (Ctrl-C). A non-empty `token` goes with every request.
  static Result<Connection> open(const std::string& address, int stop_fd = -1,
                                 std::string token = "");

  // A request with a complete body (Content-Length).
  Result<void> send(std::string_view method, const std::string& target, std::string_view body,
                    std::string_view content_type = "application/json");
  // A request whose body follows in chunks (Transfer-Encoding: chunked).
  Result<void> start_chunked(std::string_view method, const std::string& target,
                             std::string_view content_type);
  Result<void> write_chunk(std::string_view data);
  Result<void> end_chunks();

  // Reads the response header (skipping any 100 Continue); returns the status.
  Result<int> read_head();
  // A response header, "" if absent (after read_head).
  std::string header(std::string_view name) const;
  // Next body bytes; 0 at the end of the body. A body cut short is an error.
  Result<size_t> read_some(char* out, size_t n);
  Result<std::string> read_body(size_t limit = 64u << 20);
  // Asks to switch the connection to `protocol` (POST `target`, Connection: Upgrade): on 101 the
  // connection is a raw byte stream from here on (stream().fd()); returns the bytes already
  // read past the answer's head. Another answer is its API error.
  // `json_body`: a JSON request body sent with it (the terminal's exec request).
  Result<std::string> upgrade(const std::string& target, std::string_view protocol,
                              std::string_view json_body = {});
  // Reads an NDJSON body line by line (at most 64 MiB a line), calling `line` with each
  // non-empty one until it returns false or the body ends.
  Result<void> for_each_line(const std::function<Result<bool>(std::string_view)>& line);

  // One JSON round trip (see Client::call). Afterwards the connection can carry the next
  // request if reusable().
  Result<nlohmann::json> call(std::string_view method, const std::string& target,
                              const std::optional<nlohmann::json>& body = std::nullopt);
  // Whether the last response was read to its end and the daemon keeps the connection open
  // (HTTP/1.1 keep-alive), so another request may follow on it.
  bool reusable() const;

  FdStream& stream() { return *stream_; }

 private:
  explicit Connection(UniqueFd fd, std::string socket_path);
  Result<void> write(std::string_view data, std::string_view what);
  // "Authorization: Bearer ...\r\n", or "" without a token.
  std::string auth_header() const;

  std::string socket_path_;
  std::string token_;
  // https only: the space-https helper process; reaped once it exited (without waiting for it:
  // a later connection or the CLI's exit takes what is left). Declared before stream_ so that it
  // goes after it: closing the plaintext end first lets the helper send close_notify and end.
  struct Helper {
    pid_t pid = -1;
    Helper() = default;
    Helper(Helper&& o) noexcept : pid(std::exchange(o.pid, -1)) {}
    Helper& operator=(Helper&& o) noexcept;
    ~Helper();
  };
  Helper helper_;
  std::unique_ptr<FdStream> stream_;
  std::unique_ptr<boost::beast::flat_buffer> buffer_;
  std::unique_ptr<boost::beast::http::response_parser<boost::beast::http::buffer_body>> parser_;
};

class Client {
 public:
  // `socket_path`: a socket path, or "http(s)://HOST:PORT" for the TCP listener.
  explicit Client(std::string socket_path, int stop_fd = -1, std::string token = "")
      : socket_path_(std::move(socket_path)), stop_fd_(stop_fd), token_(std::move(token)) {}

  const std::string& socket_path() const { return socket_path_; }
  const std::string& token() const { return token_; }
  int stop_fd() const { return stop_fd_; }
  Result<Connection> connect() const { return Connection::open(socket_path_, stop_fd_, token_); }

  // One JSON round trip on a new connection: the response body as JSON (null for 204), or the
  // API's error.
  Result<nlohmann::json> call(std::string_view method, const std::string& target,
                              const std::optional<nlohmann::json>& body = std::nullopt) const;

 private:
  std::string socket_path_;
  int stop_fd_;
  std::string token_;
};

}  // namespace space::cli
