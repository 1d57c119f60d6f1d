// Credentials: parsing secret definitions from spaced's config, deciding which requests a secret
// applies to, resolving values from their sources (literal, spaced's environment, a file, a
// command run under a timeout with an output cap and a TTL cache), placeholders, and the
// streaming redactor that masks secret values in response bodies. No value ever appears in an
// error message: errors name the secret, the variable, the file or the command instead.
#include "egress/credentials.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/fd.h"
#include "common/hex.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "egress/ascii.h"

namespace space::egress {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxValueBytes = 64 * 1024;  // file contents and command stdout
// Every response is masked of every value: one shorter than this would match ordinary bytes
// (a binary download, a word) and damage them. Real credentials are far longer.
constexpr size_t kMinValueBytes = 8;
constexpr size_t kStderrExcerptBytes = 512;
constexpr size_t kMaxNameLength = 64;
constexpr double kMaxTtlSeconds = 100.0 * 365 * 24 * 3600;

bool is_name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

// [A-Za-z_][A-Za-z0-9_]*: environment variable names (and, up to 64 long, secret names).
bool is_identifier(std::string_view s) {
  return !s.empty() && is_name_start(s[0]) && std::all_of(s.begin(), s.end(), is_name_char);
}

// RFC 9110 tchar.
bool is_tchar(char c) {
  if (is_name_char(c)) return true;
  return std::string_view("!#$%&'*+-.^`|~").find(c) != std::string_view::npos;
}
bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar);
}

// A control character that has no place in a header value or request-target (HTAB is allowed).
bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7f;
  });
}

// Headers that frame the message or the connection: a secret must not set them.
bool is_reserved_header(std::string_view name) {
  for (std::string_view r : {"host", "content-length", "transfer-encoding", "connection", "upgrade",
                             "te", "trailer", "keep-alive", "proxy-connection"}) {
    if (iequals(name, r)) return true;
  }
  return false;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n\f\v";
  size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

// Reads a JSON array of strings; `what` names the key in errors.
Result<std::vector<std::string>> string_array(const json& j, std::string_view what) {
  if (!j.is_array()) return fail(Code::kInvalidArgument, std::string(what) + " must be an array");
  std::vector<std::string> out;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string()) {
      return fail(Code::kInvalidArgument,
                  std::string(what) + "[" + std::to_string(i) + "] must be a string");
    }
    out.push_back(j[i].get_ref<const std::string&>());
  }
  return out;
}

Result<std::string> string_field(const json& j, std::string_view what) {
  if (!j.is_string()) return fail(Code::kInvalidArgument, std::string(what) + " must be a string");
  return j.get_ref<const std::string&>();
}

Result<std::chrono::seconds> parse_ttl(const json& j) {
  double seconds = 0;
  if (j.is_string()) {
    seconds = TRY_CTX(parse_duration(j.get_ref<const std::string&>()), "ttl");
  } else if (j.is_number()) {
    seconds = j.get<double>();
    if (!(seconds >= 0 && seconds <= kMaxTtlSeconds)) {
      return fail(Code::kInvalidArgument, "ttl must be a duration such as \"15m\" or seconds");
    }
  } else {
    return fail(Code::kInvalidArgument, "ttl must be a duration such as \"15m\"");
  }
  return std::chrono::seconds(static_cast<int64_t>(seconds));  // whole seconds, rounded down
}

