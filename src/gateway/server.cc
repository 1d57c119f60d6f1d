// space-gateway's front end (server.h): the listener, a thread per connection, and the
// recipe each request follows (authenticate, authorize, route, forward, relay).
#include "gateway/server.h"

#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <map>
#include <thread>

#include "api/auth.h"
#include "api/exchange.h"
#include "api/request.h"
#include "api/router.h"
#include "common/tcp_listen.h"
#include "common/units.h"
#include "tls/tunnel.h"

namespace space::gateway {
namespace http = boost::beast::http;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kGwHeaderLimit = 16 * 1024;
constexpr size_t kGwCreateBodyLimit = 1 << 20;

std::string gw_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Fields a proxy never passes on (RFC 9110 7.6.1), plus what the gateway sets itself.
bool gw_hop_by_hop(const std::string& lower) {
  return lower == "connection" || lower == "keep-alive" || lower == "proxy-connection" ||
         lower == "te" || lower == "trailer" || lower == "transfer-encoding" ||
         lower == "upgrade" || lower == "content-length" || lower == "host" ||
         lower == "authorization" || lower == "space-principal" || lower == "proxy-authorization";
}

Result<void> gw_write(FdStream& s, std::string_view data) {
  boost::system::error_code ec;
  boost::asio::write(s, boost::asio::buffer(data.data(), data.size()), ec);
  if (ec) return fail(Code::kUnavailable, "writing: " + ec.message());
  return {};
}

}  // namespace

// One client connection: its requests, one after another.
class GatewayConnection {
 public:
  GatewayConnection(GatewayServer& server, UniqueFd fd)
      : s_(server), cs_(std::move(fd)), cancel_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    cs_.set_stop_fd(s_.cut_fd_.get());
  }
  void run();

 private:
  using Parser = http::request_parser<http::empty_body>;
  // Handles one request; false when the connection must close afterwards.
  bool handle(Parser& p);
  bool respond(unsigned status, const json& body, bool keep_alive = true);
  bool respond_text(const std::string& text, bool keep_alive);
  std::string metrics_text();  // Prometheus text: nodes by status, request counters
  bool respond_error(const Error& e, bool keep_alive = true) {
    return respond(static_cast<unsigned>(http_status(e.code())), api::error_body(e), keep_alive);
  }
  // The head of the request as the node gets it (`body_framing`: the Content-Length or
  // Transfer-Encoding line, or "").
  std::string node_head(const Parser& p, const std::string& target, const std::string& node,
                        const std::string& body_framing, bool tunnel);
  // Copies `n` body bytes from the client (what the buffer holds first) to `to`.
  Result<void> copy_body(uint64_t n, FdStream& to);
  // Reads the node's answer head; then relay_body() streams it to the client.
  using NodeParser = http::response_parser<http::buffer_body>;
  Result<void> read_node_head(NodeConn& c, NodeParser& rp);
  // Sends the answer's head and body to the client; false when the client connection must end.
  bool relay(NodeConn& c, NodeParser& rp, bool head_request, bool& node_reusable);
  // False once the client hung up, its token went, or the gateway is cutting connections.
  bool client_still_there();
  // Forwards one request whose body has a known length (or none), answer streamed back.
  bool forward(const Parser& p, const std::string& node, const std::string& body_override,
               bool has_override);
  // An exec, a port, a terminal or a chunked upload: a connection of its own, both ways.
  bool tunnel(const Parser& p, const std::string& node);
  bool create(Parser& p, const std::string& target);
  bool fan_out_list(const Parser& p, const std::string& key);
  bool lost_or_unknown(const std::string& id, const std::string& node);
  bool check_token();  // false once the token is no longer valid (streams end)

  GatewayServer& s_;
  FdStream cs_;
  boost::beast::flat_buffer cbuf_{64 * 1024};
  UniqueFd cancel_;
  api::Principal principal_;
  std::string principal_header_;
  Clock::time_point next_token_check_;
};

