// Node records, the Discovery base (the list, its version, the listener), the static file
// source and the configuration parsers (see discovery.h).
#include "cluster/discovery.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "cluster/etcd.h"
#include "cluster/kubernetes.h"
#include "tls/x509.h"

namespace space::cluster {
namespace {

using json = nlohmann::json;

// The keys of object `j` that are not in `known`: an error naming the first, for typos.
Result<void> discovery_known_keys(const json& j, std::initializer_list<std::string_view> known,
                                  std::string_view where) {
  for (const auto& [k, v] : j.items()) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      std::string list;
      for (auto name : known) list += (list.empty() ? "" : ", ") + std::string(name);
      return fail(Code::kInvalidArgument,
                  std::string(where) + ": unknown field \"" + k + "\" (known: " + list + ")");
    }
  }
  return {};
}

Result<std::string> discovery_string(const json& j, const char* key, std::string_view where,
                                     bool required) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) {
      return fail(Code::kInvalidArgument,
                  std::string(where) + ": \"" + key + "\" is required (a string)");
    }
    return std::string();
  }
  if (!it->is_string() || (required && it->get_ref<const std::string&>().empty())) {
    return fail(Code::kInvalidArgument,
                std::string(where) + ": \"" + key + "\" must be a non-empty string");
  }
  return it->get<std::string>();
}

}  // namespace

bool is_valid_node_name(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  // Dots too: Kubernetes names nodes by their host names ("ip-10-0-1-2.ec2.internal").
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '-' || c == '.'; });
}

Result<void> validate_node_record(const NodeRecord& r) {
  if (!is_valid_node_name(r.name)) {
    return fail(Code::kInvalidArgument,
                "node name \"" + r.name +
                    "\" is not a node name (lower-case letters, digits, '-' and '.', 1..63, "
                    "starting and ending with a letter or digit)");
  }
  auto u = parse_http_url(r.url);
  if (!u) return fail(std::move(u.error()).wrap("node " + r.name + ": url"));
  if (!u->path.empty()) {
    return fail(Code::kInvalidArgument, "node " + r.name + ": url \"" + r.url +
                                            "\" must be http(s)://HOST:PORT without a path");
  }
  for (const auto& [k, v] : r.labels) {
    if (k.empty()) return fail(Code::kInvalidArgument, "node " + r.name + ": an empty label name");
  }
  return {};
}

Result<NodeRecord> node_record_from_json(const json& j) {
  if (!j.is_object()) return fail(Code::kInvalidArgument, "a node record must be a JSON object");
  TRY_VOID(discovery_known_keys(j, {"name", "url", "labels"}, "node record"));
  NodeRecord r;
  r.name = TRY(discovery_string(j, "name", "node record", true));
  r.url = TRY(discovery_string(j, "url", "node record " + r.name, true));
  if (auto it = j.find("labels"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) {
      return fail(Code::kInvalidArgument, "node " + r.name + ": labels must be an object");
    }
    for (const auto& [k, v] : it->items()) {
      if (!v.is_string()) {
        return fail(Code::kInvalidArgument,
                    "node " + r.name + ": label \"" + k + "\" must be a string");
      }
      r.labels[k] = v.get<std::string>();
    }
  }
  TRY_VOID(validate_node_record(r));
  return r;
}

json node_record_to_json(const NodeRecord& r) {
  json labels = json::object();
  for (const auto& [k, v] : r.labels) labels[k] = v;
  return json{{"name", r.name}, {"url", r.url}, {"labels", labels}};
}

Result<std::vector<NodeRecord>> parse_nodes_file(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return fail(Code::kInvalidArgument, "not valid JSON");
  if (!j.is_object() || !j.contains("nodes") || !j["nodes"].is_array()) {
    return fail(Code::kInvalidArgument, "expected {\"nodes\": [{\"name\", \"url\"}, ...]}");
  }
  std::vector<NodeRecord> nodes;
  std::set<std::string> names;
  size_t i = 0;
  for (const auto& e : j["nodes"]) {
    auto r = node_record_from_json(e);
    if (!r) return fail(std::move(r.error()).wrap("nodes[" + std::to_string(i) + "]"));
    if (!names.insert(r->name).second) {
      return fail(Code::kInvalidArgument,
                  "nodes[" + std::to_string(i) + "]: node \"" + r->name + "\" appears twice");
    }
    nodes.push_back(std::move(*r));
    ++i;
  }
  return nodes;
}

// --- Discovery

Discovery::~Discovery() = default;

std::vector<NodeRecord> Discovery::snapshot() const {
  std::lock_guard lock(mu_);
  return nodes_;
}

uint64_t Discovery::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

bool Discovery::wait_for_version(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return version_ > seen; });
}

