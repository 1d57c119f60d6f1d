// The gateway's view of the nodes (nodes.h): discovery's set, polls, placement, connections.
#include "gateway/nodes.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstring>
#include <random>

#include "common/tcp_connect.h"

namespace space::gateway {
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

Result<std::pair<std::string, uint16_t>> split_node_url(const std::string& url) {
  constexpr std::string_view kScheme = "https://";
  auto bad = [&] {
    return fail(Code::kInvalidArgument,
                "node url \"" + url + "\": expected https://HOST:PORT (nodes serve mutual TLS)");
  };
  if (url.rfind(kScheme, 0) != 0) return bad();
  std::string rest = url.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  std::string host, port;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
      return bad();
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos) return bad();
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty() || port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return bad();
  int p = std::stoi(port);
  if (p < 1 || p > 65535) return bad();
  return std::pair{host, static_cast<uint16_t>(p)};
}

std::string node_of_id(std::string_view id) {
  if (!id.starts_with("sb_") && !id.starts_with("snap_")) return "";
  size_t dash = id.find('-');
  if (dash == std::string_view::npos || dash + 1 >= id.size()) return "";
  return std::string(id.substr(dash + 1));
}

NodeTable::NodeTable(Options options) : options_(std::move(options)) {}

NodeTable::~NodeTable() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

void NodeTable::set_nodes(std::vector<NodeAddress> nodes) {
  std::lock_guard lock(mu_);
  std::map<std::string, NodeAddress> next;
  for (auto& n : nodes) next[n.name] = std::move(n);
  for (auto& [name, node] : nodes_) {
    if (!next.count(name) && node.present) {
      node.present = false;
      node.gone_at = Clock::now();
      node.idle.clear();
      spdlog::warn("node {} left discovery: its sandboxes answer 410 node_lost", name);
    }
  }
  for (auto& [name, addr] : next) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) {
      spdlog::info("node {} at {} joined", name, addr.url);
      Node n;
      n.addr = std::move(addr);
      nodes_.emplace(name, std::move(n));
    } else {
      if (!it->second.present) spdlog::info("node {} is back at {}", name, addr.url);
      if (it->second.addr.url != addr.url) it->second.idle.clear();
      it->second.present = true;
      it->second.addr = std::move(addr);
    }
  }
  cv_.notify_all();
}

void NodeTable::start() {
  poller_ = std::thread([this] { poll_loop(); });
}

void NodeTable::poll_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    poll_once();
    lock.lock();
    cv_.wait_for(lock, std::chrono::duration<double>(options_.poll_interval_s),
                 [&] { return stopping_; });
  }
}

void NodeTable::poll_once() {
  std::vector<std::string> names;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, n] : nodes_)
      if (n.present) names.push_back(name);
  }
  // One thread per node, so one node that hangs delays no other's status.
  std::vector<std::thread> threads;
  for (const std::string& name : names) {
    threads.emplace_back([this, name] {
      auto a = call(name, "GET", "/v1/node");
      nlohmann::json info;
      if (a && a->status == 200) info = nlohmann::json::parse(a->body, nullptr, false);
      std::lock_guard lock(mu_);
      auto it = nodes_.find(name);
      if (it == nodes_.end()) return;
      Node& n = it->second;
      if (info.is_object()) {
        if (n.failing_since) spdlog::info("node {} answers again", name);
        n.failing_since.reset();
        n.info = std::move(info);
        n.placed_since_poll = 0;
      } else if (!n.failing_since) {
        n.failing_since = Clock::now();
        spdlog::warn("node {} does not answer GET /v1/node: {}", name,
                     a ? "status " + std::to_string(a->status) : a.error().message());
      }
    });
  }
  for (auto& t : threads) t.join();
}

NodeStatus NodeTable::status_of(const Node& n, Clock::time_point now) const {
  if (!n.present) return NodeStatus::kLost;
  if (!n.failing_since) return NodeStatus::kActive;
  if (now - *n.failing_since > std::chrono::duration<double>(options_.node_lost_after_s))
    return NodeStatus::kLost;
  return NodeStatus::kUnreachable;
}

