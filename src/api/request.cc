// Parsing and validation of REST requests (see request.h). The rules mirror the OpenAPI file
// (api/openapi.yaml): when a limit changes here, change it there too.
#include "api/request.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

#include "common/hex.h"
#include "common/units.h"
#include "proto/runtime_names.h"

namespace space::api {
namespace {

using nlohmann::json;

std::unexpected<Error> invalid(std::string message) {
  return fail(Code::kInvalidArgument, std::move(message));
}

Result<std::string> percent_decode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      int hi = i + 2 < in.size() ? hex_value(in[i + 1]) : -1;
      int lo = i + 2 < in.size() ? hex_value(in[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return invalid("bad percent-escape in request target near \"" +
                       std::string(in.substr(i, 3)) + "\"; encode '%' as %25");
      }
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

// [A-Za-z0-9][A-Za-z0-9_.-]{0,max-1}
bool is_name(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  char c = s[0];
  if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
  for (char ch : s) {
    if (!is_name_char(ch)) return false;
  }
  return true;
}

std::string shown(std::string_view s) {
  // For messages: at most 64 bytes of what the client sent, as a JSON string (so control bytes
  // are escaped and the message stays one line).
  std::string cut(s.substr(0, 64));
  std::string q = json(cut).dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 64) q += "...";
  return q;
}

Result<std::string> string_field(const json& v, std::string_view key) {
  if (!v.is_string()) return invalid("\"" + std::string(key) + "\" must be a string");
  const auto& s = v.get_ref<const std::string&>();
  if (s.find('\0') != std::string::npos) {
    return invalid("\"" + std::string(key) + "\" must not contain NUL bytes");
  }
  return s;
}

Result<uint64_t> size_field(const json& v, std::string_view key, uint64_t minimum,
                            std::string_view minimum_text) {
  uint64_t bytes;
  if (v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0)) {
    bytes = v.get<uint64_t>();
  } else if (v.is_string()) {
    auto r = parse_size(v.get_ref<const std::string&>());
    if (!r) return fail(std::move(r.error()).wrap("\"" + std::string(key) + "\""));
    bytes = *r;
  } else {
    return invalid("\"" + std::string(key) +
                   "\" must be a whole number of bytes or a string such as \"512M\" or \"2G\"");
  }
  if (bytes < minimum) {
    return invalid("\"" + std::string(key) + "\" is " + format_size(bytes) +
                   ", below the minimum of " + std::string(minimum_text));
  }
  return bytes;
}

// A number of seconds or a duration string ("30s", "5m"), before any range check.
Result<double> seconds_field(const json& v, std::string_view key, std::string_view examples) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    auto r = parse_duration(v.get_ref<const std::string&>());
    if (!r) return fail(std::move(r.error()).wrap("\"" + std::string(key) + "\""));
    return *r;
  }
  return invalid("\"" + std::string(key) + "\" must be a number of seconds or a string such as " +
                 std::string(examples));
}

Result<double> duration_field(const json& v, std::string_view key) {
  double seconds = TRY(seconds_field(v, key, "\"30s\", \"5m\" or \"1h\""));
  if (!std::isfinite(seconds) || seconds <= 0) {
    return invalid("\"" + std::string(key) + "\" must be greater than 0 seconds");
  }
  if (seconds > 100.0 * 365 * 86400) {
    return invalid("\"" + std::string(key) + "\" must be at most 100 years");
  }
  return seconds;
}

// Like duration_field, but 0 is allowed and means "off" (snapshot_every). Anything else must
// be at least a second: a sandbox snapshotted more often would do little else.
Result<double> interval_field(const json& v, std::string_view key) {
  double seconds = TRY(seconds_field(v, key, "\"30s\", \"10m\" or \"1h\" (0 = off)"));
  if (!std::isfinite(seconds) || seconds < 0 || (seconds > 0 && seconds < 1)) {
    return invalid("\"" + std::string(key) +
                   "\" must be 0 (off) or at least 1 second, e.g. \"10m\"");
  }
  if (seconds > 100.0 * 365 * 86400) {
    return invalid("\"" + std::string(key) + "\" must be at most 100 years");
  }
  return seconds;
}

