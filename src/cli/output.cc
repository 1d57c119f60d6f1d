// Tables, ages, error reporting for the CLI (see output.h).
#include "cli/output.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "common/units.h"

namespace space::cli {

std::string format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) out += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += '\n';
  }
  return out;
}

double now_unix() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

void print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

std::string age(const nlohmann::json& created_at, double now_unix) {
  double t;
  if (created_at.is_number()) {
    t = created_at.get<double>();
  } else if (created_at.is_string()) {
    const std::string& s = created_at.get_ref<const std::string&>();
    std::tm tm{};
    const char* rest = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
    if (rest == nullptr) return "-";
    t = static_cast<double>(timegm(&tm));
  } else {
    return "-";
  }
  double seconds = now_unix - t;
  if (seconds < 0) seconds = 0;
  auto s = static_cast<long long>(seconds);
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m";
  if (s < 86400) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::string cell(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

int report(const Error& e) {
  std::fflush(stdout);
  write_all(STDERR_FILENO, "space: " + e.message() + "\n");
  return kExitSpaceFailed;
}

void print_json(const nlohmann::json& j) {
  std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace space::cli