// The body of from_json; errors get "secret NAME: " in front.
Result<SecretDef> parse_def(const std::string& name, const json& j) {
  if (!j.is_object()) return fail(Code::kInvalidArgument, "definition must be an object");
  static const std::vector<std::string_view> kKeys = {
      "value", "env",      "file",    "command", "ttl",    "hosts",         "methods",
      "paths", "profiles", "env_var", "header",  "format", "placeholder_in"};
  for (const auto& [key, _] : j.items()) {
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
      return fail(Code::kInvalidArgument, "unknown key \"" + key + "\"");
    }
  }
  SecretDef d;
  d.name = name;

  int sources = 0;
  for (const char* k : {"value", "env", "file", "command"}) sources += j.contains(k) ? 1 : 0;
  if (sources != 1) {
    return fail(Code::kInvalidArgument,
                "exactly one of \"value\", \"env\", \"file\" or \"command\" is required");
  }
  if (j.contains("value")) {
    d.source = SecretDef::Source::kValue;
    // The messages below must not quote the value.
    if (!j["value"].is_string()) return fail(Code::kInvalidArgument, "value must be a string");
    d.value = j["value"].get_ref<const std::string&>();
    if (d.value.empty()) return fail(Code::kInvalidArgument, "value is empty");
    if (d.value.size() < kMinValueBytes) {
      return fail(Code::kInvalidArgument,
                  "value is shorter than " + std::to_string(kMinValueBytes) +
                      " bytes; responses are masked of every secret value, and one that short "
                      "would match ordinary text");
    }
    if (has_control(d.value)) {
      return fail(Code::kInvalidArgument, "value contains a control character");
    }
  } else if (j.contains("env")) {
    d.source = SecretDef::Source::kEnv;
    d.value = TRY(string_field(j["env"], "env"));
    if (!is_identifier(d.value)) {
      return fail(Code::kInvalidArgument, "env \"" + d.value + "\" is not a variable name");
    }
  } else if (j.contains("file")) {
    d.source = SecretDef::Source::kFile;
    d.value = TRY(string_field(j["file"], "file"));
    if (d.value.empty() || d.value[0] != '/' || d.value.find('\0') != std::string::npos) {
      return fail(Code::kInvalidArgument, "file must be an absolute path");
    }
  } else {
    d.source = SecretDef::Source::kCommand;
    d.command = TRY(string_array(j["command"], "command"));
    if (d.command.empty()) return fail(Code::kInvalidArgument, "command is empty");
    if (d.command[0].empty() || d.command[0][0] != '/') {
      return fail(Code::kInvalidArgument, "command[0] must be an absolute path");
    }
    for (const auto& arg : d.command) {
      if (arg.find('\0') != std::string::npos) {
        return fail(Code::kInvalidArgument, "command has an argument with a NUL byte");
      }
    }
  }
  if (j.contains("ttl")) {
    if (d.source != SecretDef::Source::kCommand) {
      return fail(Code::kInvalidArgument, "ttl is only allowed with command");
    }
    d.ttl = TRY(parse_ttl(j["ttl"]));
  }

  if (!j.contains("hosts")) return fail(Code::kInvalidArgument, "hosts is required");
  auto hosts = TRY(string_array(j["hosts"], "hosts"));
  if (hosts.empty()) return fail(Code::kInvalidArgument, "hosts is empty");
  for (size_t i = 0; i < hosts.size(); ++i) {
    d.hosts.push_back(TRY_CTX(parse_host_pattern(hosts[i]), "hosts[" + std::to_string(i) + "]"));
  }

  if (j.contains("methods")) {
    d.methods = TRY(string_array(j["methods"], "methods"));
    for (const auto& m : d.methods) {
      bool upper = std::none_of(m.begin(), m.end(), [](char c) { return c >= 'a' && c <= 'z'; });
      if (!is_token(m) || !upper) {
        return fail(Code::kInvalidArgument,
                    "method \"" + m + "\" is not an upper-case HTTP method");
      }
    }
  }
  if (j.contains("paths")) {
    d.paths = TRY(string_array(j["paths"], "paths"));
    // The profile's own rule syntax, so a binding reads a path exactly as the path check does.
    for (const auto& p : d.paths) TRY_VOID(parse_path_prefix(p));
  }

  if (!j.contains("profiles")) return fail(Code::kInvalidArgument, "profiles is required");
  d.profiles = TRY(string_array(j["profiles"], "profiles"));
  if (d.profiles.empty()) return fail(Code::kInvalidArgument, "profiles is empty");
  for (const auto& p : d.profiles) {
    if (p.empty()) return fail(Code::kInvalidArgument, "profiles has an empty name");
  }

  d.env_var = name;
  if (j.contains("env_var")) {
    d.env_var = TRY(string_field(j["env_var"], "env_var"));
    if (!is_identifier(d.env_var)) {
      return fail(Code::kInvalidArgument, "env_var \"" + d.env_var + "\" is not a variable name");
    }
  }

  if (j.contains("header")) {
    d.header = TRY(string_field(j["header"], "header"));
    if (!is_token(d.header)) {
      return fail(Code::kInvalidArgument, "header \"" + d.header + "\" is not a field name");
    }
    if (is_reserved_header(d.header)) {
      return fail(Code::kInvalidArgument, "header " + d.header + " cannot be set by a secret");
    }
  }
  if (j.contains("placeholder_in")) {
    auto places = TRY(string_array(j["placeholder_in"], "placeholder_in"));
    for (const auto& place : places) {
      if (place.starts_with("query:")) {
        std::string_view param = std::string_view(place).substr(6);
        bool ok = !param.empty() && std::all_of(param.begin(), param.end(), [](char c) {
          return is_tchar(c) && c != '&' && c != '%' && c != '+';
        });
        if (!ok) {
          return fail(Code::kInvalidArgument, "placeholder_in \"" + place +
                                                  "\": a query parameter name is letters, "
                                                  "digits and -._~!$'*^`|");
        }
        d.placeholder_query.emplace_back(param);
      } else if (!is_token(place)) {
        return fail(Code::kInvalidArgument,
                    "placeholder_in \"" + place + "\" is not a header name or \"query:NAME\"");
      } else if (is_reserved_header(place)) {
        return fail(Code::kInvalidArgument, "placeholder_in: header " + place +
                                                " frames the message; it cannot carry "
                                                "a secret");
      } else {
        d.placeholder_headers.push_back(place);
      }
    }
  } else if (!j.contains("header")) {
    d.placeholder_headers = {"Authorization"};
  }
  if (j.contains("format")) {
    if (d.header.empty()) return fail(Code::kInvalidArgument, "format needs header");
    d.format = TRY(string_field(j["format"], "format"));
    size_t first = d.format.find("{}");
    if (first == std::string::npos || d.format.find("{}", first + 2) != std::string::npos) {
      return fail(Code::kInvalidArgument, "format must contain \"{}\" exactly once");
    }
    if (has_control(d.format)) {
      return fail(Code::kInvalidArgument, "format contains a control character");
    }
  }
  return d;
}