// {"K":"V",...} -> {"K=V",...}
Result<std::vector<std::string>> env_field(const json& v) {
  if (!v.is_object()) return invalid("\"env\" must be an object such as {\"KEY\": \"value\"}");
  std::vector<std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (key.empty()) return invalid("\"env\" has an empty variable name");
    if (key.find('=') != std::string::npos || key.find('\0') != std::string::npos) {
      return invalid("\"env\" variable name " + shown(key) + " must not contain '=' or NUL");
    }
    if (!value.is_string()) {
      return invalid("\"env\" value of " + shown(key) + " must be a string");
    }
    const auto& s = value.get_ref<const std::string&>();
    if (s.find('\0') != std::string::npos) {
      return invalid("\"env\" value of " + shown(key) + " must not contain NUL bytes");
    }
    out.push_back(key + "=" + s);
  }
  return out;
}

Result<std::vector<std::string>> string_list_field(const json& v, std::string_view key) {
  if (!v.is_array()) return invalid("\"" + std::string(key) + "\" must be an array of strings");
  std::vector<std::string> out;
  for (const auto& item : v) {
    auto s = TRY(string_field(item, std::string(key) + "[]"));
    out.push_back(std::move(s));
  }
  return out;
}

Result<void> refuse_unknown_keys(const json& body, const std::set<std::string_view>& known,
                                 std::string_view what) {
  for (const auto& [key, value] : body.items()) {
    if (!known.contains(key)) {
      std::string list;
      for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return invalid("unknown field " + shown(key) + " in " + std::string(what) +
                     "; known fields: " + list);
    }
  }
  return {};
}

constexpr std::string_view kUtf8Hint =
    "; names, paths and values must be UTF-8 text (in a URL, percent-encode the UTF-8 bytes, "
    "e.g. %C3%A9 for U+00E9)";

std::string bad_byte(std::string_view s, size_t at, std::string_view of = "") {
  char where[96];
  std::snprintf(where, sizeof where, " (byte 0x%02X at offset %zu%s)",
                static_cast<unsigned char>(s[at]), at, std::string(of).c_str());
  return where;
}

}  // namespace

Result<void> check_utf8(std::string_view s, std::string_view what) {
  auto at = invalid_utf8_at(s);
  if (!at) return {};
  return invalid(std::string(what) + " is not valid UTF-8" + bad_byte(s, *at) +
                 std::string(kUtf8Hint));
}

std::string json_field_at(std::string_view text, size_t offset) {
  struct Frame {
    bool object;
    std::string key;       // object: the key whose value is being read
    size_t index = 0;      // array: the element being read
    bool want_key = true;  // object: before the next key's ':'
  };
  std::vector<Frame> stack;
  bool in_string = false, escape = false, is_key = false;
  std::string key;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
        if (is_key) stack.back().key = key;
        continue;
      }
      if (is_key && key.size() < 48) key += c;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        is_key = !stack.empty() && stack.back().object && stack.back().want_key;
        key.clear();
        break;
      case '{':
      case '[':
        if (stack.size() < kMaxJsonDepth + 1) stack.push_back(Frame{c == '{'});
        break;
      case '}':
      case ']':
        if (!stack.empty()) stack.pop_back();
        break;
      case ':':
        if (!stack.empty() && stack.back().object) stack.back().want_key = false;
        break;
      case ',':
        if (!stack.empty()) {
          if (stack.back().object)
            stack.back().want_key = true;
          else
            ++stack.back().index;
        }
        break;
      default:
        break;
    }
  }
  std::string path;
  bool in_key = false;
  for (size_t f = 0; f < stack.size(); ++f) {
    const Frame& fr = stack[f];
    if (fr.object && fr.want_key) {
      in_key = f + 1 == stack.size();  // between a ',' (or '{') and a ':': a key
      break;
    }
    if (fr.object)
      path += (path.empty() ? "" : ".") + fr.key;
    else
      path += "[" + std::to_string(fr.index) + "]";
  }
  if (in_key)
    return path.empty() ? "a key of the JSON body" : "a key in field " + path + " of the JSON body";
  return path.empty() ? "the JSON body" : "field " + path + " of the JSON body";
}

