// HTTP client over the daemon's Unix socket or TCP listener, plain or TLS (see client.h).
#include "cli/client.h"

#include <netdb.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>

namespace space::cli {
namespace {

namespace http = boost::beast::http;

Error transport_error(const boost::system::error_code& ec, std::string_view what,
                      const std::string& socket) {
  if (ec == boost::asio::error::operation_aborted) {
    return Error(Code::kUnavailable, std::string(what) + ": interrupted");
  }
  if (ec == boost::asio::error::timed_out) {
    return Error(Code::kTimeout,
                 std::string(what) + ": the daemon at " + socket + " did not answer in time");
  }
  return Error(Code::kUnavailable, std::string(what) + ": " + ec.message() + " (the daemon at " +
                                       socket + " closed the connection; is it still running?)");
}

std::optional<Code> code_from_name(std::string_view name) {
  for (Code c : {Code::kInvalidArgument, Code::kNotFound, Code::kAlreadyExists, Code::kConflict,
                 Code::kPermissionDenied, Code::kUnauthenticated, Code::kPayloadTooLarge,
                 Code::kResourceExhausted, Code::kTimeout, Code::kUnavailable, Code::kUnimplemented,
                 Code::kProtocol, Code::kInternal}) {
    if (code_name(c) == name) return c;
  }
  return std::nullopt;
}

}  // namespace

std::string socket_path_from_env() {
  const char* env = std::getenv("SPACE_SOCKET");
  return env != nullptr && *env != '\0' ? env : kDefaultSocket;
}

std::string address_from_env() {
  const char* env = std::getenv("SPACE_API");
  return env != nullptr && *env != '\0' ? env : socket_path_from_env();
}

std::string token_from_env() {
  const char* env = std::getenv("SPACE_TOKEN");
  return env != nullptr ? env : "";
}

bool is_tcp_address(std::string_view address) {
  return address.starts_with("http://") || address.starts_with("https://");
}

std::string url_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Error api_error(int status, std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const auto& e = j["error"];
    std::string message = e.value("message", "");
    auto code = code_from_name(e.value("code", ""));
    if (code && !message.empty()) return Error(*code, message);
  }
  Code code = status == 404   ? Code::kNotFound
              : status >= 500 ? Code::kInternal
                              : Code::kInvalidArgument;
  std::string text(body.substr(0, 200));
  return Error(code, "the daemon answered HTTP " + std::to_string(status) +
                         (text.empty() ? "" : ": " + text));
}

Connection::Connection(UniqueFd fd, std::string socket_path)
    : socket_path_(std::move(socket_path)),
      stream_(std::make_unique<FdStream>(std::move(fd))),
      buffer_(std::make_unique<boost::beast::flat_buffer>()) {}

namespace {

struct TcpUrl {
  bool https = false;
  std::string host;  // without brackets
  std::string port;
};

// "http://HOST:PORT" or "https://HOST:PORT" (HOST a name, an IPv4 address or [IPv6]).
Result<TcpUrl> parse_url(const std::string& url) {
  TcpUrl u;
  u.https = url.starts_with("https://");
  std::string_view rest = std::string_view(url).substr(u.https ? 8 : 7);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == rest.size() ||
      rest.find('/') != std::string_view::npos)
    return fail(Code::kInvalidArgument,
                "SPACE_API=" + url +
                    " is not http://HOST:PORT or https://HOST:PORT; set SPACE_API to the "
                    "daemon's api_listen address, e.g. http://127.0.0.1:7070 or "
                    "https://myhost.example:7443");
  u.host = std::string(rest.substr(0, colon));
  u.port = std::string(rest.substr(colon + 1));
  if (u.host.size() > 2 && u.host.front() == '[' && u.host.back() == ']') {
    u.host = u.host.substr(1, u.host.size() - 2);
  }
  return u;
}

// A connected TCP socket to the URL's host and port.
Result<UniqueFd> connect_tcp(const std::string& url, const TcpUrl& u) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &res);
  if (rc != 0)
    return fail(Code::kInvalidArgument,
                "SPACE_API=" + url + ": cannot resolve " + u.host + ": " + ::gai_strerror(rc));
  int err = ECONNREFUSED;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) {
      err = errno;
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    err = errno;
  }
  ::freeaddrinfo(res);
  if (err == ECONNREFUSED)
    return fail(Code::kUnavailable,
                "no daemon answers at " + url +
                    " (SPACE_API); is spaced running with api_listen "
                    "set to that address?",
                err);
  return fail(Error::sys("connect", "\"" + url + "\"", err));
}

// The client TLS context for $SPACE_CA (or the system's trust store), made once per process.
Result<std::shared_ptr<SSL_CTX>> client_context() {
  static std::mutex mu;
  static std::shared_ptr<SSL_CTX> ctx;
  std::lock_guard lock(mu);
  if (!ctx) {
    // The static CLI does not read the system's openssl.cnf: it could ask to dlopen provider
    // modules, which a static binary cannot do reliably. TLS settings are all set in code.
    OPENSSL_init_ssl(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr);
    const char* ca = std::getenv("SPACE_CA");
    ctx = TRY(tls::client_context(ca != nullptr ? ca : ""));
  }
  return ctx;
}