// ---- running a command -------------------------------------------------------------------

// A readable, single-line excerpt of what the command wrote to stderr.
std::string excerpt(std::string_view err) {
  std::string out(trim(err));
  for (char& c : out) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
  }
  return out;
}

// Runs argv[0] (absolute) with argv through run_program (common/subprocess.h: no shell, stdin
// /dev/null, no fd but 0..2, default signal dispositions, its process group killed when it ends
// or at the deadline), with an environment of only PATH, in /. Returns the trimmed stdout.
Result<std::string> run_command(const std::vector<std::string>& argv,
                                std::chrono::milliseconds timeout) {
  const std::string& path = argv[0];
  RunOptions opts;
  opts.timeout = timeout;
  opts.max_output = kMaxValueBytes + 1;  // a byte more than a value may have tells "too much"
  opts.env = std::vector<std::string>{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  opts.cwd = "/";
  RunResult r = TRY_CTX(run_program(argv, opts), "command " + path);
  if (r.timed_out) {
    return fail(Code::kTimeout, "command " + path + " did not finish within " +
                                    format_duration(timeout.count() / 1000.0));
  }
  if (r.out_truncated || r.out.size() > kMaxValueBytes) {
    return fail(Code::kUnavailable, "command " + path + " wrote more than " +
                                        format_size(kMaxValueBytes) + " to stdout");
  }
  // The stdout of a failed command is discarded, but it may still be a token, so it is cut out
  // of the stderr excerpt too (best effort: a copy cut by the 512-byte limit stays partly).
  std::string value(trim(r.out));
  std::string err = r.err.substr(0, kStderrExcerptBytes);
  if (value.size() >= 8) replace_all(err, value, "[redacted]");
  std::string note = excerpt(err);
  if (r.err.size() > kStderrExcerptBytes || r.err_truncated) note += " ...";
  if (r.signal != 0) {
    return fail(Code::kUnavailable, "command " + path + " was killed by signal " +
                                        std::to_string(r.signal) +
                                        (note.empty() ? "" : ": " + note));
  }
  if (r.exit_code != 0) {
    return fail(Code::kUnavailable, "command " + path + " exited with status " +
                                        std::to_string(r.exit_code) +
                                        (note.empty() ? "" : ": " + note));
  }
  if (value.empty()) return fail(Code::kUnavailable, "command " + path + " printed nothing");
  return value;
}

// ---- the other sources ---------------------------------------------------------------------

Result<std::string> read_secret_file(const std::string& path) {
  // O_NONBLOCK: a FIFO put in place of the file must not hang the gateway; it is refused below.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) return fail(Error::sys("open", "\"" + path + "\"").wrap("reading secret file"));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fail_sys("fstat", "\"" + path + "\"");
  if (!S_ISREG(st.st_mode)) {
    return fail(Code::kUnavailable, "secret file " + path + " is not a regular file");
  }
  std::string data;
  char buf[16384];
  for (;;) {
    ssize_t got = ::read(fd.get(), buf, sizeof buf);
    if (got < 0) {
      if (errno == EINTR) continue;
      return fail_sys("read", "\"" + path + "\"");
    }
    if (got == 0) break;
    data.append(buf, static_cast<size_t>(got));
    if (data.size() > kMaxValueBytes) {
      return fail(Code::kUnavailable,
                  "secret file " + path + " is larger than " + format_size(kMaxValueBytes));
    }
  }
  std::string value(trim(data));
  if (value.empty()) return fail(Code::kUnavailable, "secret file " + path + " is empty");
  return value;
}

}  // namespace

