// The .dockerignore of a build context (`space image build`), with Docker's rules, so that a
// context sends what `docker build` would send: one pattern a line, '#' lines are comments,
// surrounding spaces trimmed, a leading '!' makes an exception that includes again what an
// earlier pattern excluded; each pattern is a path relative to the context root (a leading '/'
// is dropped, the path cleaned: "a//b/./c/" is "a/b/c"), matched against the whole path, with
// `*` (any run of characters but '/'), `?` (one character but '/'), `[a-z]` / `[^a-z]` (one of
// a set; `\` escapes), and `**` (any number of directories, none included: "**/x" matches "x"
// and "a/b/x"; a trailing "**" matches everything below). A pattern that matches a directory
// matches everything under it. The last pattern that matches a path (or one of its parents)
// decides. (The Dockerfile and .dockerignore themselves are sent whatever it says: the caller
// sees to that.)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace space::cli {

class DockerIgnore {
 public:
  DockerIgnore() = default;
  // Parses a .dockerignore's text; a malformed pattern (an unterminated or empty `[`) is
  // kInvalidArgument naming its line.
  static Result<DockerIgnore> parse(std::string_view text);

  // Whether `path` (relative to the context, '/'-separated, e.g. "src/app.py") is left out.
  bool excluded(std::string_view path) const;
  // Whether an exception ('!') could include something under an excluded directory, so it must
  // be looked into rather than skipped whole.
  bool has_exceptions() const { return has_exceptions_; }
  size_t size() const { return patterns_.size(); }

 private:
  struct Token {
    enum class Kind { kChar, kStar, kOne, kSet, kAnyDirs, kRest } kind;
    char c = 0;            // kChar
    std::string set;       // kSet: the bytes it holds (ranges expanded)
    bool negated = false;  // kSet
  };
  struct Pattern {
    std::vector<Token> tokens;
    bool exception = false;
  };
  static Result<Pattern> compile(std::string_view text, size_t line);
  static bool matches(const Pattern& p, std::string_view path);

  std::vector<Pattern> patterns_;
  bool has_exceptions_ = false;
};

}  // namespace space::cli
