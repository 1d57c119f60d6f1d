// etcd's JSON gateway: the client, a node's Registration and EtcdDiscovery (see etcd.h).
#include "cluster/etcd.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <charconv>

#include "common/base64.h"

namespace space::cluster {
namespace {

using json = nlohmann::json;

// grpc-gateway writes int64 as a JSON string ("7"), and leaves out fields equal to zero.
int64_t etcd_int(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const auto& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && p == s.data() + s.size()) return v;
  }
  return 0;
}

Result<EtcdKeyValue> etcd_kv(const json& j, const std::string& origin) {
  EtcdKeyValue kv;
  auto key = base64_decode(j.value("key", ""));
  auto value = base64_decode(j.value("value", ""));
  if (!j.is_object() || !key || !value) {
    return fail(Code::kProtocol, origin + ": a key-value that is not base64");
  }
  kv.key = std::move(*key);
  kv.value = std::move(*value);
  kv.mod_revision = etcd_int(j, "mod_revision");
  kv.lease = etcd_int(j, "lease");
  return kv;
}

// An etcd error answer {"error": "...", "code": N, "message": "..."} (3.4's gateway) or
// {"error": {"grpc_code", "http_code", "message"}} (its watch stream).
std::optional<std::string> etcd_error_message(const json& j) {
  if (!j.is_object()) return std::nullopt;
  auto e = j.find("error");
  if (e == j.end()) return std::nullopt;
  if (e->is_object()) return e->value("message", e->dump());
  if (j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  return e->is_string() ? e->get<std::string>() : e->dump();
}

// Sleeps `ms` unless `stop_fd` turns readable (then false).
bool etcd_pause(int stop_fd, int ms) {
  pollfd p{stop_fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 0;
}

}  // namespace

std::string etcd_prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

// --- EtcdWatch

Result<std::optional<EtcdWatchResponse>> EtcdWatch::next() {
  for (;;) {
    auto line = TRY(stream_->read_line());
    if (!line) return std::optional<EtcdWatchResponse>();
    if (line->empty()) continue;
    json j = json::parse(*line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return fail(Code::kProtocol, origin_ + ": the watch sent a line that is not JSON");
    }
    if (auto e = etcd_error_message(j)) return fail(Code::kUnavailable, origin_ + ": watch: " + *e);
    const json& r = j.contains("result") ? j["result"] : j;
    EtcdWatchResponse w;
    if (r.contains("header")) w.revision = etcd_int(r["header"], "revision");
    w.created = r.value("created", false);
    w.canceled = r.value("canceled", false);
    w.compact_revision = etcd_int(r, "compact_revision");
    w.cancel_reason = r.value("cancel_reason", "");
    if (auto ev = r.find("events"); ev != r.end() && ev->is_array()) {
      for (const auto& e : *ev) {
        EtcdEvent event;
        event.deleted = e.value("type", "PUT") == "DELETE";
        if (!e.contains("kv")) continue;
        event.kv = TRY(etcd_kv(e["kv"], origin_));
        w.events.push_back(std::move(event));
      }
    }
    return std::optional<EtcdWatchResponse>(std::move(w));
  }
}

// --- EtcdClient

Result<std::unique_ptr<EtcdClient>> EtcdClient::create(const EtcdConfig& config, int stop_fd) {
  std::unique_ptr<EtcdClient> c(new EtcdClient());
  for (const auto& url : config.endpoints) {
    HttpOptions o;
    o.service = "etcd";
    o.tls = config.tls;
    o.stop_fd = stop_fd;
    o.connect_timeout = std::chrono::seconds(3);
    o.io_timeout = std::chrono::seconds(10);
    o.max_idle = 2;
    c->endpoints_.push_back(TRY(HttpClient::create(url, o)));
  }
  if (c->endpoints_.empty()) return fail(Code::kInvalidArgument, "etcd: no endpoints");
  return c;
}

std::string EtcdClient::endpoint() const {
  return endpoints_[current_.load() % endpoints_.size()]->url().origin();
}

Result<json> EtcdClient::call(const std::string& path, const json& body) {
  HttpRequest req;
  req.method = "POST";
  req.target = path;
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  const size_t first = current_.load();
  std::optional<Error> last;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    size_t at = (first + i) % endpoints_.size();
    HttpClient& ep = *endpoints_[at];
    const std::string origin = "etcd at " + ep.url().origin();
    auto r = ep.request(req);
    if (!r) {
      // Another endpoint may answer; a stop ends at once.
      if (r.error().message().ends_with(": stopped")) return fail(std::move(r.error()));
      last = std::move(r.error());
      continue;
    }
    current_.store(at);
    json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded()) {
      return fail(Code::kProtocol, origin + ": " + path + " answered " + std::to_string(r->status) +
                                       " with a body that is not JSON");
    }
    if (auto e = etcd_error_message(j); e || r->status != 200) {
      Code code = r->status == 404   ? Code::kNotFound
                  : r->status >= 500 ? Code::kUnavailable
                                     : Code::kInvalidArgument;
      return fail(code, origin + ": " + path + ": " + std::to_string(r->status) + " " +
                            e.value_or(r->body.substr(0, 200)));
    }
    return j;
  }
  return fail(std::move(*last));
}

