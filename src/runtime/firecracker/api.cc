// Firecracker's REST API over its Unix socket (see api.h). Requests are Beast messages written
// to an FdStream, which gives each call a deadline; responses are read with a parser bounded
// in header and body size. The JSON bodies follow Firecracker 1.16's specification field for
// field; the unit tests hold a transcription of it (tests/unit/runtime/firecracker/fixtures)
// and check every body this file builds against it.
#include "runtime/firecracker/api.h"

#include <sys/socket.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstring>

#include "common/fd_stream.h"

namespace space::runtime::firecracker {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;

// Firecracker's answers are small (the largest, GET /vm/config, is a few KiB).
constexpr uint64_t kMaxBody = 1 << 20;
constexpr uint32_t kMaxHeader = 16 * 1024;
// How much of Firecracker's fault_message goes into an Error.
constexpr size_t kMaxFaultText = 300;

// Firecracker's words are untrusted and end up in logs and API answers: keep printable ASCII
// (its messages are ASCII), whitespace becomes a space, everything else goes.
std::string sanitize(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= kMaxFaultText) {
      out += "...";
      break;
    }
    if (c == '\n' || c == '\r' || c == '\t') {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

Error refusal(const std::string& what, int status, std::string_view body) {
  json j = json::parse(body, nullptr, false);
  std::string words;
  if (j.is_object() && j.contains("fault_message") && j["fault_message"].is_string()) {
    words = sanitize(j["fault_message"].get_ref<const std::string&>());
  } else {
    words = sanitize(body);
  }
  if (words.empty()) words = "(no fault_message)";
  return Error(status == 400 ? Code::kInvalidArgument : Code::kInternal,
               "Firecracker refused " + what + " (" + std::to_string(status) + "): " + words);
}

bool is_http_error(const boost::system::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::end_of_stream).category();
}

Error transport_error(const boost::system::error_code& ec, const std::string& what,
                      std::chrono::milliseconds timeout) {
  if (ec == boost::asio::error::timed_out) {
    return Error(Code::kTimeout, "Firecracker did not answer " + what + " within " +
                                     std::to_string(timeout.count()) + " ms");
  }
  if (ec == http::error::body_limit) {
    return Error(Code::kProtocol, "Firecracker's answer to " + what + " is larger than 1 MiB");
  }
  if (is_http_error(ec) && ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return Error(Code::kProtocol,
                 "Firecracker's answer to " + what + " is not valid HTTP: " + ec.message());
  }
  return Error(Code::kUnavailable,
               "Firecracker's API connection failed during " + what + ": " + ec.message());
}

// A body for a "RateLimiter" property: present and non-empty, or nothing.
void put_limiter(json& body, const char* name, const std::optional<RateLimiter>& r) {
  if (r && !r->empty()) body[name] = to_json_body(*r);
}

}  // namespace

// ---- request bodies ----------------------------------------------------------------------

json to_json_body(const TokenBucket& b) {
  json j = {{"size", b.size}, {"refill_time", b.refill_time_ms}};
  if (b.one_time_burst) j["one_time_burst"] = *b.one_time_burst;
  return j;
}

json to_json_body(const RateLimiter& r) {
  json j = json::object();
  if (r.bandwidth) j["bandwidth"] = to_json_body(*r.bandwidth);
  if (r.ops) j["ops"] = to_json_body(*r.ops);
  return j;
}

json to_json_body(const MachineConfig& m) {
  return {{"vcpu_count", m.vcpu_count},
          {"mem_size_mib", m.mem_size_mib},
          {"smt", m.smt},
          {"track_dirty_pages", m.track_dirty_pages}};
}

json to_json_body(const BootSource& b) {
  json j = {{"kernel_image_path", b.kernel_image_path}};
  if (!b.initrd_path.empty()) j["initrd_path"] = b.initrd_path;
  if (!b.boot_args.empty()) j["boot_args"] = b.boot_args;
  return j;
}

json to_json_body(const Drive& d) {
  json j = {{"drive_id", d.drive_id},
            {"path_on_host", d.path_on_host},
            {"is_root_device", d.is_root_device},
            {"is_read_only", d.is_read_only}};
  put_limiter(j, "rate_limiter", d.rate_limiter);
  return j;
}

json to_json_body(const Vsock& v) { return {{"guest_cid", v.guest_cid}, {"uds_path", v.uds_path}}; }

