// space-gateway: the cluster's stateless front end (docs/cluster.md). Reads its config, opens
// the tokens file, the nodes' mutual-TLS credentials and discovery, then serves spaced's API by
// passing each request to its node (server.h). SIGTERM: stop accepting, let requests in flight
// finish (shutdown_grace_s), exit 0.
//
//   space-gateway --config /etc/space/gateway.json
//   space-gateway token create --name ci --profile test --op read,create,exec,files,lifecycle
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <thread>

#include "cluster/discovery.h"
#include "cluster/object_store.h"
#include "cluster/store_keys.h"
#include "common/units.h"
#include "gateway/config.h"
#include "gateway/nodes.h"
#include "gateway/server.h"
#include "gateway/tokens.h"
#include "tls/api_certs.h"
#include "tls/tunnel.h"
#include "tls/x509.h"

namespace space::gateway {
namespace {

int token_create(const std::string& name, const std::vector<std::string>& profiles,
                 const std::vector<std::string>& ops, const std::string& ttl) {
  auto ttl_s = parse_duration(ttl);
  if (!ttl_s) {
    std::cerr << "space-gateway: --ttl: " << ttl_s.error().message() << "\n";
    return 2;
  }
  auto t = make_token(name, profiles, ops, *ttl_s);
  if (!t) {
    std::cerr << "space-gateway: " << t.error().message() << "\n";
    return 2;
  }
  std::cout << "token (shown once; give it to the client as SPACE_TOKEN):\n  " << t->text
            << "\nentry (add it to the \"tokens\" array of every gateway's tokens_file):\n  "
            << t->entry.dump() << "\n";
  return 0;
}

Result<std::shared_ptr<SSL_CTX>> node_client_context(const GatewayConfig& cfg) {
  auto ctx = TRY_CTX(tls::client_context(cfg.node_ca.string()), "node_tls.ca");
  auto kc = TRY_CTX(tls::load_cert_files(cfg.node_cert, cfg.node_key), "node_tls");
  TRY_VOID_CTX(tls::set_client_certificate(ctx.get(), kc), "node_tls");
  return ctx;
}

int serve(const std::string& config_file) {
  auto cfg = GatewayConfig::load(config_file);
  if (!cfg) {
    std::cerr << "space-gateway: " << cfg.error().message() << "\n";
    return 2;
  }
  auto tokens = TokenFile::open(cfg->tokens_file);
  auto node_tls = node_client_context(*cfg);
  std::shared_ptr<SSL_CTX> public_tls;
  if (!cfg->tls_cert.empty()) {
    auto kc = tls::load_cert_files(cfg->tls_cert, cfg->tls_key);
    auto ctx = kc ? tls::server_context(*kc) : Result<std::shared_ptr<SSL_CTX>>(fail(kc.error()));
    if (!ctx) {
      std::cerr << "space-gateway: tls: " << ctx.error().message() << "\n";
      return 2;
    }
    public_tls = *ctx;
  }
  auto dcfg = cluster::parse_discovery_config(cfg->discovery);
  for (const Error* e : {tokens ? nullptr : &tokens.error(), node_tls ? nullptr : &node_tls.error(),
                         dcfg ? nullptr : &dcfg.error()}) {
    if (e != nullptr) {
      std::cerr << "space-gateway: " << e->message() << "\n";
      return 2;
    }
  }
  std::unique_ptr<cluster::ObjectStore> store;
  if (!cfg->store.empty()) {
    cluster::ObjectStoreOptions so;
    so.credentials_file = cfg->store_credentials_file.string();
    auto s = cluster::open_object_store(cfg->store, so);
    if (!s) {
      std::cerr << "space-gateway: store: " << s.error().message() << "\n";
      return 2;
    }
    store = std::move(*s);
  }

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  NodeTable::Options no;
  no.tls = *node_tls;
  no.poll_interval_s = cfg->poll_interval_s;
  no.node_lost_after_s = cfg->node_lost_after_s;
  no.sample = cfg->sample;
  no.server_name = cfg->node_server_name;
  NodeTable nodes(no);
  auto discovery = cluster::make_discovery(*dcfg);
  if (!discovery) {
    std::cerr << "space-gateway: discovery: " << discovery.error().message() << "\n";
    return 2;
  }
  auto to_addresses = [](const std::vector<cluster::NodeRecord>& recs) {
    std::vector<NodeAddress> out;
    for (auto& r : recs) out.push_back({r.name, r.url, r.labels});
    return out;
  };
  (*discovery)->on_change([&](const std::vector<cluster::NodeRecord>& recs, uint64_t) {
    nodes.set_nodes(to_addresses(recs));
  });
  if (auto r = (*discovery)->start(); !r) {
    std::cerr << "space-gateway: discovery: " << r.error().message() << "\n";
    return 2;
  }
  nodes.set_nodes(to_addresses((*discovery)->snapshot()));
  nodes.start();

  LastSnapshotFn last = [&store](const std::string& id) -> nlohmann::json {
    if (!store) return nullptr;
    auto p = cluster::read_sandbox_pointer(*store, id);
    if (!p) {
      if (p.error().code() != Code::kNotFound)
        spdlog::warn("gateway: reading the last snapshot of {}: {}", id, p.error().message());
      return nullptr;
    }
    return *p;
  };
  GatewayServer::Options so;
  so.listen = cfg->listen;
  so.tls = public_tls;
  so.grace = std::chrono::milliseconds(static_cast<int64_t>(cfg->shutdown_grace_s * 1000));
  auto server = GatewayServer::listen(so, nodes, **tokens, last);
  if (!server) {
    std::cerr << "space-gateway: " << server.error().message() << "\n";
    return 1;
  }
  spdlog::info("space-gateway listening on {} (port {}); discovery: {}", cfg->listen,
               (*server)->port(), (*discovery)->describe());
  std::thread sig_thread([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    spdlog::info("signal {}: no new connections; requests in flight finish", sig);
    (*server)->stop();
  });
  (*server)->serve();
  (*discovery)->stop();
  if (sig_thread.joinable()) {
    ::pthread_kill(sig_thread.native_handle(), SIGTERM);
    sig_thread.join();
  }
  spdlog::info("space-gateway stopped");
  return 0;
}

}  // namespace
}  // namespace space::gateway

int main(int argc, char** argv) {
  CLI::App app{"space-gateway — the SPACE cluster's front end: spaced's API over many nodes"};
  std::string config_file, log_level = "info";
  app.add_option("--config", config_file, "JSON config file (docs/cluster.md)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  auto* token = app.add_subcommand("token", "API tokens for the tokens_file");
  auto* create = token->add_subcommand("create", "make a token and print its tokens_file entry");
  std::string name;
  std::vector<std::string> profiles, ops;
  std::string ttl = "30d";
  create->add_option("--name", name, "what the token is for")->required();
  create->add_option("--profile", profiles, "profiles it may use (\"*\" = all)")->delimiter(',');
  create->add_option("--op", ops, "operations: read, create, exec, files, lifecycle, images, admin")
      ->delimiter(',');
  create->add_option("--ttl", ttl, "lifetime (30d, 12h, ...; at most 365d)");
  token->require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v", spdlog::pattern_time_type::utc);
  if (create->parsed()) return space::gateway::token_create(name, profiles, ops, ttl);
  if (config_file.empty()) {
    std::cerr << "space-gateway: --config FILE is required (docs/cluster.md)\n";
    return 2;
  }
  return space::gateway::serve(config_file);
}
