// `space image import|ls|rm|build-vm`. Import streams a root filesystem to the daemon: a
// tarball as it is (any compression the daemon's libarchive reads), a directory as a tar built
// on the fly, with numeric owners kept. Progress goes to stderr when it is a terminal (a few
// updates a second), and a summary line always. build-vm prints the daemon's progress events
// (NDJSON) to stderr as they come, then the same kind of summary line.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/output.h"
#include "cli/tar.h"
#include "common/clock.h"
#include "common/units.h"

namespace space::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

class Progress {
 public:
  Progress(std::string name, uint64_t total)
      : name_(std::move(name)), total_(total), tty_(::isatty(STDERR_FILENO) != 0) {}

  void add(uint64_t bytes) {
    sent_ += bytes;
    if (!tty_) return;
    auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    std::string line = "\rspace: uploading " + name_ + ": " + format_size(sent_);
    if (total_ > 0) {
      line += " / " + format_size(total_) + " (" + std::to_string(sent_ * 100 / total_) + "%)";
    }
    write_all(STDERR_FILENO, line + "\033[K");
    drawn_ = true;
  }

  void finish() {
    if (drawn_) write_all(STDERR_FILENO, "\r\033[K");
    double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    write_all(STDERR_FILENO, "space: imported image " + name_ + " (" + format_size(sent_) +
                                 " uploaded in " + format_duration(secs) + ")\n");
  }

 private:
  std::string name_;
  uint64_t total_;
  uint64_t sent_ = 0;
  bool tty_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_{};
};

}  // namespace

Result<int> cmd_image_import(const Args& a, const Client& c) {
  struct stat st;
  if (::stat(a.path.c_str(), &st) != 0) return fail_sys("stat", "\"" + a.path + "\"");
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return fail(Code::kInvalidArgument, a.path + " is neither a directory nor a tarball");
  }
  Connection conn = TRY(c.connect());
  TRY_VOID(conn.start_chunked("PUT", "/v1/images/" + url_encode(a.name), "application/x-tar"));
  Progress progress(a.name, S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0);
  auto send = [&](std::string_view bytes) -> Result<void> {
    TRY_VOID(conn.write_chunk(bytes));
    progress.add(bytes.size());
    return {};
  };
  if (S_ISREG(st.st_mode)) {
    UniqueFd fd(::open(a.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return fail_sys("open", "\"" + a.path + "\"");
    char buf[256 * 1024];
    for (;;) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail_sys("read", "\"" + a.path + "\"");
      if (n == 0) break;
      TRY_VOID(send(std::string_view(buf, static_cast<size_t>(n))));
    }
  } else {
    TRY_VOID(write_tar(a.path, send, TarWriteOptions{.keep_owners = true}));
  }
  TRY_VOID(conn.end_chunks());
  int status = TRY(conn.read_head());
  std::string body = TRY(conn.read_body(1 << 20));
  if (status >= 400) return fail(api_error(status, body));
  progress.finish();
  return 0;
}

Result<int> cmd_image_ls(const Args& a, const Client& c) {
  json res = TRY(c.call("GET", "/v1/images"));
  json images = res.value("images", json::array());
  if (a.json) {
    print_json(images);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "SIZE", "CREATED"}};
  double now = now_s();
  for (const auto& img : images) {
    std::string size = "-";
    if (img.contains("size_bytes") && img["size_bytes"].is_number_unsigned()) {
      size = format_size(img["size_bytes"].get<uint64_t>());
    }
    json created = img.value("created_at", json());
    std::string when = created.is_null() ? "-" : age(created, now) + " ago";
    rows.push_back({cell(img.value("name", json())), size, when});
  }
  print(format_table(rows));
  return 0;
}

Result<int> cmd_image_rm(const Args& a, const Client& c) {
  TRY(c.call("DELETE", "/v1/images/" + url_encode(a.name)));
  return 0;
}

Result<int> cmd_image_build_vm(const Args& a, const Client& c) {
  Connection conn = TRY(c.connect());
  TRY_VOID(conn.send("POST", "/v1/images/" + url_encode(a.name) + "/vm", ""));
  int status = TRY(conn.read_head());
  if (status >= 400) {
    std::string body = TRY(conn.read_body(1 << 20));
    return fail(api_error(status, body));
  }
  auto start = Clock::now();
  std::optional<int> result;
  TRY_VOID(conn.for_each_line([&](std::string_view line) -> Result<bool> {
    json ev = json::parse(line, nullptr, false);
    if (!ev.is_object()) return true;
    std::string type = ev.value("type", "");
    if (type == "progress" && ev.contains("message") && ev["message"].is_string()) {
      write_all(STDERR_FILENO, "space: " + escape_text(ev["message"].get<std::string>()) + "\n");
    } else if (type == "error") {
      return fail(api_error(500, json{{"error", ev.value("error", json::object())}}.dump()));
    } else if (type == "done") {
      json disk = ev.value("disk", json::object());
      result = 0;
      if (a.json) {
        print_json(disk);
        return false;
      }
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      uint64_t size = disk.contains("size_bytes") && disk["size_bytes"].is_number_unsigned()
                          ? disk["size_bytes"].get<uint64_t>()
                          : 0;
      bool cached = disk.value("cached", false);
      write_all(STDERR_FILENO,
                "space: VM disk of image " + a.name + " " + (cached ? "is current" : "built") +
                    " (" + format_size(size) + (cached ? "" : " in " + format_duration(secs)) +
                    "): " + escape_text(disk.value("path", std::string("?"))) + "\n");
      return false;
    }
    return true;
  }));
  if (result) return *result;
  return fail(Code::kProtocol,
              "the daemon ended the build-vm stream without a result; see spaced's log");
}

}  // namespace space::cli