std::optional<NodeStatus> NodeTable::status(const std::string& node) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return status_of(it->second, Clock::now());
}

std::optional<NodeAddress> NodeTable::address(const std::string& node) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return std::nullopt;
  return it->second.addr;
}

std::vector<std::string> NodeTable::active() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  auto now = Clock::now();
  for (auto& [name, n] : nodes_)
    if (status_of(n, now) == NodeStatus::kActive) out.push_back(name);
  return out;
}

nlohmann::json NodeTable::describe() {
  std::lock_guard lock(mu_);
  nlohmann::json out = nlohmann::json::array();
  auto now = Clock::now();
  for (auto& [name, n] : nodes_) {
    static const char* kNames[] = {"active", "unreachable", "lost"};
    out.push_back({{"name", name},
                   {"url", n.addr.url},
                   {"labels", n.addr.labels},
                   {"status", kNames[static_cast<int>(status_of(n, now))]},
                   {"in_flight", n.inflight},
                   {"info", n.info}});
  }
  return out;
}

double NodeTable::load_of(const Node& n) const {
  // The busiest of CPU and memory allocated over total, and sandboxes over max_sandboxes; the
  // creates this gateway has in flight or placed since the last poll count as one CPU and one
  // sandbox each. Unknown totals: by count alone.
  const nlohmann::json& i = n.info;
  const double pending = n.inflight + n.placed_since_poll;
  auto field = [&](const char* obj, const char* key) {
    return i.is_object() && i.contains(obj) && i[obj].is_object() ? i[obj].value(key, 0.0) : 0.0;
  };
  double cpu_total = field("cpus", "total");
  double cpu = cpu_total > 0 ? (field("cpus", "allocated") + pending) / cpu_total : 0;
  double mem_total = field("memory", "total_bytes");
  double mem = mem_total > 0 ? field("memory", "allocated_bytes") / mem_total : 0;
  double max = field("sandboxes", "max");
  double count = field("sandboxes", "running") + pending;
  double by_count = max > 0 ? count / max : count;
  return std::max({cpu, mem, by_count});
}

std::vector<std::string> NodeTable::place(const PlacementRequest& req) {
  std::lock_guard lock(mu_);
  auto now = Clock::now();
  std::vector<std::string> warm, others;
  for (auto& [name, n] : nodes_) {
    if (status_of(n, now) != NodeStatus::kActive || !n.info.is_object()) continue;
    const nlohmann::json& i = n.info;
    if (i.value("draining", false)) continue;
    auto rts = i.value("runtimes", std::vector<std::string>{});
    if (std::find(rts.begin(), rts.end(), req.runtime) == rts.end()) continue;
    if (req.runtime == "firecracker" && !i.value("kvm", false)) continue;
    bool labels_ok = true;
    for (auto& [k, v] : req.node_selector) {
      auto it = n.addr.labels.find(k);
      std::string have = it != n.addr.labels.end() ? it->second : "";
      if (have.empty() && i.contains("labels") && i["labels"].is_object())
        have = i["labels"].value(k, std::string());
      if (have != v) labels_ok = false;
    }
    if (!labels_ok) continue;
    bool has_warm = false;
    if (i.contains("warm") && i["warm"].is_array()) {
      for (auto& w : i["warm"]) {
        if (w.value("runtime", "") == req.runtime && w.value("image", "") == req.image &&
            w.value("profile", "") == req.profile && w.value("ready", 0) > 0 &&
            (req.memory == 0 || w.value("memory", uint64_t{0}) == req.memory) &&
            (req.cpus == 0 || w.value("cpus", 0.0) == req.cpus))
          has_warm = true;
      }
    }
    (has_warm ? warm : others).push_back(name);
  }
  static thread_local std::mt19937_64 rng(std::random_device{}());
  auto by_load = [&](std::vector<std::string>& v) {
    // The power of K choices: the least loaded of `sample` drawn at random comes first, then
    // the rest by load.
    std::shuffle(v.begin(), v.end(), rng);
    size_t k = std::min(options_.sample, v.size());
    auto load = [&](const std::string& a) { return load_of(nodes_.at(a)); };
    if (k > 0) {
      auto best = std::min_element(v.begin(), v.begin() + static_cast<long>(k),
                                   [&](auto& a, auto& b) { return load(a) < load(b); });
      std::iter_swap(v.begin(), best);
      std::stable_sort(v.begin() + 1, v.end(), [&](auto& a, auto& b) { return load(a) < load(b); });
    }
  };
  by_load(warm);
  by_load(others);
  warm.insert(warm.end(), others.begin(), others.end());
  return warm;
}

