// Handlers for images: import (a root filesystem tarball, an OCI layout or oci-archive, or a
// docker-save archive, streamed in any compression libarchive reads), list, show one (its
// format and config), remove, build one from a Dockerfile (the build context streamed in, the
// steps' progress and output streamed out as NDJSON), and build the VM disk (progress streamed
// as NDJSON). All streams stop once the caller's token is revoked or expires (StreamAuth): an
// import fails with 401, a build's progress stream ends with an "error" event (a VM disk build
// itself goes on and is cached, as when a client leaves).
#include <cctype>
#include <map>
#include <set>
#include <utility>

#include "api/handlers.h"
#include "api/views.h"

namespace space::api::handlers {
namespace {

using nlohmann::json;

constexpr size_t kMaxBuildArgs = 256;

std::unexpected<Error> invalid(std::string message) {
  return fail(Code::kInvalidArgument, std::move(message));
}

// At most 64 bytes of what the client sent, as a JSON string, for messages.
std::string shown(std::string_view s) {
  return json_text(json(std::string(s.substr(0, 64)))) + (s.size() > 64 ? "..." : "");
}

// [A-Za-z0-9][A-Za-z0-9_.-]{0,max-1}: profile and secret names, as POST /v1/sandboxes takes them.
bool is_name(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

// A comma-separated query list ("a,b"); absent or empty = none. Empty items are refused.
Result<std::vector<std::string>> comma_list(const Target& t, const std::string& key) {
  std::vector<std::string> out;
  auto it = t.query.find(key);
  if (it == t.query.end() || it->second.empty()) return out;
  std::string_view rest = it->second;
  for (;;) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (item.empty()) {
      return invalid("query parameter " + key + " has an empty item: " + shown(it->second) +
                     "; give names separated by single commas, e.g. a,b");
    }
    out.emplace_back(item);
    if (comma == std::string_view::npos) return out;
    rest.remove_prefix(comma + 1);
  }
}

// dockerfile=: a relative path inside the build context, without ".." components.
Result<void> check_dockerfile_path(std::string_view path) {
  auto bad = [&](std::string_view why) {
    return invalid("query parameter dockerfile " + shown(path) + " " + std::string(why) +
                   "; give a path relative to the build context, e.g. Dockerfile or "
                   "docker/Dockerfile.dev");
  };
  if (path.empty()) return bad("is empty");
  if (path.size() > kMaxSandboxPath) return bad("is longer than 4096 bytes");
  if (path.front() == '/') return bad("is absolute");
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) return bad("contains a control character");
  }
  std::string_view rest = path;
  for (;;) {
    size_t slash = rest.find('/');
    if (rest.substr(0, slash) == "..") return bad("leaves the build context (a \"..\" component)");
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  if (path.back() == '/') return bad("names a directory");
  return {};
}

// step_timeout=: seconds (or a duration such as "10m"), more than 0 and at most a day.
Result<std::optional<double>> step_timeout_param(const Target& t) {
  auto it = t.query.find("step_timeout");
  if (it == t.query.end()) return std::nullopt;
  auto v = parse_duration_value(json(it->second), "step_timeout");
  if (!v || !(*v > 0) || *v > 86400) {
    return invalid(
        "query parameter step_timeout must be a number of seconds greater than 0 and "
        "at most 86400 (or a duration such as 10m), got " +
        shown(it->second));
  }
  return *v;
}

// build_args=: a JSON object of strings, keyed by ARG names.
Result<std::map<std::string, std::string>> build_args_param(const Target& t) {
  std::map<std::string, std::string> out;
  auto it = t.query.find("build_args");
  if (it == t.query.end() || it->second.empty()) return out;
  auto parsed = parse_json(it->second);
  if (!parsed) {
    return invalid(
        "query parameter build_args must be a JSON object of strings, e.g. "
        "{\"PIP_VERSION\":\"24.0\"}: " +
        parsed.error().message());
  }
  if (!parsed->is_object()) {
    return invalid(
        "query parameter build_args must be a JSON object of strings, e.g. "
        "{\"PIP_VERSION\":\"24.0\"}, not " +
        shown(it->second));
  }
  if (parsed->size() > kMaxBuildArgs) {
    return invalid("query parameter build_args has " + std::to_string(parsed->size()) +
                   " entries; at most " + std::to_string(kMaxBuildArgs));
  }
  for (const auto& [key, value] : parsed->items()) {
    bool ok =
        !key.empty() && key.size() <= 256 && !std::isdigit(static_cast<unsigned char>(key[0]));
    for (unsigned char c : key) ok = ok && (std::isalnum(c) || c == '_');
    if (!ok) {
      return invalid("build arg name " + shown(key) +
                     " must be letters, digits and '_' (not starting with a digit), as an ARG "
                     "names it");
    }
    if (!value.is_string()) return invalid("build arg " + shown(key) + " must be a string");
    const std::string& v = value.get_ref<const std::string&>();
    if (v.find('\0') != std::string::npos) {
      return invalid("build arg " + shown(key) + " must not contain NUL");
    }
    out[key] = v;
  }
  return out;
}

// Output bytes go out as JSON strings, so they must be UTF-8 (json_text turns any invalid byte
// into U+FFFD rather than throwing). A character split across two chunks is not invalid, only
// cut: this holds back an unfinished trailing sequence (at most 3 bytes) until the next chunk of
// the same step and stream.
class Utf8Joiner {
 public:
  // The text of `chunk` that is whole so far.
  std::string feed(std::string_view chunk) {
    std::string text = std::move(pending_);
    pending_.clear();
    text.append(chunk);
    size_t lead = text.size();
    for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
      unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
      if ((c & 0xC0) != 0x80) {
        lead = text.size() - back;
        break;
      }
    }
    if (lead == text.size()) return text;
    unsigned char c = static_cast<unsigned char>(text[lead]);
    size_t need = c >= 0xF0 && c <= 0xF4   ? 4
                  : c >= 0xE0 && c <= 0xEF ? 3
                  : c >= 0xC2 && c <= 0xDF ? 2
                                           : 1;
    if (lead + need > text.size()) {
      pending_ = text.substr(lead);
      text.resize(lead);
    }
    return text;
  }
  // What is left (an unfinished character: invalid, and shown as U+FFFD).
  std::string flush() { return std::exchange(pending_, {}); }

