// Reads space-gateway's JSON configuration (config.h); every error names the key and the fix.
#include "gateway/config.h"

#include <fstream>
#include <sstream>

namespace space::gateway {
namespace {

Result<std::filesystem::path> gw_abs_path(const nlohmann::json& v, const std::string& key) {
  if (!v.is_string() || v.get<std::string>().empty())
    return fail(Code::kInvalidArgument, key + ": a path, please");
  std::filesystem::path p = v.get<std::string>();
  if (!p.is_absolute())
    return fail(Code::kInvalidArgument, key + " \"" + p.string() + "\": an absolute path, please");
  return p;
}

}  // namespace

Result<GatewayConfig> GatewayConfig::load(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return fail(Error::sys("open", file.string()));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object())
    return fail(Code::kInvalidArgument, file.string() + ": not a JSON object (docs/cluster.md)");
  GatewayConfig c;
  auto where = [&](const std::string& k) { return file.string() + ": " + k; };
  for (auto& [k, v] : j.items()) {
    if (k == "listen" && v.is_string()) {
      c.listen = v.get<std::string>();
    } else if (k == "tls" && v.is_object()) {
      for (auto& [tk, tv] : v.items()) {
        if (tk == "cert")
          c.tls_cert = TRY_CTX(gw_abs_path(tv, "tls.cert"), file.string());
        else if (tk == "key")
          c.tls_key = TRY_CTX(gw_abs_path(tv, "tls.key"), file.string());
        else
          return fail(Code::kInvalidArgument, where("unknown key tls." + tk + " (cert, key)"));
      }
      if (c.tls_cert.empty() != c.tls_key.empty())
        return fail(Code::kInvalidArgument, where("tls: give both \"cert\" and \"key\""));
    } else if (k == "node_tls" && v.is_object()) {
      for (auto& [tk, tv] : v.items()) {
        if (tk == "cert")
          c.node_cert = TRY_CTX(gw_abs_path(tv, "node_tls.cert"), file.string());
        else if (tk == "key")
          c.node_key = TRY_CTX(gw_abs_path(tv, "node_tls.key"), file.string());
        else if (tk == "ca")
          c.node_ca = TRY_CTX(gw_abs_path(tv, "node_tls.ca"), file.string());
        else if (tk == "server_name" && tv.is_string())
          c.node_server_name = tv.get<std::string>();
        else
          return fail(Code::kInvalidArgument,
                      where("unknown key node_tls." + tk + " (cert, key, ca, server_name)"));
      }
      if (c.node_cert.empty() || c.node_key.empty() || c.node_ca.empty())
        return fail(Code::kInvalidArgument,
                    where("node_tls needs \"cert\" and \"key\" (the gateway's client certificate "
                          "from the cluster CA) and \"ca\" (the cluster CA)"));
    } else if (k == "discovery" && v.is_object() && v.size() == 1) {
      c.discovery = v;
    } else if (k == "tokens_file") {
      c.tokens_file = TRY_CTX(gw_abs_path(v, "tokens_file"), file.string());
    } else if (k == "store" && v.is_string()) {
      c.store = v.get<std::string>();
    } else if (k == "store_credentials_file") {
      c.store_credentials_file = TRY_CTX(gw_abs_path(v, k), file.string());
    } else if (k == "placement" && v.is_object()) {
      for (auto& [pk, pv] : v.items()) {
        if (pk == "sample" && pv.is_number_unsigned() && pv.get<size_t>() >= 1)
          c.sample = pv.get<size_t>();
        else
          return fail(Code::kInvalidArgument,
                      where("unknown or mistyped key placement." + pk + " (sample: 1 or more)"));
      }
    } else if (k == "node_lost_after_s" && v.is_number() && v.get<double>() > 0) {
      c.node_lost_after_s = v.get<double>();
    } else if (k == "poll_interval_s" && v.is_number() && v.get<double>() >= 0.05) {
      c.poll_interval_s = v.get<double>();
    } else if (k == "shutdown_grace_s" && v.is_number() && v.get<double>() >= 0) {
      c.shutdown_grace_s = v.get<double>();
    } else {
      return fail(Code::kInvalidArgument, where("unknown or mistyped key \"" + k + "\""));
    }
  }
  if (c.discovery.is_null())
    return fail(Code::kInvalidArgument,
                where("no \"discovery\": give one of {\"static\": FILE}, {\"etcd\": {...}}, "
                      "{\"kubernetes\": {...}}"));
  if (c.tokens_file.empty())
    return fail(Code::kInvalidArgument,
                where("no \"tokens_file\": the gateway authenticates every request with a token "
                      "from it (`space-gateway token create` makes one)"));
  if (c.node_cert.empty())
    return fail(Code::kInvalidArgument,
                where("no \"node_tls\": nodes take the gateway's calls over mutual TLS only"));
  return c;
}

}  // namespace space::gateway
