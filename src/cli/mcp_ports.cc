// `space mcp`: wait_for_port and http_request, a model's way to check the server it started in a
// sandbox. Both reach the port as `space port` does: POST /v1/sandboxes/{id}/ports/{port} with
// "Upgrade: tcp" turns the API connection into a TCP stream to 127.0.0.1:PORT in the sandbox
// (spaced answers 503 while nothing listens there, so waiting is asking again). http_request
// then writes one HTTP/1.1 request on that stream and reads the answer with Beast's parser,
// keeping at most max_bytes of the body.
#include <poll.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "cli/commands.h"
#include "cli/mcp.h"
#include "cli/signals.h"
#include "common/utf8.h"

namespace space::cli::mcp {
namespace {

namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

constexpr auto kRetryEvery = std::chrono::milliseconds(200);
constexpr double kMaxBodyShown = 1u << 20;  // max_bytes' ceiling
constexpr size_t kMaxResponseHeader = 64u << 10;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

// Sleeps `d`; false when a signal is ending the session meanwhile.
bool pause_for(std::chrono::milliseconds d) {
  pollfd p{interrupt_fd(), POLLIN, 0};
  int n = ::poll(&p, interrupt_fd() >= 0 ? 1 : 0, static_cast<int>(d.count()));
  return n <= 0;
}

bool nothing_listens(const Error& e) {
  return e.code() == Code::kUnavailable && e.message().find("nothing listens") != std::string::npos;
}

std::string start_hint(int port) {
  return "Is the server started, on this port, and still running? Start it in the background "
         "with run_command, e.g. \"python3 -m http.server " +
         std::to_string(port) +
         " > /tmp/server.log 2>&1 &\", then call wait_for_port; if it does not come up, read its "
         "log";
}

struct PortStream {
  Connection conn;
  std::string early;  // bytes of the stream read with spaced's answer
  double waited = 0;  // seconds until something listened
};

// A TCP stream to `port` in sandbox `id`, through spaced, waiting up to `wait_s` seconds for
// something to listen there.
Result<PortStream> open_port(const Session& s, const std::string& id, int port, double wait_s) {
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  const std::string target = sandbox_target(id, "/ports/" + std::to_string(port));
  for (;;) {
    Connection conn = TRY(s.client.connect());
    auto early = conn.upgrade(target, "tcp");
    if (early) return PortStream{std::move(conn), std::move(*early), seconds_since(start)};
    if (!nothing_listens(early.error())) return fail(std::move(early.error()));
    if (Clock::now() + kRetryEvery > deadline) {
      if (wait_s <= 0)
        return fail(Code::kUnavailable, early.error().message() + ". " + start_hint(port) + ".");
      return fail(Code::kTimeout, "nothing listens on port " + std::to_string(port) +
                                      " in sandbox " + id + " after waiting " +
                                      seconds_text(seconds_since(start)) + ". " + start_hint(port) +
                                      ". A server must listen on 127.0.0.1 or 0.0.0.0.");
    }
    if (!pause_for(kRetryEvery))
      return fail(Code::kUnavailable, "stopped waiting for port " + std::to_string(port) +
                                          ": the MCP session is ending");
  }
}

bool is_token_char(unsigned char c) {
  return std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

// The request's bytes, from the tool's arguments, each checked so that it cannot split the
// request (no CR, LF or other controls where they would).
Result<std::string> http_request_text(const json& a, int port, const std::string& method) {
  std::string path = TRY(str_arg(a, "path", false, "/"));
  if (path.empty() || path[0] != '/')
    return fail(Code::kInvalidArgument,
                "\"path\" must start with /, e.g. / or /api/items?page=2 (the host is always the "
                "sandbox's 127.0.0.1:PORT)");
  for (unsigned char c : path)
    if (c <= 0x20 || c == 0x7f)
      return fail(Code::kInvalidArgument,
                  "\"path\" has a space or a control character; percent-encode it (%20)");
  std::string head = method + " " + path + " HTTP/1.1\r\n";
  bool has_host = false, has_type = false;
  std::string extra;
  if (a.contains("headers")) {
    if (!a["headers"].is_object())
      return fail(Code::kInvalidArgument, "\"headers\" must be an object of strings");
    for (const auto& [name, value] : a["headers"].items()) {
      if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
            return is_token_char(static_cast<unsigned char>(c));
          }))
        return fail(Code::kInvalidArgument, "bad header name \"" + name.substr(0, 80) + "\"");
      if (!value.is_string())
        return fail(Code::kInvalidArgument, "header \"" + name + "\" must be a string");
      const std::string& v = value.get_ref<const std::string&>();
      for (unsigned char c : v)
        if ((c < 0x20 && c != '\t') || c == 0x7f)
          return fail(Code::kInvalidArgument,
                      "header \"" + name + "\" has a control character (CR, LF, ...)");
      std::string lower;
      for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower == "content-length" || lower == "transfer-encoding" || lower == "connection")
        return fail(Code::kInvalidArgument, "header \"" + name + "\" is set by http_request");
      has_host = has_host || lower == "host";
      has_type = has_type || lower == "content-type";
      extra += name + ": " + v + "\r\n";
    }
  }
  if (!has_host) head += "Host: localhost:" + std::to_string(port) + "\r\n";
  head += "User-Agent: space-mcp\r\nAccept: */*\r\nConnection: close\r\n" + extra;
  std::optional<std::string> body;
  if (a.contains("body")) body = TRY(str_arg(a, "body"));
  if (body && !has_type)
    head += json::accept(*body) ? "Content-Type: application/json\r\n"
                                : "Content-Type: text/plain; charset=utf-8\r\n";
  if (body || method == "POST" || method == "PUT" || method == "PATCH")
    head += "Content-Length: " + std::to_string(body ? body->size() : 0) + "\r\n";
  return head + "\r\n" + body.value_or("");
}