// The TLS tunnel to an https:// daemon; errors say what to set.
Result<std::pair<std::unique_ptr<tls::ClientTunnel>, UniqueFd>> open_tls(const std::string& url,
                                                                         const TcpUrl& u,
                                                                         UniqueFd tcp,
                                                                         int stop_fd) {
  const char* ca = std::getenv("SPACE_CA");
  const bool ca_set = ca != nullptr && *ca != '\0';
  auto ctx = client_context();
  if (!ctx) {
    return fail(std::move(ctx.error())
                    .wrap("SPACE_CA: set it to the path of the CA certificate (PEM) that signed "
                          "the daemon's certificate, e.g. a copy of the daemon host's "
                          "/var/lib/space/tls/ca.pem"));
  }
  tls::TunnelOptions o;
  o.handshake_timeout = std::chrono::seconds(30);
  o.stall_timeout = std::chrono::hours(1);  // the daemon bounds its own side
  o.cancel_fd = stop_fd;
  auto t = tls::ClientTunnel::start(std::move(tcp), *ctx, u.host, o);
  if (!t) {
    Error e = std::move(t.error());
    if (e.code() != Code::kPermissionDenied)
      return fail(e.wrap("connecting to " + url + " (SPACE_API)"));
    std::string hint;
    if (e.message().find("not valid for") != std::string::npos) {
      hint = "; use a name the certificate holds in SPACE_API, or add \"" + u.host +
             "\" to api_tls.names in spaced's config (its own CA) and restart it";
    } else if (ca_set) {
      hint = std::string("; SPACE_CA=") + ca +
             " does not hold the CA that signed it: copy the daemon host's "
             "<state_dir>/tls/ca.pem (default /var/lib/space/tls/ca.pem) again";
    } else {
      hint =
          "; set SPACE_CA to a copy of the daemon host's <state_dir>/tls/ca.pem (default "
          "/var/lib/space/tls/ca.pem) when spaced makes its own CA (api_tls \"auto\")";
    }
    return fail(Code::kPermissionDenied,
                "connecting to " + url + " (SPACE_API): " + e.message() + hint);
  }
  return t;
}

}  // namespace

Result<Connection> Connection::open(const std::string& socket_path, int stop_fd,
                                    std::string token) {
  // The token goes into a header line: a character that could end the line would let the
  // environment inject headers. Never repeat it in a message.
  for (unsigned char ch : token) {
    if (ch <= 0x20 || ch >= 0x7f)
      return fail(Code::kInvalidArgument,
                  "SPACE_TOKEN holds a character no API token has (spaces, control or non-ASCII "
                  "characters); copy the token printed by `space token create` again");
  }
  if (is_tcp_address(socket_path)) {
    TcpUrl u = TRY(parse_url(socket_path));
    UniqueFd fd = TRY(connect_tcp(socket_path, u));
    std::unique_ptr<tls::ClientTunnel> tunnel;
    if (u.https) std::tie(tunnel, fd) = TRY(open_tls(socket_path, u, std::move(fd), stop_fd));
    Connection c(std::move(fd), socket_path);
    c.tunnel_ = std::move(tunnel);
    c.stream_->set_stop_fd(stop_fd);
    c.token_ = std::move(token);
    return c;
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fail_sys("socket", "AF_UNIX");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path) {
    return fail(Code::kInvalidArgument,
                "socket path \"" + socket_path + "\" is too long (check $SPACE_SOCKET)");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    if (err == ENOENT || err == ECONNREFUSED) {
      return fail(Code::kUnavailable,
                  "no daemon at " + socket_path + "; start one with `spaced` or run `space run`",
                  err);
    }
    if (err == EACCES || err == EPERM) {
      return fail(Code::kPermissionDenied,
                  "permission denied connecting to " + socket_path +
                      ": the socket is root-only (mode 0600); run space as root, or use "
                      "an API token on spaced's TCP listener (SPACE_API, SPACE_TOKEN)",
                  err);
    }
    return fail(Error::sys("connect", "\"" + socket_path + "\"", err));
  }
  Connection c(std::move(fd), socket_path);
  c.stream_->set_stop_fd(stop_fd);
  c.token_ = std::move(token);
  return c;
}

std::string Connection::auth_header() const {
  return token_.empty() ? "" : "Authorization: Bearer " + token_ + "\r\n";
}

Result<void> Connection::write(std::string_view data, std::string_view what) {
  auto ec = stream_->write_all(data);
  if (ec) return fail(transport_error(ec, what, socket_path_));
  return {};
}