Result<Target> parse_target(std::string_view target) {
  if (target.empty() || target[0] != '/') {
    return invalid("request target must be an absolute path such as /v1/sandboxes");
  }
  Target t;
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  t.path = std::string(path);
  size_t start = 1;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view raw = path.substr(start, slash - start);
    if (!raw.empty()) {
      std::string seg = TRY(percent_decode(raw, false));
      if (seg.find('/') != std::string::npos || seg.find('\0') != std::string::npos || seg == "." ||
          seg == "..") {
        return invalid("bad path segment " + shown(seg) + " in request target");
      }
      TRY_VOID(check_utf8(
          seg, "path segment " + std::to_string(t.segments.size() + 1) + " of the request target"));
      t.segments.push_back(std::move(seg));
    }
    start = slash + 1;
  }
  if (q != std::string_view::npos) {
    std::string_view query = target.substr(q + 1);
    while (!query.empty()) {
      size_t amp = query.find('&');
      std::string_view item = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      if (item.empty()) continue;
      size_t eq = item.find('=');
      std::string key = TRY(percent_decode(item.substr(0, eq), true));
      TRY_VOID(check_utf8(key, "a query parameter name"));
      std::string value;
      if (eq != std::string_view::npos) value = TRY(percent_decode(item.substr(eq + 1), true));
      TRY_VOID(check_utf8(value, "query parameter " + key));
      t.query[std::move(key)] = std::move(value);
    }
  }
  return t;
}

JsonValueScanner::State JsonValueScanner::feed(std::string_view buffer) {
  if (state_ != State::kIncomplete) return state_;
  for (; pos_ < buffer.size(); ++pos_) {
    char c = buffer[pos_];
    if (!started_) {
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
      if (c != '{') return state_ = State::kNotAnObject;
      started_ = true;
      depth_ = 1;
      continue;
    }
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string_ = true;
        break;
      case '{':
      case '[':
        if (++depth_ > kMaxJsonDepth) return state_ = State::kTooDeep;
        break;
      case '}':
      case ']':
        if (--depth_ == 0) {
          end_ = ++pos_;
          return state_ = State::kComplete;
        }
        break;
      default:
        break;
    }
  }
  return state_;
}