Result<EtcdRange> EtcdClient::range_prefix(std::string_view prefix) {
  json j = TRY(call("/v3/kv/range", {{"key", base64_encode(prefix)},
                                     {"range_end", base64_encode(etcd_prefix_end(prefix))}}));
  EtcdRange r;
  r.revision = j.contains("header") ? etcd_int(j["header"], "revision") : 0;
  if (auto kvs = j.find("kvs"); kvs != j.end() && kvs->is_array()) {
    for (const auto& kv : *kvs) r.kvs.push_back(TRY(etcd_kv(kv, "etcd at " + endpoint())));
  }
  return r;
}

Result<int64_t> EtcdClient::put(std::string_view key, std::string_view value, int64_t lease) {
  json body = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  json j = TRY(call("/v3/kv/put", body));
  return j.contains("header") ? etcd_int(j["header"], "revision") : 0;
}

Result<int64_t> EtcdClient::lease_grant(int ttl_s) {
  json j = TRY(call("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}}));
  int64_t id = etcd_int(j, "ID");
  if (id == 0) {
    std::string why = j.value("error", "");
    return fail(Code::kUnavailable,
                "etcd at " + endpoint() + ": no lease granted" + (why.empty() ? "" : ": " + why));
  }
  return id;
}

Result<int64_t> EtcdClient::lease_keepalive(int64_t id) {
  // A stream in gRPC; through the gateway one request body gives one answer.
  json j = TRY(call("/v3/lease/keepalive", {{"ID", std::to_string(id)}}));
  const json& r = j.contains("result") ? j["result"] : j;
  return etcd_int(r, "TTL");
}

Result<void> EtcdClient::lease_revoke(int64_t id) {
  auto r = call("/v3/lease/revoke", {{"ID", std::to_string(id)}});
  if (!r && r.error().message().find("requested lease not found") == std::string::npos) {
    return fail(std::move(r.error()));
  }
  return {};
}

Result<std::unique_ptr<EtcdWatch>> EtcdClient::watch_prefix(std::string_view prefix,
                                                            int64_t start_revision) {
  json create = {{"key", base64_encode(prefix)},
                 {"range_end", base64_encode(etcd_prefix_end(prefix))},
                 {"start_revision", std::to_string(start_revision)}};
  HttpRequest req;
  req.method = "POST";
  req.target = "/v3/watch";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = json{{"create_request", create}}.dump();
  const size_t first = current_.load();
  std::optional<Error> last;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    size_t at = (first + i) % endpoints_.size();
    auto s = endpoints_[at]->stream(req);
    if (!s) {
      if (s.error().message().ends_with(": stopped")) return fail(std::move(s.error()));
      last = std::move(s.error());
      continue;
    }
    current_.store(at);
    std::string origin = "etcd at " + endpoints_[at]->url().origin();
    if ((*s)->status() != 200) {
      auto body = (*s)->read_all(4096);
      return fail(Code::kUnavailable, origin + ": /v3/watch: " + std::to_string((*s)->status()) +
                                          " " + (body ? *body : body.error().message()));
    }
    // Idle watches send nothing: the stream waits for ever (until the stop fd); a dead peer is
    // found by TCP keepalive (http_client.cc).
    (*s)->set_read_timeout(std::chrono::milliseconds(0));
    std::unique_ptr<EtcdWatch> w(new EtcdWatch());
    w->stream_ = std::move(*s);
    w->origin_ = std::move(origin);
    return w;
  }
  return fail(std::move(*last));
}

// --- Registration

Result<std::unique_ptr<Registration>> Registration::create(const EtcdConfig& config,
                                                           NodeRecord self) {
  TRY_VOID_CTX(validate_node_record(self), "registering in etcd");
  std::unique_ptr<Registration> r(new Registration());
  r->config_ = config;
  r->self_ = std::move(self);
  r->stop_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
  if (!r->stop_fd_) return fail_sys("eventfd");
  r->client_ = TRY(EtcdClient::create(config, r->stop_fd_.get()));
  return r;
}

Registration::~Registration() { stop(true); }

void Registration::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

Result<void> Registration::register_once() {
  int64_t lease = TRY(client_->lease_grant(config_.ttl_s));
  std::string value;
  {
    std::lock_guard lock(mu_);
    value = node_record_to_json(self_).dump();
  }
  auto put = client_->put(key(), value, lease);
  if (!put) {
    (void)client_->lease_revoke(lease);
    return fail(std::move(put.error()));
  }
  {
    std::lock_guard lock(mu_);
    lease_ = lease;
    ++registrations_;
  }
  cv_.notify_all();
  return {};
}

void Registration::run() {
  const int interval_ms = std::max(1000, config_.ttl_s * 1000 / 3);
  std::string last_error;
  auto report = [&](const Error& e, const char* what) {
    pollfd p{stop_fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) return;  // stopping: the error is the stop's
    if (e.message() == last_error) return;
    last_error = e.message();
    spdlog::warn("etcd registration of node {}: {}: {}", self_.name, what, e.message());
  };
  for (;;) {
    if (lease_id() == 0) {
      auto r = register_once();
      if (!r) {
        report(r.error(), "registering");
        if (!etcd_pause(stop_fd_.get(), 1000)) return;
        continue;
      }
      if (!last_error.empty()) spdlog::info("etcd registration of node {}: registered", self_.name);
      last_error.clear();
    }
    if (!etcd_pause(stop_fd_.get(), interval_ms)) return;
    auto ttl = client_->lease_keepalive(lease_id());
    if (!ttl) {
      // etcd unreachable: keep trying; if the lease expires meanwhile, the next answer says so.
      report(ttl.error(), "keeping the lease alive");
      continue;
    }
    if (*ttl <= 0) {
      spdlog::warn("etcd registration of node {}: lease {:x} was lost; registering again",
                   self_.name, lease_id());
      std::lock_guard lock(mu_);
      lease_ = 0;
      continue;
    }
    if (!last_error.empty()) spdlog::info("etcd registration of node {}: lease kept", self_.name);
    last_error.clear();
  }
}

void Registration::stop(bool revoke) {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(stop_fd_.get(), &one, sizeof one);
    thread_.join();
  }
  int64_t lease = lease_id();
  if (revoke && lease != 0) {
    // The client's stop fd has fired: revoke on a client of its own.
    auto c = EtcdClient::create(config_, -1);
    auto r = c ? (*c)->lease_revoke(lease) : Result<void>(fail(std::move(c.error())));
    if (!r) {
      spdlog::warn(
          "etcd registration of node {}: revoking lease {:x}: {} (the record expires "
          "within {} s)",
          self_.name, lease, r.error().message(), config_.ttl_s);
    }
  }
  std::lock_guard lock(mu_);
  lease_ = 0;
}

