// The egress gateway: a sandbox's only way out. For each sandbox, spaced binds listening
// sockets inside the sandbox's own network namespace (which holds nothing but `lo`) and serves
// them from the host side:
//   127.0.0.1:3128   HTTP proxy: absolute-form requests (http://) and CONNECT (https)
//   127.0.0.1:443    transparent TLS: the target is the ClientHello's SNI (for clients that
//                    ignore proxy variables and resolve names through the DNS stub)
//   127.0.0.1:80     transparent HTTP: the target is the Host header
//   127.0.0.53:53    DNS stub (UDP): names the policy allows resolve to 127.0.0.1 (the two
//                    transparent listeners); every other name is NXDOMAIN
// Every connection and every HTTP request is checked against the sandbox's Policy; upstream
// names are resolved by the gateway, each address is checked, and the gateway dials exactly
// the address it checked. Hosts a granted secret is bound to (and hosts whose rules restrict
// methods or paths) are intercepted: TLS is terminated with a leaf of the sandbox's CA, each
// request is authorized, the secret's placeholder is swapped for its value, and the upstream
// is verified normally. Other allowed TLS is tunneled after checking that the SNI names the
// host that was allowed. Connections are served by one thread each, with blocking I/O bounded
// by timeouts and a per-sandbox cancel fd; listeners are watched by one epoll thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "egress/ca.h"
#include "egress/credentials.h"
#include "egress/policy.h"

namespace space::egress {

// A secret granted to a sandbox at creation.
struct Grant {
  std::string name;
  std::string placeholder;  // what the sandbox sees in its environment
};

// What the gateway needs to serve one sandbox.
struct SandboxEgress {
  std::string id;
  Policy policy;
  std::vector<Grant> grants;
  std::shared_ptr<SandboxCa> ca;
};

// The sandbox-side settings of a sandbox using the gateway: environment variables and files.
inline constexpr const char* kProxyUrl = "http://127.0.0.1:3128";
// The TCP listeners' ports (all on 127.0.0.1): a microVM's agent listens on the same ones in the
// guest and carries each connection to the listener of its port.
inline constexpr uint16_t kProxyPort = 3128;
inline constexpr uint16_t kTransparentTlsPort = 443;
inline constexpr uint16_t kTransparentHttpPort = 80;
// The DNS stub (UDP). A microVM's agent receives guest queries on the same address in the guest
// and carries them to this one (proto::kDnsStubIp, the guest's side of the same contract).
inline constexpr const char* kDnsStubAddress = "127.0.0.53";
inline constexpr uint16_t kDnsStubPort = 53;
inline constexpr const char* kCaCertPath = "/etc/space/ca.crt";           // the sandbox CA
inline constexpr const char* kCaBundlePath = "/etc/space/ca-bundle.crt";  // system + CA
// Debian's Chromium reads managed policies there; the daemon puts the sandbox CA in it.
inline constexpr const char* kChromiumPolicyPath = "/etc/chromium/policies/managed/space.json";
// HTTP(S)_PROXY, ALL_PROXY, NO_PROXY (both cases), SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
// CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS, GIT_SSL_CAINFO, PIP_CERT, NPM_CONFIG_CAFILE, and one
// variable per grant.
std::vector<std::string> sandbox_env(const std::vector<Grant>& grants, const SecretStore& secrets);

// A sandbox's gateway listeners, bound inside its network namespace but not served yet:
// Gateway::bind() ahead of time (a warm pool's sandboxes), Gateway::attach() serves them.
// Until then a connection to them waits in the backlog. Closing it unbinds them.
struct BoundListeners {
  std::vector<std::pair<UniqueFd, int>> fds;  // socket, listener kind (egress/internal.h)
  bool empty() const { return fds.empty(); }
};

class Gateway {
 public:
  using AuditFn =
      std::function<void(const std::string& sandbox_id, const std::string& kind, nlohmann::json)>;
  struct Options {
    // Resolver overrides: "host" or "host:port" -> "address" or "address:port". For tests and
    // split-horizon setups; the address is still checked against the policy.
    std::map<std::string, std::string> resolve;
    // CA files trusted, besides the system store, when verifying upstream servers.
    std::vector<std::string> upstream_ca_files;
    // The same as PEM text (the gateway process cannot read the operator's files).
    std::vector<std::string> upstream_ca_pems;
    std::chrono::milliseconds connect_timeout{10'000};
    std::chrono::milliseconds idle_timeout{300'000};
    AuditFn audit;
  };

  static Result<std::unique_ptr<Gateway>> start(Options options,
                                                std::shared_ptr<SecretStore> secrets);
  ~Gateway();  // stop()s
  // Closes every listener, cuts every connection and waits for their threads.
  void stop();

  // Binds the sandbox's listeners inside the network namespace `netns_fd` and starts serving
  // them. Fails (and binds nothing) if any bind fails.
  Result<void> attach(SandboxEgress sandbox, int netns_fd);
  // The same in two steps: bind() the listeners (no gateway state), attach() them later.
  static Result<BoundListeners> bind(int netns_fd);
  Result<void> attach(SandboxEgress sandbox, BoundListeners listeners);
  // Closes the sandbox's listeners and cuts its connections. Idempotent.
  void detach(const std::string& id);

  struct Stats {
    uint64_t connections = 0, requests = 0, denied = 0, bytes_up = 0, bytes_down = 0,
             credential_uses = 0, dns_queries = 0;
    size_t active_connections = 0, sandboxes = 0;
  };
  Stats stats() const;

  struct State;  // per-sandbox state, shared with connection threads (gateway.cc)

 private:
  Gateway(Options options, std::shared_ptr<SecretStore> secrets);
  void poll_loop();
  void on_readable(int fd);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace space::egress