void GatewayConnection::run() {
  for (bool first = true;; first = false) {
    Parser p;
    p.header_limit(kGwHeaderLimit);
    // Bodies are relayed, not parsed: their limits are the node's (file uploads have none).
    // (Not boost::none: Boost 1.74 compares a Content-Length against an empty optional as
    // "greater".)
    p.body_limit(std::numeric_limits<std::uint64_t>::max());
    p.eager(false);
    cs_.set_read_timeout(std::chrono::milliseconds(0));
    cs_.set_read_deadline(Clock::now() + std::chrono::seconds(60));
    // Stopping: a new connection's first request is served (its client sent it to us); a
    // kept-alive connection with nothing pending is closed rather than waited on (its client
    // opens the next one to another replica).
    bool idle_between_requests = !first && cbuf_.size() == 0;
    cs_.set_read_interrupt_fd(idle_between_requests ? s_.stop_fd_.get() : -1);
    boost::system::error_code ec;
    http::read_header(cs_, cbuf_, p, ec);
    cs_.set_read_interrupt_fd(-1);
    if (ec) {
      if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
        respond(413, api::error_body(Error(Code::kPayloadTooLarge, "request header over 16 KiB")),
                false);
      else if (ec != http::error::end_of_stream && ec != boost::asio::error::operation_aborted &&
               ec != boost::asio::error::timed_out && ec != http::error::partial_message)
        respond(400, api::error_body(Error(Code::kInvalidArgument, "bad request: " + ec.message())),
                false);
      return;
    }
    cs_.set_read_deadline(Clock::time_point::max());
    s_.requests_++;
    bool again = false;
    try {
      again = handle(p);
    } catch (const std::exception& e) {
      // A bug, not the client's doing: this connection ends, the gateway goes on.
      spdlog::error("gateway: {} {}: {}", std::string(p.get().method_string()),
                    std::string(p.get().target()), e.what());
    }
    if (!again || !p.get().keep_alive()) return;
  }
}

bool GatewayConnection::respond(unsigned status, const json& body, bool keep_alive) {
  std::string text = api::json_text(body) + "\n";
  std::string head =
      "HTTP/1.1 " + std::to_string(status) + " " +
      std::string(http::obsolete_reason(static_cast<http::status>(status))) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(text.size()) +
      "\r\n" + (keep_alive ? "" : "Connection: close\r\n") + "\r\n";
  return gw_write(cs_, head + text).has_value() && keep_alive;
}

bool GatewayConnection::respond_text(const std::string& text, bool keep_alive) {
  std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
      "Content-Length: " +
      std::to_string(text.size()) + "\r\n" + (keep_alive ? "" : "Connection: close\r\n") + "\r\n";
  return gw_write(cs_, head + text).has_value() && keep_alive;
}

std::string GatewayConnection::metrics_text() {
  std::map<std::string, int> by_status = {{"active", 0}, {"unreachable", 0}, {"lost", 0}};
  for (auto& n : s_.nodes_.describe()) by_status[n.value("status", std::string("lost"))]++;
  std::string o = "# HELP space_gateway_nodes Nodes by status.\n# TYPE space_gateway_nodes gauge\n";
  for (auto& [status, count] : by_status)
    o += "space_gateway_nodes{status=\"" + status + "\"} " + std::to_string(count) + "\n";
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name +
         " " + std::to_string(v) + "\n";
  };
  counter("space_gateway_requests_total", "Requests read from clients.", s_.requests_.load());
  counter("space_gateway_creates_placed_total", "Creates and restores a node took.",
          s_.creates_placed_.load());
  counter("space_gateway_creates_refused_total",
          "Creates and restores no node took (every candidate refused or none fit).",
          s_.creates_refused_.load());
  counter("space_gateway_node_lost_total", "Answers 410 node_lost.", s_.node_lost_.load());
  std::lock_guard lock(s_.mu_);
  o += "# HELP space_gateway_connections Client connections open.\n# TYPE "
       "space_gateway_connections gauge\nspace_gateway_connections " +
       std::to_string(s_.active_) + "\n";
  return o;
}

bool GatewayConnection::check_token() {
  if (principal_.root) return true;
  auto now = Clock::now();
  if (now < next_token_check_) return true;
  next_token_check_ = now + std::chrono::seconds(1);
  auto ok = s_.tokens_.still_valid(principal_.token.id);
  if (!ok) spdlog::info("gateway: ending a stream: {}", ok.error().message());
  return ok.has_value();
}