Result<json> parse_json(std::string_view body) {
  // Depth first (nlohmann's parser is iterative, but refusing absurd nesting early keeps every
  // later walk of the value cheap).
  size_t depth = 0;
  bool in_string = false, escape = false;
  for (char c : body) {
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth) {
        return invalid("JSON body is nested more than " + std::to_string(kMaxJsonDepth) +
                       " levels deep");
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  // Text that is not UTF-8, in a string or anywhere else, named by the field it is in.
  if (auto at = invalid_utf8_at(body)) {
    return invalid(json_field_at(body, *at) + " is not valid UTF-8" +
                   bad_byte(body, *at, " of the body") +
                   "; JSON text must be UTF-8 (send binary data base64-encoded)");
  }
  try {
    return json::parse(body);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    if (what.find("surrogate") != std::string::npos) {
      // A \u escape of half a surrogate pair: valid JSON syntax, but no Unicode text.
      size_t at = e.byte > 0 ? e.byte - 1 : 0;
      return invalid(json_field_at(body, at) +
                     " has a \\u escape of an unpaired UTF-16 surrogate (\\uD800-\\uDFFF); "
                     "escape a character past U+FFFF as a surrogate pair, or send it as UTF-8");
    }
    return invalid("malformed JSON body: " + utf8_lossy(what) +
                   "; send one JSON object, e.g. {\"cmd\": [\"ls\"]}");
  } catch (const json::exception& e) {
    return invalid("malformed JSON body: " + utf8_lossy(e.what()) +
                   "; send one JSON object, e.g. {\"cmd\": [\"ls\"]}");
  }
}

Result<double> parse_duration_value(const json& v, std::string_view key) {
  return duration_field(v, key);
}

Result<daemon::CreateRequest> parse_create_request(const json& body) {
  if (!body.is_object()) {
    return invalid(
        "the body of POST /v1/sandboxes must be a JSON object, e.g. {\"memory\": \"512M\"}");
  }
  TRY_VOID(refuse_unknown_keys(
      body,
      {"runtime", "image", "profile", "memory", "cpus", "pids", "disk", "timeout", "idle_timeout",
       "env", "secrets", "allow", "workdir", "snapshot_every"},
      "the sandbox request"));
  daemon::CreateRequest req;
  if (auto it = body.find("runtime"); it != body.end()) {
    req.runtime = TRY(string_field(*it, "runtime"));
    if (!proto::is_runtime_name(req.runtime)) {
      return invalid("unknown runtime " + shown(req.runtime) + "; use " + proto::runtime_names() +
                     " (`space doctor` shows what this host supports)");
    }
  }
  if (auto it = body.find("image"); it != body.end()) {
    req.image = TRY(string_field(*it, "image"));
    TRY_VOID(check_image_name(req.image));
  }
  if (auto it = body.find("profile"); it != body.end()) {
    req.profile = TRY(string_field(*it, "profile"));
    if (!is_name(req.profile, 64)) {
      return invalid("bad profile name " + shown(req.profile) +
                     "; use letters, digits, '_', '-' and '.' (at most 64)");
    }
  }
  if (auto it = body.find("memory"); it != body.end()) {
    req.limits.memory_bytes = TRY(size_field(*it, "memory", 16ull << 20, "16M"));
    req.limits_given[0] = true;
  }
  if (auto it = body.find("disk"); it != body.end()) {
    req.limits.disk_bytes = TRY(size_field(*it, "disk", 1ull << 20, "1M"));
    req.limits_given[3] = true;
  }
  if (auto it = body.find("cpus"); it != body.end()) {
    double cpus;
    if (it->is_number()) {
      cpus = it->get<double>();
    } else if (it->is_string()) {
      const auto& s = it->get_ref<const std::string&>();
      auto [ptr, ec] =
          std::from_chars(s.data(), s.data() + s.size(), cpus, std::chars_format::fixed);
      if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) {
        return invalid("\"cpus\" must be a number such as 1.5, got " + shown(s));
      }
    } else {
      return invalid("\"cpus\" must be a number such as 1.5");
    }
    if (!std::isfinite(cpus) || cpus <= 0 || cpus > 1024) {
      return invalid("\"cpus\" must be greater than 0 and at most 1024");
    }
    req.limits.cpus = cpus;
    req.limits_given[1] = true;
  }
  if (auto it = body.find("pids"); it != body.end()) {
    if (!it->is_number_integer()) return invalid("\"pids\" must be a whole number such as 256");
    int64_t pids = it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX ? INT64_MAX
                                                                               : it->get<int64_t>();
    if (pids < 8 || pids > 4194304) {
      return invalid("\"pids\" must be at least 8 and at most 4194304");
    }
    req.limits.pids = static_cast<uint32_t>(pids);
    req.limits_given[2] = true;
  }
  if (auto it = body.find("idle_timeout"); it != body.end()) {
    req.idle_timeout_s = TRY(duration_field(*it, "idle_timeout"));
  }
  if (auto it = body.find("timeout"); it != body.end()) {
    req.timeout_s = TRY(duration_field(*it, "timeout"));
  }
  if (auto it = body.find("env"); it != body.end()) req.env = TRY(env_field(*it));
  if (auto it = body.find("secrets"); it != body.end()) {
    req.secrets = TRY(string_list_field(*it, "secrets"));
    for (const auto& s : req.secrets) {
      if (!is_name(s, 128)) {
        return invalid("bad secret name " + shown(s) +
                       "; use letters, digits, '_', '-' and '.' (at most 128)");
      }
    }
  }
  if (auto it = body.find("allow"); it != body.end()) {
    req.allow = TRY(string_list_field(*it, "allow"));
    for (const auto& a : req.allow) {
      bool ok = !a.empty() && a.size() <= 261;
      for (unsigned char c : a) {
        if (c <= ' ' || c >= 0x7f || c == '/' || c == '@' || c == '?' || c == '#') ok = false;
      }
      if (!ok) {
        return invalid("bad \"allow\" entry " + shown(a) +
                       "; use HOST, HOST:PORT or *.SUFFIX, e.g. \"pypi.org:443\"");
      }
    }
  }
  if (auto it = body.find("workdir"); it != body.end()) {
    req.workdir = TRY(string_field(*it, "workdir"));
    TRY_VOID(check_sandbox_path(req.workdir, "workdir"));
    req.workdir_given = true;
  }
  if (auto it = body.find("snapshot_every"); it != body.end()) {
    req.snapshot_every_s = TRY(interval_field(*it, "snapshot_every"));
  }
  return req;
}