 private:
  std::string pending_;
};

}  // namespace

Result<daemon::BuildRequest> parse_build_request(const Target& t) {
  static const std::set<std::string> kKnown = {"dockerfile", "profile", "no_cache", "step_timeout",
                                               "build_args", "secrets", "allow"};
  for (const auto& [key, value] : t.query) {
    if (!kKnown.contains(key)) {
      return invalid("unknown query parameter " + shown(key) +
                     "; a build takes dockerfile, profile, no_cache, step_timeout, build_args, "
                     "secrets and allow");
    }
  }
  daemon::BuildRequest req;
  if (auto it = t.query.find("dockerfile"); it != t.query.end()) {
    TRY_VOID(check_dockerfile_path(it->second));
    req.dockerfile = it->second;
  }
  if (auto it = t.query.find("profile"); it != t.query.end() && !it->second.empty()) {
    if (!is_name(it->second, 64)) {
      return invalid("bad profile name " + shown(it->second) +
                     "; use letters, digits, '_', '-' and '.' (at most 64)");
    }
    req.profile = it->second;
  }
  req.no_cache = TRY(parse_bool_param(t, "no_cache", false));
  req.step_timeout_s = TRY(step_timeout_param(t));
  req.build_args = TRY(build_args_param(t));
  req.secrets = TRY(comma_list(t, "secrets"));
  for (const auto& s : req.secrets) {
    if (!is_name(s, 128)) {
      return invalid("bad secret name " + shown(s) +
                     "; use letters, digits, '_', '-' and '.' (at most 128)");
    }
  }
  req.allow = TRY(comma_list(t, "allow"));
  for (const auto& a : req.allow) {
    bool ok = a.size() <= 261;
    for (unsigned char c : a) {
      if (c <= ' ' || c >= 0x7f || c == '/' || c == '@' || c == '?' || c == '#') ok = false;
    }
    if (!ok) {
      return invalid("bad allow entry " + shown(a) +
                     "; use HOST, HOST:PORT or *.SUFFIX, e.g. pypi.org:443");
    }
  }
  return req;
}