std::string GatewayConnection::node_head(const Parser& p, const std::string& target,
                                         const std::string& node, const std::string& body_framing,
                                         bool tunnel) {
  const auto& req = p.get();
  std::string h =
      std::string(req.method_string()) + " " + target + " HTTP/1.1\r\nHost: " + node + "\r\n";
  for (const auto& f : req) {
    std::string name(f.name_string());
    if (gw_hop_by_hop(gw_lower(name))) continue;
    h += name + ": " + std::string(f.value()) + "\r\n";
  }
  h += body_framing;
  if (!principal_header_.empty()) h += "Space-Principal: " + principal_header_ + "\r\n";
  if (tunnel && p.upgrade()) {
    h += "Connection: Upgrade\r\nUpgrade: " + std::string(req[http::field::upgrade]) + "\r\n";
  } else if (tunnel) {
    h += "Connection: close\r\n";
  }
  return h + "\r\n";
}

Result<void> GatewayConnection::copy_body(uint64_t n, FdStream& to) {
  while (n > 0) {
    if (cbuf_.size() == 0) {
      boost::system::error_code ec;
      cs_.set_read_timeout(std::chrono::seconds(60));
      size_t got = cs_.read_some(cbuf_.prepare(std::min<uint64_t>(n, 64 * 1024)), ec);
      cs_.set_read_timeout(std::chrono::milliseconds(0));
      if (ec) return fail(Code::kInvalidArgument, "reading the request body: " + ec.message());
      cbuf_.commit(got);
    }
    size_t take = static_cast<size_t>(std::min<uint64_t>(n, cbuf_.size()));
    auto data = cbuf_.data();
    TRY_VOID(gw_write(to, std::string_view(static_cast<const char*>(data.data()), take)));
    cbuf_.consume(take);
    n -= take;
  }
  return {};
}

Result<void> GatewayConnection::read_node_head(NodeConn& c, NodeParser& rp) {
  rp.body_limit(std::numeric_limits<std::uint64_t>::max());
  rp.header_limit(64 * 1024);
  boost::system::error_code ec;
  c.stream->set_read_interrupt_fd(cancel_.get());
  c.stream->set_read_timeout(std::chrono::milliseconds(0));
  http::read_header(*c.stream, c.buffer, rp, ec);
  if (ec) return fail(Code::kUnavailable, "node " + c.node + " did not answer: " + ec.message());
  return {};
}

bool GatewayConnection::relay(NodeConn& c, NodeParser& rp, bool head_request, bool& node_reusable) {
  node_reusable = false;
  auto& res = rp.get();
  unsigned status = res.result_int();
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + std::string(res.reason()) + "\r\n";
  for (const auto& f : res) {
    std::string name(f.name_string());
    std::string lower = gw_lower(name);
    if (lower == "connection" || lower == "keep-alive" || lower == "transfer-encoding" ||
        lower == "content-length")
      continue;
    h += name + ": " + std::string(f.value()) + "\r\n";
  }
  bool no_body = head_request || status / 100 == 1 || status == 204 || status == 304;
  bool chunked = !no_body && rp.chunked();
  auto length = rp.content_length();
  bool client_alive = true;
  if (!no_body) {
    if (length) {
      h += "Content-Length: " + std::to_string(*length) + "\r\n";
    } else if (chunked) {
      h += "Transfer-Encoding: chunked\r\n";
    } else {
      client_alive = false;  // the answer ends when the node closes: so does ours
    }
  }
  if (!client_alive) h += "Connection: close\r\n";
  if (!gw_write(cs_, h + "\r\n")) return false;
  if (no_body) {
    node_reusable = res.keep_alive();
    return client_alive;
  }
  char buf[64 * 1024];
  // Reads wake up every second even when the node sends nothing (a silent exec, a followed
  // log), to notice a client that hung up: a timed-out read consumes nothing, and the parser
  // goes on where it was.
  c.stream->set_read_timeout(std::chrono::milliseconds(1000));
  while (!rp.is_done()) {
    res.body().data = buf;
    res.body().size = sizeof buf;
    boost::system::error_code ec;
    http::read_some(*c.stream, c.buffer, rp, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec == boost::asio::error::timed_out) {
      if (!client_still_there()) return false;
      continue;
    }
    size_t n = sizeof buf - res.body().size;
    if (n > 0) {
      std::string out;
      if (chunked) {
        char size[32];
        snprintf(size, sizeof size, "%zx\r\n", n);
        out = size;
      }
      out.append(buf, n);
      if (chunked) out += "\r\n";
      if (!gw_write(cs_, out)) return false;  // the client went away
    }
    if (ec) {
      if (ec != http::error::end_of_stream || length || chunked) {
        spdlog::debug("gateway: node {} answer cut: {}", c.node, ec.message());
        return false;  // cut short: all we can do is close
      }
      break;
    }
    if (!check_token()) return false;
  }
  if (chunked && !gw_write(cs_, "0\r\n\r\n")) return false;
  node_reusable = res.keep_alive() && rp.is_done();
  return client_alive;
}