struct HttpAnswer {
  http::response<http::string_body> res;
  bool truncated = false;  // the body shown is not all of it
  std::string why;         // then: why, for the model
};

// Reads the answer from `stream` (after `early`) until it ends, its body reaches `limit`
// bytes, or `timeout_s` passes.
Result<HttpAnswer> read_http_answer(FdStream& stream, std::string early, bool head_only,
                                    size_t limit, double timeout_s, int port) {
  http::response_parser<http::string_body> p;
  p.header_limit(kMaxResponseHeader);
  p.body_limit(std::numeric_limits<std::uint64_t>::max());
  p.eager(true);
  if (head_only) p.skip(true);
  boost::beast::flat_buffer buf;
  auto room = buf.prepare(early.size());
  std::memcpy(room.data(), early.data(), early.size());
  buf.commit(early.size());
  stream.set_read_deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(timeout_s)));
  const std::string who = "the server on port " + std::to_string(port);
  HttpAnswer answer;
  for (;;) {
    if (buf.size() > 0) {
      boost::system::error_code ec;
      size_t n = p.put(buf.data(), ec);
      buf.consume(n);
      if (ec && ec != http::error::need_more)
        return fail(Code::kProtocol, who + " sent a malformed HTTP answer: " + ec.message());
      if (p.is_done()) break;
      if (p.is_header_done() && p.get().body().size() >= limit) {
        answer.truncated = true;
        answer.why = "the body goes on; only its first " + std::to_string(limit) +
                     " bytes are shown (max_bytes)";
        break;
      }
      if (!ec && n > 0) continue;
    }
    boost::system::error_code ec;
    size_t n = stream.read_some(buf.prepare(16 * 1024), ec);
    if (ec == boost::asio::error::eof) {
      p.put_eof(ec);
      if (ec && !p.is_header_done())
        return fail(Code::kProtocol, who + " closed the connection before a whole HTTP answer (" +
                                         std::to_string(buf.size()) +
                                         " bytes; is it an HTTP server?)");
      if (ec) {
        answer.truncated = true;
        answer.why = "the server closed the connection before the end of the body";
      }
      break;
    }
    if (ec == boost::asio::error::timed_out && p.is_header_done()) {
      answer.truncated = true;
      answer.why = "the rest of the body did not come within " + seconds_text(timeout_s) +
                   " (timeout_seconds)";
      break;
    }
    if (ec == boost::asio::error::timed_out)
      return fail(Code::kTimeout,
                  who + " did not answer within " + seconds_text(timeout_s) + " (timeout_seconds)");
    if (ec)
      return fail(Code::kUnavailable,
                  "reading " + who + "'s answer: " + ec.message() +
                      (received_signal() ? " (the MCP session is ending)" : ""));
    buf.commit(n);
  }
  answer.res = p.release();
  if (answer.res.body().size() > limit) {
    answer.res.body().resize(limit);
    answer.truncated = true;
    answer.why = "the body goes on; only its first " + std::to_string(limit) +
                 " bytes are shown (max_bytes)";
  }
  return answer;
}

}  // namespace