json build_event_json(const daemon::BuildEvent& e) {
  using Kind = daemon::BuildEvent::Kind;
  switch (e.kind) {
    case Kind::kStep:
      return {{"type", "step"},
              {"step", e.step},
              {"of", e.of},
              {"instruction", e.text},
              {"cached", e.cached}};
    case Kind::kOutput:
      return {{"type", "output"},
              {"step", e.step},
              {"stream", e.is_stderr ? "stderr" : "stdout"},
              {"data", e.text}};
    case Kind::kStepDone:
      return {{"type", "step_done"},
              {"step", e.step},
              {"cached", e.cached},
              {"duration_s", e.duration_s}};
    case Kind::kWarning:
      return {{"type", "warning"}, {"message", e.text}};
  }
  return {{"type", "warning"}, {"message", "an event of an unknown kind"}};
}

Result<void> import_image(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  StreamAuth auth(ctx.principal, ctx.tokens);
  std::optional<Error> refused;
  daemon::ChunkSource body = guarded_body(ex, auth, refused);
  auto image = ctx.service.import_image(name, body);
  if (refused) return fail(std::move(*refused).wrap("importing image " + name));
  if (!image) return fail(std::move(image.error()).wrap("importing image " + name));
  return ex.respond_json(http::status::created, to_json(*image));
}

Result<void> list_images(Exchange& ex, ApiContext& ctx) {
  std::vector<daemon::ImageInfo> images = TRY(ctx.service.list_images());
  return ex.respond_json(http::status::ok, {{"images", to_json(images)}});
}

Result<void> get_image(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  for (auto& image : TRY(ctx.service.list_images()))
    if (image.name == name) return ex.respond_json(http::status::ok, to_json(image));
  return fail(Code::kNotFound, "unknown image \"" + name +
                                   "\"; `space image ls` lists images, `space image import NAME "
                                   "PATH` adds one");
}

Result<void> delete_image(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  TRY_VOID(ctx.service.remove_image(name));
  return ex.respond_no_content();
}

namespace {

// The NDJSON progress stream of a long image operation (build, build-vm). The response begins
// with the first event. Before each event the caller's token is checked: one gone bad ends the
// stream with an "error" event (or, before it began, makes finish() answer 401). A client that
// left is not written to again; the operation itself goes on (its result is kept or cached).
class ProgressStream {
 public:
  ProgressStream(Exchange& ex, StreamAuth& auth, std::string what)
      : ex_(ex), auth_(auth), what_(std::move(what)) {}

  void emit(const nlohmann::json& event) {
    if (broken_) return;
    if (auto valid = auth_.check(); !valid) {
      Error e = std::move(valid.error()).wrap(what_);
      if (streaming_)
        (void)ex_.write_chunk(json_text({{"type", "error"}, {"error", error_body(e)["error"]}}) +
                              "\n");
      else
        refused_ = std::move(e);
      broken_ = true;
      return;
    }
    if (!streaming_) {
      if (!ex_.begin_chunked(http::status::ok, "application/x-ndjson",
                             {{"Cache-Control", "no-store"}})) {
        broken_ = true;
        return;
      }
      streaming_ = true;
    }
    if (!ex_.write_chunk(json_text(event) + "\n")) broken_ = true;
  }
  void error(const Error& e) { emit({{"type", "error"}, {"error", error_body(e)["error"]}}); }
  // Whether anything was decided about the response yet (a plain error answer is still
  // possible when not).
  bool begun() const { return streaming_ || broken_; }
  Result<void> finish() {
    if (refused_) return fail(std::move(*refused_));
    if (broken_) {
      ex_.mark_broken();
      return {};
    }
    return ex_.end_chunked();
  }