bool GatewayConnection::client_still_there() {
  // A followed log or a silent exec can send nothing for minutes: meanwhile the client may go
  // (then the node connection is closed, and the node ends what it was streaming, as it does
  // for its own clients), its token may be revoked, or the gateway may be cutting connections.
  pollfd p{cs_.fd(), POLLRDHUP, 0};
  if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return false;
  if (!check_token()) return false;
  pollfd stop{s_.cut_fd_.get(), POLLIN, 0};
  return ::poll(&stop, 1, 0) != 1;
}

bool GatewayConnection::forward(const Parser& p, const std::string& node,
                                const std::string& body_override, bool has_override) {
  const auto& req = p.get();
  uint64_t body_len = has_override ? body_override.size() : p.content_length().value_or(0);
  std::string framing =
      (body_len > 0 || req.method() == http::verb::post || req.method() == http::verb::put)
          ? "Content-Length: " + std::to_string(body_len) + "\r\n"
          : "";
  auto conn = s_.nodes_.connect(node);
  if (!conn) {
    // Unread body bytes would be taken for the next request: close after answering.
    return respond_error(
        Error(Code::kUnavailable, "node " + node + " is not answering: " + conn.error().message() +
                                      "; retry in a moment (after node_lost_after_s its sandboxes "
                                      "answer 410 node_lost)"),
        false);
  }
  std::string head = node_head(p, std::string(req.target()), node, framing, false);
  auto sent = gw_write(*(*conn)->stream, head);
  if (sent && has_override) sent = gw_write(*(*conn)->stream, body_override);
  if (sent && !has_override && body_len > 0) sent = copy_body(body_len, *(*conn)->stream);
  NodeParser rp;
  Result<void> got = sent ? read_node_head(**conn, rp) : Result<void>(fail(sent.error()));
  if (!got)
    return respond_error(Error(Code::kUnavailable, "node " + node + ": " + got.error().message()),
                         false);
  bool reusable = false;
  bool alive = relay(**conn, rp, req.method() == http::verb::head, reusable);
  if (reusable) s_.nodes_.put_back(std::move(*conn));
  return alive;
}

