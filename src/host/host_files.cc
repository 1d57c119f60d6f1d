// Host-side file helpers (see host_files.h).
#include "host/host_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>

#include "common/fd.h"

namespace space::host {

namespace {

std::string quoted(const std::filesystem::path& p) { return "\"" + p.string() + "\""; }

std::optional<uint64_t> parse_u64(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  if (s == "max") return std::numeric_limits<uint64_t>::max();
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

Result<std::string> read_text(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_sys("open", quoted(path));
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail_sys("read", quoted(path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (16u << 20)) return fail(Code::kInternal, "file too large: " + quoted(path));
  }
  return out;
}

Result<void> write_text(const std::filesystem::path& path, std::string_view value) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return fail_sys("open", quoted(path));
  ssize_t n;
  do {
    n = ::write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return fail_sys("write", quoted(path) + " \"" + std::string(value) + "\"");
  if (static_cast<size_t>(n) != value.size()) {
    return fail(Code::kInternal, "short write to " + quoted(path));
  }
  return {};
}

Result<uint64_t> read_u64(const std::filesystem::path& path) {
  std::string text = TRY(read_text(path));
  auto v = parse_u64(text);
  if (!v) return fail(Code::kInternal, "not a number in " + quoted(path) + ": " + text);
  return *v;
}

Result<uint64_t> read_keyed(const std::filesystem::path& path, std::string_view key) {
  std::string text = TRY(read_text(path));
  std::string_view rest = text;
  while (!rest.empty()) {
    size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ' ') {
      auto v = parse_u64(line.substr(key.size() + 1));
      if (v) return *v;
    }
  }
  return fail(Code::kNotFound, "no \"" + std::string(key) + "\" in " + quoted(path));
}

Result<uint64_t> process_start_time(int pid) {
  std::filesystem::path path = "/proc/" + std::to_string(pid) + "/stat";
  std::string text = TRY(read_text(path));
  // The command name (field 2) is in parentheses and may itself contain spaces and ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos) return fail(Code::kInternal, "malformed " + quoted(path));
  std::string_view rest = std::string_view(text).substr(close + 1);
  // rest starts at field 3 (" S ..."); field 22 is the 20th field of rest.
  int field = 2;
  size_t pos = 0;
  while (pos < rest.size()) {
    while (pos < rest.size() && rest[pos] == ' ') ++pos;
    size_t end = rest.find(' ', pos);
    if (end == std::string_view::npos) end = rest.size();
    ++field;
    if (field == 22) {
      auto v = parse_u64(rest.substr(pos, end - pos));
      if (!v) break;
      return *v;
    }
    pos = end;
  }
  return fail(Code::kInternal, "no start time in " + quoted(path));
}

}  // namespace space::host
