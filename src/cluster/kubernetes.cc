// Kubernetes EndpointSlices: the mapping to node records, list + watch (see kubernetes.h).
#include "cluster/kubernetes.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "tls/x509.h"

namespace space::cluster {
namespace {

using json = nlohmann::json;

constexpr const char* kDefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token";
constexpr const char* kDefaultCaFile = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

std::string k8s_trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string k8s_resource_version(const json& object) {
  if (!object.is_object()) return "";
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  auto rv = m->find("resourceVersion");
  return rv != m->end() && rv->is_string() ? rv->get<std::string>() : "";
}

std::string k8s_name(const json& object) {
  if (!object.is_object()) return "";
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  return m->value("name", "");
}

// The message of a Kubernetes Status object (an error answer), else the text itself (cut).
std::string k8s_status_message(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string()) {
    return j["message"].get<std::string>();
  }
  return body.substr(0, 300);
}

bool k8s_pause(int stop_fd, int ms) {
  pollfd p{stop_fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 0;
}

}  // namespace

std::vector<NodeRecord> nodes_from_endpoint_slices(const std::vector<json>& slices,
                                                   std::string_view port_name,
                                                   std::vector<std::string>* problems) {
  auto problem = [&](std::string text) {
    if (problems != nullptr) problems->push_back(std::move(text));
  };
  struct Candidate {
    NodeRecord record;
    bool ready;
  };
  std::map<std::string, Candidate> by_name;
  for (const json& slice : slices) {
    if (!slice.is_object()) continue;
    const std::string slice_name = k8s_name(slice);
    std::optional<int64_t> port;
    if (auto ports = slice.find("ports"); ports != slice.end() && ports->is_array()) {
      for (const auto& p : *ports) {
        if (p.is_object() && p.value("name", "") == port_name && p.contains("port") &&
            p["port"].is_number_integer()) {
          port = p["port"].get<int64_t>();
        }
      }
    }
    auto endpoints = slice.find("endpoints");
    if (endpoints == slice.end() || !endpoints->is_array() || endpoints->empty()) continue;
    if (!port || *port <= 0 || *port > 65535) {
      problem("EndpointSlice " + slice_name + " has no port named \"" + std::string(port_name) +
              "\"");
      continue;
    }
    const bool ipv6_slice = slice.value("addressType", "") == "IPv6";
    for (const auto& ep : *endpoints) {
      if (!ep.is_object()) continue;
      bool ready = true;
      if (auto c = ep.find("conditions"); c != ep.end() && c->is_object()) {
        auto r = c->find("ready");
        if (r != c->end() && r->is_boolean() && !r->get<bool>()) ready = false;
      }
      std::string name;
      if (ep.contains("nodeName") && ep["nodeName"].is_string()) {
        name = ep["nodeName"].get<std::string>();
      } else if (auto t = ep.find("targetRef"); t != ep.end() && t->is_object()) {
        name = t->value("name", "");
      }
      std::string address;
      if (auto a = ep.find("addresses");
          a != ep.end() && a->is_array() && !a->empty() && (*a)[0].is_string()) {
        address = (*a)[0].get<std::string>();
      }
      if (!is_valid_node_name(name)) {
        problem("EndpointSlice " + slice_name + ": endpoint " + address +
                " has no usable name (\"" + name + "\")");
        continue;
      }
      if (!tls::is_ip_address(address)) {
        problem("EndpointSlice " + slice_name + ": endpoint " + name + " has no IP address: \"" +
                address + "\"");
        continue;
      }
      bool v6 = ipv6_slice || address.find(':') != std::string::npos;
      Candidate c;
      c.ready = ready;
      c.record.name = name;
      c.record.url =
          "https://" + (v6 ? "[" + address + "]" : address) + ":" + std::to_string(*port);
      if (ep.contains("zone") && ep["zone"].is_string()) {
        c.record.labels["zone"] = ep["zone"].get<std::string>();
      }
      auto [it, fresh] = by_name.emplace(name, c);
      if (!fresh && !it->second.ready && ready) it->second = std::move(c);
    }
  }
  std::vector<NodeRecord> nodes;
  for (auto& [name, c] : by_name) {
    if (c.ready) nodes.push_back(std::move(c.record));
  }
  return nodes;
}

// --- KubernetesDiscovery

Result<std::unique_ptr<KubernetesDiscovery>> KubernetesDiscovery::create(
    const KubernetesConfig& config) {
  std::unique_ptr<KubernetesDiscovery> d(new KubernetesDiscovery());
  d->config_ = config;
  d->namespace_ = config.namespace_;
  if (d->namespace_.empty()) {
    auto text = tls::read_small_file(config.namespace_file, false, true);
    if (!text) {
      return fail(std::move(text.error())
                      .wrap("kubernetes: no \"namespace\" in the configuration and none from the "
                            "service account"));
    }
    d->namespace_ = k8s_trim(*text);
  }
  std::string api = config.api_server;
  if (api.empty()) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (host == nullptr || *host == '\0') {
      return fail(Code::kInvalidArgument,
                  "kubernetes: no \"api_server\" in the configuration and "
                  "KUBERNETES_SERVICE_HOST is not set (not running in a pod?)");
    }
    std::string h = host;
    if (h.find(':') != std::string::npos) h = "[" + h + "]";
    api = "https://" + h + ":" + (port != nullptr && *port != '\0' ? port : "443");
  }
  HttpOptions o;
  o.service = "the Kubernetes API";
  o.connect_timeout = std::chrono::seconds(5);
  o.io_timeout = std::chrono::seconds(30);
  o.max_idle = 1;
  std::error_code ec;
  if (config.ca_file != kDefaultCaFile || std::filesystem::exists(config.ca_file, ec)) {
    o.tls.ca_file = config.ca_file;
  }
  d->stop_fd_ = UniqueFd(::eventfd(0, EFD_CLOEXEC));
  if (!d->stop_fd_) return fail_sys("eventfd");
  o.stop_fd = d->stop_fd_.get();
  d->client_ = TRY_CTX(HttpClient::create(api, o), "kubernetes");
  return d;
}