Result<json> tool_wait_for_port(Session& s, const json& a) {
  int port = TRY(int_arg(a, "port", 1, 65535));
  double wait = TRY(number_arg(a, "timeout_seconds", 30, 0, 600));
  std::string id = TRY(target_sandbox(s, a));
  PortStream ps = TRY(open_port(s, id, port, wait));
  double waited = std::round(ps.waited * 10) / 10;
  return tool_result(
      "port " + std::to_string(port) + " in sandbox " + id + " is listening" +
          (waited > 0 ? " (after " + seconds_text(waited) + ")" : ""),
      {{"sandbox_id", id}, {"port", port}, {"listening", true}, {"waited_seconds", waited}});
}

Result<json> tool_http_request(Session& s, const json& a) {
  int port = TRY(int_arg(a, "port", 1, 65535));
  std::string method = TRY(str_arg(a, "method", false, "GET"));
  static const char* const kMethods[] = {"GET",   "HEAD",   "POST",   "PUT",
                                         "PATCH", "DELETE", "OPTIONS"};
  if (std::none_of(std::begin(kMethods), std::end(kMethods),
                   [&](const char* m) { return method == m; }))
    return fail(Code::kInvalidArgument,
                "\"method\" must be one of GET, HEAD, POST, PUT, PATCH, "
                "DELETE, OPTIONS");
  std::string request = TRY(http_request_text(a, port, method));
  double wait = TRY(number_arg(a, "wait_seconds", 10, 0, 600));
  double timeout = TRY(number_arg(a, "timeout_seconds", 30, 0.1, 600));
  auto limit = static_cast<size_t>(TRY(number_arg(a, "max_bytes", 32768, 1, kMaxBodyShown)));
  std::string id = TRY(target_sandbox(s, a));
  PortStream ps = TRY(open_port(s, id, port, wait));
  FdStream& stream = ps.conn.stream();
  stream.set_write_timeout(std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)));
  if (auto ec = stream.write_all(request))
    return fail(Code::kUnavailable,
                "sending the request to port " + std::to_string(port) + ": " + ec.message());
  HttpAnswer ans =
      TRY(read_http_answer(stream, std::move(ps.early), method == "HEAD", limit, timeout, port));

  const auto& res = ans.res;
  std::string body = res.body();
  if (ans.truncated) {  // a UTF-8 character cut at the end is no reason to call it binary
    auto bad = invalid_utf8_at(body);
    if (bad && *bad + 4 > body.size()) body.resize(*bad);
  }
  json headers = json::object();
  std::string text =
      "HTTP " + std::to_string(res.result_int()) + " " + std::string(res.reason()) + "\n";
  for (const auto& f : res) {
    std::string name(f.name_string()), value(f.value());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    headers[name] =
        headers.contains(name) ? headers[name].get<std::string>() + ", " + value : value;
    text += name + ": " + value + "\n";
  }
  std::string shown = printable(body);
  text += "\n" + shown;
  if (ans.truncated) text += "\n[... " + ans.why + "]";
  return tool_result(text, {{"sandbox_id", id},
                            {"port", port},
                            {"status", res.result_int()},
                            {"reason", std::string(res.reason())},
                            {"headers", headers},
                            {"body", shown},
                            {"truncated", ans.truncated}});
}

}  // namespace space::cli::mcp