Result<void> Connection::send(std::string_view method, const std::string& target,
                              std::string_view body, std::string_view content_type) {
  std::string head =
      std::string(method) + " " + target + " HTTP/1.1\r\nHost: spaced\r\n" + auth_header();
  if (!body.empty() || method == "POST" || method == "PUT") {
    head += "Content-Type: " + std::string(content_type) + "\r\n";
    head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  head += "\r\n";
  head += body;  // one write: the daemon reads head and body in one go
  return write(head, "sending the request");
}

Result<void> Connection::start_chunked(std::string_view method, const std::string& target,
                                       std::string_view content_type) {
  std::string head =
      std::string(method) + " " + target + " HTTP/1.1\r\nHost: spaced\r\n" + auth_header() +
      "Transfer-Encoding: chunked\r\nContent-Type: " + std::string(content_type) + "\r\n\r\n";
  return write(head, "sending the request");
}

Result<void> Connection::write_chunk(std::string_view data) {
  if (data.empty()) return {};
  char size_line[24];
  int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
  std::string chunk(size_line, static_cast<size_t>(n));
  chunk.append(data);
  chunk.append("\r\n");
  return write(chunk, "sending the request body");
}

Result<void> Connection::end_chunks() { return write("0\r\n\r\n", "sending the request body"); }

Result<int> Connection::read_head() {
  for (;;) {
    parser_ = std::make_unique<http::response_parser<http::buffer_body>>();
    parser_->header_limit(64 * 1024);
    // Not boost::none: Boost 1.74 then refuses every body with a Content-Length.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    boost::system::error_code ec;
    http::read_header(*stream_, *buffer_, *parser_, ec);
    if (ec) return fail(transport_error(ec, "reading the response", socket_path_));
    int status = parser_->get().result_int();
    if (status != 100) return status;
  }
}

std::string Connection::header(std::string_view name) const {
  if (!parser_) return "";
  auto v = parser_->get()[boost::beast::string_view(name.data(), name.size())];
  return std::string(v.data(), v.size());
}

Result<size_t> Connection::read_some(char* out, size_t n) {
  if (parser_->is_done() || n == 0) return 0;
  for (;;) {
    auto& body = parser_->get().body();
    body.data = out;
    body.size = n;
    body.more = true;
    boost::system::error_code ec;
    http::read_some(*stream_, *buffer_, *parser_, ec);
    size_t got = n - body.size;
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return fail(transport_error(ec, "reading the response", socket_path_));
    if (got > 0 || parser_->is_done()) return got;
  }
}

Result<std::string> Connection::read_body(size_t limit) {
  std::string body;
  char buf[64 * 1024];
  for (;;) {
    size_t n = TRY(read_some(buf, sizeof buf));
    if (n == 0) return body;
    if (body.size() + n > limit) {
      return fail(Code::kProtocol,
                  "the daemon's response is larger than " + std::to_string(limit >> 20) + " MiB");
    }
    body.append(buf, n);
  }
}

Result<std::string> Connection::upgrade(const std::string& target, std::string_view protocol) {
  TRY_VOID(write("POST " + target +
                     " HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: " +
                     std::string(protocol) + "\r\nContent-Length: 0\r\n" + auth_header() + "\r\n",
                 "sending the request"));
  int status = TRY(read_head());
  if (status != 101) return fail(api_error(status, TRY(read_body(1 << 20))));
  std::string early(static_cast<const char*>(buffer_->data().data()), buffer_->size());
  buffer_->consume(buffer_->size());
  return early;
}

Result<void> Connection::for_each_line(const std::function<Result<bool>(std::string_view)>& line) {
  std::string pending;
  char buf[64 * 1024];
  for (;;) {
    size_t n = TRY(read_some(buf, sizeof buf));
    if (n == 0) return {};
    pending.append(buf, n);
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      std::string_view l(pending.data() + start, nl - start);
      start = nl + 1;
      if (!l.empty() && !TRY(line(l))) return {};
    }
    pending.erase(0, start);
    if (pending.size() > (64u << 20))
      return fail(Code::kProtocol, "the daemon sent a line longer than 64 MiB");
  }
}

bool Connection::reusable() const {
  return parser_ && parser_->is_done() && parser_->get().keep_alive();
}

Result<nlohmann::json> Connection::call(std::string_view method, const std::string& target,
                                        const std::optional<nlohmann::json>& body) {
  TRY_VOID(send(method, target, body ? body->dump() : ""));
  int status = TRY(read_head());
  std::string text = TRY(read_body());
  if (status >= 400) return fail(api_error(status, text));
  if (status == 204 || text.empty()) return nlohmann::json(nullptr);
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    return fail(Code::kProtocol, "the daemon sent a malformed JSON response to " +
                                     std::string(method) + " " + target);
  }
  return j;
}

Result<nlohmann::json> Client::call(std::string_view method, const std::string& target,
                                    const std::optional<nlohmann::json>& body) const {
  Connection c = TRY(connect());
  return c.call(method, target, body);
}

}  // namespace space::cli
