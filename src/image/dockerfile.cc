// Reading a Dockerfile into the plan `space image build` runs (dockerfile.h), the way BuildKit
// reads one: physical lines are joined at the escape char into instructions (comment and blank
// lines inside a continuation dropped), the instruction word is case-insensitive, flags
// (--name=value) come first, RUN/CMD/ENTRYPOINT/SHELL take a JSON array of strings or a shell
// line, ENV/LABEL/ARG take quoted NAME=VALUE words, and words are substituted by a small
// shell-word lexer ($VAR, ${VAR:-word}, quotes, the escape char). Every size is bounded by
// DockerfileLimits or a constant here; nothing throws.
#include "image/dockerfile.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "common/json_nesting.h"
#include "common/utf8.h"

namespace space::image {

// Named, as well as anonymous: the library may be built as one unity file, where another
// file's anonymous helpers would otherwise collide with these.
namespace {
namespace dockerfile_parser {

constexpr int kMaxExecJsonNesting = 8;       // an exec form is one array; deeper is refused
constexpr int kMaxSubstitutionNesting = 16;  // ${A:-${B:-${C...}}}
constexpr size_t kMaxListItems = 4096;       // argv, Env and Labels (ImageConfig::from_json's)

using Lookup = std::function<std::optional<std::string_view>(std::string_view name)>;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'; }

std::string_view ltrim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view trim(std::string_view s) {
  s = ltrim(s);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

// At most `n` bytes of `s` for a message, not cutting a UTF-8 character.
std::string clip(std::string_view s, size_t n) {
  if (s.size() <= n) return std::string(s);
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n)) + "...";
}

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && lower(s.substr(s.size() - suffix.size())) == suffix;
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && lower(s.substr(0, prefix.size())) == prefix;
}

// "/a/./b/../c" -> "/a/c"; ".." never climbs above "/".
std::string clean_absolute(std::string_view path) {
  std::vector<std::string_view> parts;
  while (!path.empty()) {
    size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view{} : path.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  std::string out;
  for (auto p : parts) {
    out += '/';
    out += p;
  }
  return out.empty() ? "/" : out;
}

// A path resolved against the working directory, as Docker's WORKDIR and COPY destinations.
std::string resolve_path(const std::string& workdir, std::string_view path) {
  if (!path.empty() && path.front() == '/') return clean_absolute(path);
  return clean_absolute(workdir + "/" + std::string(path));
}

// --- the shell-word lexer (BuildKit's shell.Lex, ProcessWord): quotes are removed, the
// escape char takes the next char literally, and $VAR / ${VAR...} are replaced. Output is
// bounded by `max`.
class ShellWord {
 public:
  ShellWord(std::string_view in, char escape, const Lookup& lookup, size_t max)
      : in_(in), escape_(escape), lookup_(lookup), max_(max) {}

  Result<std::string> process() {
    std::string out;
    TRY_VOID(stop_on(-1, out, 0));
    return out;
  }

 private:
  int peek() const { return pos_ < in_.size() ? static_cast<unsigned char>(in_[pos_]) : -1; }
  int next() { return pos_ < in_.size() ? static_cast<unsigned char>(in_[pos_++]) : -1; }

  Result<void> put(std::string& out, std::string_view s) const {
    if (out.size() + s.size() > max_)
      return fail(Code::kInvalidArgument,
                  "longer than " + std::to_string(max_) + " bytes after substitution");
    out.append(s);
    return {};
  }
  Result<void> put(std::string& out, int c) const {
    char ch = static_cast<char>(c);
    return put(out, std::string_view(&ch, 1));
  }

  // Reads up to `stop` (-1: the end), which is consumed.
  Result<void> stop_on(int stop, std::string& out, int depth) {
    while (peek() != -1) {
      int c = peek();
      if (stop != -1 && c == stop) {
        next();
        return {};
      }
      if (c == '\'') {
        TRY_VOID(single_quote(out));
      } else if (c == '"') {
        TRY_VOID(double_quote(out, depth));
      } else if (c == '$') {
        TRY_VOID(dollar(out, depth));
      } else {
        next();
        if (c == escape_) {
          if (peek() == -1) break;  // an escape char at the very end is dropped
          c = next();
        }
        TRY_VOID(put(out, c));
      }
    }
    if (stop != -1) return fail(Code::kInvalidArgument, "missing '}' in a ${...} substitution");
    return {};
  }

  // '...': everything literal up to the next ', which cannot be escaped.
  Result<void> single_quote(std::string& out) {
    next();
    for (;;) {
      int c = next();
      if (c == -1) return fail(Code::kInvalidArgument, "a single quote is not closed");
      if (c == '\'') return {};
      TRY_VOID(put(out, c));
    }
  }

  // "...": substitution happens; the escape char escapes only ", $ and itself.
  Result<void> double_quote(std::string& out, int depth) {
    next();
    for (;;) {
      int c = peek();
      if (c == -1) return fail(Code::kInvalidArgument, "a double quote is not closed");
      if (c == '"') {
        next();
        return {};
      }
      if (c == '$') {
        TRY_VOID(dollar(out, depth));
        continue;
      }
      c = next();
      if (c == escape_) {
        int n = peek();
        if (n == -1) continue;
        if (n == '"' || n == '$' || n == escape_) c = next();
      }
      TRY_VOID(put(out, c));
    }
  }

  std::string name() {
    std::string n;
    int c = peek();
    if (c >= '0' && c <= '9') {
      while (peek() >= '0' && peek() <= '9') n += static_cast<char>(next());
      return n;
    }
    if (c != -1 && std::string_view("@*#?-$!").find(static_cast<char>(c)) != std::string::npos) {
      next();
      return std::string(1, static_cast<char>(c));
    }
    while ((c = peek()) != -1 &&
           ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      n += static_cast<char>(next());
    return n;
  }

  Result<void> dollar(std::string& out, int depth) {
    next();  // '$'
    if (peek() != '{') {
      std::string n = name();
      if (n.empty()) return put(out, "$");
      if (auto v = lookup_(n)) return put(out, *v);
      return {};
    }
    next();  // '{'
    if (depth >= kMaxSubstitutionNesting)
      return fail(Code::kInvalidArgument, "substitutions nested more than " +
                                              std::to_string(kMaxSubstitutionNesting) + " deep");
    int c = peek();
    if (c == -1) return fail(Code::kInvalidArgument, "missing '}' in a ${...} substitution");
    if (c == '{' || c == '}' || c == ':')
      return fail(Code::kInvalidArgument, "bad substitution: ${ needs a variable name");
    std::string n = name();
    std::optional<std::string_view> v = lookup_(n);
    c = next();
    if (c == '}') return v ? put(out, *v) : Result<void>{};
    bool colon = c == ':';
    if (colon) c = next();
    if (c == -1) return fail(Code::kInvalidArgument, "missing '}' in a ${...} substitution");
    if (c != '-' && c != '+' && c != '?')
      return fail(Code::kInvalidArgument,
                  "unsupported modifier (" + std::string(1, static_cast<char>(c)) + ") in ${" + n +
                      "...}: use ${VAR}, ${VAR:-default}, ${VAR:+alternative} "
                      "or ${VAR:?message}");
    std::string word;
    TRY_VOID(stop_on('}', word, depth + 1));
    bool set = v.has_value() && (!colon || !v->empty());
    switch (c) {
      case '-':
        return put(out, set ? *v : std::string_view(word));
      case '+':
        return set ? put(out, word) : Result<void>{};
      default:  // '?'
        if (!set)
          return fail(Code::kInvalidArgument,
                      n + ": " + (word.empty() ? std::string("is not set") : word));
        return put(out, *v);
    }
  }

  std::string_view in_;
  size_t pos_ = 0;
  int escape_;
  const Lookup& lookup_;
  size_t max_;
};

// BuildKit's parseWords: splits at whitespace outside quotes, keeping the quotes and escape
// chars in the words (the lexer removes them later).
std::vector<std::string> split_words(std::string_view rest, char escape) {
  std::vector<std::string> words;
  std::string word;
  enum { kSpaces, kWord, kQuote } phase = kSpaces;
  char quote = 0;
  bool blank_ok = false;
  for (size_t pos = 0; pos <= rest.size(); ++pos) {
    bool end = pos == rest.size();
    char c = end ? 0 : rest[pos];
    if (phase == kSpaces) {
      if (end) break;
      if (is_space(c)) continue;
      phase = kWord;
    }
    if (end) {
      if (blank_ok || !word.empty()) words.push_back(std::move(word));
      break;
    }
    if (phase == kWord) {
      if (is_space(c)) {
        phase = kSpaces;
        if (blank_ok || !word.empty()) words.push_back(std::move(word));
        word.clear();
        blank_ok = false;
        continue;
      }
      if (c == '\'' || c == '"') {
        quote = c;
        blank_ok = true;
        phase = kQuote;
      }
      if (c == escape) {
        if (pos + 1 == rest.size()) continue;
        word += c;
        c = rest[++pos];
      }
      word += c;
      continue;
    }
    // kQuote
    if (c == quote) phase = kWord;
    if (c == escape && quote != '\'') {
      if (pos + 1 == rest.size()) {
        phase = kWord;
        continue;
      }
      word += c;
      c = rest[++pos];
    }
    word += c;
  }
  return words;
}

// BuildKit's extractBuilderFlags: the leading "--name[=value]" words (quotes and backslashes
// processed; "--" ends them) and the rest of the line.
std::pair<std::vector<std::string>, std::string_view> split_flags(std::string_view line) {
  std::vector<std::string> words;
  std::string word;
  enum { kSpaces, kWord, kQuote } phase = kSpaces;
  char quote = 0;
  bool blank_ok = false;
  for (size_t pos = 0; pos <= line.size(); ++pos) {
    bool end = pos == line.size();
    char c = end ? 0 : line[pos];
    if (phase == kSpaces) {
      if (end) break;
      if (is_space(c)) continue;
      if (c != '-' || pos + 1 == line.size() || line[pos + 1] != '-')
        return {std::move(words), line.substr(pos)};
      phase = kWord;
    }
    if (end) {
      if (word != "--" && (blank_ok || !word.empty())) words.push_back(std::move(word));
      break;
    }
    if (phase == kWord) {
      if (is_space(c)) {
        phase = kSpaces;
        if (word == "--") return {std::move(words), ltrim(line.substr(pos))};
        if (blank_ok || !word.empty()) words.push_back(std::move(word));
        word.clear();
        blank_ok = false;
        continue;
      }
      if (c == '\'' || c == '"') {
        quote = c;
        blank_ok = true;
        phase = kQuote;
        continue;
      }
      if (c == '\\') {
        if (pos + 1 == line.size()) continue;
        c = line[++pos];
      }
      word += c;
      continue;
    }
    if (c == quote) {
      phase = kWord;
      continue;
    }
    if (c == '\\') {
      if (pos + 1 == line.size()) {
        phase = kWord;
        continue;
      }
      c = line[++pos];
    }
    word += c;
  }
  return {std::move(words), std::string_view{}};
}

// A word BuildKit would read as the start of a heredoc: [n]<<[-]WORD.
bool is_heredoc_word(std::string_view w) {
  while (!w.empty() && w.front() >= '0' && w.front() <= '9') w.remove_prefix(1);
  if (!w.starts_with("<<")) return false;
  w.remove_prefix(2);
  if (w.starts_with("-")) w.remove_prefix(1);
  return !w.empty() && w.find('<') == std::string_view::npos;
}

bool is_archive_name(std::string_view s) {
  for (std::string_view ext : {".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2",
                               ".tbz", ".tar.zst", ".tzst", ".tar.lz4"})
    if (ends_with_ci(s, ext)) return true;
  return false;
}

bool is_url(std::string_view s) {
  for (std::string_view p : {"http://", "https://", "git://", "git@", "ssh://", "git+"})
    if (starts_with_ci(s, p)) return true;
  return false;
}

struct Instruction {
  size_t line = 0;
  std::string text;  // joined, trimmed
  bool empty_continuation = false;
};

struct Flag {
  std::string name;
  std::optional<std::string> value;
};

class Parser {
 public:
  Parser(const std::map<std::string, std::string>& build_args,
         const std::function<Result<ImageConfig>(const std::string&)>& base_config,
         const DockerfileLimits& limits)
      : build_args_(build_args), base_config_(base_config), limits_(limits) {
    Platform host = Platform::host();
    std::string platform = host.os + "/" + host.architecture;
    if (!host.variant.empty()) platform += "/" + host.variant;
    for (std::string side : {"TARGET", "BUILD"}) {
      meta_[side + "PLATFORM"] = platform;
      meta_[side + "OS"] = host.os;
      meta_[side + "ARCH"] = host.architecture;
      meta_[side + "VARIANT"] = host.variant;
    }
    host_platform_ = platform;
    host_os_arch_ = host.os + "/" + host.architecture;
  }

  Result<Dockerfile> run(std::string_view text) {
    if (text.size() > limits_.max_bytes)
      return fail(Code::kInvalidArgument, "the Dockerfile is " + std::to_string(text.size()) +
                                              " bytes, more than the " +
                                              std::to_string(limits_.max_bytes) + " allowed");
    if (text.find('\0') != std::string_view::npos)
      return fail(Code::kInvalidArgument, "the Dockerfile holds a NUL byte (is it a binary file?)");
    if (auto bad = invalid_utf8_at(text)) {
      size_t line = 1 + std::count(text.begin(), text.begin() + *bad, '\n');
      return fail(Code::kInvalidArgument,
                  "line " + std::to_string(line) + ": the Dockerfile is not valid UTF-8");
    }
    if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
    auto instructions = TRY(split(text));
    for (const auto& ins : instructions) TRY_VOID(dispatch(ins));
    if (!from_seen_)
      return fail(Code::kInvalidArgument,
                  "the Dockerfile has no FROM instruction: start it with FROM IMAGE");
    for (const auto& [name, value] : build_args_)
      if (!consumed_.contains(name))
        out_.warnings.push_back("build-arg " + name +
                                " was not used: the Dockerfile declares no ARG " + name);
    return std::move(out_);
  }

 private:
  // --- lines -----------------------------------------------------------------------------

  // The parser directives (# escape=, # syntax=, # check=) at the top. Returns false once a
  // line is not one (which ends the directives).
  Result<bool> directive(std::string_view l, size_t line) {
    if (l.empty() || l.front() != '#') return false;
    l.remove_prefix(1);
    l = ltrim(l);
    size_t n = 0;
    while (n < l.size() && (std::isalpha(static_cast<unsigned char>(l[n])) ||
                            (n > 0 && std::isdigit(static_cast<unsigned char>(l[n])))))
      ++n;
    if (n == 0) return false;
    std::string name = lower(l.substr(0, n));
    l = ltrim(l.substr(n));
    if (l.empty() || l.front() != '=') return false;
    std::string_view value = trim(l.substr(1));
    if (value.empty()) return false;
    if (name != "escape" && name != "syntax" && name != "check") return false;
    if (!directives_seen_.insert(name).second)
      return fail(Code::kInvalidArgument, "line " + std::to_string(line) + ": only one " + name +
                                              " parser directive can be used");
    if (name == "escape") {
      if (value != "\\" && value != "`")
        return fail(Code::kInvalidArgument, "line " + std::to_string(line) +
                                                ": the escape directive must be \\ or `, not " +
                                                clip(value, 64));
      escape_ = value[0];
    }
    return true;  // syntax= and check= are read and ignored
  }

  // Strips a trailing escape char (and the blanks after it): {line, continues}.
  std::pair<std::string_view, bool> continuation(std::string_view l) const {
    std::string_view t = l;
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (!t.empty() && t.back() == escape_) return {t.substr(0, t.size() - 1), true};
    return {l, false};
  }

  Result<std::vector<Instruction>> split(std::string_view text) {
    std::vector<std::string_view> lines;
    while (!text.empty()) {
      size_t nl = text.find('\n');
      std::string_view l = text.substr(0, nl);
      while (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      lines.push_back(l);
      if (nl == std::string_view::npos) break;
      text.remove_prefix(nl + 1);
    }
    std::vector<Instruction> out;
    bool directives = true;
    for (size_t i = 0; i < lines.size(); ++i) {
      std::string_view l = ltrim(lines[i]);
      if (directives) directives = TRY(directive(l, i + 1));
      if (!l.empty() && l.front() == '#') continue;
      auto [body, more] = continuation(l);
      if (!more && trim(body).empty()) continue;
      Instruction ins;
      ins.line = i + 1;
      ins.text = body;
      auto too_long = [&] {
        return fail(Code::kInvalidArgument, "line " + std::to_string(ins.line) +
                                                ": the instruction is longer than " +
                                                std::to_string(limits_.max_value_bytes) + " bytes");
      };
      if (ins.text.size() > limits_.max_value_bytes) return too_long();
      while (more && i + 1 < lines.size()) {
        std::string_view raw = lines[++i];
        std::string_view t = ltrim(raw);
        if (!t.empty() && t.front() == '#') continue;  // a comment inside a continuation
        if (t.empty()) {
          ins.empty_continuation = true;
          continue;
        }
        auto [part, again] = continuation(raw);
        more = again;
        if (ins.text.size() + part.size() > limits_.max_value_bytes) return too_long();
        ins.text += part;
      }
      std::string_view joined = trim(ins.text);
      if (joined.empty()) continue;
      ins.text = std::string(joined);
      if (out.size() == limits_.max_instructions)
        return fail(Code::kInvalidArgument,
                    "line " + std::to_string(ins.line) + ": the Dockerfile has more than " +
                        std::to_string(limits_.max_instructions) + " instructions");
      out.push_back(std::move(ins));
    }
    return out;
  }

  // --- helpers ---------------------------------------------------------------------------

  Error error(const std::string& msg) const {
    return Error(Code::kInvalidArgument, "line " + std::to_string(line_) + ": " + msg);
  }

  // Substitutes `word` in the current scope: before FROM the ARGs declared before it (and
  // the platform ARGs), after it ENV first, then the ARGs in scope.
  Result<std::string> expand(std::string_view word, std::string_view what) {
    Lookup lookup = [this](std::string_view name) { return this->lookup(name); };
    auto r = ShellWord(word, escape_, lookup, limits_.max_value_bytes).process();
    if (!r) return fail(error(name_ + ": " + std::string(what) + ": " + r.error().message()));
    expanded_bytes_ += r->size();
    if (expanded_bytes_ > limits_.max_env_bytes)
      return fail(error(name_ + ": the values grow past " + std::to_string(limits_.max_env_bytes) +
                        " bytes after substitution"));
    return r;
  }

  // Values are views into the parser's state, which no substitution changes.
  std::optional<std::string_view> lookup(std::string_view name) const {
    if (!from_seen_) {
      auto it = meta_.find(std::string(name));
      if (it == meta_.end() || !it->second) return std::nullopt;
      return std::string_view(*it->second);
    }
    if (auto it = env_index_.find(name); it != env_index_.end())
      return std::string_view(out_.config.env[it->second]).substr(name.size() + 1);
    if (auto it = args_index_.find(name); it != args_index_.end() && args_[it->second].second)
      return std::string_view(*args_[it->second].second);
    return std::nullopt;
  }

  bool env_has(std::string_view name) const { return env_index_.contains(name); }

  StepContext context() const {
    StepContext c;
    c.env = out_.config.env;
    for (const auto& [k, v] : args_)
      if (v && !env_has(k)) c.args.push_back(k + "=" + *v);
    c.workdir = workdir_;
    c.user = out_.config.user;
    return c;
  }

  // The environment a RUN sees (Env plus ARGs) stays within bounds.
  Result<void> check_environment() const {
    size_t bytes = 0, count = 0;
    StepContext c = context();
    for (const auto* list : {&c.env, &c.args})
      for (const auto& e : *list) {
        bytes += e.size() + 1;
        ++count;
        if (e.size() > limits_.max_value_bytes)
          return fail(error(name_ + ": the variable " + e.substr(0, e.find('=')) +
                            " is longer than " + std::to_string(limits_.max_value_bytes) +
                            " bytes"));
      }
    if (bytes > limits_.max_env_bytes || count > kMaxListItems)
      return fail(error(name_ + ": the environment grows past " +
                        std::to_string(limits_.max_env_bytes) + " bytes or " +
                        std::to_string(kMaxListItems) + " variables"));
    return {};
  }

  Result<void> add_step(Step s) {
    size_t bytes = s.text.size() + s.dest.size() + s.chown.size() + s.value.size();
    for (const auto* list : {&s.context.env, &s.context.args, &s.argv, &s.sources})
      for (const auto& e : *list) bytes += e.size() + 1;
    for (const auto& [k, v] : s.pairs) bytes += k.size() + v.size() + 2;
    plan_bytes_ += bytes + sizeof(Step);
    if (plan_bytes_ > limits_.max_plan_bytes)
      return fail(error(name_ + ": the build plan grows past " +
                        std::to_string(limits_.max_plan_bytes) +
                        " bytes (too many steps with too large an environment)"));
    out_.steps.push_back(std::move(s));
    return {};
  }

  Step new_step(Step::Kind kind) const {
    Step s;
    s.kind = kind;
    s.line = line_;
    s.text = text_;
    s.context = context();
    return s;
  }

  Result<void> no_flags(const std::vector<Flag>& flags) const {
    if (!flags.empty())
      return fail(error(name_ + " takes no flags (--" + flags.front().name + ")"));
    return {};
  }

  // The exec (JSON) form, or nullopt for the shell form. As Docker: text that starts with '['
  // but is not valid JSON is a shell line; a valid array with a non-string item is refused.
  Result<std::optional<std::vector<std::string>>> exec_form(std::string_view rest) const {
    if (!rest.starts_with('[')) return std::nullopt;
    if (!json_nesting_within(rest, kMaxExecJsonNesting))
      return fail(
          error(name_ + ": the JSON form is nested too deep: write [\"program\", \"arg\"]"));
    auto j = nlohmann::json::parse(rest, nullptr, false);
    if (j.is_discarded() || !j.is_array()) return std::nullopt;
    if (j.size() >= kMaxListItems)  // a SHELL's items and the shell form's command fit the config
      return fail(error(name_ + ": the JSON form has more than " +
                        std::to_string(kMaxListItems - 1) + " items"));
    std::vector<std::string> argv;
    for (const auto& item : j) {
      if (!item.is_string())
        return fail(error(name_ + ": the JSON form must be an array of strings, as " + name_ +
                          " [\"program\", \"arg\"]: quote every item"));
      std::string s = item.get<std::string>();
      if (s.find('\0') != std::string::npos)
        return fail(error(name_ + ": an item of the JSON form holds a NUL character"));
      argv.push_back(std::move(s));
    }
    return argv;
  }

  std::vector<std::string> shell_form(std::string_view rest) const {
    std::vector<std::string> argv = shell_;
    argv.emplace_back(rest);
    return argv;
  }

  Result<void> refuse_heredoc(std::string_view rest) const {
    for (const auto& w : split_words(rest, escape_))
      if (is_heredoc_word(w))
        return fail(error(
            name_ + ": heredocs (" + w +
            ") are not supported: put the text in a file of the build context and COPY it, or "
            "write it with printf in the RUN command"));
    return {};
  }

  // ENV and LABEL: NAME=VALUE words, or the legacy "NAME VALUE" (the rest of the line).
  Result<std::vector<std::pair<std::string, std::string>>> name_values(std::string_view rest) {
    std::vector<std::pair<std::string, std::string>> raw;
    auto words = split_words(rest, escape_);
    if (words.empty()) return fail(error(name_ + " needs NAME=VALUE"));
    if (words[0].find('=') == std::string::npos) {
      size_t ws = 0;
      while (ws < rest.size() && !is_space(rest[ws])) ++ws;
      std::string_view value = ltrim(rest.substr(ws));
      if (value.empty())
        return fail(error(name_ + " " + std::string(rest.substr(0, ws)) + " has no value: write " +
                          name_ + " NAME=VALUE"));
      raw.emplace_back(rest.substr(0, ws), value);
    } else {
      for (const auto& w : words) {
        size_t eq = w.find('=');
        if (eq == std::string::npos)
          return fail(error(name_ + ": no '=' in \"" + w + "\": write " + name_ +
                            " NAME=VALUE (quote a value with spaces)"));
        raw.emplace_back(w.substr(0, eq), w.substr(eq + 1));
      }
    }
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const auto& [k, v] : raw) {
      std::string key = TRY(expand(k, "the name"));
      std::string value = TRY(expand(v, key));
      if (key.empty()) return fail(error(name_ + ": a name is empty"));
      if (name_ == "ENV" && key.find('=') != std::string::npos)
        return fail(error("ENV: the name \"" + key + "\" holds '='"));
      pairs.emplace_back(std::move(key), std::move(value));
    }
    return pairs;
  }

  // --- instructions ----------------------------------------------------------------------

  Result<void> dispatch(const Instruction& ins) {
    line_ = ins.line;
    text_ = ins.text;
    expanded_bytes_ = 0;
    std::string_view t = ins.text;
    size_t ws = 0;
    while (ws < t.size() && !is_space(t[ws])) ++ws;
    name_ = upper(t.substr(0, ws));
    if (ins.empty_continuation)
      out_.warnings.push_back("line " + std::to_string(line_) + ": " + name_ +
                              " has an empty continuation line (Docker deprecates them)");
    static const std::map<std::string, std::string, std::less<>> kIgnored = {
        {"EXPOSE", "a sandbox's ports are not published: reach one with space port ID PORT"},
        {"VOLUME",
         "SPACE has no Docker volumes: the directory stays an ordinary part of the "
         "image"},
        {"STOPSIGNAL", "SPACE stops a sandbox's processes itself"},
        {"HEALTHCHECK", "SPACE does not run health checks"},
        {"MAINTAINER", "deprecated by Docker: use LABEL maintainer=\"...\""},
    };
    if (auto it = kIgnored.find(name_); it != kIgnored.end()) {
      out_.warnings.push_back("line " + std::to_string(line_) + ": " + name_ + " is ignored (" +
                              it->second + ")");
      return {};
    }
    auto [flag_words, rest_view] = split_flags(ltrim(t.substr(ws)));
    std::string_view rest = trim(rest_view);
    std::vector<Flag> flags;
    for (const auto& w : flag_words) {
      Flag f;
      std::string_view body = std::string_view(w).substr(2);
      size_t eq = body.find('=');
      f.name = lower(body.substr(0, eq));
      if (eq != std::string_view::npos) f.value = std::string(body.substr(eq + 1));
      for (const auto& g : flags)
        if (g.name == f.name) return fail(error(name_ + ": the flag --" + f.name + " is repeated"));
      flags.push_back(std::move(f));
    }

    if (name_ == "ONBUILD")
      return fail(
          error("ONBUILD is not supported: put the instructions in the Dockerfile that "
                "builds FROM this image"));
    if (name_ == "ARG") return on_arg(flags, rest);
    if (name_ == "FROM") return on_from(flags, rest);
    static const std::set<std::string, std::less<>> kKnown = {
        "RUN", "COPY", "ADD", "ENV", "WORKDIR", "USER", "ENTRYPOINT", "CMD", "LABEL", "SHELL"};
    if (!kKnown.contains(name_))
      return fail(error("unknown instruction " + clip(name_, 64) +
                        ": SPACE builds FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, "
                        "ENTRYPOINT, CMD, LABEL and SHELL (docs/images.md)"));
    if (!from_seen_)
      return fail(error(name_ + " comes before FROM: a Dockerfile starts with FROM IMAGE (only "
                                "ARG may come before it)"));
    if (name_ == "RUN") return on_run(flags, rest);
    if (name_ == "COPY" || name_ == "ADD") return on_copy(flags, rest);
    TRY_VOID(no_flags(flags));
    if (name_ == "ENV") return on_env(rest);
    if (name_ == "LABEL") return on_label(rest);
    if (name_ == "WORKDIR") return on_workdir(rest);
    if (name_ == "USER") return on_user(rest);
    if (name_ == "SHELL") return on_shell(rest);
    return on_command(rest);  // ENTRYPOINT, CMD
  }

  Result<void> on_from(const std::vector<Flag>& flags, std::string_view rest) {
    if (from_seen_)
      return fail(
          error("a second FROM starts a multi-stage build, which SPACE does not "
                "support: build the earlier stage as an image of its own (space image "
                "build) and start this Dockerfile FROM it"));
    for (const auto& f : flags) {
      if (f.name != "platform") return fail(error("FROM: unknown flag --" + f.name));
      std::string p = TRY(expand(f.value.value_or(""), "--platform"));
      if (p != host_platform_ && p != host_os_arch_)
        return fail(error("FROM --platform=" + p + ": SPACE builds for this host's platform (" +
                          host_platform_ + ") only: drop --platform"));
    }
    std::vector<std::string_view> words;
    for (std::string_view r = rest; !(r = ltrim(r)).empty();) {
      size_t end = 0;
      while (end < r.size() && !is_space(r[end])) ++end;
      words.push_back(r.substr(0, end));
      r.remove_prefix(end);
    }
    if (words.size() == 3 && lower(words[1]) == "as")
      return fail(error("FROM ... AS " + std::string(words[2]) +
                        " names a build stage, and multi-stage builds are not supported: drop "
                        "the AS name (and build each stage as an image of its own)"));
    if (words.size() != 1) return fail(error("FROM takes one image name: FROM IMAGE"));
    std::string image = TRY(expand(words[0], "the image name"));
    if (image.empty())
      return fail(
          error("FROM: the image name is empty after substitution (is the ARG it uses "
                "declared before FROM, with a value?)"));
    out_.from = image;
    out_.config = TRY(base_config_(image));
    for (size_t i = 0; i < out_.config.env.size(); ++i) {
      const std::string& e = out_.config.env[i];
      size_t eq = e.find('=');
      if (eq != std::string::npos && eq > 0) env_index_.emplace(e.substr(0, eq), i);  // first wins
    }
    const std::string& wd = out_.config.working_dir;
    workdir_ = wd.empty() ? "/" : resolve_path("/", wd);
    from_seen_ = true;
    return {};
  }

  Result<void> on_arg(const std::vector<Flag>& flags, std::string_view rest) {
    TRY_VOID(no_flags(flags));
    auto words = split_words(rest, escape_);
    if (words.empty()) return fail(error("ARG needs a NAME or NAME=default"));
    std::vector<std::pair<std::string, std::optional<std::string>>> declared;
    for (const auto& w : words) {
      size_t eq = w.find('=');
      std::string name = w.substr(0, eq);
      if (name.empty()) return fail(error("ARG: a name is empty"));
      std::optional<std::string> value;
      if (auto b = build_args_.find(name); b != build_args_.end()) {
        value = b->second;  // --build-arg wins, taken as is
      } else if (eq != std::string::npos) {
        value = TRY(expand(std::string_view(w).substr(eq + 1), name));
      } else if (auto m = meta_.find(name); m != meta_.end()) {
        value = m->second;  // as declared before FROM, or a platform ARG
      }
      consumed_.insert(name);
      declared.emplace_back(std::move(name), std::move(value));
    }
    for (auto& [name, value] : declared) {
      if (!from_seen_) {
        meta_[name] = std::move(value);
        continue;
      }
      if (auto it = args_index_.find(name); it != args_index_.end()) {
        args_[it->second].second = std::move(value);
        continue;
      }
      if (args_.size() >= kMaxListItems)
        return fail(error("ARG: more than " + std::to_string(kMaxListItems) + " ARGs"));
      args_index_.emplace(name, args_.size());
      args_.emplace_back(name, std::move(value));
    }
    if (from_seen_) return check_environment();
    size_t bytes = 0;
    for (const auto& [k, v] : meta_) bytes += k.size() + (v ? v->size() : 0) + 2;
    if (bytes > limits_.max_env_bytes || meta_.size() > kMaxListItems)
      return fail(error("ARG: the ARGs before FROM grow past " +
                        std::to_string(limits_.max_env_bytes) + " bytes or " +
                        std::to_string(kMaxListItems) + " names"));
    return {};
  }

  Result<void> on_run(const std::vector<Flag>& flags, std::string_view rest) {
    for (const auto& f : flags) {
      if (f.name == "mount")
        return fail(
            error("RUN --mount is not supported: COPY the files the step needs into "
                  "the image, and give it credentials as build secrets (space image "
                  "build --secret NAME), which the egress gateway injects"));
      if (f.name == "network")
        return fail(
            error("RUN --network is not supported: RUN steps reach the network through "
                  "the build profile's egress (space image build --profile / --allow)"));
      if (f.name == "security")
        return fail(
            error("RUN --security is not supported: RUN steps run in a SPACE sandbox "
                  "of the build profile"));
      return fail(error("RUN: unknown flag --" + f.name));
    }
    if (rest.empty()) return fail(error("RUN needs a command"));
    Step s = new_step(Step::Kind::kRun);
    if (auto argv = TRY(exec_form(rest))) {
      if (argv->empty()) return fail(error("RUN needs a command: the JSON form is empty"));
      s.argv = std::move(*argv);
    } else {
      TRY_VOID(refuse_heredoc(rest));
      s.argv = shell_form(rest);
    }
    return add_step(std::move(s));
  }

  Result<void> on_copy(const std::vector<Flag>& flags, std::string_view rest) {
    bool add = name_ == "ADD";
    Step s = new_step(Step::Kind::kCopy);
    for (const auto& f : flags) {
      if (f.name == "from")
        return fail(error(name_ + " --from is a multi-stage build, which is not supported: "
                                  "build that stage as an image of its own and COPY from the "
                                  "build context, or FROM that image"));
      if (f.name == "link") continue;  // a layering hint: every step is its own layer anyway
      if (f.name == "chown") {
        if (!f.value) return fail(error(name_ + " --chown needs a value: --chown=USER[:GROUP]"));
        s.chown = TRY(expand(*f.value, "--chown"));
        continue;
      }
      if (f.name == "chmod") {
        if (!f.value) return fail(error(name_ + " --chmod needs a value: --chmod=644"));
        std::string mode = TRY(expand(*f.value, "--chmod"));
        uint32_t m = 0;
        bool ok = !mode.empty() && mode.size() <= 5;
        for (char c : mode) {
          if (c < '0' || c > '7') ok = false;
          m = m * 8 + static_cast<uint32_t>(c - '0');
        }
        if (!ok || m > 07777)
          return fail(error(name_ + " --chmod=" + clip(mode, 64) +
                            ": give the mode in octal, as --chmod=755"));
        s.chmod = m;
        continue;
      }
      if (add && f.name == "checksum")
        return fail(
            error("ADD --checksum is for URLs, which are not supported: download in a "
                  "RUN step and check the file there (sha256sum -c)"));
      return fail(error(name_ + ": unsupported flag --" + f.name));
    }
    std::vector<std::string> words;
    if (auto argv = TRY(exec_form(rest))) {
      words = std::move(*argv);
    } else {
      TRY_VOID(refuse_heredoc(rest));
      for (std::string_view r = rest; !(r = ltrim(r)).empty();) {
        size_t end = 0;
        while (end < r.size() && !is_space(r[end])) ++end;
        words.emplace_back(r.substr(0, end));
        r.remove_prefix(end);
      }
    }
    if (words.size() < 2)
      return fail(error(name_ + " needs a source and a destination: " + name_ + " SOURCE... DEST"));
    for (size_t i = 0; i + 1 < words.size(); ++i) {
      std::string src = TRY(expand(words[i], "a source"));
      if (src.empty()) return fail(error(name_ + ": a source is empty after substitution"));
      if (is_url(src))
        return fail(error(name_ + " of a URL is not supported: download it in a RUN step "
                                  "through the build profile's egress"));
      if (add && is_archive_name(src))
        return fail(error("ADD of the archive " + clip(src, 256) +
                          " would unpack it, which SPACE does not do: COPY it and unpack it in "
                          "a RUN step (COPY " +
                          clip(src, 256) + " /tmp/ then RUN tar -xf /tmp/... -C DEST)"));
      s.sources.push_back(std::move(src));
    }
    std::string dest = TRY(expand(words.back(), "the destination"));
    if (dest.empty()) return fail(error(name_ + ": the destination is empty after substitution"));
    bool into = dest.ends_with('/') || dest == "." || dest == ".." || dest.ends_with("/.") ||
                dest.ends_with("/..");
    if (s.sources.size() > 1 && !into)
      return fail(error(name_ +
                        " of several sources needs a destination directory ending in "
                        "'/': " +
                        clip(dest, 256) + "/"));
    s.dest = resolve_path(workdir_, dest);
    if (into && s.dest != "/") s.dest += '/';
    return add_step(std::move(s));
  }

  Result<void> on_env(std::string_view rest) {
    auto pairs = TRY(name_values(rest));
    Step s = new_step(Step::Kind::kEnv);
    for (const auto& [k, v] : pairs) {
      std::string entry = k + "=" + v;
      if (auto it = env_index_.find(k); it != env_index_.end()) {
        out_.config.env[it->second] = std::move(entry);
        continue;
      }
      if (out_.config.env.size() >= kMaxListItems)
        return fail(error("ENV: more than " + std::to_string(kMaxListItems) + " variables"));
      env_index_.emplace(k, out_.config.env.size());
      out_.config.env.push_back(std::move(entry));
    }
    TRY_VOID(check_environment());
    s.pairs = std::move(pairs);
    return add_step(std::move(s));
  }

  Result<void> on_label(std::string_view rest) {
    auto pairs = TRY(name_values(rest));
    Step s = new_step(Step::Kind::kLabel);
    for (const auto& [k, v] : pairs) out_.config.labels[k] = v;
    if (out_.config.labels.size() > kMaxListItems)
      return fail(error("LABEL: more than " + std::to_string(kMaxListItems) + " labels"));
    s.pairs = std::move(pairs);
    return add_step(std::move(s));
  }

  Result<void> on_workdir(std::string_view rest) {
    if (rest.empty()) return fail(error("WORKDIR needs a path"));
    std::string path = TRY(expand(rest, "the path"));
    if (path.empty()) return fail(error("WORKDIR: the path is empty after substitution"));
    Step s = new_step(Step::Kind::kWorkdir);
    workdir_ = resolve_path(workdir_, path);
    out_.config.working_dir = workdir_;
    s.value = workdir_;
    return add_step(std::move(s));
  }

  Result<void> on_user(std::string_view rest) {
    if (rest.empty()) return fail(error("USER needs a user: USER NAME[:GROUP] or UID[:GID]"));
    std::string user = TRY(expand(rest, "the user"));
    if (user.empty()) return fail(error("USER: the user is empty after substitution"));
    Step s = new_step(Step::Kind::kUser);
    out_.config.user = user;
    s.value = std::move(user);
    return add_step(std::move(s));
  }

  Result<void> on_shell(std::string_view rest) {
    auto argv = TRY(exec_form(rest));
    if (!argv || argv->empty())
      return fail(error("SHELL takes the JSON form: SHELL [\"/bin/bash\", \"-c\"]"));
    shell_ = std::move(*argv);
    return {};
  }

  Result<void> on_command(std::string_view rest) {
    bool cmd = name_ == "CMD";
    if (rest.empty())
      return fail(error(name_ + " needs a command (or " + name_ + " [] to clear it)"));
    Step s = new_step(cmd ? Step::Kind::kCmd : Step::Kind::kEntrypoint);
    if (auto argv = TRY(exec_form(rest)))
      s.argv = std::move(*argv);
    else
      s.argv = shell_form(rest);
    if (cmd) {
      out_.config.cmd = s.argv;
      cmd_set_ = true;
    } else {
      out_.config.entrypoint = s.argv;
      if (!cmd_set_) out_.config.cmd.clear();  // as Docker: a new ENTRYPOINT drops the base's CMD
    }
    return add_step(std::move(s));
  }

  const std::map<std::string, std::string>& build_args_;
  const std::function<Result<ImageConfig>(const std::string&)>& base_config_;
  const DockerfileLimits& limits_;

  char escape_ = '\\';
  std::set<std::string> directives_seen_;
  std::map<std::string, std::optional<std::string>> meta_;  // ARGs before FROM (+ platform's)
  std::string host_platform_, host_os_arch_;                // "linux/arm64/v8", "linux/arm64"
  std::set<std::string> consumed_;                          // names some ARG declares
  std::vector<std::pair<std::string, std::optional<std::string>>> args_;  // after FROM
  std::map<std::string, size_t, std::less<>> args_index_;  // name -> its place in args_
  std::map<std::string, size_t, std::less<>> env_index_;   // name -> its entry in config.env
  std::vector<std::string> shell_ = {"/bin/sh", "-c"};
  std::string workdir_ = "/";
  bool from_seen_ = false;
  bool cmd_set_ = false;
  size_t plan_bytes_ = 0;
  size_t expanded_bytes_ = 0;  // substitution output of the current instruction

  size_t line_ = 0;
  std::string name_, text_;
  Dockerfile out_;
};

}  // namespace dockerfile_parser
}  // namespace

Result<Dockerfile> parse_dockerfile(
    std::string_view text, const std::map<std::string, std::string>& build_args,
    const std::function<Result<ImageConfig>(const std::string& from)>& base_config,
    const DockerfileLimits& limits) {
  return dockerfile_parser::Parser(build_args, base_config, limits).run(text);
}

}  // namespace space::image
