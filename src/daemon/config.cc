// Loading the JSON config file. Unknown keys are an error (a typo must not silently fall back
// to a default).
#include "daemon/config.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/units.h"
#include "proto/runtime_names.h"

namespace space::daemon {

Result<void> Config::load(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return fail_sys("open", file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object()) return fail(Code::kInvalidArgument, file.string() + ": not a JSON object");
  auto str = [&](const char* k) -> Result<std::string> {
    if (!j[k].is_string())
      return fail(Code::kInvalidArgument, std::string(k) + ": expected a string");
    return j[k].get<std::string>();
  };
  std::vector<std::array<bool, 4>> pool_limits_given;  // memory, cpus, pids, disk
  for (auto& [k, v] : j.items()) {
    if (k == "state_dir")
      state_dir = TRY(str("state_dir"));
    else if (k == "socket")
      socket = TRY(str("socket"));
    else if (k == "agent")
      agent = TRY(str("agent"));
    else if (k == "cgroup_name")
      cgroup_name = TRY(str("cgroup_name"));
    else if (k == "log_level")
      log_level = TRY(str("log_level"));
    else if (k == "api_listen")
      api_listen = TRY(str("api_listen"));
    else if (k == "api_tls")
      TRY_VOID_CTX(load_api_tls(v), file.string() + ": api_tls");
    else if (k == "e2b")
      TRY_VOID_CTX(load_e2b(v), file.string() + ": e2b");
    else if (k == "node")
      TRY_VOID_CTX(load_node(v), file.string() + ": node");
    else if (k == "cluster")
      TRY_VOID_CTX(load_cluster(v), file.string() + ": cluster");
    else if (k == "max_sandboxes" && v.is_number_unsigned())
      max_sandboxes = v.get<size_t>();
    else if (k == "destroyed_retention_days" && v.is_number())
      destroyed_retention_s = v.get<double>() * 86400.0;
    else if (k == "audit_retention_days" && v.is_number())
      audit_retention_s = v.get<double>() * 86400.0;
    else if (k == "audit_execs" && v.is_boolean())
      audit_execs = v.get<bool>();
    else if (k == "audit_guest_execs_per_s" && v.is_number() && v.get<double>() > 0)
      audit_guest_execs_per_s = v.get<double>();
    else if (k == "audit_guest_execs_burst" && v.is_number() && v.get<double>() >= 1)
      audit_guest_execs_burst = v.get<double>();
    else if (k == "profiles" && v.is_array()) {
      profiles.clear();
      for (auto& p : v)
        if (p.is_string()) profiles.insert(p.get<std::string>());
    } else if (k == "profiles" && v.is_object()) {
      TRY_VOID_CTX(load_profiles(v), file.string() + ": profiles");
    } else if (k == "secrets" && v.is_object()) {
      secrets.clear();
      for (auto& [name, def] : v.items())
        secrets.emplace(name, TRY_CTX(egress::SecretDef::from_json(name, def), file.string()));
    } else if (k == "pools" && v.is_array()) {
      TRY_VOID_CTX(load_pools(v, pool_limits_given), file.string() + ": pools");
      pools_configured = true;
    } else if (k == "snapshots" && v.is_object()) {
      TRY_VOID_CTX(load_snapshots(v), file.string() + ": snapshots");
    } else if (k == "vm" && v.is_object()) {
      TRY_VOID_CTX(load_vm(v), file.string() + ": vm");
    } else if (k == "images" && v.is_object()) {
      TRY_VOID_CTX(load_images(v), file.string() + ": images");
    } else if (k == "gateway" && v.is_object()) {
      TRY_VOID_CTX(load_gateway(v), file.string() + ": gateway");
    } else if (k == "defaults" && v.is_object()) {
      for (auto& [dk, dv] : v.items()) {
        if (dk == "memory" && dv.is_string())
          default_limits.memory_bytes =
              TRY_CTX(parse_size(dv.get<std::string>()), "defaults.memory");
        else if (dk == "disk" && dv.is_string())
          default_limits.disk_bytes = TRY_CTX(parse_size(dv.get<std::string>()), "defaults.disk");
        else if (dk == "cpus" && dv.is_number())
          default_limits.cpus = dv.get<double>();
        else if (dk == "pids" && dv.is_number_unsigned())
          default_limits.pids = dv.get<uint32_t>();
        else if (dk == "timeout" && dv.is_string())
          default_timeout_s = TRY_CTX(parse_duration(dv.get<std::string>()), "defaults.timeout");
        else if (dk == "max_timeout" && dv.is_string())
          max_timeout_s = TRY_CTX(parse_duration(dv.get<std::string>()), "defaults.max_timeout");
        else
          return fail(Code::kInvalidArgument,
                      file.string() + ": unknown or mistyped key defaults." + dk);
      }
    } else {
      return fail(Code::kInvalidArgument,
                  file.string() + ": unknown or mistyped key \"" + k + "\"");
    }
  }
  // Pools: limits not given are the defaults (whatever order the keys came in); profiles exist.
  for (size_t i = 0; i < pools.size() && i < pool_limits_given.size(); ++i) {
    auto& pool = pools[i];
    const auto& given = pool_limits_given[i];
    if (!given[0]) pool.limits.memory_bytes = default_limits.memory_bytes;
    if (!given[1]) pool.limits.cpus = default_limits.cpus;
    if (!given[2]) pool.limits.pids = default_limits.pids;
    if (!given[3]) pool.limits.disk_bytes = default_limits.disk_bytes;
    if (!profiles.count(pool.profile))
      return fail(Code::kInvalidArgument, file.string() + ": pools[" + std::to_string(i) +
                                              "] names profile \"" + pool.profile +
                                              "\", which is not configured");
    for (size_t j = 0; j < i; ++j) {
      const auto& o = pools[j];
      if (o.runtime == pool.runtime && o.image == pool.image && o.profile == pool.profile &&
          o.limits.memory_bytes == pool.limits.memory_bytes && o.limits.cpus == pool.limits.cpus &&
          o.limits.pids == pool.limits.pids && o.limits.disk_bytes == pool.limits.disk_bytes)
        return fail(Code::kInvalidArgument,
                    file.string() + ": pools[" + std::to_string(j) + "] and pools[" +
                        std::to_string(i) + "] have the same template; merge them into one size");
    }
  }
  if (api_tls.mode != ApiTlsConfig::Mode::kOff && api_listen.empty())
    return fail(Code::kInvalidArgument,
                file.string() +
                    ": api_tls needs api_listen, the TCP address to serve TLS on (e.g. "
                    "\"api_listen\": \"0.0.0.0:7443\")");
  if (!e2b.listen.empty() && !profiles.count(e2b.profile))
    return fail(Code::kInvalidArgument,
                file.string() + ": e2b: profile \"" + e2b.profile + "\" is not configured");
  for (auto& [name, def] : secrets)
    for (auto& p : def.profiles)
      if (!profiles.count(p))
        return fail(Code::kInvalidArgument, file.string() + ": secret " + name +
                                                " names profile \"" + p +
                                                "\", which is not configured");
  return {};
}

size_t default_pool_size(uint64_t mem_total_bytes) {
  constexpr uint64_t kPerSandbox = 4ull << 30;
  return std::clamp<size_t>(static_cast<size_t>(mem_total_bytes / kPerSandbox), 1, 4);
}

void Config::add_default_pool(uint64_t mem_total_bytes) {
  if (pools_configured || !pools.empty() || !profiles.count("test")) return;
  PoolConfig pool;
  pool.limits = default_limits;
  pool.size = default_pool_size(mem_total_bytes);
  pool.is_default = true;
  pools.push_back(std::move(pool));
}

// "profiles": {"test": {"egress": {...}}, "live": {}}: the names, and each one's egress policy
// (egress/policy.h, EgressProfile).
Result<void> Config::load_profiles(const nlohmann::json& v) {
  profiles.clear();
  egress.clear();
  profile_snapshots.clear();
  profile_vm.clear();
  for (auto& [name, p] : v.items()) {
    if (name.empty() || name.size() > 64 ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_") != std::string::npos)
      return fail(Code::kInvalidArgument,
                  "profile name \"" + name.substr(0, 64) + "\" must be [a-z0-9_-]{1,64}");
    if (!p.is_object()) return fail(Code::kInvalidArgument, name + ": expected an object");
    for (auto& [k, pv] : p.items()) {
      if (k == "egress")
        egress[name] = TRY_CTX(egress::EgressProfile::from_json(pv), name + ".egress");
      else if (k == "snapshot_every" && pv.is_string())
        profile_snapshots[name].every_s =
            TRY_CTX(parse_duration(pv.get<std::string>()), name + ".snapshot_every");
      else if (k == "snapshot_quota" && pv.is_string())
        profile_snapshots[name].quota_bytes =
            TRY_CTX(parse_size(pv.get<std::string>()), name + ".snapshot_quota");
      else if (k == "vm" && pv.is_object())
        profile_vm[name] = TRY_CTX(load_vm_devices(pv), name + ".vm");
      else
        return fail(Code::kInvalidArgument, name + ": unknown key \"" + k + "\"");
    }
    profiles.insert(name);
  }
  return {};
}

// "snapshots": {"retention": [{"for": "1h", "every": "0s"}, ...], "keep_manual": "7d",
// "gc_interval": "60s"}.
Result<void> Config::load_snapshots(const nlohmann::json& v) {
  auto duration = [](const nlohmann::json& d, const std::string& what) -> Result<double> {
    if (!d.is_string())
      return fail(Code::kInvalidArgument, what + ": expected a duration such as \"1h\"");
    return TRY_CTX(parse_duration(d.get<std::string>()), what);
  };
  for (auto& [k, sv] : v.items()) {
    if (k == "retention" && sv.is_array()) {
      std::vector<RetentionTier> tiers;
      for (auto& t : sv) {
        if (!t.is_object() || !t.contains("for"))
          return fail(Code::kInvalidArgument,
                      "retention: each tier is {\"for\": \"1d\", \"every\": \"1h\"}");
        RetentionTier tier;
        for (auto& [tk, tv] : t.items()) {
          if (tk == "for")
            tier.for_s = TRY(duration(tv, "retention.for"));
          else if (tk == "every")
            tier.every_s = TRY(duration(tv, "retention.every"));
          else
            return fail(Code::kInvalidArgument, "retention: unknown key \"" + tk + "\"");
        }
        if (!tiers.empty() && tier.for_s <= tiers.back().for_s)
          return fail(Code::kInvalidArgument,
                      "retention: tiers must be in increasing order of \"for\"");
        tiers.push_back(tier);
      }
      snapshots.retention = std::move(tiers);
    } else if (k == "keep_manual") {
      snapshots.keep_manual_s = TRY(duration(sv, "keep_manual"));
    } else if (k == "gc_interval") {
      snapshots.gc_interval_s = TRY(duration(sv, "gc_interval"));
      if (snapshots.gc_interval_s < 1)
        return fail(Code::kInvalidArgument, "gc_interval: at least 1s");
    } else {
      return fail(Code::kInvalidArgument, "unknown or mistyped key \"" + k + "\"");
    }
  }
  double longest = snapshots.keep_manual_s;
  for (auto& t : snapshots.retention) longest = std::max(longest, t.for_s);
  if (longest > SnapshotConfig::kMaxAge)
    return fail(Code::kInvalidArgument,
                "snapshots are kept at most 7 days; shorten \"retention\" or \"keep_manual\"");
  return {};
}

// "pools": [{"profile": "test", "image": "host", "size": 4, "memory": "512M", ...}].
Result<void> Config::load_pools(const nlohmann::json& v, std::vector<std::array<bool, 4>>& given) {
  pools.clear();
  given.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const auto& p = v[i];
    std::string at = "[" + std::to_string(i) + "]";
    if (!p.is_object())
      return fail(Code::kInvalidArgument,
                  at + ": expected an object such as {\"profile\": \"test\", \"size\": 4}");
    PoolConfig pool;
    std::array<bool, 4> g{};
    bool sized = false;
    auto str = [&](const nlohmann::json& x, const std::string& k) -> Result<std::string> {
      if (!x.is_string()) return fail(Code::kInvalidArgument, at + "." + k + ": expected a string");
      return x.get<std::string>();
    };
    for (auto& [k, pv] : p.items()) {
      if (k == "runtime")
        pool.runtime = TRY(str(pv, k));
      else if (k == "image")
        pool.image = TRY(str(pv, k));
      else if (k == "profile")
        pool.profile = TRY(str(pv, k));
      else if (k == "workdir")
        pool.workdir = TRY(str(pv, k));
      else if (k == "size" && pv.is_number_unsigned()) {
        pool.size = pv.get<size_t>();
        sized = true;
      } else if (k == "memory") {
        pool.limits.memory_bytes = TRY_CTX(parse_size(TRY(str(pv, k))), at + ".memory");
        g[0] = true;
      } else if (k == "cpus" && pv.is_number()) {
        pool.limits.cpus = pv.get<double>();
        g[1] = true;
      } else if (k == "pids" && pv.is_number_unsigned()) {
        pool.limits.pids = pv.get<uint32_t>();
        g[2] = true;
      } else if (k == "disk") {
        pool.limits.disk_bytes = TRY_CTX(parse_size(TRY(str(pv, k))), at + ".disk");
        g[3] = true;
      } else {
        return fail(Code::kInvalidArgument, at + ": unknown or mistyped key \"" + k + "\"");
      }
    }
    if (!sized || pool.size < 1 || pool.size > PoolConfig::kMaxSize)
      return fail(Code::kInvalidArgument,
                  at + ".size: a whole number from 1 to " + std::to_string(PoolConfig::kMaxSize));
    if (!proto::is_runtime_name(pool.runtime))
      return fail(Code::kInvalidArgument, at + ".runtime: " + proto::runtime_names());
    if (pool.workdir.empty() || pool.workdir[0] != '/')
      return fail(Code::kInvalidArgument, at + ".workdir: an absolute path");
    if (g[1] && (pool.limits.cpus <= 0 || pool.limits.cpus > 1024))
      return fail(Code::kInvalidArgument, at + ".cpus: greater than 0 and at most 1024");
    pools.push_back(std::move(pool));
    given.push_back(g);
  }
  return {};
}

Result<void> Config::load_gateway(const nlohmann::json& v) {
  auto strings = [](const nlohmann::json& a,
                    const std::string& what) -> Result<std::vector<std::string>> {
    if (!a.is_array()) return fail(Code::kInvalidArgument, what + ": expected an array of strings");
    std::vector<std::string> out;
    for (auto& e : a) {
      if (!e.is_string()) return fail(Code::kInvalidArgument, what + ": expected strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  };
  std::vector<std::string> both;  // "ca_files": trusted where intercepted and where tunneled
  for (auto& [k, gv] : v.items()) {
    if (k == "ca_files") {
      both = TRY(strings(gv, k));
    } else if (k == "resolve" && gv.is_object()) {
      gateway_resolve.clear();
      for (auto& [host, addr] : gv.items()) {
        if (!addr.is_string())
          return fail(Code::kInvalidArgument, "resolve." + host + ": expected \"address[:port]\"");
        gateway_resolve[host] = addr.get<std::string>();
      }
    } else if (k == "upstream_ca_files") {
      upstream_ca_files = TRY(strings(gv, k));
    } else if (k == "sandbox_ca_files") {
      sandbox_ca_files = TRY(strings(gv, k));
    } else if (k == "binary") {
      if (!gv.is_string() || gv.get<std::string>().empty() || gv.get<std::string>()[0] != '/')
        return fail(Code::kInvalidArgument, "binary: the absolute path of space-egress");
      gateway_binary = gv.get<std::string>();
    } else if (k == "uid" || k == "gid") {
      if (!gv.is_number_unsigned() || gv.get<uint64_t>() == 0 || gv.get<uint64_t>() >= (1u << 30))
        return fail(Code::kInvalidArgument,
                    k + ": a number from 1 to 2^30-1 (not root, below the sandboxes' id ranges)");
      (k == "uid" ? gateway_uid : gateway_gid) = gv.get<uint32_t>();
    } else if (k == "sandboxes_per_process") {
      if (!gv.is_number_unsigned() || gv.get<uint64_t>() > 1'000'000)
        return fail(Code::kInvalidArgument,
                    k + ": a number from 0 (one space-egress for every sandbox) to 1000000; "
                        "1 gives each sandbox a gateway process of its own");
      gateway_sandboxes_per_process = gv.get<size_t>();
    } else {
      return fail(Code::kInvalidArgument, "unknown or mistyped key \"" + k + "\"");
    }
  }
  for (auto& f : both) {
    upstream_ca_files.push_back(f);
    sandbox_ca_files.push_back(f);
  }
  return {};
}

// A profile's "vm": {"disk_bandwidth": "50M" (bytes/s), "disk_iops": N, "balloon": true}.
Result<runtime::VmDevices> Config::load_vm_devices(const nlohmann::json& v) {
  runtime::VmDevices d;
  for (auto& [k, x] : v.items()) {
    if (k == "disk_bandwidth" && x.is_string()) {
      d.disk_bytes_per_s = TRY_CTX(parse_size(x.get<std::string>()), k);
    } else if (k == "disk_iops" && x.is_number_unsigned() && x.get<uint64_t>() <= 10'000'000) {
      d.disk_ops_per_s = x.get<uint64_t>();
    } else if (k == "balloon" && x.is_boolean()) {
      d.balloon = x.get<bool>();
    } else {
      return fail(Code::kInvalidArgument,
                  "unknown or mistyped key \"" + k +
                      "\" (known: disk_bandwidth \"50M\", disk_iops N, balloon true|false)");
    }
  }
  return d;
}

// "e2b": {"listen": "127.0.0.1:PORT", "domain": ..., "templates": {...}, "profile": ...}
// (docs/e2b.md).
Result<void> Config::load_e2b(const nlohmann::json& v) {
  constexpr const char* kForm =
      " (expected {\"listen\": \"127.0.0.1:PORT\", \"domain\": \"...\", \"templates\": "
      "{\"ID\": \"IMAGE\"}, \"profile\": \"NAME\"})";
  if (!v.is_object()) return fail(Code::kInvalidArgument, "not an object" + std::string(kForm));
  e2b = E2b{};
  for (auto& [k, x] : v.items()) {
    if (k == "listen" && x.is_string()) {
      e2b.listen = x.get<std::string>();
    } else if (k == "domain" && x.is_string()) {
      e2b.domain = x.get<std::string>();
      for (char c : e2b.domain)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-'))
          return fail(Code::kInvalidArgument,
                      "domain \"" + e2b.domain + "\": letters, digits, '.' and '-' only");
    } else if (k == "profile" && x.is_string()) {
      e2b.profile = x.get<std::string>();
    } else if (k == "templates" && x.is_object()) {
      for (auto& [id, image] : x.items()) {
        if (!image.is_string() || id.empty() || image.get<std::string>().empty())
          return fail(Code::kInvalidArgument,
                      "templates: \"" + id + "\" must name an image (a non-empty string)");
        e2b.templates[id] = image.get<std::string>();
      }
    } else {
      return fail(Code::kInvalidArgument, "unknown or mistyped key \"" + k + "\"" + kForm);
    }
  }
  if (e2b.listen.empty())
    return fail(Code::kInvalidArgument, "listen is required" + std::string(kForm));
  return {};
}

// "api_tls": "auto" | {"auto": true, "names": ["host.example", "10.0.0.5"]} |
//            {"cert": "/etc/space/tls/cert.pem", "key": "/etc/space/tls/key.pem"}.
Result<void> Config::load_api_tls(const nlohmann::json& v) {
  constexpr const char* kForms =
      " (expected \"auto\", {\"auto\": true, \"names\": [\"host.example\"]} or "
      "{\"cert\": \"/path/cert.pem\", \"key\": \"/path/key.pem\"})";
  api_tls = ApiTlsConfig{};
  if (v.is_string() && v.get<std::string>() == "auto") {
    api_tls.mode = ApiTlsConfig::Mode::kAuto;
    return {};
  }
  if (!v.is_object())
    return fail(Code::kInvalidArgument, "not a valid value" + std::string(kForms));
  bool auto_on = false;
  bool names_given = false;
  for (auto& [k, x] : v.items()) {
    if ((k == "cert" || k == "key") && x.is_string()) {
      std::filesystem::path p = x.get<std::string>();
      if (!p.is_absolute())
        return fail(Code::kInvalidArgument,
                    k + " \"" + p.string() + "\": an absolute path, please");
      (k == "cert" ? api_tls.cert : api_tls.key) = p;
    } else if (k == "auto" && x.is_boolean()) {
      auto_on = x.get<bool>();
    } else if (k == "client_ca" && x.is_string()) {
      api_tls.client_ca = x.get<std::string>();
      if (!api_tls.client_ca.is_absolute())
        return fail(Code::kInvalidArgument,
                    "client_ca \"" + api_tls.client_ca.string() + "\": an absolute path, please");
    } else if (k == "names" && x.is_array()) {
      names_given = true;
      for (auto& n : x) {
        if (!n.is_string() || n.get<std::string>().empty())
          return fail(Code::kInvalidArgument,
                      "names: expected an array of host names and addresses");
        api_tls.names.push_back(n.get<std::string>());
      }
    } else {
      return fail(Code::kInvalidArgument, "unknown or mistyped key \"" + k + "\"" + kForms);
    }
  }
  bool files = !api_tls.cert.empty() || !api_tls.key.empty();
  if (auto_on && files)
    return fail(
        Code::kInvalidArgument,
        "either \"auto\": true (spaced's own CA) or \"cert\" and \"key\" (yours), not both");
  if (files) {
    if (api_tls.cert.empty() || api_tls.key.empty())
      return fail(Code::kInvalidArgument, "\"cert\" and \"key\" go together: give both files");
    if (names_given)
      return fail(Code::kInvalidArgument,
                  "\"names\" is for \"auto\" only: your certificate already names its hosts");
    api_tls.mode = ApiTlsConfig::Mode::kFiles;
  } else if (auto_on) {
    api_tls.mode = ApiTlsConfig::Mode::kAuto;
  } else {
    return fail(Code::kInvalidArgument,
                "neither \"auto\": true nor \"cert\" and \"key\"" + std::string(kForms));
  }
  return {};
}

// "node": {"name": "n1", "url": "https://10.0.0.5:7443", "labels": {"zone": "a"}}
Result<void> Config::load_node(const nlohmann::json& v) {
  if (!v.is_object())
    return fail(Code::kInvalidArgument,
                "expected {\"name\": \"n1\", \"url\": \"https://ADDRESS:7443\", \"labels\": {}}");
  node = NodeConfig{};
  for (auto& [k, x] : v.items()) {
    if (k == "name" && x.is_string()) {
      node.name = x.get<std::string>();
    } else if (k == "url" && x.is_string()) {
      node.url = x.get<std::string>();
    } else if (k == "labels" && x.is_object()) {
      for (auto& [lk, lv] : x.items()) {
        if (!lv.is_string() || lk.empty() || lk.size() > 63)
          return fail(Code::kInvalidArgument,
                      "labels: string values and keys of 1 to 63 characters, please");
        node.labels[lk] = lv.get<std::string>();
      }
    } else {
      return fail(Code::kInvalidArgument, "unknown or mistyped key \"" + k + "\"");
    }
  }
  return check_node(node);
}

Result<void> check_node(const NodeConfig& node) {
  if (!node.name.empty() && !cluster::is_valid_node_name(node.name))
    return fail(
        Code::kInvalidArgument,
        "node name \"" + node.name +
            "\" is not a valid node name: lower-case letters, digits, '-' and '.', at most 63, "
            "starting and ending with a letter or digit");
  if (!node.url.empty() && node.url.rfind("https://", 0) != 0 && node.url.rfind("http://", 0) != 0)
    return fail(
        Code::kInvalidArgument,
        "node url \"" + node.url + "\": give https://ADDRESS:PORT (the api_listen address)");
  if (!node.url.empty() && node.name.empty())
    return fail(Code::kInvalidArgument, "a node url needs a node name");
  return {};
}

// "cluster": {"snapshot_key_file", "store", "store_credentials_file", "push_snapshots",
//             "etcd": {"endpoints": [...], "prefix": "/space/nodes/", "ttl_s": 10}}
Result<void> Config::load_cluster(const nlohmann::json& v) {
  if (!v.is_object()) return fail(Code::kInvalidArgument, "expected an object (docs/cluster.md)");
  cluster = ClusterConfig{};
  for (auto& [k, x] : v.items()) {
    if ((k == "snapshot_key_file" || k == "store_credentials_file") && x.is_string()) {
      std::filesystem::path p = x.get<std::string>();
      if (!p.is_absolute())
        return fail(Code::kInvalidArgument,
                    k + " \"" + p.string() + "\": an absolute path, please");
      (k == "snapshot_key_file" ? cluster.snapshot_key_file : cluster.store_credentials_file) = p;
    } else if (k == "store" && x.is_string()) {
      cluster.store = x.get<std::string>();
      if (cluster.store.rfind("file:///", 0) != 0 && cluster.store.rfind("s3://", 0) != 0)
        return fail(
            Code::kInvalidArgument,
            "store \"" + cluster.store +
                "\": give file:///DIR (a shared volume) or s3://BUCKET/PREFIX?endpoint=URL");
    } else if (k == "push_snapshots" && x.is_boolean()) {
      cluster.push_snapshots = x.get<bool>();
    } else if (k == "etcd") {
      cluster.etcd = TRY_CTX(cluster::parse_etcd_config(x), "etcd");
    } else {
      return fail(Code::kInvalidArgument, "unknown or mistyped key \"" + k + "\"");
    }
  }
  return {};
}

// "images": {"max_layer": "16G", "max_total": "32G", "max_entries": 1000000, "max_ratio": 200,
// "keep_setuid": false}.
Result<void> Config::load_images(const nlohmann::json& v) {
  for (auto& [k, iv] : v.items()) {
    if ((k == "max_layer" || k == "max_total") && iv.is_string()) {
      uint64_t n = TRY_CTX(parse_size(iv.get<std::string>()), k);
      if (n == 0) return fail(Code::kInvalidArgument, k + ": more than 0");
      (k == "max_layer" ? images.max_layer_bytes : images.max_total_bytes) = n;
    } else if ((k == "max_entries" || k == "max_ratio") && iv.is_number_unsigned() &&
               iv.get<uint64_t>() > 0) {
      (k == "max_entries" ? images.max_entries : images.max_ratio) = iv.get<uint64_t>();
    } else if (k == "keep_setuid" && iv.is_boolean()) {
      images.keep_setuid = iv.get<bool>();
    } else {
      return fail(Code::kInvalidArgument, "unknown or mistyped key \"" + k + "\"");
    }
  }
  return {};
}

// "vm": {"kernel": PATH, "initrd": PATH, "qemu": PATH, "accel": "auto|kvm|tcg",
//        "boot_timeout_s": N, "firecracker": PATH, "jailer": PATH, "templates": BOOL}.
Result<void> Config::load_vm(const nlohmann::json& v) {
  for (auto& [k, x] : v.items()) {
    if ((k == "kernel" || k == "initrd" || k == "qemu") && x.is_string()) {
      std::filesystem::path p = x.get<std::string>();
      if (k != "qemu" && !p.is_absolute())
        return fail(Code::kInvalidArgument, k + ": an absolute path, please");
      (k == "kernel" ? vm.kernel : k == "initrd" ? vm.initrd : vm.qemu) = p;
    } else if ((k == "firecracker" || k == "jailer") && x.is_string() &&
               !x.get<std::string>().empty()) {
      (k == "firecracker" ? vm.firecracker : vm.jailer) = x.get<std::string>();
    } else if (k == "templates" && x.is_boolean()) {
      vm.templates = x.get<bool>();
    } else if (k == "accel" && x.is_string()) {
      vm.accel = x.get<std::string>();
      if (vm.accel != "auto" && vm.accel != "kvm" && vm.accel != "tcg")
        return fail(Code::kInvalidArgument, "accel: auto, kvm or tcg");
    } else if (k == "boot_timeout_s" && x.is_number() && x.get<double>() > 0 &&
               x.get<double>() <= 600) {
      vm.boot_timeout_s = x.get<double>();
    } else {
      return fail(Code::kInvalidArgument, "unknown or mistyped key \"" + k + "\"");
    }
  }
  return {};
}

}  // namespace space::daemon