KubernetesDiscovery::~KubernetesDiscovery() { stop(); }

std::string KubernetesDiscovery::describe() const {
  return "kubernetes service " + namespace_ + "/" + config_.service + " at " +
         client_->url().origin();
}

Result<void> KubernetesDiscovery::start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  return {};
}

void KubernetesDiscovery::stop() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  (void)!::write(stop_fd_.get(), &one, sizeof one);
  thread_.join();
}

std::string KubernetesDiscovery::slices_path() const {
  return "/apis/discovery.k8s.io/v1/namespaces/" + namespace_ +
         "/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3D" + config_.service;
}

Result<std::unique_ptr<HttpStream>> KubernetesDiscovery::get(const std::string& target) {
  HttpRequest req;
  req.target = target;
  req.headers = {{"Accept", "application/json"}};
  std::error_code ec;
  if (config_.token_file != kDefaultTokenFile || std::filesystem::exists(config_.token_file, ec)) {
    std::string token = k8s_trim(TRY_CTX(tls::read_small_file(config_.token_file, false, true),
                                         "kubernetes: the service account token"));
    req.headers.emplace_back("Authorization", "Bearer " + token);
  }
  return client_->stream(req);
}

void KubernetesDiscovery::publish_slices() {
  std::vector<json> slices;
  for (const auto& [name, s] : slices_) slices.push_back(s);
  std::vector<std::string> problems;
  auto nodes = nodes_from_endpoint_slices(slices, config_.port_name, &problems);
  for (auto& p : problems) {
    if (std::find(reported_.begin(), reported_.end(), p) != reported_.end()) continue;
    spdlog::warn("discovery {}: {}", describe(), p);
    reported_.push_back(std::move(p));
  }
  publish(std::move(nodes));
}

