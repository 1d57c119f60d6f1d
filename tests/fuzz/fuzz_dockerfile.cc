// libFuzzer target: the Dockerfile parser (src/image/dockerfile.cc), whose text is a user's or an
// agent's. The first byte picks the setting: bit 0 passes --build-arg values, bit 1 a base image
// with a config (Env, WorkingDir, User, Entrypoint, Cmd, Labels), bit 2 small limits (so the
// bounds are reached by small inputs); the rest is the Dockerfile.
// Properties checked besides "no crash, no exception": a refusal is kInvalidArgument and says
// where ("line N: ..." or "the Dockerfile ..."); an accepted plan is within every limit (steps,
// each instruction's text, the environment a step sees), holds no NUL in what reaches execve or
// the filesystem, has absolute, clean working directories and destinations, "K=V" environments,
// a command for every RUN and an octal mode of at most 07777; its config survives
// ImageConfig's stored form; and parsing the same text again gives the same plan.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "image/dockerfile.h"

namespace si = space::image;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool no_nul(std::string_view s) { return s.find('\0') == std::string_view::npos; }

bool clean_absolute(std::string_view p) {
  if (p.empty() || p[0] != '/') return false;
  if (p == "/") return true;
  if (p.back() == '/') return false;
  for (size_t at = 1; at <= p.size();) {
    size_t slash = p.find('/', at);
    std::string_view part = p.substr(at, slash == std::string_view::npos ? p.npos : slash - at);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  return true;
}

void check_env(const std::vector<std::string>& env) {
  for (const auto& e : env) {
    auto eq = e.find('=');
    check(eq != std::string::npos && eq > 0 && no_nul(e));
  }
}

void check_context(const si::StepContext& c, const si::DockerfileLimits& limits) {
  check_env(c.env);
  check_env(c.args);
  size_t bytes = 0;
  for (const auto* list : {&c.env, &c.args})
    for (const auto& e : *list) bytes += e.size() + 1;
  check(bytes <= limits.max_env_bytes);
  check(clean_absolute(c.workdir));
  check(no_nul(c.user));
}

bool same_context(const si::StepContext& a, const si::StepContext& b) {
  return a.env == b.env && a.args == b.args && a.workdir == b.workdir && a.user == b.user;
}

bool same_step(const si::Step& a, const si::Step& b) {
  return a.kind == b.kind && a.line == b.line && a.text == b.text &&
         same_context(a.context, b.context) && a.argv == b.argv && a.sources == b.sources &&
         a.dest == b.dest && a.chown == b.chown && a.chmod == b.chmod && a.pairs == b.pairs &&
         a.value == b.value;
}

bool same_config(const si::ImageConfig& a, const si::ImageConfig& b) {
  return a.env == b.env && a.working_dir == b.working_dir && a.user == b.user &&
         a.entrypoint == b.entrypoint && a.cmd == b.cmd && a.labels == b.labels;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  std::map<std::string, std::string> args;
  if (mode & 1) args = {{"A", "1"}, {"TAG", "3.12"}, {"X", "$A ${B:-c}"}, {"UNUSED", "u"}};
  si::ImageConfig base;
  if (mode & 2) {
    base.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "A=base"};
    base.working_dir = "/srv/app";
    base.user = "app";
    base.entrypoint = {"/entry.sh"};
    base.cmd = {"serve", "--port", "80"};
    base.labels = {{"org.example", "yes"}};
  }
  si::DockerfileLimits limits;
  if (mode & 4) {
    limits.max_bytes = 4096;
    limits.max_instructions = 8;
    limits.max_value_bytes = 256;
    limits.max_env_bytes = 1024;
    limits.max_plan_bytes = 16384;
  }
  size_t calls = 0;
  auto base_config = [&](const std::string& from) -> space::Result<si::ImageConfig> {
    ++calls;
    check(!from.empty() && no_nul(from) && from.size() <= limits.max_value_bytes);
    return base;
  };

  auto r = si::parse_dockerfile(text, args, base_config, limits);
  check(calls <= 1);
  if (!r) {
    check(r.error().code() == space::Code::kInvalidArgument);
    const std::string& m = r.error().message();
    check(m.starts_with("line ") || m.starts_with("the Dockerfile "));
    return 0;
  }
  check(calls == 1);
  const si::Dockerfile& d = *r;
  check(!d.from.empty());
  check(d.steps.size() <= limits.max_instructions);
  size_t last_line = 0;
  for (const auto& s : d.steps) {
    check(s.line >= 1 && s.line >= last_line);
    last_line = s.line;
    check(!s.text.empty() && s.text.size() <= limits.max_value_bytes && no_nul(s.text));
    check_context(s.context, limits);
    for (const auto& a : s.argv) check(no_nul(a));
    switch (s.kind) {
      case si::Step::Kind::kRun:
        check(!s.argv.empty());
        break;
      case si::Step::Kind::kCopy: {
        check(!s.sources.empty() && !s.dest.empty() && s.dest[0] == '/');
        std::string_view dest = s.dest;
        if (dest.size() > 1 && dest.back() == '/') dest.remove_suffix(1);
        check(clean_absolute(dest));
        for (const auto& src : s.sources) check(!src.empty() && no_nul(src));
        check(no_nul(s.chown));
        if (s.chmod) check(*s.chmod <= 07777);
        break;
      }
      case si::Step::Kind::kEnv:
      case si::Step::Kind::kLabel:
        check(!s.pairs.empty());
        for (const auto& [k, v] : s.pairs) check(!k.empty() && no_nul(k) && no_nul(v));
        break;
      case si::Step::Kind::kWorkdir:
        check(clean_absolute(s.value));
        break;
      case si::Step::Kind::kUser:
        check(!s.value.empty() && no_nul(s.value));
        break;
      case si::Step::Kind::kEntrypoint:
      case si::Step::Kind::kCmd:
        break;
    }
  }
  check_env(d.config.env);
  auto back = si::ImageConfig::from_json(d.config.to_json());
  check(back.has_value() && same_config(*back, d.config));

  auto again = si::parse_dockerfile(text, args, base_config, limits);
  check(again.has_value() && again->from == d.from && again->warnings == d.warnings &&
        same_config(again->config, d.config) && again->steps.size() == d.steps.size());
  for (size_t i = 0; i < d.steps.size(); ++i) check(same_step(again->steps[i], d.steps[i]));
  return 0;
}