// ---- SecretDef ---------------------------------------------------------------------------

Result<SecretDef> SecretDef::from_json(const std::string& name, const nlohmann::json& j) {
  if (name.size() > kMaxNameLength || !is_identifier(name)) {
    std::string shown =
        name.size() > kMaxNameLength ? name.substr(0, kMaxNameLength) + "..." : name;
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    }
    return fail(Code::kInvalidArgument,
                "secret \"" + shown + "\": name must match [A-Za-z_][A-Za-z0-9_]{0,63}");
  }
  auto d = parse_def(name, j);
  if (!d) return fail(std::move(d.error()).wrap("secret " + name));
  return d;
}

nlohmann::json SecretDef::to_wire() const {
  json hs = json::array();
  for (const auto& h : hosts) hs.push_back(h.text());
  json places = json::array();
  for (const auto& h : placeholder_headers) places.push_back(h);
  for (const auto& q : placeholder_query) places.push_back("query:" + q);
  json j = {
      {"hosts", hs}, {"profiles", profiles}, {"env_var", env_var}, {"placeholder_in", places}};
  if (!methods.empty()) j["methods"] = methods;
  if (!paths.empty()) j["paths"] = paths;
  if (!header.empty()) {
    j["header"] = header;
    j["format"] = format;
  }
  return j;
}

