// HTTP client over the daemon's Unix socket or TCP listener, plain or TLS (see client.h).
#include "cli/client.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "cli/tcp_url.h"
#include "common/subprocess.h"

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

// --- https: the helper executable space-https (src/cli/https_main.cc) holds the TLS client, so
// that `space` itself links no OpenSSL (its relocations cost every CLI start ~1.7 ms).

// Helpers whose Connection is gone but that had not exited yet (finishing close_notify); reaped
// without waiting on each new spawn, so long-running commands (space mcp, space port) leave no
// zombies behind.
std::mutex g_reap_mu;
std::vector<pid_t> g_unreaped;

void reap_finished() {
  std::lock_guard lock(g_reap_mu);
  std::erase_if(g_unreaped, [](pid_t pid) {
    int status;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    return r == pid || (r < 0 && errno == ECHILD);
  });
}

void reap_later(pid_t pid) {
  int status;
  if (::waitpid(pid, &status, WNOHANG) != 0) return;  // gone (or not ours)
  std::lock_guard lock(g_reap_mu);
  g_unreaped.push_back(pid);
}

// $SPACE_HTTPS_BIN, else space-https next to this executable, else /usr/lib/space/space-https.
Result<std::string> https_helper_path() {
  const char* env = std::getenv("SPACE_HTTPS_BIN");
  if (env != nullptr && *env != '\0') return std::string(env);
  std::string next_to;
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string_view exe(self, static_cast<size_t>(n));
    size_t slash = exe.rfind('/');
    if (slash != std::string_view::npos) {
      next_to = std::string(exe.substr(0, slash + 1)) + "space-https";
      if (::access(next_to.c_str(), X_OK) == 0) return next_to;
    }
  }
  static constexpr const char* kInstalled = "/usr/lib/space/space-https";
  if (::access(kInstalled, X_OK) == 0) return std::string(kInstalled);
  return fail(Code::kUnavailable,
              "https:// (SPACE_API) needs the helper space-https, found neither at " +
                  (next_to.empty() ? std::string("<space's own directory>") : next_to) +
                  " nor at " + kInstalled + "; install it next to space");
}

// Waits for the child and says how it ended ("exited with status 1", "was killed by signal
// KILL").
std::string wait_status(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return describe_wait_status(status);
}

// Starts `space-https URL` on one end of a socketpair (its fd 3) and reads its status line:
// on "ok" the other end carries plaintext HTTP to the daemon; on "error CODE MESSAGE" that
// Error. `stop_fd` (Ctrl-C) ends the wait and the helper.
Result<std::pair<UniqueFd, pid_t>> open_https(const std::string& url, int stop_fd) {
  reap_finished();
  std::string helper = TRY(https_helper_path());
  ChannelOptions co;
  co.inherit_env = true;
  co.stdin_null = false;
  // Its own process group: the terminal's Ctrl-C goes to the CLI, which decides (exec forwards
  // it to the sandbox); the helper ends when the CLI closes its end.
  co.own_process_group = true;
  SpawnedHelper spawned = TRY(spawn_with_channel(helper, {"space-https", url}, co));
  ChildProcess& child = spawned.child;
  UniqueFd& mine = spawned.channel;
  auto give_up = [&](Error e) -> Error {
    (void)child.kill_and_wait(SIGTERM);
    return e;
  };
  std::string line;
  for (;;) {
    pollfd fds[2] = {{mine.get(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int n = ::poll(fds, stop_fd >= 0 ? 2 : 1, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(give_up(Error::sys("poll", "https helper", errno)));
    }
    if (stop_fd >= 0 && fds[1].revents != 0)
      return fail(give_up(Error(Code::kUnavailable, "connecting to " + url + ": interrupted")));
    char ch;
    ssize_t got = ::read(mine.get(), &ch, 1);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      return fail(Code::kUnavailable, "connecting to " + url + " (SPACE_API): " + helper + " " +
                                          wait_status(child.release()) + " without saying why");
    }
    if (ch == '\n') break;
    if (line.size() >= 64 * 1024)
      return fail(give_up(Error(Code::kProtocol, helper + " sent a status line too long")));
    line += ch;
  }
  if (line == "ok") return std::pair{std::move(mine), child.release()};
  // "error CODE MESSAGE"
  Code code = Code::kUnavailable;
  std::string message = line;
  if (line.starts_with("error ")) {
    std::string_view rest = std::string_view(line).substr(6);
    size_t sp = rest.find(' ');
    if (auto c = code_from_name(rest.substr(0, sp))) code = *c;
    message = sp == std::string_view::npos ? std::string() : std::string(rest.substr(sp + 1));
  }
  mine.reset();
  (void)wait_status(child.release());
  return fail(code, message);
}

}  // namespace

Connection::Helper& Connection::Helper::operator=(Helper&& o) noexcept {
  if (this != &o) {
    if (pid > 0) reap_later(pid);
    pid = std::exchange(o.pid, -1);
  }
  return *this;
}

Connection::Helper::~Helper() {
  if (pid > 0) reap_later(pid);
}

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
    UniqueFd fd;
    pid_t helper = -1;
    if (u.https) {
      std::tie(fd, helper) = TRY(open_https(socket_path, stop_fd));
    } else {
      fd = TRY(connect_tcp(socket_path, u));
    }
    Connection c(std::move(fd), socket_path);
    c.helper_.pid = helper;
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

Result<std::string> Connection::upgrade(const std::string& target, std::string_view protocol,
                                        std::string_view json_body) {
  TRY_VOID(write("POST " + target +
                     " HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: " +
                     std::string(protocol) + "\r\n" +
                     (json_body.empty() ? "" : "Content-Type: application/json\r\n") +
                     "Content-Length: " + std::to_string(json_body.size()) + "\r\n" +
                     auth_header() + "\r\n" + std::string(json_body),
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
  auto sent = send(method, target, body ? body->dump() : "");
  // A daemon that refuses the connection (503, too many connections) may answer and close
  // before the request is written: its answer says more than "Broken pipe".
  auto head = read_head();
  if (!sent && !head) return fail(std::move(sent.error()));
  int status = TRY(std::move(head));
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