bool GatewayConnection::tunnel(const Parser& p, const std::string& node) {
  const auto& req = p.get();
  std::string framing;
  if (p.chunked())
    framing = "Transfer-Encoding: chunked\r\n";
  else if (p.content_length())
    framing = "Content-Length: " + std::to_string(*p.content_length()) + "\r\n";
  auto conn = s_.nodes_.connect(node);
  if (!conn)
    return respond_error(
        Error(Code::kUnavailable, "node " + node + " is not answering: " + conn.error().message()),
        false);
  NodeConn& c = **conn;
  if (!gw_write(*c.stream, node_head(p, std::string(req.target()), node, framing, true)))
    return respond_error(Error(Code::kUnavailable, "node " + node + " closed the connection"),
                         false);
  // Up: what the client sends (the buffered rest first), until it ends or the answer does.
  UniqueFd up_done(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  cs_.set_read_interrupt_fd(up_done.get());
  std::thread up([&] {
    auto data = cbuf_.data();
    if (data.size() > 0 &&
        gw_write(*c.stream, std::string_view(static_cast<const char*>(data.data()), data.size())))
      cbuf_.consume(data.size());
    char buf[64 * 1024];
    for (;;) {
      boost::system::error_code ec;
      size_t n = cs_.read_some(boost::asio::buffer(buf), ec);
      if (ec) break;
      if (!gw_write(*c.stream, std::string_view(buf, n))) break;
    }
    ::shutdown(c.stream->fd(), SHUT_WR);
  });
  // Down: the node's bytes as they come, until it closes.
  c.stream->set_read_interrupt_fd(cancel_.get());
  c.stream->set_read_timeout(std::chrono::milliseconds(0));
  auto data = c.buffer.data();
  bool ok = data.size() == 0 ||
            gw_write(cs_, std::string_view(static_cast<const char*>(data.data()), data.size()));
  char buf[64 * 1024];
  while (ok) {
    boost::system::error_code ec;
    size_t n = c.stream->read_some(boost::asio::buffer(buf), ec);
    if (ec) break;
    if (!gw_write(cs_, std::string_view(buf, n))) break;
    if (!check_token()) break;
  }
  uint64_t one = 1;
  (void)!::write(up_done.get(), &one, sizeof one);
  up.join();
  cs_.set_read_interrupt_fd(-1);
  return false;  // the connection was the tunnel's
}

bool GatewayConnection::fan_out_list(const Parser& p, const std::string& key) {
  // Each node answers {"<key>": [...]}: the gateway's answer is the same with every node's.
  json all = json::array();
  std::string missing;
  std::string extra =
      principal_header_.empty() ? "" : "Space-Principal: " + principal_header_ + "\r\n";
  for (const std::string& node : s_.nodes_.active()) {
    auto a = s_.nodes_.call(node, "GET", std::string(p.get().target()), extra);
    json part = a && a->status == 200 ? json::parse(a->body, nullptr, false) : json();
    if (part.is_object() && part.contains(key)) part = part[key];
    if (!part.is_array()) {
      missing += (missing.empty() ? "" : ", ") + node;
      continue;
    }
    for (auto& x : part) all.push_back(std::move(x));
  }
  if (!missing.empty()) spdlog::warn("gateway: listing without nodes {} (no answer)", missing);
  return respond(200, json{{key, std::move(all)}});
}

bool GatewayConnection::lost_or_unknown(const std::string& id, const std::string& node) {
  json last = s_.last_snapshot_ ? s_.last_snapshot_(id) : json();
  auto status = s_.nodes_.status(node);
  if (!last.is_object() && !status) {
    return respond(404,
                   api::error_body(Error(Code::kNotFound, "unknown id " + id.substr(0, 80) +
                                                              ": no node " + node +
                                                              " in this cluster; `space ls` lists "
                                                              "sandboxes")));
  }
  json body = {{"error",
                {{"code", "node_lost"},
                 {"node", node},
                 {"message", "node " + node + " holding " + id +
                                 " is lost (gone from discovery or not answering)"}}}};
  if (last.is_object() && last.contains("snapshot")) {
    body["error"]["snapshot"] = last["snapshot"];
    body["error"]["snapshot_created_at"] = last.value("created_at", json());
    body["error"]["message"] = body["error"]["message"].get<std::string>() +
                               "; its latest snapshot is " + last["snapshot"].get<std::string>() +
                               ": `space restore " + last["snapshot"].get<std::string>() +
                               "` resumes it on another node";
  } else {
    body["error"]["snapshot"] = nullptr;
    body["error"]["message"] = body["error"]["message"].get<std::string>() +
                               "; no snapshot of it reached the shared store, so it cannot be "
                               "resumed";
  }
  s_.node_lost_++;
  return respond(410, body);
}

bool GatewayConnection::create(Parser& p, const std::string& target) {
  if (p.chunked() || !p.content_length())
    return respond(411,
                   api::error_body(Error(Code::kInvalidArgument,
                                         "a create through the gateway needs a "
                                         "Content-Length body")),
                   false);
  uint64_t n = *p.content_length();
  if (n > kGwCreateBodyLimit)
    return respond(413, api::error_body(Error(Code::kPayloadTooLarge, "create body over 1 MiB")),
                   false);
  std::string body;
  {
    // Collected whole (it may be sent to more than one node): what the buffer holds, then the
    // rest straight from the connection (the buffer is bounded to a request head's size).
    auto d = cbuf_.data();
    size_t have = std::min<size_t>(n, d.size());
    body.assign(static_cast<const char*>(d.data()), have);
    cbuf_.consume(have);
    body.resize(n);
    cs_.set_read_timeout(std::chrono::seconds(60));
    while (have < n) {
      boost::system::error_code ec;
      size_t got = cs_.read_some(boost::asio::buffer(body.data() + have, n - have), ec);
      if (ec) {
        cs_.set_read_timeout(std::chrono::milliseconds(0));
        return false;
      }
      have += got;
    }
    cs_.set_read_timeout(std::chrono::milliseconds(0));
  }
  PlacementRequest req;
  json j = body.empty() ? json::object() : json::parse(body, nullptr, false);
  bool restore = target.rfind("/v1/snapshots/", 0) == 0;
  if (j.is_object() && !restore) {
    req.runtime = j.value("runtime", req.runtime);
    req.image = j.value("image", req.image);
    req.profile = j.value("profile", req.profile);
    if (j.contains("cpus") && j["cpus"].is_number()) req.cpus = j["cpus"].get<double>();
    if (j.contains("memory") && j["memory"].is_string())
      req.memory = parse_size(j["memory"].get<std::string>()).value_or(0);
    if (j.contains("node_selector")) {
      if (!j["node_selector"].is_object())
        return respond(400, api::error_body(Error(Code::kInvalidArgument,
                                                  "node_selector: an object of label: value")));
      for (auto& [k, v] : j["node_selector"].items()) {
        if (!v.is_string())
          return respond(400, api::error_body(Error(Code::kInvalidArgument,
                                                    "node_selector: string values, please")));
        req.node_selector[k] = v.get<std::string>();
      }
      j.erase("node_selector");  // the gateway's own field: nodes do not know it
      body = j.dump();
    }
  }
  auto candidates = s_.nodes_.place(req);
  if (candidates.empty()) s_.creates_refused_++;
  if (candidates.empty())
    return respond_error(
        Error(Code::kUnavailable, "no node can take this sandbox now (" +
                                      std::to_string(s_.nodes_.active().size()) +
                                      " active; none has runtime " + req.runtime +
                                      (req.node_selector.empty() ? "" : " and the labels asked") +
                                      " while not draining); GET /v1/nodes shows them"));
  std::string last_error;
  for (const std::string& node : candidates) {
    s_.nodes_.reserve(node);
    auto conn = s_.nodes_.connect(node);
    if (!conn) {
      s_.nodes_.release(node);
      last_error = conn.error().message();
      continue;
    }
    std::string head = node_head(p, target, node,
                                 "Content-Length: " + std::to_string(body.size()) + "\r\n", false);
    NodeParser rp;
    auto sent = gw_write(*(*conn)->stream, head + body);
    auto got = sent ? read_node_head(**conn, rp) : Result<void>(fail(sent.error()));
    if (!got) {
      s_.nodes_.release(node);
      last_error = got.error().message();
      continue;  // the node may have taken it: it is its own sandbox then, reaped by lifetime
    }
    unsigned status = rp.get().result_int();
    if (status == 429 || status == 503) {
      // The node's own admission said no (full, draining): the next candidate.
      boost::system::error_code ec;
      char buf[4096];
      while (!rp.is_done() && !ec) {
        rp.get().body().data = buf;
        rp.get().body().size = sizeof buf;
        http::read_some(*(*conn)->stream, (*conn)->buffer, rp, ec);
        if (ec == http::error::need_buffer) ec = {};
      }
      last_error = "node " + node + " answered " + std::to_string(status);
      s_.nodes_.release(node);
      if (!ec && rp.get().keep_alive()) s_.nodes_.put_back(std::move(*conn));
      continue;
    }
    bool reusable = false;
    bool alive = relay(**conn, rp, false, reusable);
    s_.nodes_.release(node, status / 100 == 2);
    if (status / 100 == 2) s_.creates_placed_++;
    if (reusable) s_.nodes_.put_back(std::move(*conn));
    return alive;
  }
  s_.creates_refused_++;
  return respond_error(Error(Code::kUnavailable, "every candidate node refused or failed (" +
                                                     std::to_string(candidates.size()) +
                                                     " tried; last: " + last_error +
                                                     "); retry in a moment"));
}

bool GatewayConnection::handle(Parser& p) {
  const auto& req = p.get();
  std::string target_text(req.target());
  auto target = api::parse_target(target_text);
  if (!target) return respond_error(target.error(), false);
  const auto& seg = target->segments;
  // Probes: no token needed, nothing revealed.
  if (req.method() == http::verb::get && target->path == "/v1/health")
    return respond(200,
                   {{"status", "ok"}, {"role", "gateway"}, {"nodes", s_.nodes_.active().size()}});
  auto auth = req[http::field::authorization];
  auto token = s_.tokens_.authenticate(std::string_view(auth.data(), auth.size()));
  if (!token) {
    // Whatever body followed is not read: close after the answer.
    return respond(401, api::error_body(token.error()), false);
  }
  principal_ = api::Principal{};
  principal_.token = *token;
  json forwarded = json::object();
  forwarded["id"] = token->id;
  forwarded["name"] = token->name;
  forwarded["profiles"] = token->profiles;
  forwarded["ops"] = token->ops;
  forwarded["expires_at"] = token->expires_at;
  principal_header_ = forwarded.dump();
  next_token_check_ = Clock::now() + std::chrono::seconds(1);
  bool has_body = p.chunked() || p.content_length().value_or(0) > 0;
  bool keep = !has_body;  // an answer given before reading a body must close the connection

  if (req.method() == http::verb::get && target->path == "/v1/nodes") {
    if (auto ok = api::authorize(principal_, api::Op::kRead, "GET /v1/nodes"); !ok)
      return respond_error(ok.error(), keep);
    return respond(200, s_.nodes_.describe(), keep);
  }
  auto match = api::match_route(req.method(), seg);
  if (!match)
    return respond(
        404,
        api::error_body(Error(Code::kNotFound, "no route for " + std::string(req.method_string()) +
                                                   " " + target->path +
                                                   "; the API is described in api/openapi.yaml")),
        keep);
  std::string name = std::string(req.method_string()) + " " + std::string(match->route->pattern);
  if (auto ok = api::authorize(principal_, match->route->op, name); !ok)
    return respond_error(ok.error(), keep);
  auto param = [&](std::string_view k) {
    for (auto& [pk, pv] : match->params)
      if (pk == k) return pv;
    return std::string();
  };
  std::string_view pattern = match->route->pattern;

  if (pattern == "/v1/node" || pattern == "/v1/node/drain")
    return respond(404,
                   api::error_body(Error(Code::kNotFound,
                                         "the gateway is not a node: GET /v1/nodes lists the "
                                         "nodes; drain one with `spaced drain` on it")),
                   keep);
  if (pattern.starts_with("/v1/tokens"))
    return respond(501,
                   api::error_body(Error(Code::kUnimplemented,
                                         "the gateway's tokens live in its tokens_file: "
                                         "`space-gateway token create` makes one")),
                   keep);
  if (pattern == "/v1/doctor")
    return respond(200, {{"role", "gateway"}, {"nodes", s_.nodes_.describe()}}, keep);
  if (pattern == "/metrics") return respond_text(metrics_text(), keep);
  if (pattern.starts_with("/v1/images")) {
    if (req.method() != http::verb::get)
      return respond(501,
                     api::error_body(Error(Code::kUnimplemented,
                                           "images are per node: import them on each node "
                                           "(or bake them into the node image)")),
                     keep);
    auto active = s_.nodes_.active();
    if (active.empty()) return respond_error(Error(Code::kUnavailable, "no node is active"), keep);
    return forward(p, active.front(), "", false);
  }
  if (pattern == "/v1/sandboxes" && req.method() == http::verb::get)
    return fan_out_list(p, "sandboxes");
  if (pattern == "/v1/snapshots" && req.method() == http::verb::get)
    return fan_out_list(p, "snapshots");
  if (pattern == "/v1/sandboxes" && req.method() == http::verb::post) return create(p, target_text);

  // Everything else names a sandbox or a snapshot, and so its node.
  std::string id = !param("id").empty() ? param("id") : param("snap");
  std::string node = node_of_id(id);
  if (node.empty())
    return respond(404,
                   api::error_body(
                       Error(Code::kNotFound, "unknown id " + id.substr(0, 80) +
                                                  ": ids in a cluster name their node "
                                                  "(sb_<hex>-<node>); `space ls` lists sandboxes")),
                   keep);
  auto status = s_.nodes_.status(node);
  if (pattern == "/v1/snapshots/{snap}/restore" && status != NodeStatus::kActive) {
    // Its node is gone: any node restores it from the shared store.
    return create(p, target_text);
  }
  if (!status || *status == NodeStatus::kLost) {
    if (param("id").empty()) {
      // A snapshot of a lost node: restore it elsewhere (above); reading it needs its node.
      return respond(410,
                     {{"error",
                       {{"code", "node_lost"},
                        {"node", node},
                        {"snapshot", id},
                        {"message", "node " + node + " is lost; `space restore " + id +
                                        "` restores this snapshot on another node if it "
                                        "reached the shared store"}}}},
                     keep);
    }
    return lost_or_unknown(id, node) && keep;
  }
  if (*status == NodeStatus::kUnreachable)
    return respond_error(
        Error(Code::kUnavailable, "node " + node +
                                      " is not answering; retry in a moment (if it "
                                      "stays away its sandboxes answer 410 node_lost)"),
        keep);
  // A body whose length is known is sent whole before the answer streams back: such an exec
  // (no stdin, or stdin given whole) goes over a kept-alive connection like any request.
  bool streams_both_ways = p.chunked() || p.upgrade() || pattern.ends_with("/ports/{port}");
  if (streams_both_ways) return tunnel(p, node);
  if (pattern == "/v1/snapshots/{snap}/restore") return create(p, target_text);
  return forward(p, node, "", false);
}

// --- the listener ---------------------------------------------------------------------------

GatewayServer::GatewayServer(Options options, NodeTable& nodes, TokenFile& tokens,
                             LastSnapshotFn last)
    : options_(std::move(options)),
      nodes_(nodes),
      tokens_(tokens),
      last_snapshot_(std::move(last)) {}

GatewayServer::~GatewayServer() = default;

Result<std::unique_ptr<GatewayServer>> GatewayServer::listen(Options options, NodeTable& nodes,
                                                             TokenFile& tokens,
                                                             LastSnapshotFn last_snapshot) {
  auto where = parse_host_port(options.listen);
  if (!where)
    return fail(Code::kInvalidArgument, "listen \"" + options.listen + "\": expected HOST:PORT");
  if (!options.tls && !where->loopback)
    return fail(Code::kInvalidArgument,
                "listen " + options.listen +
                    " is not a loopback address: bearer tokens must not cross a network in the "
                    "clear; add \"tls\": {\"cert\", \"key\"}");
  std::unique_ptr<GatewayServer> s(
      new GatewayServer(std::move(options), nodes, tokens, std::move(last_snapshot)));
  auto [fd, port] = TRY_CTX(listen_tcp(*where), "listen " + s->options_.listen);
  s->listen_fd_ = std::move(fd);
  s->port_ = port;
  s->stop_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  s->cut_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->stop_fd_ || !s->cut_fd_) return fail_sys("eventfd", "the gateway's stop events");
  return s;
}

