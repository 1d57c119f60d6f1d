// `space token create|ls|rm`: API tokens (docs/api-auth.md). `create` prints the token's text
// alone on stdout (so `TOKEN=$(space token create ...)` works) and, on stderr, that it will
// never be shown again; `ls` never shows secrets (the daemon does not have them).
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/output.h"
#include "common/clock.h"

namespace space::cli {
namespace {

using nlohmann::json;

std::string joined(const json& arr) {
  std::string out;
  if (!arr.is_array()) return "-";
  for (const auto& v : arr) out += (out.empty() ? "" : ",") + cell(v);
  return out.empty() ? "-" : out;
}

// "2026-12-03T10:00:00Z" from "2026-12-03T10:00:00.123Z".
std::string timestamp(const json& when) {
  if (!when.is_string()) return "-";
  std::string s = when.get<std::string>();
  size_t dot = s.find('.');
  return dot == std::string::npos ? s : s.substr(0, dot) + "Z";
}

// The same token as E2B's SDKs want an API key: "spt_<12 hex>_<64 hex>" is "e2b_" and its 76
// hex digits (what spaced's E2B door takes back, e2b::token_from_e2b_key).
Result<std::string> e2b_key(const std::string& token) {
  if (token.size() != 4 + 12 + 1 + 64 || !token.starts_with("spt_") || token[16] != '_')
    return fail(Code::kProtocol,
                "the daemon's token is not of the form spt_<12 hex>_<64 hex>; "
                "it cannot be written as an E2B key");
  return "e2b_" + token.substr(4, 12) + token.substr(17);
}

}  // namespace

Result<int> cmd_token_create(const Args& a, const Client& c) {
  json body = {{"name", a.name}, {"profiles", a.profiles}, {"ops", a.ops}, {"ttl", a.ttl}};
  json res = TRY(c.call("POST", "/v1/tokens", body));
  std::string text = res.value("token", "");
  if (text.empty()) return fail(Code::kProtocol, "the daemon made a token but sent no text");
  if (a.e2b) {
    text = TRY(e2b_key(text));
    res["token"] = text;
  }
  if (a.json) {
    print_json(res);
  } else {
    write_all(STDOUT_FILENO, text + "\n");
  }
  write_all(STDERR_FILENO, "space: token " + escape_text(res.value("id", "")) + " (" +
                               escape_text(res.value("name", "")) + ") for profiles " +
                               escape_text(joined(res.value("profiles", json()))) +
                               ", operations " + escape_text(joined(res.value("ops", json()))) +
                               ", valid until " + escape_text(res.value("expires_at", "?")) +
                               ".\nspace: this is the only time its text is shown: store it now (" +
                               (a.e2b ? "E2B's SDKs send it as $E2B_API_KEY to spaced's E2B door"
                                      : "the CLI sends it as $SPACE_TOKEN") +
                               ").\n");
  return 0;
}

Result<int> cmd_token_ls(const Args& a, const Client& c) {
  json res = TRY(c.call("GET", "/v1/tokens"));
  json tokens = res.value("tokens", json::array());
  if (a.json) {
    print_json(tokens);
    return 0;
  }
  double now = now_s();
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAME", "PROFILES", "OPS", "STATE", "EXPIRES", "LAST USED"}};
  for (const auto& t : tokens) {
    json last_used = t.value("last_used_at", json());
    rows.push_back({cell(t.value("id", json())), cell(t.value("name", json())),
                    joined(t.value("profiles", json())), joined(t.value("ops", json())),
                    cell(t.value("state", json())), timestamp(t.value("expires_at", json())),
                    last_used.is_null() ? "never" : age(last_used, now) + " ago"});
  }
  print(format_table(rows));
  return 0;
}

Result<int> cmd_token_rm(const Args& a, const Client& c) {
  TRY(c.call("DELETE", "/v1/tokens/" + url_encode(a.id)));
  return 0;
}

}  // namespace space::cli
