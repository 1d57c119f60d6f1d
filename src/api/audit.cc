// Handler for a sandbox's audit log: GET /v1/sandboxes/{id}/audit. Returns the events as one
// JSON document or as JSON Lines (format=jsonl), a verification of the hash chain
// (verify=true), or — with follow=true — a JSON Lines stream that keeps delivering new events
// until the sandbox is destroyed or the client hangs up (an empty line every 5 s of quiet
// keeps the connection checked). Works for destroyed sandboxes too. A follow stream opened
// with a token ends, within about a second, once the token is revoked or expires: a last line
// {"error": {"code": "unauthenticated", "message": ...}}, then the connection is closed
// without the final chunk, so the client sees the stream cut short rather than complete.
#include <charconv>
#include <chrono>
#include <thread>

#include "api/handlers.h"
#include "api/views.h"

namespace space::api::handlers {
namespace {

constexpr size_t kMaxPage = 100000;

Result<int64_t> int_param(const Target& t, const std::string& key, int64_t fallback, int64_t max) {
  auto it = t.query.find(key);
  if (it == t.query.end()) return fallback;
  const std::string& v = it->second;
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || n < 0 || n > max)
    return fail(Code::kInvalidArgument,
                "query parameter " + key + " must be an integer 0.." + std::to_string(max));
  return n;
}

std::string jsonl(const std::vector<daemon::AuditEvent>& events) {
  std::string out;
  for (auto& e : events) {
    out += json_text(to_json(e));
    out += '\n';
  }
  return out;
}

}  // namespace

Result<void> get_audit(Exchange& ex, ApiContext& ctx) {
  std::string id = TRY(sandbox_id(ex));
  const Target& t = ex.target();
  int64_t after = TRY(int_param(t, "after", 0, INT64_MAX));
  int64_t limit = TRY(int_param(t, "limit", kMaxPage, kMaxPage));
  bool verify = TRY(parse_bool_param(t, "verify", false));
  bool follow = TRY(parse_bool_param(t, "follow", false));
  std::string format = "json";
  if (auto it = t.query.find("format"); it != t.query.end()) format = it->second;
  if (format != "json" && format != "jsonl")
    return fail(Code::kInvalidArgument, "query parameter format must be json or jsonl");

  if (verify) {
    daemon::AuditVerdict rep = TRY(ctx.service.audit_verify(id));
    return ex.respond_json(http::status::ok, to_json(rep));
  }
  if (!follow) {
    std::vector<daemon::AuditEvent> events =
        TRY(ctx.service.audit_events(id, after, static_cast<size_t>(limit)));
    if (format == "jsonl") return ex.respond(http::status::ok, "application/jsonl", jsonl(events));
    return ex.respond_json(http::status::ok, {{"events", to_json(events)}});
  }
  // follow: JSON Lines, polled from the log, until sandbox.destroy, the client leaves, or the
  // caller's token is no longer valid (checked on every poll, at most once a second).
  StreamAuth auth(ctx.principal, ctx.tokens);
  std::vector<daemon::AuditEvent> batch = TRY(ctx.service.audit_events(id, after, kMaxPage));
  TRY_VOID(ex.begin_chunked(http::status::ok, "application/jsonl"));
  auto last_write = std::chrono::steady_clock::now();
  for (;;) {
    if (auto valid = auth.check(); !valid) {
      Error e = std::move(valid.error()).wrap("following the audit log of " + id);
      (void)ex.write_chunk(json_text(error_body(e)) + "\n");
      ex.mark_broken();
      return {};
    }
    bool ended = false;
    if (!batch.empty()) {
      for (auto& e : batch)
        if (e.kind == "sandbox.destroy") ended = true;
      after = batch.back().seq;
      TRY_VOID(ex.write_chunk(jsonl(batch)));
      last_write = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - last_write > std::chrono::seconds(5)) {
      // An empty line now and then: a client that left is noticed (the write fails).
      TRY_VOID(ex.write_chunk("\n"));
      last_write = std::chrono::steady_clock::now();
    }
    if (ended) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    batch = TRY(ctx.service.audit_events(id, after, kMaxPage));
  }
  return ex.end_chunked();
}

}  // namespace space::api::handlers