Result<daemon::ExecRequest> parse_exec_request(const json& body) {
  if (!body.is_object()) {
    return invalid("the exec request must be a JSON object, e.g. {\"cmd\": [\"ls\", \"-l\"]}");
  }
  TRY_VOID(refuse_unknown_keys(body,
                               {"cmd", "env", "cwd", "timeout", "detach", "stdin", "snapshot",
                                "user", "tty", "rows", "cols"},
                               "the exec request"));
  daemon::ExecRequest req;
  req.image_user = true;  // no "user": the image's User, if its config names one
  // No "cmd": the sandbox's default command (its image's Entrypoint + Cmd), decided by the
  // service, which refuses it where the image has none.
  if (auto cmd = body.find("cmd"); cmd != body.end()) {
    req.argv = TRY(string_list_field(*cmd, "cmd"));
    if (req.argv.empty() || req.argv[0].empty()) {
      return invalid("\"cmd\" must be a non-empty array whose first element names a program");
    }
  }
  if (auto it = body.find("env"); it != body.end()) req.env = TRY(env_field(*it));
  if (auto it = body.find("cwd"); it != body.end()) {
    req.cwd = TRY(string_field(*it, "cwd"));
    TRY_VOID(check_sandbox_path(req.cwd, "cwd"));
  }
  if (auto it = body.find("timeout"); it != body.end()) {
    req.timeout_s = TRY(duration_field(*it, "timeout"));
  }
  if (auto it = body.find("user"); it != body.end()) {
    if (it->is_number_unsigned() && it->get<uint64_t>() <= 0xfffffffe) {
      req.user = std::to_string(it->get<uint64_t>());
    } else if (it->is_string() && !it->get<std::string>().empty() &&
               it->get<std::string>().size() <= 64 &&
               it->get<std::string>().find_first_of(std::string("\0\n/ ", 4)) ==
                   std::string::npos) {
      req.user = it->get<std::string>();
    } else {
      return invalid(
          "\"user\" must be a user name of the sandbox, a uid or \"uid:gid\", e.g. "
          "\"nobody\" or \"1000\"");
    }
  }
  for (auto [key, field] : {std::pair{"detach", &req.detach}, std::pair{"stdin", &req.stdin},
                            std::pair{"snapshot", &req.snapshot}, std::pair{"tty", &req.tty}}) {
    if (auto it = body.find(key); it != body.end()) {
      if (!it->is_boolean()) return invalid("\"" + std::string(key) + "\" must be true or false");
      *field = it->get<bool>();
    }
  }
  if (req.detach && req.stdin) {
    return invalid(
        "\"detach\" and \"stdin\" cannot both be true: a detached process gets no stdin");
  }
  for (auto [key, field] : {std::pair{"rows", &req.rows}, std::pair{"cols", &req.cols}}) {
    if (auto it = body.find(key); it != body.end()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 4096)
        return invalid("\"" + std::string(key) +
                       "\" must be a whole number 1-4096 (the terminal's size)");
      *field = static_cast<uint16_t>(it->get<int64_t>());
    }
  }
  if (req.tty && req.detach)
    return invalid("\"tty\" and \"detach\" cannot both be true: a terminal needs its client");
  return req;
}

Result<daemon::SnapshotRequest> parse_snapshot_request(const json& body) {
  if (!body.is_object()) {
    return invalid(
        "the snapshot request must be a JSON object, e.g. {\"name\": \"before-migrate\"}");
  }
  TRY_VOID(refuse_unknown_keys(body, {"name"}, "the snapshot request"));
  daemon::SnapshotRequest req;
  if (auto it = body.find("name"); it != body.end() && !it->is_null()) {
    req.name = TRY(string_field(*it, "name"));
    TRY_VOID(check_snapshot_name(req.name));
  }
  return req;
}

Result<std::string> parse_rollback_request(const json& body) {
  if (!body.is_object()) {
    return invalid("the rollback request must be a JSON object, e.g. {\"snapshot\": \"snap_...\"}");
  }
  TRY_VOID(refuse_unknown_keys(body, {"snapshot"}, "the rollback request"));
  auto it = body.find("snapshot");
  if (it == body.end()) {
    return invalid(
        "the rollback request needs \"snapshot\": the id or name of a snapshot of this sandbox's "
        "profile; `space snapshots ID` lists them");
  }
  std::string snap = TRY(string_field(*it, "snapshot"));
  TRY_VOID(check_snapshot_ref(snap, "snapshot"));
  return snap;
}

