// .dockerignore patterns (see dockerignore.h): parsed as moby's ignorefile.ReadAll does, and
// matched as its patternmatcher does, with a table instead of a regular expression (no
// backtracking, so no pattern can make a match slow).
#include "cli/dockerignore.h"

#include <algorithm>

namespace space::cli {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Go's filepath.Clean for '/'-separated paths: no empty or "." elements, ".." folded into the
// element before it (and dropped at the root), no trailing '/'; "" is ".".
std::string clean(std::string_view path) {
  bool rooted = !path.empty() && path.front() == '/';
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view part = path.substr(start, slash - start);
    start = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!rooted) {
        parts.push_back(part);
      }
      continue;
    }
    parts.push_back(part);
  }
  std::string out = rooted ? "/" : "";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out.empty() ? "." : out;
}

// The length of the UTF-8 character at the start of `s` (1 for a byte that starts none).
size_t char_len(std::string_view s) {
  unsigned char c = static_cast<unsigned char>(s[0]);
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (n > s.size()) return 1;
  for (size_t i = 1; i < n; ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

}  // namespace

Result<DockerIgnore> DockerIgnore::parse(std::string_view text) {
  DockerIgnore out;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    if (line_no == 1 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);  // a BOM
    if (line.starts_with("#")) continue;
    line = trim(line);
    if (line.empty()) continue;
    bool exception = line.front() == '!';
    if (exception) line = trim(line.substr(1));
    if (exception && line.empty()) {
      return fail(Code::kInvalidArgument, ".dockerignore line " + std::to_string(line_no) +
                                              ": \"!\" needs a pattern after it, e.g. !README.md");
    }
    std::string pattern = clean(line);
    if (pattern.size() > 1 && pattern.front() == '/') pattern.erase(0, 1);
    Pattern p = TRY(compile(pattern, line_no));
    p.exception = exception;
    out.has_exceptions_ = out.has_exceptions_ || exception;
    out.patterns_.push_back(std::move(p));
  }
  return out;
}

Result<DockerIgnore::Pattern> DockerIgnore::compile(std::string_view text, size_t line) {
  auto bad = [&](std::string_view why) {
    return fail(Code::kInvalidArgument, ".dockerignore line " + std::to_string(line) + ": " +
                                            std::string(why) + " in \"" +
                                            std::string(text.substr(0, 200)) + "\"");
  };
  Pattern p;
  size_t i = 0;
  while (i < text.size()) {
    char ch = text[i++];
    if (ch == '*') {
      if (i < text.size() && text[i] == '*') {
        ++i;
        if (i < text.size() && text[i] == '/') ++i;  // "**/" is "**"
        // "**" at the end matches everything from here on; elsewhere any number of whole
        // directories (the regular expression "(.*/)?" of moby's patternmatcher).
        p.tokens.push_back({i == text.size() ? Token::Kind::kRest : Token::Kind::kAnyDirs});
      } else {
        p.tokens.push_back({Token::Kind::kStar});
      }
    } else if (ch == '?') {
      p.tokens.push_back({Token::Kind::kOne});
    } else if (ch == '\\') {
      if (i == text.size()) return bad("a '\\' at the end escapes nothing");
      p.tokens.push_back({Token::Kind::kChar, text[i++]});
    } else if (ch == '[') {
      Token t{Token::Kind::kSet};
      if (i < text.size() && text[i] == '^') {
        t.negated = true;
        ++i;
      }
      bool closed = false;
      while (i < text.size()) {
        char lo = text[i++];
        if (lo == ']') {
          closed = true;
          break;
        }
        if (lo == '\\') {
          if (i == text.size()) break;
          lo = text[i++];
        }
        char hi = lo;
        if (i + 1 < text.size() && text[i] == '-' && text[i + 1] != ']') {
          hi = text[i + 1];
          i += 2;
          if (hi == '\\') {
            if (i == text.size()) break;
            hi = text[i++];
          }
          if (static_cast<unsigned char>(hi) < static_cast<unsigned char>(lo)) {
            return bad("a range that runs backwards");
          }
        }
        for (int c = static_cast<unsigned char>(lo); c <= static_cast<unsigned char>(hi); ++c) {
          t.set += static_cast<char>(c);
        }
      }
      if (!closed) return bad("a '[' without its ']'");
      if (t.set.empty()) return bad("an empty set \"[]\"");
      p.tokens.push_back(std::move(t));
    } else {
      p.tokens.push_back({Token::Kind::kChar, ch});
    }
  }
  return p;
}

bool DockerIgnore::matches(const Pattern& p, std::string_view path) {
  // at[i][j]: tokens i.. match path[j..]. Filled from the end, one row per token.
  const size_t n = path.size();
  std::vector<char> next(n + 1, 0), row(n + 1, 0);
  next[n] = 1;  // no tokens left match only the empty rest
  for (size_t i = p.tokens.size(); i-- > 0;) {
    const Token& t = p.tokens[i];
    switch (t.kind) {
      case Token::Kind::kRest:
        std::fill(row.begin(), row.end(), 1);
        break;
      case Token::Kind::kChar:
        for (size_t j = 0; j <= n; ++j) row[j] = j < n && path[j] == t.c && next[j + 1];
        break;
      case Token::Kind::kOne:
        for (size_t j = 0; j <= n; ++j) {
          row[j] = j < n && path[j] != '/' && next[j + char_len(path.substr(j))];
        }
        break;
      case Token::Kind::kSet:
        for (size_t j = 0; j <= n; ++j) {
          bool in = j < n && t.set.find(path[j]) != std::string::npos;
          row[j] = j < n && path[j] != '/' && in != t.negated && next[j + 1];
        }
        break;
      case Token::Kind::kStar:
        row[n] = next[n];
        for (size_t j = n; j-- > 0;) row[j] = next[j] || (path[j] != '/' && row[j + 1]);
        break;
      case Token::Kind::kAnyDirs: {
        // Nothing, or anything that ends with '/'.
        bool after_slash = false;  // some k >= j has path[k] == '/' and next[k + 1]
        row[n] = next[n];
        for (size_t j = n; j-- > 0;) {
          after_slash = after_slash || (path[j] == '/' && next[j + 1]);
          row[j] = next[j] || after_slash;
        }
        break;
      }
    }
    std::swap(row, next);
  }
  return next[0] != 0;
}

bool DockerIgnore::excluded(std::string_view path) const {
  bool excluded = false;
  for (const Pattern& p : patterns_) {
    // An exclusion cannot change an excluded path, nor an exception an included one.
    if (p.exception != excluded) continue;
    bool match = matches(p, path);
    // A pattern that matches a parent directory matches everything under it.
    for (size_t slash = path.find('/'); !match && slash != std::string_view::npos;
         slash = path.find('/', slash + 1)) {
      match = matches(p, path.substr(0, slash));
    }
    if (match) excluded = !p.exception;
  }
  return excluded;
}

}  // namespace space::cli