void NodeTable::reserve(const std::string& node) {
  std::lock_guard lock(mu_);
  if (auto it = nodes_.find(node); it != nodes_.end()) it->second.inflight++;
}

void NodeTable::release(const std::string& node, bool placed) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  if (it->second.inflight > 0) it->second.inflight--;
  if (placed) it->second.placed_since_poll++;
}

void NodeTable::set_info_for_test(const std::string& node, nlohmann::json info) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  it->second.info = std::move(info);
  it->second.failing_since.reset();
}

Result<std::unique_ptr<NodeConn>> NodeTable::connect(const std::string& node) {
  NodeAddress addr;
  {
    std::lock_guard lock(mu_);
    auto it = nodes_.find(node);
    if (it == nodes_.end() || !it->second.present)
      return fail(Code::kUnavailable, "node " + node + " is not in discovery");
    auto& idle = it->second.idle;
    while (!idle.empty()) {
      auto c = std::move(idle.back());
      idle.pop_back();
      // A connection idle for long may have been closed by the node (idle_timeout 60 s).
      if (Clock::now() - c->idle_since < std::chrono::seconds(30)) return c;
    }
    addr = it->second.addr;
  }
  auto [host, port] = TRY(split_node_url(addr.url));
  UniqueFd tcp = TRY_CTX(tcp_connect(host, port, options_.connect_timeout), "node " + node);
  tls::TunnelOptions o;
  o.handshake_timeout = options_.connect_timeout;
  auto [tunnel, plain] = TRY_CTX(
      tls::ClientTunnel::start(std::move(tcp), options_.tls,
                               options_.server_name.empty() ? host : options_.server_name, o),
      "node " + node);
  auto c = std::make_unique<NodeConn>();
  c->node = node;
  c->tunnel = std::move(tunnel);
  c->stream = std::make_unique<FdStream>(std::move(plain));
  return c;
}

void NodeTable::put_back(std::unique_ptr<NodeConn> conn) {
  conn->idle_since = Clock::now();
  conn->stream->set_read_interrupt_fd(-1);
  conn->stream->set_stop_fd(-1);
  std::lock_guard lock(mu_);
  auto it = nodes_.find(conn->node);
  if (it == nodes_.end() || !it->second.present || it->second.idle.size() >= kMaxIdlePerNode)
    return;
  it->second.idle.push_back(std::move(conn));
}

Result<NodeTable::Answer> NodeTable::call(const std::string& node, const std::string& method,
                                          const std::string& target,
                                          const std::string& extra_headers,
                                          const std::string& body) {
  // A pooled connection may have been closed by the node meanwhile: one retry on a fresh one
  // (these calls are reads, or creates that never reached the node).
  for (int attempt = 0;; ++attempt) {
    auto conn = TRY(connect(node));
    std::string head = method + " " + target + " HTTP/1.1\r\nHost: " + node +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                       extra_headers + "\r\n";
    boost::system::error_code ec;
    conn->stream->set_write_timeout(std::chrono::seconds(10));
    conn->stream->set_read_timeout(std::chrono::seconds(30));
    boost::asio::write(*conn->stream, boost::asio::buffer(head + body), ec);
    http::response_parser<http::string_body> p;
    p.body_limit(64 << 20);
    if (!ec) http::read(*conn->stream, conn->buffer, p, ec);
    if (ec) {
      if (attempt == 0) continue;
      return fail(Code::kUnavailable, "node " + node + ": " + ec.message());
    }
    Answer a{p.get().result_int(), std::move(p.get().body())};
    if (p.get().keep_alive()) put_back(std::move(conn));
    return a;
  }
}

}  // namespace space::gateway
