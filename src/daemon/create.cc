// Creating a sandbox (docs/pools.md, docs/crash-safety.md): the request checked, a sandbox taken
// from a warm pool or made on the cold path (prepare_sandbox: the record written first, then the
// CA, the trust store, the runtime's instance, the agent, the workdir, the gateway's listeners),
// then personalized (env, egress policy, lifetime, the image config's defaults) and registered. A
// failure at any step leaves nothing but a destroyed record saying why; a kill at any step leaves a
// record that the next start's reconcile undoes.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/clock.h"
#include "common/failpoint.h"
#include "common/openat2.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "daemon/daemon.h"
#include "image/oci.h"
#include "runtime/kvm.h"

namespace space::daemon {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Limits no sandbox on this host could ever use are a caller's mistake, not a quota.
Result<void> check_fits_host(const runtime::Limits& l) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (pages > 0 && page > 0) {
    const uint64_t total = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
    if (l.memory_bytes > total)
      return fail(Code::kInvalidArgument,
                  "memory " + format_size(l.memory_bytes) + " is more than this host has (" +
                      format_size(total) + "); ask for at most that, e.g. \"memory\": \"" +
                      format_size(total / 2 / (1 << 20) * (1 << 20)) + "\"");
  }
  if (cpus > 0 && l.cpus > static_cast<double>(cpus))
    return fail(Code::kInvalidArgument,
                fmt::format("cpus {} is more than this host's {} online CPUs; ask for at most {}",
                            l.cpus, cpus, cpus));
  return {};
}

// CreateRequest::metadata's bounds: labels, not a data store (they are in every listing).
Result<void> check_metadata(const std::map<std::string, std::string>& metadata) {
  if (metadata.size() > kMaxMetadataEntries)
    return fail(Code::kInvalidArgument, "metadata: at most " + std::to_string(kMaxMetadataEntries) +
                                            " entries, not " + std::to_string(metadata.size()));
  for (const auto& [k, v] : metadata) {
    if (k.empty() || k.size() > 256)
      return fail(Code::kInvalidArgument, "metadata: a key must be 1-256 bytes (\"" +
                                              k.substr(0, 64) + "\" is " +
                                              std::to_string(k.size()) + ")");
    if (v.size() > 4096)
      return fail(Code::kInvalidArgument, "metadata: the value of \"" + k.substr(0, 64) + "\" is " +
                                              std::to_string(v.size()) + " bytes; at most 4096");
  }
  return {};
}

