// A sandbox's way out, from the daemon's side: checking what a create request asks for
// (`--secret`, `--allow`) against its profile, giving the sandbox placeholders instead of
// secrets, its own CA for the gateway's TLS interception, the proxy environment, and attaching
// it to the egress gateway (src/egress) — at creation, and again after a daemon restart.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "daemon/daemon.h"

namespace space::daemon {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSystemBundle = "/etc/ssl/certs/ca-certificates.crt";

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

const egress::EgressProfile& Daemon::egress_profile(const std::string& profile) const {
  static const egress::EgressProfile kNothing;  // a profile without "egress" reaches nothing
  auto it = cfg_.egress.find(profile);
  return it == cfg_.egress.end() ? kNothing : it->second;
}

json Daemon::installed_stats(Sandbox& sb, const std::vector<std::string>& rel_paths) {
  json out = json::object();
  auto layer = sb.inst->writable_layer();
  if (!layer) return out;
  UniqueFd upper(::openat(layer->get(), "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!upper) return out;
  for (auto& rel : rel_paths) {
    struct stat st;
    if (::fstatat(upper.get(), rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    out["/" + rel] = {{"size", st.st_size},
                      {"mtime_ns", int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec},
                      {"dir", S_ISDIR(st.st_mode)}};
  }
  return out;
}

Result<egress::SandboxEgress> Daemon::plan_egress(SandboxRecord& rec, const CreateRequest& req) {
  egress::SandboxEgress eg;
  eg.id = rec.id;
  eg.policy = TRY(egress::Policy::make(req.profile, egress_profile(req.profile), req.allow));
  json grants = json::array();
  for (auto& name : req.secrets) {
    const egress::SecretDef* def = secrets_->find(name);
    if (!def)
      return fail(Code::kInvalidArgument,
                  "--secret " + name.substr(0, 64) +
                      ": no such secret in spaced's config (secrets are defined only there; see "
                      "docs/configuration.md)");
    if (std::find(def->profiles.begin(), def->profiles.end(), req.profile) == def->profiles.end())
      return fail(Code::kPermissionDenied,
                  "--secret " + name + ": not available to profile " + req.profile);
    if (std::any_of(eg.grants.begin(), eg.grants.end(),
                    [&](const egress::Grant& g) { return g.name == name; }))
      continue;
    eg.grants.push_back({name, egress::make_placeholder(name)});
    grants.push_back({{"name", name}, {"placeholder", eg.grants.back().placeholder}});
  }
  rec.spec["grants"] = grants;
  // The gateway's variables first, so a user's --env may still override them.
  std::vector<std::string> env = egress::sandbox_env(eg.grants, *secrets_);
  for (auto& kv : req.env) env.push_back(kv);
  rec.spec["env"] = env;
  return eg;
}

Result<egress::SandboxEgress> Daemon::egress_of(const SandboxRecord& rec) {
  egress::SandboxEgress eg;
  eg.id = rec.id;
  auto allow = rec.spec.value("allow", std::vector<std::string>{});
  auto policy = egress::Policy::make(rec.profile, egress_profile(rec.profile), allow);
  if (!policy) {
    // The config changed under a running sandbox: fail closed.
    spdlog::warn("sandbox {}: its --allow no longer fits profile {} ({}); egress refused", rec.id,
                 rec.profile, policy.error().message());
    policy = egress::Policy();
  }
  eg.policy = std::move(*policy);
  for (auto& g : rec.spec.value("grants", json::array()))
    if (g.is_object() && g.value("name", "") != "" && g.value("placeholder", "") != "")
      eg.grants.push_back({g["name"].get<std::string>(), g["placeholder"].get<std::string>()});
  return eg;
}

Result<void> Daemon::start_egress(Sandbox& sb, egress::SandboxEgress eg, CaMode mode) {
  int netns = sb.inst->netns_fd();
  if (netns < 0) return {};  // a runtime whose agent carries egress itself (VMs, later)
  fs::path dir = sb.spec.dir / "egress";
  if (mode == CaMode::kNew) {
    // The CA lives as long as a sandbox may: its lifetime, or a year.
    auto life = std::chrono::seconds(365 * 86400);
    if (sb.rec.expires_at)
      life = std::chrono::seconds(static_cast<int64_t>(*sb.rec.expires_at - now_s()) + 86400);
    eg.ca = TRY(egress::SandboxCa::create(sb.rec.id, life));
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return fail(Code::kInternal, "creating " + dir.string() + ": " + ec.message());
    TRY_VOID(eg.ca->save(dir));
  } else {
    eg.ca = TRY(egress::SandboxCa::load(dir));
  }
  if (mode != CaMode::kSaved) {
    // The sandbox's trust store: the host's CAs, the configured extra ones, and its own CA.
    std::string bundle = read_text(kSystemBundle);
    for (auto& f : cfg_.sandbox_ca_files) {
      std::string pem = read_text(f);
      if (pem.empty()) return fail(Code::kInvalidArgument, "sandbox_ca_files: cannot read " + f);
      bundle += "\n" + pem;
    }
    std::string ca = eg.ca->cert_pem();
    bundle += "\n# SPACE: this sandbox's egress gateway CA\n" + ca;
    TRY_VOID_CTX(put_file(*sb.conn, egress::kCaCertPath, 0644, ca), "installing the gateway CA");
    TRY_VOID_CTX(put_file(*sb.conn, egress::kCaBundlePath, 0644, bundle),
                 "installing the trust store");
    // `space diff` shows what changed since creation; these files are part of creation.
    sb.rec.spec["installed"] =
        installed_stats(sb, {"etc/space", "etc/space/ca.crt", "etc/space/ca-bundle.crt"});
  }
  TRY_VOID(gateway_->attach(std::move(eg), netns));
  return {};
}

void Daemon::stop_egress(const std::string& id) {
  if (gateway_) gateway_->detach(id);
}

}  // namespace space::daemon
