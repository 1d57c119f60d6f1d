// A sandbox's way out, from the daemon's side: checking what a create request asks for
// (`--secret`, `--allow`) against its profile, giving the sandbox placeholders instead of
// secrets, its own CA for the gateway's TLS interception, the proxy environment, and attaching
// it to the egress gateway (src/egress) — at creation, and again after a daemon restart.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cctype>
#include <fstream>
#include <sstream>

#include "daemon/daemon.h"
#include "runtime/vm_diff.h"

namespace space::daemon {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSystemBundle = "/etc/ssl/certs/ca-certificates.crt";
constexpr const char* kBundleMarker = "# SPACE: this sandbox's egress gateway CA\n";

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Chromium's managed policy for a sandbox: trust `pems` (its CA and sandbox_ca_files), no ECH.
// CACertificates takes base64 DER, which is a PEM block's body without its line breaks.
std::string chromium_policy(std::string_view pems) {
  constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----",
                             kEnd = "-----END CERTIFICATE-----";
  json certs = json::array();
  for (size_t at = pems.find(kBegin); at != std::string_view::npos; at = pems.find(kBegin, at)) {
    at += kBegin.size();
    size_t end = pems.find(kEnd, at);
    if (end == std::string_view::npos) break;
    std::string der64;
    for (char c : pems.substr(at, end - at))
      if (!std::isspace(static_cast<unsigned char>(c))) der64 += c;
    certs.push_back(std::move(der64));
    at = end;
  }
  return json{{"CACertificates", certs}, {"EncryptedClientHelloEnabled", false}}.dump(2) + "\n";
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
  if (!layer && layer.error().code() == Code::kUnimplemented) {
    // A microVM's layer is on its own disk: its agent stats the files, and what space-vminit
    // made there at boot is part of the creation too (runtime/vm_diff.h). Its mount points are
    // directories, for which only the type counts: no need to ask.
    for (const char* p : runtime::vm::kGuestMountPoints)
      out["/" + std::string(p)] = {{"size", -1}, {"mtime_ns", -1}, {"dir", true}};
    std::vector<std::string> rels = rel_paths;
    for (const char* p : runtime::vm::kGuestBootFiles) rels.emplace_back(p);
    for (auto& rel : rels) {
      auto r = sb.conn->request({{"op", "stat"}, {"path", "/" + rel}});
      if (!r) continue;
      auto st = r->find("stat");
      if (st == r->end() || !st->is_object()) continue;
      auto num = [&](const char* k) {
        auto it = st->find(k);
        return it != st->end() && it->is_number_integer() ? it->get<int64_t>() : int64_t{-1};
      };
      auto type = st->find("type");
      out["/" + rel] = {{"size", num("size")},
                        {"mtime_ns", num("mtime_ns")},
                        {"dir", type != st->end() && *type == "dir"}};
    }
    return out;
  }
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

Result<std::shared_ptr<const Daemon::TrustBase>> Daemon::trust_base() {
  struct stat st;
  if (::stat(kSystemBundle, &st) != 0) st = {};
  std::lock_guard lock(trust_.mu);
  if (trust_.base && trust_.size == st.st_size && trust_.mtime.tv_sec == st.st_mtim.tv_sec &&
      trust_.mtime.tv_nsec == st.st_mtim.tv_nsec)
    return trust_.base;
  TrustBase base{read_text(kSystemBundle), ""};
  for (auto& f : cfg_.sandbox_ca_files) {
    std::string pem = read_text(f);
    if (pem.empty()) return fail(Code::kInvalidArgument, "sandbox_ca_files: cannot read " + f);
    base.bundle += "\n" + pem;
    base.extra += pem + "\n";
  }
  trust_.base = std::make_shared<const TrustBase>(std::move(base));
  trust_.size = st.st_size;
  trust_.mtime = st.st_mtim;
  return trust_.base;
}

namespace {

// A directory `name` under `parent` in a writable layer's upper tree, made if missing with the
// mode and (shifted) owner of `lower_dir`, the image's directory it shadows (or 0755 root when
// the image has none). Invalid if something other than a directory is in the way.
Result<UniqueFd> upper_dir(int parent, const char* name, const fs::path& lower_dir,
                           uint32_t uid_base) {
  struct stat st;
  if (::fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISDIR(st.st_mode)) return UniqueFd();
  } else if (errno != ENOENT) {
    return fail_sys("fstatat", name);
  } else {
    mode_t mode = 0755;
    uid_t uid = 0;
    gid_t gid = 0;
    struct stat lst;
    if (::lstat(lower_dir.c_str(), &lst) == 0) {
      if (!S_ISDIR(lst.st_mode)) return UniqueFd();
      mode = lst.st_mode & 07777;
      uid = lst.st_uid;
      gid = lst.st_gid;
    } else if (errno != ENOENT) {
      return fail_sys("lstat", lower_dir.string());
    }
    if (uid >= runtime::SandboxSpec::kIdRange || gid >= runtime::SandboxSpec::kIdRange)
      return UniqueFd();  // not representable inside the sandbox
    if (::mkdirat(parent, name, 0700) != 0) return fail_sys("mkdirat", name);
    if (::fchownat(parent, name, uid_base + uid, uid_base + gid, AT_SYMLINK_NOFOLLOW) != 0 ||
        ::fchmodat(parent, name, mode, 0) != 0)
      return fail_sys("chown/chmod", name);
  }
  UniqueFd fd(::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_sys("openat", name);
  return fd;
}

Result<bool> write_upper_file(int dir, const char* name, std::vector<std::string_view> parts,
                              uint32_t uid_base) {
  if (::unlinkat(dir, name, 0) != 0 && errno != ENOENT) {
    if (errno == EISDIR || errno == EPERM) return false;
    return fail_sys("unlinkat", name);
  }
  UniqueFd fd(::openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return fail_sys("openat", name);
  for (std::string_view bytes : parts) {
    while (!bytes.empty()) {
      ssize_t n = ::write(fd.get(), bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail_sys("write", name);
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
  if (::fchown(fd.get(), uid_base, uid_base) != 0 || ::fchmod(fd.get(), 0644) != 0)
    return fail_sys("fchown/fchmod", name);
  return true;
}

}  // namespace

Result<bool> Daemon::install_ca_files(int upper_fd, uint32_t uid_base, const fs::path& rootfs,
                                      const std::string& ca_pem, const TrustBase& base) {
  static_assert(std::string_view(egress::kCaCertPath) == "/etc/space/ca.crt" &&
                std::string_view(egress::kCaBundlePath) == "/etc/space/ca-bundle.crt" &&
                std::string_view(egress::kChromiumPolicyPath) ==
                    "/etc/chromium/policies/managed/space.json");
  UniqueFd etc = TRY(upper_dir(upper_fd, "etc", rootfs / "etc", uid_base));
  if (!etc) return false;
  UniqueFd space = TRY(upper_dir(etc.get(), "space", rootfs / "etc" / "space", uid_base));
  if (!space) return false;
  if (!TRY(write_upper_file(space.get(), "ca.crt", {ca_pem}, uid_base))) return false;
  if (!TRY(write_upper_file(space.get(), "ca-bundle.crt",
                            {base.bundle, "\n" + std::string(kBundleMarker), ca_pem}, uid_base)))
    return false;
  // Chromium's policy, in the image's /etc/chromium/policies/managed (an empty directory of the
  // host image's skeleton; made here for other images).
  fs::path lower = rootfs / "etc";
  UniqueFd dir = std::move(etc);
  for (const char* name : {"chromium", "policies", "managed"}) {
    lower /= name;
    dir = TRY(upper_dir(dir.get(), name, lower, uid_base));
    if (!dir) return false;
  }
  return TRY(
      write_upper_file(dir.get(), "space.json", {chromium_policy(base.extra + ca_pem)}, uid_base));
}

Result<void> Daemon::install_ca_via_agent(Sandbox& sb, const egress::SandboxCa& ca) {
  std::string pem = ca.cert_pem();
  auto base = TRY(trust_base());
  std::string bundle = base->bundle + "\n" + kBundleMarker + pem;
  TRY_VOID_CTX(put_file(*sb.conn, egress::kCaCertPath, 0644, pem), "installing the gateway CA");
  TRY_VOID_CTX(put_file(*sb.conn, egress::kCaBundlePath, 0644, bundle),
               "installing the trust store");
  TRY_VOID_CTX(
      put_file(*sb.conn, egress::kChromiumPolicyPath, 0644, chromium_policy(base->extra + pem)),
      "installing Chromium's policy");
  return {};
}

Result<void> Daemon::start_egress(Sandbox& sb, egress::SandboxEgress eg, CaMode mode) {
  int netns = sb.inst->netns_fd();
  if (netns < 0) return {};  // a runtime whose agent carries egress itself (VMs, later)
  fs::path dir = sb.spec.dir / "egress";
  eg.ca = TRY(egress::SandboxCa::load(dir));
  if (mode == CaMode::kReinstall) {
    // The sandbox's writable layer was replaced: write its trust store again.
    TRY_VOID(install_ca_via_agent(sb, *eg.ca));
    sb.rec.spec["installed"] = installed_stats(sb, kInstalledFiles);
  }
  TRY_VOID(gateway_->attach(std::move(eg), netns));
  return {};
}

void Daemon::stop_egress(const std::string& id) {
  if (gateway_) gateway_->detach(id);
}

}  // namespace space::daemon