// Whether `path` is a directory in an image's rootfs, reached without any symlink.
bool image_has_dir(const fs::path& rootfs, const std::string& path) {
  UniqueFd root(::open(rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return false;
  std::string rel = path;
  while (!rel.empty() && rel.front() == '/') rel.erase(0, 1);
  if (rel.empty()) return true;
  UniqueFd fd(sys_openat2(root.get(), rel.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                          RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS));
  return fd.valid();
}

// The defaults an image's config gives a sandbox (docs/images.md, "The image config"), put
// into the sandbox's spec under what the request asked: "env" gains the image's Env first (so
// the gateway's variables and the request's --env win per key), "user" is the default user of
// its execs, "command" the command of an exec that names none (Entrypoint + Cmd). The config
// came from an uploaded image: entries that cannot be used are left out.
void apply_image_config(const image::ImageConfig& c, json& spec) {
  std::vector<std::string> env;
  for (const auto& kv : c.env) {
    auto eq = kv.find('=');
    if (eq == 0 || eq == std::string::npos || kv.find('\0') != std::string::npos) continue;
    env.push_back(kv);
  }
  if (!env.empty()) {
    for (auto& kv : spec.value("env", std::vector<std::string>{})) env.push_back(kv);
    spec["env"] = env;
  }
  // As the API checks an exec's "user": a name, "UID" or "UID:GID", no spaces or slashes.
  if (!c.user.empty() && c.user.size() <= 64 &&
      c.user.find_first_of(std::string("\0\n/ ", 4)) == std::string::npos)
    spec["user"] = c.user;
  std::vector<std::string> command = c.entrypoint;
  command.insert(command.end(), c.cmd.begin(), c.cmd.end());
  if (!command.empty() && !command[0].empty()) spec["command"] = command;
}

json limits_json(const runtime::Limits& l) {
  return {{"memory", l.memory_bytes}, {"cpus", l.cpus}, {"pids", l.pids}, {"disk", l.disk_bytes}};
}

}  // namespace

Result<SandboxInfo> Daemon::create(const CreateRequest& req) {
  return create_sandbox(req, {}, json::object());
}

bool Template::same_kind(const Template& o) const {
  return runtime == o.runtime && image == o.image && profile == o.profile &&
         limits.memory_bytes == o.limits.memory_bytes && limits.cpus == o.limits.cpus &&
         limits.pids == o.limits.pids && limits.disk_bytes == o.limits.disk_bytes &&
         limits.disk_inodes == o.limits.disk_inodes;
}

Error Daemon::abandon_create(Sandbox& sb, Error e) {
  SandboxRecord& rec = sb.rec;
  metrics_.create_failures++;
  stop_egress(rec.id);
  close_agent(sb);
  if (sb.inst) (void)sb.inst->destroy();
  std::error_code ec;
  fs::remove_all(cfg_.state_dir / "sandboxes" / rec.id, ec);
  record_destroyed(rec, "creation failed: " + e.message(), "sandbox.create_failed");
  spdlog::warn("creating sandbox {} failed: {}", rec.id, e.message());
  return std::move(e).wrap("creating sandbox " + rec.id);
}

Result<Daemon::Prepared> Daemon::prepare_sandbox(
    const Template& t, runtime::Runtime* rt,
    const std::function<Result<void>(int, uint32_t)>& populate, std::chrono::seconds ca_life,
    SandboxState state, StepTimes& times) {
  Prepared p;
  p.sb = std::make_shared<Sandbox>();
  Sandbox& sb = *p.sb;
  sb.rt = rt;
  SandboxRecord& rec = sb.rec;
  rec.id = node_id(random_id("sb_", 6));
  rec.profile = t.profile;
  rec.runtime = t.runtime;
  rec.image = t.image;
  rec.state = state;
  rec.uid_base = TRY(allocate_uid_base());
  rec.created_at = now_s();
  rec.spec = limits_json(t.limits);
  rec.spec["workdir"] = t.workdir;

  runtime::SandboxSpec spec;
  spec.id = rec.id;
  spec.image = TRY(images_.resolve(t.image));
  spec.limits = t.limits;
  if (auto it = cfg_.profile_vm.find(t.profile); it != cfg_.profile_vm.end()) spec.vm = it->second;
  spec.dir = cfg_.state_dir / "sandboxes" / rec.id;
  spec.uid_base = rec.uid_base;
  if (cfg_.audit_execs) spec.exec_events = exec_sink(rec.id);

  std::error_code ec;
  fs::create_directory(spec.dir, ec);
  if (ec) return fail(Code::kInternal, "creating " + spec.dir.string() + ": " + ec.message());
  ::chmod(spec.dir.c_str(), 0700);
  auto undo_dir = [&] {
    std::error_code e;
    fs::remove_all(spec.dir, e);
  };
  // The intent: from here on a restarted spaced finds this record and removes whatever of the
  // sandbox exists (its cgroups are named by the id: runtime cleanup() needs nothing more).
  if (auto r = store_->put_sandbox(rec); !r) {
    undo_dir();
    return fail(std::move(r.error()));
  }
  failpoint("create.after_record");
  times.mark("record");
  auto failed = [&](Error e) -> Result<Prepared> { return fail(abandon_create(sb, std::move(e))); };

  // The sandbox's own CA for the gateway's TLS interception, kept beside its state so that a
  // restarted spaced serves it again.
  auto ca = egress::SandboxCa::create(rec.id, ca_life);
  if (!ca) return failed(std::move(ca.error()));
  p.ca = std::move(*ca);
  if (auto r = p.ca->save(spec.dir / "egress"); !r) return failed(std::move(r.error()));
  times.mark("ca");

  // Its trust store (the host's CAs, sandbox_ca_files, its CA) goes straight into the writable
  // layer before anything runs there, after a snapshot's files if it is restored from one.
  std::string ca_pem;
  std::shared_ptr<const Daemon::TrustBase> trust;
  if (rt->has_writable_layer()) {
    auto base = trust_base();
    if (!base) return failed(std::move(base.error()));
    trust = std::move(*base);
    ca_pem = p.ca->cert_pem();
    spec.populate_upper = [&, base_uid = rec.uid_base](int fd) -> Result<void> {
      if (populate) TRY_VOID(populate(fd, base_uid));
      p.ca_installed = TRY_CTX(install_ca_files(fd, base_uid, spec.image.rootfs, ca_pem, *trust),
                               "installing the gateway CA");
      return {};
    };
  } else if (populate && rt->keeps_machine_state()) {
    // A VM's snapshot is its whole machine: the files it needs go into a directory of the
    // runtime's (no uid shift: they are the daemon's, and QEMU gets them as fds).
    spec.restore_machine = [&, base_uid = rec.uid_base](int fd) { return populate(fd, base_uid); };
  } else if (populate) {
    spec.populate_upper = [&, base_uid = rec.uid_base](int fd) { return populate(fd, base_uid); };
  }
  times.mark("trust store");

  spec.times = &times;
  auto inst = rt->create(spec);
  const bool resumed = static_cast<bool>(spec.restore_machine);
  spec.populate_upper = nullptr;  // used once; it may hold the snapshot's manifest
  spec.restore_machine = nullptr;
  spec.times = nullptr;
  if (!inst) return failed(std::move(inst.error()));
  sb.inst = std::move(*inst);
  failpoint("create.after_runtime");
  if (auto r = open_agent(sb, resumed || sb.inst->resumed_from_template()); !r)
    return failed(std::move(r.error()));
  failpoint("create.after_agent");
  sb.spec = spec;
  times.mark("agent hello");
  // The default working directory must exist (imported images may lack /root); where the
  // image has it and nothing was restored over it, there is nothing to ask the agent.
  if (!t.workdir.empty() && !populate && image_has_dir(spec.image.rootfs, t.workdir)) {
    p.workdir = t.workdir;
  } else if (!t.workdir.empty()) {
    auto r =
        sb.conn->request({{"op", "mkdir"}, {"path", t.workdir}, {"mode", 0755}, {"parents", true}});
    if (!r && r.error().code() != Code::kAlreadyExists)
      return failed(std::move(r.error()).wrap("creating workdir " + t.workdir));
    p.workdir = t.workdir;
  }
  times.mark("workdir");
  if (int netns = sb.inst->netns_fd(); netns >= 0) {
    auto bound = egress::Gateway::bind(netns);
    if (!bound)
      return failed(std::move(bound.error())
                        .wrap("binding the egress gateway's listeners in its network namespace"));
    p.listeners = std::move(*bound);
  }
  times.mark("gateway bind");
  if (p.ca && !p.ca_installed && sb.inst->egress_over_channel()) {
    // A VM has no writable layer on the host: its agent writes the CA files now, before a pool
    // keeps it, so that a create from the pool does not wait for them.
    if (auto r = install_ca_via_agent(sb, *p.ca); !r) return failed(std::move(r.error()));
    p.ca_installed = true;
    // What `space diff` counts as part of the creation, asked of the agent now too.
    p.installed = installed_stats(sb, kInstalledFiles);
    times.mark("trust store via agent");
  }
  rec.runtime_state = sb.inst->persist();
  if (state != SandboxState::kCreating) {
    // Recorded with its runtime state, so that a restarted spaced can remove it.
    if (auto r = store_->put_sandbox(rec); !r) return failed(std::move(r.error()));
  }
  return p;
}

Result<Prepared> Daemon::make_pooled(const Template& t) {
  auto rt_it = runtimes_.find(t.runtime);
  if (rt_it == runtimes_.end())
    return fail(Code::kUnavailable,
                "runtime \"" + t.runtime + "\" is not available in this spaced");
  StepTimes times;
  auto made = prepare_sandbox(t, rt_it->second.get(), {}, std::chrono::seconds(365 * 86400),
                              SandboxState::kPooled, times);
  if (made)
    spdlog::debug("warm pool {}/{}: sandbox {} made ({})", t.profile, t.image, made->sb->rec.id,
                  times.summary());
  return made;
}

void Daemon::discard_prepared(Prepared& p, const std::string& why) {
  if (!p.sb) return;
  Sandbox& sb = *p.sb;
  sb.destroyed = true;
  close_agent(sb);
  p.listeners = {};
  if (sb.inst) {
    if (auto r = sb.inst->destroy(); !r) {
      spdlog::error("removing unused sandbox {}: {}", sb.rec.id, r.error().message());
      return;  // its record stays "pooled": the next start cleans it up
    }
  }
  std::error_code ec;
  fs::remove_all(cfg_.state_dir / "sandboxes" / sb.rec.id, ec);
  record_destroyed(sb.rec, why);
  p.sb.reset();
}

Result<SandboxInfo> Daemon::create_sandbox(const CreateRequest& req_in,
                                           std::function<Result<void>(int, uint32_t)> populate,
                                           json audit_extra) {
  auto t0 = std::chrono::steady_clock::now();
  StepTimes times;
  CreateRequest req = req_in;
  if (!req.limits_given[0]) req.limits.memory_bytes = cfg_.default_limits.memory_bytes;
  if (!req.limits_given[1]) req.limits.cpus = cfg_.default_limits.cpus;
  if (!req.limits_given[2]) req.limits.pids = cfg_.default_limits.pids;
  if (!req.limits_given[3]) req.limits.disk_bytes = cfg_.default_limits.disk_bytes;
  TRY_VOID(check_fits_host(req.limits));
  if (!req.timeout_s && cfg_.default_timeout_s > 0) req.timeout_s = cfg_.default_timeout_s;
  if (cfg_.max_timeout_s > 0) {
    if (!req.timeout_s) {
      req.timeout_s = cfg_.max_timeout_s;
    } else if (*req.timeout_s > cfg_.max_timeout_s) {
      return fail(Code::kInvalidArgument,
                  "timeout " + format_duration(*req.timeout_s) + " is more than this daemon's " +
                      "maximum lifetime (" + format_duration(cfg_.max_timeout_s) +
                      ", defaults.max_timeout in its config)");
    }
  }
  auto rt_it = runtimes_.find(req.runtime);
  if (rt_it == runtimes_.end())
    return fail(
        Code::kUnavailable, "runtime \"" + req.runtime +
                                "\" is not available in this spaced; available: " +
                                [&] {
                                  std::string s;
                                  for (auto& [n, r] : runtimes_) s += (s.empty() ? "" : ", ") + n;
                                  return s;
                                }() +
                                " (`space doctor` explains what the host supports)");
  if (!cfg_.profiles.count(req.profile))
    return fail(
        Code::kInvalidArgument,
        "unknown profile \"" + req.profile.substr(0, 64) + "\"; configured profiles: " + [&] {
          std::string s;
          for (auto& p : cfg_.profiles) s += (s.empty() ? "" : ", ") + p;
          return s;
        }());
  if (stop_.stopped()) return fail(Code::kUnavailable, "spaced is shutting down");
  if (draining_)
    return fail(Code::kUnavailable,
                "node " + (cfg_.node.name.empty() ? std::string("(this host)") : cfg_.node.name) +
                    " is draining: it takes no new sandboxes; create it through a gateway "
                    "(another node) or on another host");
  // A place among max_sandboxes, held until the sandbox is registered or the create fails.
  Registry::Slot slot = TRY(registry_.admit(cfg_.max_sandboxes));

  // The image's config: its WorkingDir unless the request chose one (the rest below).
  const image::ImageConfig image_config = TRY(images_.config(req.image));
  if (!req.workdir_given && !image_config.working_dir.empty()) {
    req.workdir = image_config.working_dir;
    if (req.workdir[0] != '/') req.workdir.insert(0, "/");  // relative to "/", as Docker does
  }

  // Everything only this request decides is checked before a sandbox is taken or made.
  SandboxRecord personal;
  personal.spec = limits_json(req.limits);
  personal.spec["env"] = req.env;
  personal.spec["workdir"] = req.workdir;
  personal.spec["allow"] = req.allow;
  personal.spec["secrets"] = req.secrets;
  personal.spec["user_env"] = req.env;  // env as asked; "env" gains the gateway's variables
  TRY_VOID(check_metadata(req.metadata));
  if (!req.metadata.empty()) personal.spec["metadata"] = req.metadata;
  if (req.pause_on_timeout) personal.spec["on_timeout"] = "pause";
  {
    double every = req.snapshot_every_s.value_or(-1);
    if (every < 0) {
      auto it = cfg_.profile_snapshots.find(req.profile);
      every = it == cfg_.profile_snapshots.end() ? 0 : it->second.every_s;
    }
    if (every > 0 && every < 1)
      return fail(Code::kInvalidArgument, "snapshot_every: at least 1s (or 0 for none)");
    personal.spec["snapshot_every"] = every;
  }
  auto egress_plan = TRY(plan_egress(personal, req));
  apply_image_config(image_config, personal.spec);
  times.mark("request");

  Template t{req.runtime, req.image, req.profile, req.limits, req.workdir};
  std::optional<Prepared> prepared;
  if (!populate) prepared = pools_.claim(t);
  const bool pooled = prepared.has_value();
  if (pooled) {
    times.mark("pool claim");
  } else {
    // The CA lives as long as the sandbox may: its lifetime, or a year.
    auto life = std::chrono::seconds(365 * 86400);
    if (req.timeout_s)
      life = std::max(life, std::chrono::seconds(static_cast<int64_t>(*req.timeout_s) + 86400));
    prepared = TRY(
        prepare_sandbox(t, rt_it->second.get(), populate, life, SandboxState::kCreating, times));
  }
  std::shared_ptr<Sandbox> sb = prepared->sb;
  SandboxRecord& rec = sb->rec;

  // Personalize it.
  rec.created_at = now_s();
  if (req.timeout_s) rec.expires_at = rec.created_at + *req.timeout_s;
  if (req.idle_timeout_s) {
    sb->idle_timeout_s = *req.idle_timeout_s;
    rec.spec["idle_timeout"] = *req.idle_timeout_s;
  }
  sb->touch();
  for (auto& [k, v] : personal.spec.items()) rec.spec[k] = v;
  egress_plan.id = rec.id;
  egress_plan.ca = prepared->ca;
  auto failed = [&](Error e) -> Result<SandboxInfo> {
    prepared->listeners = {};
    return fail(abandon_create(*sb, std::move(e)));
  };
  if (req.workdir != prepared->workdir && !req.workdir.empty()) {
    auto r = sb->conn->request(
        {{"op", "mkdir"}, {"path", req.workdir}, {"mode", 0755}, {"parents", true}});
    if (!r && r.error().code() != Code::kAlreadyExists)
      return failed(std::move(r.error()).wrap("creating workdir " + req.workdir));
    times.mark("workdir");
  }
  if (sb->inst->netns_fd() >= 0) {
    if (!prepared->ca_installed) {
      // Its /etc is not a plain directory of the writable layer: the agent writes the files.
      if (auto r = install_ca_via_agent(*sb, *prepared->ca); !r)
        return failed(std::move(r.error()));
      times.mark("trust store via agent");
    }
    // `space diff` shows what changed since creation; these files are part of creation.
    rec.spec["installed"] = prepared->installed.is_object() ? prepared->installed
                                                            : installed_stats(*sb, kInstalledFiles);
    auto r = prepared->listeners.empty()
                 ? gateway_->attach(std::move(egress_plan), sb->inst->netns_fd())
                 : gateway_->attach(std::move(egress_plan), std::move(prepared->listeners));
    if (!r) return failed(std::move(r.error()).wrap("setting up egress"));
    times.mark("gateway attach");
  }
  failpoint("create.after_attach");
  move(rec, SandboxState::kRunning);
  if (auto r = store_->put_sandbox(rec); !r) return failed(std::move(r.error()));
  failpoint("create.after_running");
  times.mark("record running");
  json create_event = {{"runtime", rec.runtime},
                       {"image", rec.image},
                       {"profile", rec.profile},
                       {"limits", limits_json(req.limits)},
                       {"workdir", req.workdir},
                       {"env_names",
                        [&] {
                          json names = json::array();
                          for (auto& kv : req.env) names.push_back(kv.substr(0, kv.find('=')));
                          return names;
                        }()},
                       {"allow", req.allow},
                       {"secrets", req.secrets},
                       {"agent_pid", sb->inst->agent_pid()}};
  if (pooled) create_event["warm_pool"] = true;
  create_event.update(audit_extra);
  audit(rec.id, "sandbox.create", std::move(create_event));
  schedule_snapshots(*sb);
  registry_.add(sb, &slot);
  watch(sb);
  times.mark("audit and register");
  auto ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  metrics_.creates++;
  if (pooled) {
    pools_.claimed();  // its replacement
    metrics_.creates_pooled++;
    metrics_.pooled_ns_sum += ns;
  } else {
    metrics_.create_ns_sum += ns;
    metrics_.add_steps(times);
  }
  json details = sb->inst->details();
  spdlog::info("created sandbox {} (image {}, profile {}, agent pid {}{}{}) in {:.2f} ms: {}",
               rec.id, rec.image, rec.profile, sb->inst->agent_pid(), pooled ? ", warm pool" : "",
               details.is_null() ? std::string() : ", " + details.dump(),
               static_cast<double>(ns) / 1e6, times.summary());
  return info(rec, sb.get(), false);
}

}  // namespace space::daemon