void Discovery::on_change(Listener listener) {
  std::lock_guard lock(listener_mu_);
  listener_ = std::move(listener);
}

void Discovery::publish(std::vector<NodeRecord> nodes) {
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const NodeRecord& a, const NodeRecord& b) { return a.name < b.name; });
  for (size_t i = 1; i < nodes.size();) {
    if (nodes[i].name == nodes[i - 1].name) {
      spdlog::warn("discovery {}: node {} is listed twice ({} and {}); keeping the first",
                   describe(), nodes[i].name, nodes[i - 1].url, nodes[i].url);
      nodes.erase(nodes.begin() + static_cast<ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  std::lock_guard listener_lock(listener_mu_);
  uint64_t version;
  {
    std::lock_guard lock(mu_);
    if (version_ > 0 && nodes == nodes_) return;
    nodes_ = nodes;
    version = ++version_;
  }
  cv_.notify_all();
  if (listener_) listener_(nodes, version);
}

// --- StaticFileDiscovery

StaticFileDiscovery::StaticFileDiscovery(std::filesystem::path path,
                                         std::chrono::milliseconds poll_interval)
    : path_(std::move(path)), poll_interval_(poll_interval) {}

StaticFileDiscovery::~StaticFileDiscovery() { stop(); }

std::string StaticFileDiscovery::describe() const { return "static file " + path_.string(); }

Result<void> StaticFileDiscovery::check() {
  std::lock_guard lock(check_mu_);
  struct stat st {};
  FileId id;
  if (::stat(path_.c_str(), &st) == 0) {
    id = {static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
          static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_ino)};
  }
  if (id == seen_ && version() > 0 && last_error_.empty()) return {};
  if (id == seen_ && !last_error_.empty()) {
    return fail(Code::kInvalidArgument, last_error_);  // already logged
  }
  seen_ = id;
  auto nodes = [&]() -> Result<std::vector<NodeRecord>> {
    std::string text = TRY(tls::read_small_file(path_, false, true));
    return parse_nodes_file(text);
  }();
  if (!nodes) {
    last_error_ = "nodes file " + path_.string() + ": " + nodes.error().message();
    if (version() > 0) {
      spdlog::error("{}; keeping the previous list of {} nodes until it is fixed", last_error_,
                    snapshot().size());
    }
    return fail(Code::kInvalidArgument, last_error_);
  }
  if (!last_error_.empty() && version() > 0) {
    spdlog::info("nodes file {} reads well again: {} nodes", path_.string(), nodes->size());
  }
  last_error_.clear();
  publish(std::move(*nodes));
  return {};
}

std::string StaticFileDiscovery::last_error() const {
  std::lock_guard lock(check_mu_);
  return last_error_;
}

Result<void> StaticFileDiscovery::start() {
  if (thread_.joinable()) return {};
  TRY_VOID(check());
  stop_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
  if (!stop_fd_) return fail_sys("eventfd");
  thread_ = std::thread([this] {
    for (;;) {
      pollfd p{stop_fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(poll_interval_.count())) != 0) {
        if (errno == EINTR) continue;
        return;
      }
      (void)check();  // an error was logged once; the previous list stays
    }
  });
  return {};
}

void StaticFileDiscovery::stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  (void)!::write(stop_fd_.get(), &one, sizeof one);
  thread_.join();
}

// --- configuration

Result<EtcdConfig> parse_etcd_config(const json& j) {
  constexpr std::string_view kWhere = "etcd";
  if (!j.is_object()) {
    return fail(Code::kInvalidArgument,
                "etcd: expected an object {\"endpoints\": [\"http://127.0.0.1:2379\"], "
                "\"prefix\": \"/space/nodes/\", \"ttl_s\": 10}");
  }
  TRY_VOID(discovery_known_keys(
      j, {"endpoints", "prefix", "ttl_s", "ca_file", "cert_file", "key_file"}, kWhere));
  EtcdConfig c;
  auto eps = j.find("endpoints");
  if (eps == j.end() || !eps->is_array() || eps->empty()) {
    return fail(Code::kInvalidArgument,
                "etcd: \"endpoints\" must be a non-empty list of URLs, e.g. "
                "[\"http://127.0.0.1:2379\"]");
  }
  for (const auto& e : *eps) {
    if (!e.is_string()) return fail(Code::kInvalidArgument, "etcd: endpoints must be strings");
    auto u = parse_http_url(e.get<std::string>());
    if (!u) return fail(std::move(u.error()).wrap("etcd: endpoints"));
    c.endpoints.push_back(e.get<std::string>());
  }
  if (j.contains("prefix")) {
    c.prefix = TRY(discovery_string(j, "prefix", kWhere, true));
    if (c.prefix.back() != '/') {
      return fail(Code::kInvalidArgument,
                  "etcd: \"prefix\" must end with '/' (e.g. \"/space/nodes/\"): a node's key is "
                  "the prefix followed by its name");
    }
  }
  if (auto t = j.find("ttl_s"); t != j.end()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 3 || t->get<int64_t>() > 3600) {
      return fail(Code::kInvalidArgument,
                  "etcd: \"ttl_s\" must be a whole number of seconds "
                  "from 3 to 3600");
    }
    c.ttl_s = t->get<int>();
  }
  c.tls.ca_file = TRY(discovery_string(j, "ca_file", kWhere, false));
  c.tls.cert_file = TRY(discovery_string(j, "cert_file", kWhere, false));
  c.tls.key_file = TRY(discovery_string(j, "key_file", kWhere, false));
  if (c.tls.cert_file.empty() != c.tls.key_file.empty()) {
    return fail(Code::kInvalidArgument, "etcd: \"cert_file\" and \"key_file\" go together");
  }
  return c;
}