json to_json_body(const Balloon& b) {
  return {{"amount_mib", b.amount_mib},
          {"deflate_on_oom", b.deflate_on_oom},
          {"stats_polling_interval_s", b.stats_polling_interval_s}};
}

json to_json_body(const SnapshotCreate& s) {
  return {{"snapshot_path", s.snapshot_path},
          {"mem_file_path", s.mem_file_path},
          {"snapshot_type", s.diff ? "Diff" : "Full"}};
}

json to_json_body(const SnapshotLoad& s) {
  json j = {{"snapshot_path", s.snapshot_path},
            {"mem_backend",
             {{"backend_type", s.uffd ? "Uffd" : "File"}, {"backend_path", s.mem_file_path}}},
            {"resume_vm", s.resume_vm}};
  if (s.track_dirty_pages) j["track_dirty_pages"] = true;
  if (s.clock_realtime) j["clock_realtime"] = true;
  if (s.vsock_uds_override) j["vsock_override"] = {{"uds_path", *s.vsock_uds_override}};
  return j;
}

bool valid_drive_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// ---- the connection ----------------------------------------------------------------------

struct ApiClient::Conn {
  explicit Conn(UniqueFd fd) : stream(std::move(fd)) {}
  FdStream stream;
  beast::flat_buffer buffer;
};

ApiClient::ApiClient(UniqueFd fd) : conn_(std::make_unique<Conn>(std::move(fd))) {}
ApiClient::ApiClient(ApiClient&&) noexcept = default;
ApiClient& ApiClient::operator=(ApiClient&&) noexcept = default;
ApiClient::~ApiClient() = default;

Result<json> ApiClient::request(std::string_view method, std::string_view path,
                                const std::optional<json>& body,
                                std::chrono::milliseconds timeout) {
  std::string what = std::string(method) + " " + std::string(path);
  if (broken_ || !conn_) {
    return fail(Code::kUnavailable, "Firecracker API: cannot send " + what +
                                        ": the connection was lost by an earlier request");
  }
  http::verb verb = http::string_to_verb(beast::string_view(method.data(), method.size()));
  bool path_ok = !path.empty() && path.front() == '/';
  for (unsigned char c : path) path_ok = path_ok && c > 0x20 && c < 0x7f;
  if (verb == http::verb::unknown || !path_ok)
    return fail(Code::kInvalidArgument, "not a Firecracker API request: " + sanitize(what));

  http::request<http::string_body> req{verb, beast::string_view(path.data(), path.size()), 11};
  req.set(http::field::host, "localhost");
  req.set(http::field::accept, "application/json");
  if (body) {
    req.set(http::field::content_type, "application/json");
    try {
      req.body() = body->dump();
    } catch (const json::exception&) {  // a string that is not UTF-8 (a path, most likely)
      return fail(Code::kInvalidArgument, "the body of " + what + " is not valid UTF-8");
    }
  }
  req.prepare_payload();

  // Anything that goes wrong from here leaves the connection in an unknown state.
  broken_ = true;
  FdStream& stream = conn_->stream;
  stream.set_write_timeout(timeout);
  stream.set_read_deadline(Clock::now() + timeout);
  boost::system::error_code ec;
  http::write(stream, req, ec);
  if (ec) return fail(transport_error(ec, what, timeout));
  http::response_parser<http::string_body> parser;
  parser.header_limit(kMaxHeader);
  parser.body_limit(kMaxBody);
  // Header first: Boost 1.74's eager parse (http::read) skips the check of a Content-Length
  // against body_limit when body bytes arrive with the header.
  http::read_header(stream, conn_->buffer, parser, ec);
  if (!ec && parser.content_length().value_or(0) > kMaxBody) ec = http::error::body_limit;
  if (!ec) http::read(stream, conn_->buffer, parser, ec);
  if (ec) return fail(transport_error(ec, what, timeout));
  const auto& res = parser.get();
  broken_ = !res.keep_alive();  // Firecracker closes after this answer: later calls fail

  int status = res.result_int();
  if (status < 200 || status > 299) return fail(refusal(what, status, res.body()));
  if (res.body().empty()) return json(nullptr);
  json j = json::parse(res.body(), nullptr, false);
  if (j.is_discarded()) {
    broken_ = true;  // as documented: after a protocol error the connection is not used again
    return fail(Code::kProtocol, "Firecracker's answer to " + what + " is not JSON");
  }
  return j;
}

