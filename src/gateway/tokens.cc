// The gateway's tokens file (tokens.h).
#include "gateway/tokens.h"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <ctime>
#include <fstream>
#include <sstream>

#include "api/auth.h"
#include "common/clock.h"
#include "common/hex.h"
#include "common/ids.h"

namespace space::gateway {
namespace {

// "2027-06-01T00:00:00Z" (UTC, as rfc3339() writes it, fractions allowed) or unix seconds.
std::optional<double> gw_parse_time(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  return parse_rfc3339(v.get<std::string>());
}

bool gw_is_hex(std::string_view s, size_t n) { return s.size() == n && is_lower_hex(s); }

}  // namespace

Result<std::map<std::string, GatewayToken>> parse_tokens(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
    return fail(Code::kInvalidArgument, "expected {\"tokens\": [...]} (docs/cluster.md)");
  std::map<std::string, GatewayToken> out;
  size_t i = 0;
  for (auto& e : j["tokens"]) {
    std::string at = "tokens[" + std::to_string(i++) + "]";
    if (!e.is_object()) return fail(Code::kInvalidArgument, at + ": not an object");
    GatewayToken t;
    t.record.id = e.value("id", std::string());
    if (!daemon::is_token_id(t.record.id))
      return fail(Code::kInvalidArgument, at + ": \"id\" is not 12 lower-case hex digits");
    t.record.name = e.value("name", std::string());
    t.secret_sha256 = e.value("secret_sha256", std::string());
    if (!gw_is_hex(t.secret_sha256, 64))
      return fail(Code::kInvalidArgument,
                  at + ": \"secret_sha256\" is not 64 lower-case hex digits");
    auto exp = gw_parse_time(e.value("expires_at", nlohmann::json()));
    if (!exp)
      return fail(Code::kInvalidArgument,
                  at + ": \"expires_at\" is not a time (\"2027-06-01T00:00:00Z\" or unix seconds)");
    t.record.expires_at = *exp;
    for (const char* key : {"profiles", "ops"}) {
      if (!e.contains(key) || !e[key].is_array() || e[key].empty())
        return fail(Code::kInvalidArgument, at + ": \"" + key + "\" is not a non-empty array");
      for (auto& v : e[key]) {
        if (!v.is_string()) return fail(Code::kInvalidArgument, at + ": \"" + key + "\": strings");
        std::string s = v.get<std::string>();
        if (std::string_view(key) == "ops") {
          if (!api::parse_op(s) || s == "none")
            return fail(Code::kInvalidArgument,
                        at + ": unknown operation \"" + s + "\" (" + api::op_list() + ")");
          t.record.ops.push_back(s);
        } else {
          t.record.profiles.push_back(s);
        }
      }
    }
    if (out.count(t.record.id))
      return fail(Code::kInvalidArgument, at + ": token id " + t.record.id + " appears twice");
    out.emplace(t.record.id, std::move(t));
  }
  return out;
}

// The file's identity (inode, size, mtime): a change of any means it was rewritten.
std::string TokenFile::file_stamp() const {
  struct stat st {};
  // A Kubernetes Secret volume swaps a symlink: stat() follows it to the current file.
  if (::stat(file_.c_str(), &st) != 0) return "";
  return std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
         std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

Result<std::unique_ptr<TokenFile>> TokenFile::open(std::filesystem::path file) {
  std::unique_ptr<TokenFile> f(new TokenFile(std::move(file)));
  std::ifstream in(f->file_);
  if (!in) return fail(Error::sys("open", f->file_.string()).wrap("tokens_file"));
  std::stringstream ss;
  ss << in.rdbuf();
  f->tokens_ = TRY_CTX(parse_tokens(ss.str()), "tokens_file " + f->file_.string());
  f->stamp_ = f->file_stamp();
  f->next_check_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  return f;
}

void TokenFile::refresh() {
  auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return;
  next_check_ = now + std::chrono::seconds(1);
  std::string stamp = file_stamp();
  if (stamp.empty() || stamp == stamp_) return;
  std::ifstream in(file_);
  std::stringstream ss;
  ss << in.rdbuf();
  auto parsed = parse_tokens(ss.str());
  if (!parsed) {
    if (!reported_bad_)
      spdlog::error("tokens_file {}: {}; keeping the tokens read before", file_.string(),
                    parsed.error().message());
    reported_bad_ = true;
    return;
  }
  reported_bad_ = false;
  stamp_ = stamp;
  tokens_ = std::move(*parsed);
  spdlog::info("tokens_file {}: {} tokens", file_.string(), tokens_.size());
}

Result<daemon::TokenRecord> TokenFile::authenticate(std::string_view authorization) {
  auto trimmed = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  authorization = trimmed(authorization);
  if (authorization.empty())
    return fail(Code::kUnauthenticated,
                "the gateway needs an API token: send \"Authorization: Bearer spt_...\" (the CLI "
                "sends $SPACE_TOKEN)");
  if (authorization.size() < 7 ||
      (authorization.substr(0, 7) != "Bearer " && authorization.substr(0, 7) != "bearer "))
    return fail(
        Code::kUnauthenticated,
        "unsupported Authorization scheme; the gateway takes \"Authorization: Bearer spt_...\"");
  auto text = daemon::parse_token_text(trimmed(authorization.substr(7)));
  if (!text)
    return fail(Code::kUnauthenticated, "the bearer token is not a SPACE API token (spt_...)");
  std::lock_guard lock(mu_);
  refresh();
  auto it = tokens_.find(text->id);
  std::string hash = daemon::sha256_hex(text->secret);
  if (it == tokens_.end() ||
      CRYPTO_memcmp(hash.data(), it->second.secret_sha256.data(), hash.size()) != 0)
    return fail(Code::kUnauthenticated,
                "API token " + text->id +
                    " is not valid here (unknown, revoked, or a spaced "
                    "token: the gateway knows the tokens in its tokens_file)");
  if (it->second.record.expired(now_s()))
    return fail(Code::kUnauthenticated, "API token " + text->id + " (" + it->second.record.name +
                                            ") expired at " +
                                            rfc3339(it->second.record.expires_at));
  return it->second.record;
}

Result<void> TokenFile::still_valid(const std::string& id) {
  std::lock_guard lock(mu_);
  refresh();
  auto it = tokens_.find(id);
  if (it == tokens_.end())
    return fail(Code::kUnauthenticated,
                "API token " + id + " was removed from the gateway's tokens_file (revoked)");
  if (it->second.record.expired(now_s()))
    return fail(Code::kUnauthenticated, "API token " + id + " expired");
  return {};
}

Result<NewToken> make_token(const std::string& name, const std::vector<std::string>& profiles,
                            const std::vector<std::string>& ops, double ttl_s) {
  if (profiles.empty())
    return fail(Code::kInvalidArgument, "give at least one --profile (or \"*\")");
  if (ops.empty())
    return fail(Code::kInvalidArgument, "give at least one --op (" + api::op_list() + ")");
  for (auto& o : ops)
    if (!api::parse_op(o) || o == "none")
      return fail(Code::kInvalidArgument,
                  "unknown operation \"" + o + "\" (" + api::op_list() + ")");
  if (ttl_s <= 0 || ttl_s > api::kMaxTokenTtl)
    return fail(Code::kInvalidArgument, "--ttl: more than 0 and at most 365 days");
  NewToken t;
  // spaced's own token shape (daemon/tokens.h), from the same generator.
  std::string id_hex = random_id("", daemon::kTokenIdHexDigits / 2);
  std::string secret_hex = random_id("", daemon::kTokenSecretBytes);
  t.text = std::string(daemon::kTokenPrefix) + id_hex + "_" + secret_hex;
  t.entry = {
      {"id", id_hex},         {"name", name}, {"secret_sha256", daemon::sha256_hex(secret_hex)},
      {"profiles", profiles}, {"ops", ops},   {"expires_at", rfc3339(now_s() + ttl_s)}};
  return t;
}

}  // namespace space::gateway