Result<SecretDef> SecretDef::from_wire(const std::string& name, const nlohmann::json& j) {
  if (!j.is_object() || j.contains("value") || j.contains("env") || j.contains("file") ||
      j.contains("command") || j.contains("ttl"))
    return fail(Code::kInvalidArgument, "secret " + name + ": not the gateway's form");
  json config = j;
  config["env"] = "SPACE_REMOTE";  // parsed as a source, then replaced: never read
  auto d = TRY(from_json(name, config));
  d.source = Source::kRemote;
  d.value.clear();
  return d;
}

bool SecretDef::bound_to(const Host& host) const {
  return std::any_of(hosts.begin(), hosts.end(),
                     [&](const HostPattern& p) { return p.matches(host); });
}

bool SecretDef::applies(const Host& host, std::string_view method, std::string_view target) const {
  if (!bound_to(host)) return false;
  if (!methods.empty() && std::find(methods.begin(), methods.end(), method) == methods.end()) {
    return false;
  }
  if (paths.empty()) return true;
  return check_path(paths, target).allowed;
}

// ---- SecretStore -------------------------------------------------------------------------

SecretStore::SecretStore(std::map<std::string, SecretDef> defs)
    : defs_(std::move(defs)), clock_([] { return std::chrono::steady_clock::now(); }) {
  for (const auto& [name, def] : defs_) {
    if (def.source == SecretDef::Source::kCommand) {
      minting_.emplace(name, std::make_unique<std::mutex>());
      continue;
    }
    // Known from the start (value() remembers it), so a value sent before a restart is masked
    // after it too.
    (void)value(name);
  }
}

SecretStore::SecretStore(std::map<std::string, SecretDef> defs, Fetch fetch)
    : defs_(std::move(defs)),
      fetch_(std::move(fetch)),
      clock_([] { return std::chrono::steady_clock::now(); }) {}

std::vector<std::string> SecretStore::remembered(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = seen_.find(name);
  return it == seen_.end() ? std::vector<std::string>{} : it->second;
}

void SecretStore::remember_values(const std::string& name, const std::vector<std::string>& values) {
  if (!find(name)) return;
  for (const auto& v : values)
    if (v.size() >= kMinValueBytes && !has_control(v)) remember(name, v);
}

const SecretDef* SecretStore::find(std::string_view name) const {
  auto it = defs_.find(std::string(name));
  return it == defs_.end() ? nullptr : &it->second;
}

void SecretStore::set_clock(std::function<std::chrono::steady_clock::time_point()> clock) {
  std::lock_guard lock(mu_);
  clock_ = std::move(clock);
}

void SecretStore::set_command_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  command_timeout_ = timeout;
}

void SecretStore::remember(const std::string& name, const std::string& value) {
  std::lock_guard lock(mu_);
  auto& seen = seen_[name];
  auto it = std::find(seen.begin(), seen.end(), value);
  if (it != seen.end()) {
    if (it + 1 == seen.end()) return;
    seen.erase(it);  // moved to the end: the newest
  } else if (seen.size() == kRemembered) {
    seen.erase(seen.begin());
  }
  seen.push_back(value);
  ++seen_version_;
}

std::shared_ptr<const MaskPatterns> SecretStore::mask_patterns() {
  std::lock_guard lock(mu_);
  if (patterns_ && patterns_version_ == seen_version_) return patterns_;
  std::vector<std::string> all;
  for (const auto& [_, values] : seen_) {
    for (const auto& v : values) {
      for (auto& f : mask_forms(v)) all.push_back(std::move(f));
    }
  }
  patterns_ = std::make_shared<const MaskPatterns>(std::move(all));
  patterns_version_ = seen_version_;
  return patterns_;
}