Result<std::optional<std::string>> parse_restore_request(const json& body) {
  if (!body.is_object()) {
    return invalid("the restore request must be a JSON object, e.g. {} or {\"profile\": \"test\"}");
  }
  TRY_VOID(refuse_unknown_keys(body, {"profile"}, "the restore request"));
  std::optional<std::string> profile;
  if (auto it = body.find("profile"); it != body.end() && !it->is_null()) {
    profile = TRY(string_field(*it, "profile"));
    if (!is_name(*profile, 64)) {
      return invalid("bad profile name " + shown(*profile) +
                     "; use letters, digits, '_', '-' and '.' (at most 64)");
    }
  }
  return profile;
}

Result<void> check_snapshot_name(std::string_view name) {
  if (!is_name(name, 64) || name.starts_with("snap_")) {
    return invalid("bad snapshot name " + shown(name) +
                   "; use 1 to 64 letters, digits, '_', '-' and '.', starting with a letter or "
                   "digit and not with \"snap_\" (that prefix is for snapshot ids)");
  }
  return {};
}

Result<void> check_snapshot_ref(std::string_view ref, std::string_view what) {
  // Ids ("snap_" + 24 hex digits, and "-<node>" in a cluster) and names share one alphabet and
  // fit in 128 characters.
  if (!is_name(ref, 128)) {
    return invalid("bad " + std::string(what) + " " + shown(ref) +
                   ": give a snapshot id (snap_...) or name; `space snapshots ID` lists a "
                   "sandbox's snapshots");
  }
  return {};
}

Result<void> check_sandbox_id(std::string_view id) {
  if (!is_name(id, 128)) {
    return invalid("bad sandbox id " + shown(id) +
                   " (ids look like sb_0123abcd); `space ls` lists sandboxes");
  }
  return {};
}

Result<void> check_image_name(std::string_view name) {
  if (!is_name(name, 128)) {
    return invalid("bad image name " + shown(name) +
                   "; use letters, digits, '_', '-' and '.' (at most 128), starting with a letter "
                   "or digit");
  }
  return {};
}

Result<void> check_sandbox_path(std::string_view path, std::string_view what) {
  if (path.empty() || path[0] != '/') {
    return invalid("\"" + std::string(what) +
                   "\" must be an absolute path inside the sandbox, got " + shown(path));
  }
  if (path.find('\0') != std::string_view::npos) {
    return invalid("\"" + std::string(what) + "\" must not contain NUL bytes");
  }
  if (path.size() > kMaxSandboxPath) {
    return invalid("\"" + std::string(what) + "\" is longer than " +
                   std::to_string(kMaxSandboxPath) + " bytes");
  }
  return {};
}

Result<bool> parse_bool_param(const Target& t, std::string_view key, bool fallback) {
  auto it = t.query.find(std::string(key));
  if (it == t.query.end()) return fallback;
  const std::string& v = it->second;
  if (v == "true" || v == "1" || v.empty()) return true;
  if (v == "false" || v == "0") return false;
  return invalid("query parameter " + std::string(key) + " must be true or false, got " + shown(v));
}

Result<uint32_t> parse_mode_param(const Target& t, std::string_view key, uint32_t fallback) {
  auto it = t.query.find(std::string(key));
  if (it == t.query.end()) return fallback;
  const std::string& v = it->second;
  uint32_t mode = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), mode, 8);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || mode > 07777) {
    return invalid("query parameter " + std::string(key) +
                   " must be an octal file mode such as 0644 (at most 07777), got " + shown(v));
  }
  return mode;
}

Result<int> parse_signal_param(const Target& t, std::string_view key, int fallback) {
  auto it = t.query.find(std::string(key));
  if (it == t.query.end()) return fallback;
  const std::string& v = it->second;
  int sig = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), sig);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || sig < 1 || sig > 64) {
    return invalid("query parameter " + std::string(key) +
                   " must be a signal number from 1 to 64 (15 = SIGTERM, 9 = SIGKILL), got " +
                   shown(v));
  }
  return sig;
}

Result<int> parse_pid(std::string_view text) {
  int pid = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || pid < 1 ||
      pid > 4194304) {
    return invalid("bad pid " + shown(text) + "; `space ps ID` lists the sandbox's processes");
  }
  return pid;
}

}  // namespace space::api