Error KubernetesDiscovery::follow() {
  const std::string origin = "the Kubernetes API at " + client_->url().origin();
  {
    auto s = get(slices_path());
    if (!s) return std::move(s.error());
    auto body = (*s)->read_all(64u << 20);
    if (!body) return std::move(body.error());
    if ((*s)->status() != 200) {
      return Error(Code::kUnavailable,
                   origin + ": listing EndpointSlices: " + std::to_string((*s)->status()) + " " +
                       k8s_status_message(*body));
    }
    json list = json::parse(*body, nullptr, false);
    if (list.is_discarded() || !list.is_object() || !list.contains("items") ||
        !list["items"].is_array()) {
      return Error(Code::kProtocol, origin + ": the EndpointSlice list is not a list");
    }
    ++lists_;
    slices_.clear();
    for (auto& item : list["items"]) {
      std::string name = k8s_name(item);
      if (!name.empty()) slices_[name] = std::move(item);
    }
    resource_version_ = k8s_resource_version(list);
    publish_slices();
  }
  for (;;) {
    auto s = get(slices_path() + "&watch=1&resourceVersion=" + resource_version_ +
                 "&allowWatchBookmarks=true&timeoutSeconds=290");
    if (!s) return std::move(s.error());
    if ((*s)->status() == 410) {
      return Error(Code::kConflict, origin + ": resourceVersion " + resource_version_ +
                                        " is gone (410); listing again");
    }
    if ((*s)->status() != 200) {
      auto body = (*s)->read_all(1u << 20);
      return Error(Code::kUnavailable,
                   origin + ": watching EndpointSlices: " + std::to_string((*s)->status()) + " " +
                       (body ? k8s_status_message(*body) : ""));
    }
    ++watches_;
    // Bookmarks come about once a minute, and the server ends the watch after timeoutSeconds.
    (*s)->set_read_timeout(std::chrono::seconds(330));
    for (;;) {
      auto line = (*s)->read_line();
      if (!line) return std::move(line.error());
      if (!*line) break;  // the server ended the watch: again from resource_version_
      if ((*line)->empty()) continue;
      json ev = json::parse(**line, nullptr, false);
      if (ev.is_discarded() || !ev.is_object() || !ev.contains("type") || !ev["type"].is_string()) {
        return Error(Code::kProtocol, origin + ": a watch event that is not JSON");
      }
      const std::string type = ev["type"].get<std::string>();
      const json& object = ev.contains("object") ? ev["object"] : json();
      if (type == "ERROR") {
        int64_t code = object.is_object() ? object.value("code", int64_t{0}) : 0;
        std::string message = object.is_object() ? object.value("message", "") : "";
        if (code == 410) {
          return Error(Code::kConflict,
                       origin + ": watch: 410 Gone (" + message + "); listing again");
        }
        return Error(Code::kUnavailable,
                     origin + ": watch: error " + std::to_string(code) + " " + message);
      }
      std::string rv = k8s_resource_version(object);
      if (type == "BOOKMARK") {
        if (!rv.empty()) resource_version_ = rv;
        continue;
      }
      std::string name = k8s_name(object);
      if (name.empty()) continue;
      if (type == "ADDED" || type == "MODIFIED") {
        slices_[name] = object;
      } else if (type == "DELETED") {
        slices_.erase(name);
      } else {
        continue;
      }
      if (!rv.empty()) resource_version_ = rv;
      publish_slices();
    }
  }
}

void KubernetesDiscovery::run() {
  std::string last_error;
  int backoff_ms = 500;
  for (;;) {
    uint64_t before = lists_.load();
    Error e = follow();
    pollfd p{stop_fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) return;
    if (e.code() == Code::kConflict) {
      spdlog::info("discovery {}: {}", describe(), e.message());
      last_error.clear();
      backoff_ms = 500;
      if (!k8s_pause(stop_fd_.get(), 100)) return;
      continue;  // 410: list again (soon)
    }
    if (lists_.load() != before) backoff_ms = 500;
    if (e.message() != last_error) {
      spdlog::warn("discovery {}: {}; retrying", describe(), e.message());
      last_error = e.message();
    }
    if (!k8s_pause(stop_fd_.get(), backoff_ms)) return;
    backoff_ms = std::min(backoff_ms * 2, 10'000);
  }
}

}  // namespace space::cluster
