// A small HTTP client for the API server tests, speaking over a real Unix socket: one-shot
// requests, and a streaming connection that can send raw bytes (garbage, chunked bodies) and
// read a response incrementally. Every read has a 5 s timeout so a broken server fails a test
// instead of hanging it.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/base64.h"
#include "common/fd_stream.h"

namespace space::api::testing {

namespace http = boost::beast::http;
using nlohmann::json;

inline UniqueFd connect_unix(const std::filesystem::path& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return {};
  return fd;
}

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  json body_json() const { return json::parse(body, nullptr, false); }
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class Conn {
 public:
  explicit Conn(const std::filesystem::path& socket) : Conn(connect_unix(socket)) {}
  // Any connected stream socket (the TCP listener's tests).
  explicit Conn(UniqueFd fd) : stream_(std::move(fd)) {
    stream_.set_read_timeout(std::chrono::milliseconds(5000));
    stream_.set_write_timeout(std::chrono::milliseconds(5000));
  }
  bool ok() const { return stream_.fd() >= 0; }
  FdStream& stream() { return stream_; }

  bool send(std::string_view raw) { return !stream_.write_all(raw); }
  bool send_chunk(std::string_view data) {
    char head[32];
    std::snprintf(head, sizeof head, "%zx\r\n", data.size());
    return send(std::string(head) + std::string(data) + "\r\n");
  }

  // Reads the response header; returns the status (0 on failure).
  int read_head() {
    parser_.emplace();
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    boost::system::error_code ec;
    http::read_header(stream_, buffer_, *parser_, ec);
    if (ec) {
      last_error_ = ec.message();
      return 0;
    }
    for (const auto& f : parser_->get()) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      headers_[name] = std::string(f.value());
    }
    return parser_->get().result_int();
  }
  const std::map<std::string, std::string>& headers() const { return headers_; }

  // Next body bytes; "" at the end of the body; nullopt on error (e.g. truncated).
  std::optional<std::string> read_body_some() {
    if (parser_->is_done()) return std::string();
    char buf[65536];
    for (;;) {
      auto& b = parser_->get().body();
      b.data = buf;
      b.size = sizeof buf;
      boost::system::error_code ec;
      http::read_some(stream_, buffer_, *parser_, ec);
      size_t got = sizeof buf - b.size;
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return std::nullopt;
      if (got > 0 || parser_->is_done()) return std::string(buf, got);
    }
  }
  std::optional<std::string> read_body() {
    std::string all;
    for (;;) {
      auto part = read_body_some();
      if (!part) return std::nullopt;
      if (part->empty()) return all;
      all += *part;
    }
  }
  // The next NDJSON line of the body, parsed; nullopt at the end or on error.
  std::optional<json> next_event() {
    for (;;) {
      size_t nl = pending_.find('\n');
      if (nl != std::string::npos) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return json::parse(line);
      }
      auto part = read_body_some();
      if (!part || part->empty()) return std::nullopt;
      pending_ += *part;
    }
  }

  Response request(const std::string& method, const std::string& target, std::string body = "",
                   std::map<std::string, std::string> headers = {}) {
    std::string raw = method + " " + target + " HTTP/1.1\r\nHost: localhost\r\n";
    for (auto& [k, v] : headers) raw += k + ": " + v + "\r\n";
    if (!body.empty() || method == "POST" || method == "PUT") {
      raw += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    raw += "\r\n" + body;
    Response r;
    if (!send(raw)) return r;
    r.status = read_head();
    if (r.status == 0) {
      r.body = last_error_;
      return r;
    }
    r.headers = headers_;
    r.body = read_body().value_or("<truncated>");
    return r;
  }

  // True if the server closed the connection (read returns EOF) within the read timeout.
  bool closed_by_server() {
    char c;
    boost::system::error_code ec;
    stream_.read_some(boost::asio::buffer(&c, 1), ec);
    return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset;
  }

 private:
  FdStream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  std::map<std::string, std::string> headers_;
  std::string pending_;

 public:
  std::string last_error_;
};

inline Response request(const std::filesystem::path& socket, const std::string& method,
                        const std::string& target, std::string body = "",
                        std::map<std::string, std::string> headers = {}) {
  Conn c(socket);
  return c.request(method, target, std::move(body), std::move(headers));
}

}  // namespace space::api::testing