// ---- the calls -----------------------------------------------------------------------------

Result<void> ApiClient::call(std::string_view method, std::string_view path, const json& body,
                             std::chrono::milliseconds timeout) {
  TRY_VOID(request(method, path, body, timeout));
  return {};
}

Result<void> ApiClient::put_machine_config(const MachineConfig& m) {
  return call("PUT", "/machine-config", to_json_body(m));
}

Result<void> ApiClient::put_boot_source(const BootSource& b) {
  return call("PUT", "/boot-source", to_json_body(b));
}

Result<void> ApiClient::put_drive(const Drive& d) {
  if (!valid_drive_id(d.drive_id))
    return fail(Code::kInvalidArgument, "invalid Firecracker drive id \"" + sanitize(d.drive_id) +
                                            "\" (not [A-Za-z0-9_-]{1,64})");
  return call("PUT", "/drives/" + d.drive_id, to_json_body(d));
}

Result<void> ApiClient::patch_drive(const std::string& id,
                                    const std::optional<std::string>& path_on_host,
                                    const std::optional<RateLimiter>& rate_limiter) {
  if (!valid_drive_id(id))
    return fail(Code::kInvalidArgument,
                "invalid Firecracker drive id \"" + sanitize(id) + "\" (not [A-Za-z0-9_-]{1,64})");
  json body = {{"drive_id", id}};
  if (path_on_host) body["path_on_host"] = *path_on_host;
  put_limiter(body, "rate_limiter", rate_limiter);
  return call("PATCH", "/drives/" + id, body);
}

Result<void> ApiClient::put_vsock(const Vsock& v) { return call("PUT", "/vsock", to_json_body(v)); }

Result<void> ApiClient::put_entropy(const std::optional<RateLimiter>& rate_limiter) {
  json body = json::object();
  put_limiter(body, "rate_limiter", rate_limiter);
  return call("PUT", "/entropy", body);
}

Result<void> ApiClient::put_balloon(const Balloon& b) {
  return call("PUT", "/balloon", to_json_body(b));
}

Result<void> ApiClient::patch_balloon(uint64_t amount_mib) {
  return call("PATCH", "/balloon", {{"amount_mib", amount_mib}});
}

Result<json> ApiClient::balloon_statistics() {
  json stats = TRY(request("GET", "/balloon/statistics", std::nullopt));
  if (!stats.is_object())
    return fail(Code::kProtocol, "Firecracker's balloon statistics are not a JSON object");
  return stats;
}

Result<void> ApiClient::instance_start() {
  return call("PUT", "/actions", {{"action_type", "InstanceStart"}});
}

Result<void> ApiClient::pause() { return call("PATCH", "/vm", {{"state", "Paused"}}); }

Result<void> ApiClient::resume() { return call("PATCH", "/vm", {{"state", "Resumed"}}); }

Result<void> ApiClient::create_snapshot(const SnapshotCreate& s,
                                        std::chrono::milliseconds timeout) {
  return call("PUT", "/snapshot/create", to_json_body(s), timeout);
}

Result<void> ApiClient::load_snapshot(const SnapshotLoad& s, std::chrono::milliseconds timeout) {
  return call("PUT", "/snapshot/load", to_json_body(s), timeout);
}

Result<InstanceInfo> ApiClient::describe() {
  json j = TRY(request("GET", "/", std::nullopt));
  InstanceInfo info;
  for (auto [name, field] :
       {std::pair{"id", &info.id}, std::pair{"state", &info.state},
        std::pair{"vmm_version", &info.vmm_version}, std::pair{"app_name", &info.app_name}}) {
    if (!j.is_object() || !j.contains(name) || !j[name].is_string()) {
      return fail(Code::kProtocol,
                  std::string("Firecracker's answer to GET / lacks the string \"") + name + "\"");
    }
    *field = j[name].get<std::string>();
  }
  return info;
}

Result<std::string> ApiClient::version() {
  json j = TRY(request("GET", "/version", std::nullopt));
  if (!j.is_object() || !j.contains("firecracker_version") ||
      !j["firecracker_version"].is_string()) {
    return fail(Code::kProtocol,
                "Firecracker's answer to GET /version lacks the string \"firecracker_version\"");
  }
  return j["firecracker_version"].get<std::string>();
}

}  // namespace space::runtime::firecracker