void GatewayServer::stop() {
  uint64_t one = 1;
  (void)!::write(stop_fd_.get(), &one, sizeof one);
}

void GatewayServer::accept_one() {
  UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!conn) return;
  {
    std::lock_guard lock(mu_);
    if (active_ >= options_.max_connections) return;  // closed
    active_++;
  }
  std::thread([this, fd = std::move(conn)]() mutable {
    if (options_.tls) {
      auto pair = tls::plaintext_pair();
      if (pair) {
        auto [relay_end, app_end] = std::move(*pair);
        tls::TunnelOptions o;
        o.cancel_fd = cut_fd_.get();
        {
          std::lock_guard lock(mu_);
          tls_relays_++;
        }
        std::thread([this, ctx = options_.tls, o, tcp = std::move(fd),
                     relay = std::move(relay_end)]() mutable {
          (void)tls::serve_tls(std::move(tcp), std::move(relay), ctx.get(), o);
          std::lock_guard lock(mu_);
          tls_relays_--;
          cv_.notify_all();
        }).detach();
        serve_connection(std::move(app_end));
      }
    } else {
      serve_connection(std::move(fd));
    }
    std::lock_guard lock(mu_);
    active_--;
    cv_.notify_all();
  }).detach();
}

void GatewayServer::serve_connection(UniqueFd fd) {
  GatewayConnection c(*this, std::move(fd));
  c.run();
}