Result<void> Registration::update(NodeRecord self) {
  TRY_VOID(validate_node_record(self));
  int64_t lease;
  {
    std::lock_guard lock(mu_);
    if (self.name != self_.name) {
      return fail(Code::kInvalidArgument,
                  "a registration keeps its node name (" + self_.name + "), not " + self.name);
    }
    self_ = std::move(self);
    lease = lease_;
  }
  if (lease == 0) return {};  // the next registration puts it
  std::string value;
  {
    std::lock_guard lock(mu_);
    value = node_record_to_json(self_).dump();
  }
  TRY(client_->put(key(), value, lease));
  return {};
}

bool Registration::wait_registered(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return lease_ != 0; });
}

int64_t Registration::lease_id() const {
  std::lock_guard lock(mu_);
  return lease_;
}

uint64_t Registration::registrations() const {
  std::lock_guard lock(mu_);
  return registrations_;
}

// --- EtcdDiscovery

Result<std::unique_ptr<EtcdDiscovery>> EtcdDiscovery::create(const EtcdConfig& config) {
  std::unique_ptr<EtcdDiscovery> d(new EtcdDiscovery());
  d->config_ = config;
  d->stop_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
  if (!d->stop_fd_) return fail_sys("eventfd");
  d->client_ = TRY(EtcdClient::create(config, d->stop_fd_.get()));
  return d;
}

