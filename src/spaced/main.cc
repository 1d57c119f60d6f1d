// spaced: the SPACE daemon. Parses flags and the config file, sets up structured logging,
// takes the state directory's lock, starts the runtimes and the daemon core (which reconciles
// sandboxes left by a previous run), then serves the REST API on its Unix socket (and on
// api_listen, in TLS with api_tls) until SIGTERM or SIGINT. Sandboxes keep running when spaced
// stops; the next spaced reattaches to them.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/sysinfo.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "api/server.h"
#include "common/failpoint.h"
#include "common/fd.h"
#include "daemon/daemon.h"
#include "daemon/tokens.h"
#include "e2b/door.h"
#include "egress/gateway.h"
#include "runtime/registry.h"
#include "tls/api_certs.h"

namespace fs = std::filesystem;
using namespace space;

namespace {

// %* in a log pattern: the message as a JSON string (quoted and escaped), so every log line is
// one JSON object.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string s = nlohmann::json(std::string(msg.payload.data(), msg.payload.size()))
                        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(s.data(), s.data() + s.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

void setup_logging(const daemon::Config& cfg, bool json) {
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  std::error_code ec;
  fs::create_directories(cfg.state_dir, ec);
  try {
    sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
        (cfg.state_dir / "spaced.log").string(), 10 << 20, 3));
  } catch (const spdlog::spdlog_ex&) {
  }
  auto logger = std::make_shared<spdlog::logger>("spaced", sinks.begin(), sinks.end());
  auto f = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  if (json) {
    f->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","pid":%P,"msg":%*})");
  } else {
    f->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %l %v");
  }
  logger->set_formatter(std::move(f));
  logger->set_level(spdlog::level::from_str(cfg.log_level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

fs::path self_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : p.parent_path();
}

// api_tls: the operator's certificate files, or spaced's own CA under <state_dir>/tls/ with a
// server certificate for this host's names and `listen_host`.
Result<std::shared_ptr<tls::ServerCredentials>> open_api_tls(const daemon::Config& cfg,
                                                             const std::string& listen_host) {
  tls::ServerCredentials::Source source;
  if (cfg.api_tls.mode == daemon::ApiTlsConfig::Mode::kFiles) {
    source.cert_file = cfg.api_tls.cert;
    source.key_file = cfg.api_tls.key;
  } else {
    char hostname[256] = "";
    (void)::gethostname(hostname, sizeof hostname - 1);
    source.auto_certs.dir = cfg.state_dir / "tls";
    source.auto_certs.names = TRY(tls::server_names(hostname, listen_host, cfg.api_tls.names));
  }
  source.client_ca = cfg.api_tls.client_ca;
  return std::shared_ptr<tls::ServerCredentials>(TRY(tls::ServerCredentials::open(source)));
}

// `spaced drain` / `spaced health`: one request to the local spaced on its Unix socket (as
// root, so the root operator), the answer's body on stdout; exit 0 on a 2xx, 1 otherwise.
int local_request(const fs::path& socket, const std::string& method, const std::string& target,
                  std::chrono::seconds timeout, std::string* body_out = nullptr) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (!fd || socket.native().size() >= sizeof sa.sun_path) {
    std::cerr << "spaced: bad socket path " << socket << "\n";
    return 1;
  }
  std::memcpy(sa.sun_path, socket.c_str(), socket.native().size());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    std::cerr << "spaced: cannot reach spaced at " << socket.string() << ": "
              << std::strerror(errno) << " (is it running? --socket names another one)\n";
    return 1;
  }
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string req = method + " " + target +
                    " HTTP/1.1\r\nHost: spaced\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  if (::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    std::cerr << "spaced: writing to " << socket.string() << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  std::string resp;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      resp.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::cerr << "spaced: no answer from " << socket.string() << " within " << timeout.count()
                << " s: " << std::strerror(errno) << "\n";
      return 1;
    }
    break;
  }
  // "HTTP/1.1 200 OK\r\n...\r\n\r\nbody": the status, then the body as sent (JSON, not
  // chunked: these answers are small and have a Content-Length).
  int status = resp.size() > 12 ? std::atoi(resp.c_str() + 9) : 0;
  size_t body = resp.find("\r\n\r\n");
  std::string text = body == std::string::npos ? resp : resp.substr(body + 4);
  std::cout << text;
  if (body_out != nullptr) *body_out = text;
  if (status < 200 || status > 299) {
    std::cerr << "spaced: " << method << " " << target << " answered " << status << "\n";
    return 1;
  }
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{"spaced — the SPACE daemon: runs untrusted agent code in disposable sandboxes"};
  std::string config_file, state_dir, socket, agent, log_format = "json", log_level;
  std::string node_name, node_url;
  app.add_option("--node-name", node_name,
                 "this host's name in a cluster (docs/cluster.md); overrides node.name");
  app.add_option("--node-url", node_url,
                 "the URL gateways reach this node's API at; overrides node.url");
  std::string client_socket = "/run/space/space.sock";
  auto* drain_cmd = app.add_subcommand(
      "drain",
      "drain the local spaced: no new sandboxes, every sandbox snapshotted (and pushed "
      "to the cluster's store), destroyed, then spaced exits (a preStop hook)");
  drain_cmd->add_option("--socket", client_socket, "the spaced to drain");
  auto* health_cmd =
      app.add_subcommand("health", "exit 0 if the local spaced answers GET /v1/health (a probe)");
  health_cmd->add_option("--socket", client_socket, "the spaced to ask");
  app.add_option("--config", config_file, "JSON config file (docs/configuration.md)");
  app.add_option("--state-dir", state_dir, "state directory (default /var/lib/space)");
  app.add_option("--socket", socket, "API socket (default /run/space/space.sock)");
  app.add_option("--agent", agent, "space-agent binary (default: next to spaced)");
  app.add_option("--log-format", log_format, "json or text")
      ->check(CLI::IsMember({"json", "text"}));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.set_version_flag("--version", std::string("spaced ") + SPACE_VERSION);
  bool list_failpoints = false;
  app.add_flag("--failpoints", list_failpoints,
               "print the crash points SPACE_FAILPOINTS can turn on (docs/crash-safety.md), "
               "one \"name<TAB>where\" a line, and exit");
  CLI11_PARSE(app, argc, argv);
  if (list_failpoints) {
    for (const auto& f : failpoints()) std::cout << f.name << "\t" << f.where << "\n";
    return 0;
  }
  if (drain_cmd->parsed())
    return local_request(client_socket, "POST", "/v1/node/drain?exit=true", std::chrono::hours(1));
  if (health_cmd->parsed()) {
    // A draining node is alive but takes no work: not ready (its Kubernetes endpoint goes).
    std::string body;
    int rc = local_request(client_socket, "GET", "/v1/health", std::chrono::seconds(10), &body);
    auto h = nlohmann::json::parse(body, nullptr, false);
    if (rc == 0 && h.is_object() && h.value("draining", false)) {
      std::cerr << "spaced: draining (no new sandboxes)\n";
      return 1;
    }
    return rc;
  }

  daemon::Config cfg;
  if (!config_file.empty()) {
    if (auto r = cfg.load(config_file); !r) {
      std::cerr << "spaced: " << r.error().message() << "\n";
      return 2;
    }
  }
  if (!state_dir.empty()) cfg.state_dir = state_dir;
  if (!socket.empty()) cfg.socket = socket;
  if (!agent.empty()) cfg.agent = agent;
  if (!log_level.empty()) cfg.log_level = log_level;
  if (!node_name.empty()) cfg.node.name = node_name;
  if (!node_url.empty()) cfg.node.url = node_url;
  if (auto r = daemon::check_node(cfg.node); !r) {
    std::cerr << "spaced: " << r.error().message() << "\n";
    return 2;
  }
  if (struct sysinfo si{}; ::sysinfo(&si) == 0)
    cfg.add_default_pool(static_cast<uint64_t>(si.totalram) * si.mem_unit);
  if (cfg.agent.empty()) {
    cfg.agent = self_dir() / "space-agent";
    if (!fs::exists(cfg.agent)) cfg.agent = "/usr/lib/space/space-agent";
  }
  cfg.state_dir = fs::absolute(cfg.state_dir);
  cfg.socket = fs::absolute(cfg.socket);

  if (::geteuid() != 0) {
    std::cerr << "spaced: must run as root: it creates namespaces, cgroups and uid mappings "
                 "for sandboxes (try `sudo spaced`)\n";
    return 2;
  }
  setup_logging(cfg, log_format == "json");
  // spaced holds secrets and CA keys: no core dumps, and no ptrace or /proc/PID/mem access but
  // with CAP_SYS_PTRACE. (The launcher's CLONE_VM children share spaced's memory until they exec
  // the agent; their setresuid would make it non-dumpable anyway: this makes it so from the
  // start.)
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Every sandbox costs spaced about ten fds (its agent channel, a pidfd, its network
  // namespace, the gateway's listeners, cgroup directories): the soft limit goes as high as the
  // hard one allows. Without CAP_SYS_RESOURCE the hard limit cannot be raised; the log says
  // what it caps the node at.
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    const rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (was < rl.rlim_max && ::setrlimit(RLIMIT_NOFILE, &rl) != 0) rl.rlim_cur = was;
    spdlog::info("open files: soft limit {} (was {}; hard limit {}): about {} sandboxes{}",
                 rl.rlim_cur, was, rl.rlim_max, rl.rlim_cur / 12,
                 rl.rlim_max == RLIM_INFINITY ? ""
                                              : "; more need a higher hard limit (LimitNOFILE in "
                                                "spaced's unit)");
  }

  // One daemon per state directory.
  std::error_code ec;
  fs::create_directories(cfg.state_dir, ec);
  int lock_fd = ::open((cfg.state_dir / "spaced.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    spdlog::error("another spaced is using state dir {}; stop it or use --state-dir",
                  cfg.state_dir.string());
    return 1;
  }

  // The API listener's address and, with api_tls, its certificates: checked (and spaced's own
  // CA made) now, so that a bad address or certificate file stops spaced before anything starts.
  std::shared_ptr<tls::ServerCredentials> api_tls;
  if (!cfg.api_listen.empty()) {
    const bool with_tls = cfg.api_tls.mode != daemon::ApiTlsConfig::Mode::kOff;
    auto where = api::parse_listen_address(cfg.api_listen, with_tls);
    if (!where) {
      spdlog::error("{}", where.error().message());
      return 1;
    }
    if (with_tls) {
      auto creds = open_api_tls(cfg, where->host);
      if (!creds) {
        spdlog::error("{}", creds.error().message());
        return 1;
      }
      api_tls = std::move(*creds);
      if (api_tls->ca_created())
        spdlog::info("api: made a new CA for the TLS listener; clients trust {} (SPACE_CA)",
                     (cfg.state_dir / "tls" / "ca.pem").string());
    }
  }

  // Signals are handled by one thread with sigwait; block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // Every registered runtime (runtime/registry.h). The VM runtimes are always present: where
  // their VMM, the guest kernel or KVM is missing, their creates and `space doctor` say what.
  runtime::RuntimeSettings rs;
  rs.state_dir = cfg.state_dir;
  rs.cgroup_name = cfg.cgroup_name;
  rs.agent = cfg.agent;
  auto guest = [&](const fs::path& configured, const char* file) {
    if (!configured.empty()) return configured;
    fs::path near = self_dir() / "guest" / file;
    return fs::exists(near) ? near : fs::path("/usr/lib/space/guest") / file;
  };
  rs.kernel = guest(cfg.vm.kernel, "vmlinux");
  rs.initrd = guest(cfg.vm.initrd, "initrd.img");
  rs.qemu = cfg.vm.qemu;
  rs.accel = cfg.vm.accel;
  rs.firecracker = cfg.vm.firecracker;
  rs.jailer = cfg.vm.jailer;
  rs.templates = cfg.vm.templates;
  rs.boot_timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.vm.boot_timeout_s * 1000));
  rs.egress_ports = {egress::kProxyPort, egress::kTransparentTlsPort, egress::kTransparentHttpPort};
  daemon::Daemon::Runtimes runtimes;
  for (const runtime::RegisteredRuntime& r : runtime::registered_runtimes()) {
    auto rt = r.make(rs);
    if (!rt) {
      spdlog::error("the {} runtime is unavailable: {}", r.name, rt.error().message());
      return 1;
    }
    runtimes.emplace(std::string(r.name), std::move(*rt));
  }
  auto d = daemon::Daemon::start(cfg, std::move(runtimes));
  if (!d) {
    spdlog::error("{}", d.error().message());
    return 1;
  }
  // API tokens live in the same database (Daemon::start migrated it).
  auto tokens = daemon::TokenStore::open(cfg.state_dir / "space.db");
  if (!tokens) {
    spdlog::error("opening the API token store: {}", tokens.error().message());
    return 1;
  }
  api::ApiServer::Options api_options;
  api_options.tcp_listen = cfg.api_listen;
  api_options.tls = api_tls;
  api_options.tokens = tokens->get();
  api_options.profiles = cfg.profiles;
  auto server = api::ApiServer::listen(cfg.socket, **d, api_options);
  if (!server) {
    spdlog::error("{}", server.error().message());
    return 1;
  }
  // The E2B door (docs/e2b.md): E2B's protocol on a listener of its own, same service.
  std::unique_ptr<e2b::Door> e2b_door;
  std::unique_ptr<api::ApiServer> e2b_server;
  std::thread e2b_thread;
  if (!cfg.e2b.listen.empty()) {
    e2b::Options eo;
    eo.domain = cfg.e2b.domain;
    eo.templates = cfg.e2b.templates;
    eo.profile = cfg.e2b.profile;
    auto key = e2b::load_or_make_key(cfg.state_dir.string());
    if (!key) {
      spdlog::error("{}", key.error().message());
      return 1;
    }
    eo.envd_key = std::move(*key);
    e2b_door = std::make_unique<e2b::Door>(std::move(eo));
    api::ApiServer::Options o = api_options;
    o.tcp_listen = cfg.e2b.listen;
    o.name = "e2b";
    o.dispatch = [door = e2b_door.get()](api::Exchange& ex, api::ApiContext& ctx) {
      door->dispatch(ex, ctx);
    };
    // E2B's SDKs send one request per call over kept-alive connections; a command's stream
    // may stay silent for as long as the command is.
    auto s = api::ApiServer::listen("", **d, o);
    if (!s) {
      spdlog::error("e2b: {}", s.error().message());
      return 1;
    }
    e2b_server = std::move(*s);
    e2b_thread = std::thread([&] { e2b_server->serve(); });
  }
  spdlog::info("spaced {} listening on {} (state {})", SPACE_VERSION, cfg.socket.string(),
               cfg.state_dir.string());
  std::thread sig_thread([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    spdlog::info("signal {}: stopping (sandboxes keep running)", sig);
    (*server)->stop();
    if (e2b_server) e2b_server->stop();
  });
  (*server)->serve();
  if (e2b_server) e2b_server->stop();
  if (e2b_thread.joinable()) e2b_thread.join();
  if (e2b_door) e2b_door->shutdown();
  if (sig_thread.joinable()) {
    pthread_kill(sig_thread.native_handle(), SIGTERM);  // if serve() ended on its own
    sig_thread.join();
  }
  (*d)->shutdown();
  spdlog::info("spaced stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