Result<std::string> SecretStore::value(const std::string& name, const MintPermit& permit,
                                       const std::string& sandbox) {
  const SecretDef* def = find(name);
  if (!def) return fail(Code::kNotFound, "secret " + name + " is not defined");
  Result<std::string> v = fail(Code::kInternal, "unknown secret source");
  if (fetch_) {
    v = fetch_(name, sandbox);
    if (!v) return fail(std::move(v.error()));  // spaced's message names the secret already
  } else
    switch (def->source) {
      case SecretDef::Source::kValue:
        v = def->value;
        break;
      case SecretDef::Source::kEnv: {
        // Read at each use, so rotating the variable (in a wrapper that re-execs) needs nothing
        // else. getenv is only unsafe against concurrent setenv, which spaced does not do.
        const char* e = std::getenv(def->value.c_str());
        if (!e) {
          v = fail(Code::kUnavailable, "environment variable " + def->value + " is not set");
        } else if (*e == '\0') {
          v = fail(Code::kUnavailable, "environment variable " + def->value + " is empty");
        } else {
          v = std::string(e);
        }
        break;
      }
      case SecretDef::Source::kFile:
        v = read_secret_file(def->value);
        break;
      case SecretDef::Source::kCommand:
        v = mint(*def, permit);
        break;
      case SecretDef::Source::kRemote:
        v = fail(Code::kInternal, "a remote secret in a store that cannot fetch");
        break;
    }
  if (!v) return fail(std::move(v.error()).wrap("secret " + name));
  // A value is put into header values and request-targets: a line break would split them.
  if (has_control(*v)) {
    return fail(Code::kUnavailable, "secret " + name + ": the value contains a control character");
  }
  if (v->size() < kMinValueBytes) {
    return fail(Code::kUnavailable, "secret " + name + ": the value is shorter than " +
                                        std::to_string(kMinValueBytes) +
                                        " bytes, too short to be masked in responses");
  }
  remember(name, *v);
  return v;
}

Result<std::string> SecretStore::mint(const SecretDef& def, const MintPermit& permit) {
  std::lock_guard minting(*minting_.at(def.name));
  std::chrono::steady_clock::time_point started;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard lock(mu_);
    started = clock_();
    auto it = cache_.find(def.name);
    if (it != cache_.end() && started < it->second.expires) return it->second.value;
    if (auto f = failures_.find(def.name); f != failures_.end() && started < f->second.retry_at) {
      auto left = std::chrono::duration_cast<std::chrono::seconds>(f->second.retry_at - started);
      return fail(f->second.code, f->second.message + " (not retried for another " +
                                      format_duration(static_cast<double>(left.count() + 1)) + ")");
    }
    timeout = command_timeout_;
  }
  if (permit && !permit()) {
    return fail(Code::kResourceExhausted,
                "new values were asked for too often; try again in a few seconds");
  }
  auto minted = run_command(def.command, timeout);
  std::lock_guard lock(mu_);
  if (!minted) {
    auto& f = failures_[def.name];
    f.backoff = f.message.empty() ? kFirstBackoff : std::min(f.backoff * 2, kMaxBackoff);
    f.code = minted.error().code();
    f.message = minted.error().message();
    f.retry_at = clock_() + f.backoff;
    return fail(std::move(minted.error()));
  }
  failures_.erase(def.name);
  if (has_control(*minted)) return minted;  // refused by value(); not cached
  // The TTL counts from before the run: the token is at least that fresh.
  cache_[def.name] = Cached{*minted, started + def.ttl};
  return minted;
}

// ---- placeholders and replacement --------------------------------------------------------

std::string make_placeholder(std::string_view name) {
  unsigned char r[16];
  if (RAND_bytes(r, sizeof r) != 1 &&
      ::getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) {
    std::abort();  // no randomness at all: a guessable placeholder would be worse
  }
  std::string out = "space_ph_";
  out += name;
  out += '_';
  out += to_hex(r, sizeof r);
  return out;
}

size_t replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return 0;
  size_t count = 0;
  std::string out;
  size_t pos = 0;
  for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, pos)) {
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
    ++count;
  }
  if (count == 0) return 0;
  out.append(s, pos, std::string::npos);
  s = std::move(out);
  return count;
}

}  // namespace space::egress