EtcdDiscovery::~EtcdDiscovery() { stop(); }

std::string EtcdDiscovery::describe() const {
  std::string eps;
  for (const auto& e : config_.endpoints) eps += (eps.empty() ? "" : ",") + e;
  return "etcd " + eps + " prefix " + config_.prefix;
}

Result<void> EtcdDiscovery::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  return {};
}

void EtcdDiscovery::stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  (void)!::write(stop_fd_.get(), &one, sizeof one);
  thread_.join();
}

void EtcdDiscovery::publish_keys() {
  std::vector<NodeRecord> nodes;
  for (const auto& [key, value] : keys_) {
    std::string name = key.substr(config_.prefix.size());
    json j = json::parse(value, nullptr, false);
    auto r = j.is_discarded() ? Result<NodeRecord>(fail(Code::kInvalidArgument, "not JSON"))
                              : node_record_from_json(j);
    if (r && r->name != name) {
      r = fail(Code::kInvalidArgument, "the record names node \"" + r->name + "\"");
    }
    if (!r) {
      if (reported_.insert(key + "\n" + value).second) {
        spdlog::warn("discovery {}: key {} is left out: {}", describe(), key, r.error().message());
      }
      continue;
    }
    nodes.push_back(std::move(*r));
  }
  publish(std::move(nodes));
}

Error EtcdDiscovery::follow() {
  auto range = client_->range_prefix(config_.prefix);
  if (!range) return std::move(range.error());
  ++ranges_;
  keys_.clear();
  for (auto& kv : range->kvs) keys_[kv.key] = std::move(kv.value);
  publish_keys();
  auto watch = client_->watch_prefix(config_.prefix, range->revision + 1);
  if (!watch) return std::move(watch.error());
  for (;;) {
    auto msg = (*watch)->next();
    if (!msg) return std::move(msg.error());
    if (!*msg)
      return Error(Code::kUnavailable,
                   "etcd at " + client_->endpoint() + ": the watch stream ended");
    if ((*msg)->canceled || (*msg)->compact_revision != 0) {
      return Error(
          Code::kUnavailable,
          "etcd at " + client_->endpoint() + ": the watch was canceled" +
              ((*msg)->compact_revision != 0
                   ? " (revision compacted to " + std::to_string((*msg)->compact_revision) + ")"
                   : "") +
              ((*msg)->cancel_reason.empty() ? "" : ": " + (*msg)->cancel_reason));
    }
    if ((*msg)->events.empty()) continue;
    for (auto& e : (*msg)->events) {
      if (!e.kv.key.starts_with(config_.prefix)) continue;
      if (e.deleted) {
        keys_.erase(e.kv.key);
      } else {
        keys_[e.kv.key] = std::move(e.kv.value);
      }
    }
    publish_keys();
  }
}

void EtcdDiscovery::run() {
  std::string last_error;
  int backoff_ms = 500;
  for (;;) {
    uint64_t before = ranges_.load();
    Error e = follow();
    pollfd p{stop_fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) return;
    if (ranges_.load() != before) backoff_ms = 500;  // it got as far as a list: start over soon
    if (e.message() != last_error) {
      spdlog::warn("discovery {}: {}; starting over with a fresh range", describe(), e.message());
      last_error = e.message();
    }
    if (!etcd_pause(stop_fd_.get(), backoff_ms)) return;
    backoff_ms = std::min(backoff_ms * 2, 10'000);
  }
}

}  // namespace space::cluster