void GatewayServer::serve() {
  for (;;) {
    pollfd p[2] = {{stop_fd_.get(), POLLIN, 0}, {listen_fd_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) continue;
    if (p[0].revents != 0) break;
    if (p[1].revents != 0) accept_one();
  }
  // Connections the kernel completed but nobody accepted yet would be reset with the listener:
  // they are taken and served. Then new clients are refused at once (they retry another
  // replica).
  for (;;) {
    pollfd p{listen_fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) != 1) break;
    accept_one();
  }
  listen_fd_.reset();
  std::unique_lock lock(mu_);
  // Requests in flight finish, idle kept-alive connections close (run()); past the grace
  // period whatever is left is cut.
  if (!cv_.wait_for(lock, options_.grace, [&] { return active_ == 0; }))
    spdlog::warn("gateway: {} connections still busy after the grace period: cut", active_);
  // Over TLS an answer's last bytes leave with its terminator, which ends once the client
  // closes too: a moment for them to go (a client that keeps an idle connection open is not
  // waited for).
  cv_.wait_for(lock, std::chrono::seconds(2), [&] { return tls_relays_ == 0; });
  uint64_t one = 1;
  (void)!::write(cut_fd_.get(), &one, sizeof one);
  cv_.wait_for(lock, std::chrono::seconds(5), [&] { return active_ == 0 && tls_relays_ == 0; });
}

}  // namespace space::gateway