Result<KubernetesConfig> parse_kubernetes_config(const json& j) {
  constexpr std::string_view kWhere = "kubernetes";
  if (!j.is_object()) {
    return fail(Code::kInvalidArgument,
                "kubernetes: expected an object {\"service\": \"space-nodes\", \"namespace\": "
                "\"space\", \"port_name\": \"api\"}");
  }
  TRY_VOID(discovery_known_keys(
      j, {"service", "namespace", "port_name", "api_server", "token_file", "ca_file"}, kWhere));
  KubernetesConfig c;
  c.service = TRY(discovery_string(j, "service", kWhere, true));
  if (!is_valid_node_name(c.service)) {
    return fail(Code::kInvalidArgument,
                "kubernetes: service \"" + c.service + "\" is not a Service name (a DNS label)");
  }
  if (j.contains("namespace")) {
    c.namespace_ = TRY(discovery_string(j, "namespace", kWhere, true));
    if (!is_valid_node_name(c.namespace_)) {
      return fail(Code::kInvalidArgument,
                  "kubernetes: namespace \"" + c.namespace_ + "\" is not a namespace name");
    }
  }
  if (j.contains("port_name")) c.port_name = TRY(discovery_string(j, "port_name", kWhere, true));
  if (j.contains("api_server")) {
    c.api_server = TRY(discovery_string(j, "api_server", kWhere, true));
    auto u = parse_http_url(c.api_server);
    if (!u) return fail(std::move(u.error()).wrap("kubernetes: api_server"));
  }
  if (j.contains("token_file")) c.token_file = TRY(discovery_string(j, "token_file", kWhere, true));
  if (j.contains("ca_file")) c.ca_file = TRY(discovery_string(j, "ca_file", kWhere, true));
  return c;
}

Result<DiscoveryConfig> parse_discovery_config(const json& j) {
  constexpr const char* kShape =
      "discovery: expected one of {\"static\": \"/etc/space/nodes.json\"}, {\"etcd\": {...}}, "
      "{\"kubernetes\": {...}}";
  if (!j.is_object() || j.size() != 1) return fail(Code::kInvalidArgument, kShape);
  DiscoveryConfig c;
  if (auto it = j.find("static"); it != j.end()) {
    if (!it->is_string() || it->get_ref<const std::string&>().empty() ||
        it->get_ref<const std::string&>().front() != '/') {
      return fail(Code::kInvalidArgument,
                  "discovery: \"static\" must be the absolute path of a nodes file");
    }
    c.kind = DiscoveryConfig::Kind::kStatic;
    c.static_file = it->get<std::string>();
  } else if (auto it = j.find("etcd"); it != j.end()) {
    c.kind = DiscoveryConfig::Kind::kEtcd;
    c.etcd = TRY_CTX(parse_etcd_config(*it), "discovery");
  } else if (auto it = j.find("kubernetes"); it != j.end()) {
    c.kind = DiscoveryConfig::Kind::kKubernetes;
    c.kubernetes = TRY_CTX(parse_kubernetes_config(*it), "discovery");
  } else {
    return fail(Code::kInvalidArgument, kShape);
  }
  return c;
}

Result<std::unique_ptr<Discovery>> make_discovery(const DiscoveryConfig& config) {
  switch (config.kind) {
    case DiscoveryConfig::Kind::kStatic:
      return std::make_unique<StaticFileDiscovery>(config.static_file);
    case DiscoveryConfig::Kind::kEtcd:
      return std::unique_ptr<Discovery>(TRY(EtcdDiscovery::create(config.etcd)));
    case DiscoveryConfig::Kind::kKubernetes:
      return std::unique_ptr<Discovery>(TRY(KubernetesDiscovery::create(config.kubernetes)));
  }
  return fail(Code::kInternal, "unknown discovery kind");
}

}  // namespace space::cluster