 private:
  Exchange& ex_;
  StreamAuth& auth_;
  std::string what_;
  bool streaming_ = false, broken_ = false;
  std::optional<Error> refused_;  // the caller's token went bad before the stream began
};

}  // namespace

// POST /v1/images/{name}/build?dockerfile=&profile=&no_cache=&step_timeout=&build_args=&secrets=
// &allow= with the build context as a tar body. Errors found before the build starts (bad
// parameters, an existing image, an unknown profile, a Dockerfile that does not parse) are plain
// error responses; from the first event on the response is a stream of NDJSON events (see
// build_event_json), ending with {"type":"done","image":{...}} or
// {"type":"error","error":{"code","message"}}. A client that leaves ends nothing: the build goes
// on (its steps are cached); a token that goes bad ends the stream with an "error" event.
Result<void> build_image(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  daemon::BuildRequest req = TRY(parse_build_request(ex.target()));
  // The default profile, named here so that a token's profile scope applies to it: "build"
  // where spaced's config has one, else "test" (service.h, BuildRequest::profile).
  if (req.profile.empty() && ctx.profiles != nullptr)
    req.profile = ctx.profiles->contains("build") ? "build" : "test";
  const std::string what = "building image " + name;
  StreamAuth auth(ctx.principal, ctx.tokens);
  ProgressStream stream(ex, auth, what);
  std::optional<Error> body_refused;  // the token went bad while the context was being read
  auto emit = [&](const json& event) { stream.emit(event); };
  // Output: whole UTF-8 characters per step and stream (Utf8Joiner).
  Utf8Joiner joiners[2];
  size_t output_step = 0;
  auto flush_output = [&] {
    for (int i = 0; i < 2; ++i) {
      std::string rest = joiners[i].flush();
      if (!rest.empty()) {
        emit({{"type", "output"},
              {"step", output_step},
              {"stream", i == 1 ? "stderr" : "stdout"},
              {"data", rest}});
      }
    }
  };
  auto progress = [&](const daemon::BuildEvent& e) {
    if (e.kind == daemon::BuildEvent::Kind::kOutput) {
      if (e.step != output_step) flush_output();
      output_step = e.step;
      std::string text = joiners[e.is_stderr ? 1 : 0].feed(e.text);
      if (text.empty()) return;
      daemon::BuildEvent whole = e;
      whole.text = std::move(text);
      emit(build_event_json(whole));
      return;
    }
    flush_output();
    emit(build_event_json(e));
  };
  auto image = ctx.service.build_image(name, req, guarded_body(ex, auth, body_refused), progress);
  flush_output();
  std::optional<Error> failure;
  if (body_refused) {
    failure = std::move(*body_refused).wrap(what);
  } else if (!image) {
    failure = std::move(image.error()).wrap(what);
  }
  if (failure) {
    if (!stream.begun()) return fail(std::move(*failure));
    stream.error(*failure);
  } else {
    emit({{"type", "done"}, {"image", to_json(*image)}});
  }
  return stream.finish();
}

// POST /v1/images/{name}/vm. Errors found before any work starts (unknown image, the host
// image, no agent) are plain error responses; once the build has begun the response is a
// stream of NDJSON events, as exec's: {"type":"progress","message":...} per step, then
// {"type":"done","disk":{...}} or {"type":"error","error":{"code","message"}}.
Result<void> build_image_vm(Exchange& ex, ApiContext& ctx) {
  const std::string& name = ex.param("name");
  TRY_VOID(check_image_name(name));
  const std::string what = "building the VM disk of image " + name;
  StreamAuth auth(ctx.principal, ctx.tokens);
  ProgressStream stream(ex, auth, what);
  auto emit = [&](const nlohmann::json& event) { stream.emit(event); };
  auto disk = ctx.service.build_image_vm(name, [&](const std::string& message) {
    emit({{"type", "progress"}, {"message", message}});
  });
  if (!disk) {
    Error e = std::move(disk.error()).wrap(what);
    if (!stream.begun()) return fail(std::move(e));
    stream.error(e);
  } else {
    emit({{"type", "done"}, {"disk", to_json(*disk)}});
  }
  return stream.finish();
}

}  // namespace space::api::handlers
