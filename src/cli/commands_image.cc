// `space image import|ls|inspect|rm|build|build-vm`. Import streams what it is given to the daemon,
// which tells what it is (a root filesystem, an OCI image layout or oci-archive, a `docker
// save` archive; docs/images.md): a tarball as it is (any compression the daemon's libarchive
// reads), a directory (a root filesystem or an OCI layout) as a tar built on the fly, with
// numeric owners kept. Progress goes to stderr when it is a terminal (a few
// updates a second), and a summary line always. build-vm prints the daemon's progress events
// (NDJSON) to stderr as they come, then the same kind of summary line. Build sends a build
// context as a tar made on the fly (honouring its .dockerignore, with a Dockerfile from outside
// it appended) and prints the build's steps, as Docker's plain progress does, to stderr.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/dockerignore.h"
#include "cli/output.h"
#include "cli/tar.h"
#include "common/clock.h"
#include "common/units.h"

namespace space::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The API path of image `name`. Names as Docker writes them ("team/agent", "agent:latest") are
// refused here with the rule, so the user does not get a "no route" for a path.
Result<std::string> image_path(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64;
  for (char c : name)
    ok = ok &&
         ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-');
  ok = ok && name[0] != '.' && name[0] != '_' && name[0] != '-';
  if (!ok) {
    std::string hint;
    for (char c : name.substr(0, 64)) {
      char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      hint += (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.' || l == '_' ? l : '-';
    }
    while (!hint.empty() && (hint[0] == '-' || hint[0] == '.' || hint[0] == '_')) hint.erase(0, 1);
    return fail(Code::kInvalidArgument,
                "invalid image name \"" + name.substr(0, 80) +
                    "\": use 1-64 characters of a-z, 0-9, '.', '_' and '-', starting with a "
                    "letter or digit (no registry path or :tag)" +
                    (hint.empty() ? "" : "; try \"" + hint + "\""));
  }
  return "/v1/images/" + name;
}

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
  const std::string path = TRY(image_path(a.name));
  struct stat st;
  if (::stat(a.path.c_str(), &st) != 0) return fail_sys("stat", "\"" + a.path + "\"");
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    return fail(Code::kInvalidArgument, a.path + " is neither a directory nor a tarball");
  }
  Connection conn = TRY(c.connect());
  TRY_VOID(conn.start_chunked("PUT", path, "application/x-tar"));
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
  std::vector<std::vector<std::string>> rows = {{"NAME", "FORMAT", "SIZE", "CREATED"}};
  double now = now_s();
  for (const auto& img : images) {
    std::string size = "-";
    if (img.contains("size_bytes") && img["size_bytes"].is_number_unsigned()) {
      size = format_size(img["size_bytes"].get<uint64_t>());
    }
    json created = img.value("created_at", json());
    std::string when = created.is_null() ? "-" : age(created, now) + " ago";
    json format = img.value("format", json());
    rows.push_back({cell(img.value("name", json())),
                    format.is_string() && !format.get<std::string>().empty() ? cell(format) : "-",
                    size, when});
  }
  print(format_table(rows));
  return 0;
}

Result<int> cmd_image_inspect(const Args& a, const Client& c) {
  print_json(TRY(c.call("GET", TRY(image_path(a.name)))));
  return 0;
}

Result<int> cmd_image_rm(const Args& a, const Client& c) {
  TRY(c.call("DELETE", TRY(image_path(a.name))));
  return 0;
}

namespace {

namespace fs = std::filesystem;

// What a build sends: the context directory, its .dockerignore, and where the Dockerfile is.
struct BuildContext {
  fs::path dir;
  DockerIgnore ignore;
  std::string dockerfile;           // its name in the tar (the dockerfile= parameter)
  std::optional<fs::path> outside;  // a Dockerfile outside `dir`, appended as `dockerfile`
};

Result<std::string> random_hex() {
  unsigned char bytes[8];
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    return fail_sys("getrandom", "");
  }
  std::string hex;
  for (unsigned char b : bytes) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", b);
    hex += two;
  }
  return hex;
}

Result<BuildContext> prepare_context(const Args& a) {
  BuildContext ctx;
  std::error_code ec;
  std::string given = a.path.empty() ? "." : a.path;
  if (!fs::is_directory(given, ec)) {
    return fail(Code::kInvalidArgument, "the build context " + given +
                                            " is not a directory; give the directory whose "
                                            "files the Dockerfile's COPY takes");
  }
  ctx.dir = fs::canonical(given, ec);
  if (ec) return fail(Code::kInvalidArgument, "the build context " + given + ": " + ec.message());
  // -f is relative to the working directory, as docker build's is.
  fs::path file = a.file.empty() ? ctx.dir / "Dockerfile" : fs::path(a.file);
  if (!fs::is_regular_file(file, ec)) {
    return fail(
        Code::kNotFound,
        "no Dockerfile at " + file.native() +
            (a.file.empty() ? "; give one with -f, or a context directory that has one" : ""));
  }
  fs::path real = fs::canonical(file, ec);
  if (ec)
    return fail(Code::kInvalidArgument, "the Dockerfile " + file.native() + ": " + ec.message());
  fs::path rel = real.lexically_relative(ctx.dir);
  if (!rel.empty() && *rel.begin() != ".." && a.file.find("..") == std::string::npos &&
      !fs::is_symlink(file, ec)) {
    ctx.dockerfile = rel.generic_string();
  } else {
    // Outside the context (or reached through a link or ".."): sent as a file of its own.
    ctx.dockerfile = ".dockerfile." + TRY(random_hex());
    ctx.outside = real;
  }
  fs::path ignore_file = ctx.dir / ".dockerignore";
  if (fs::is_regular_file(ignore_file, ec)) {
    std::ifstream in(ignore_file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return fail_sys("read", "\"" + ignore_file.native() + "\"");
    ctx.ignore = TRY(DockerIgnore::parse(text.str()));
  }
  return ctx;
}

// Which entries of the context go into the tar: all but those .dockerignore leaves out, and
// always the Dockerfile and .dockerignore themselves (docker build's rule).
TarFilter context_filter(const BuildContext& ctx, const std::string& path, bool is_dir) {
  if (path == ".dockerignore" || path == ctx.dockerfile) return TarFilter::kInclude;
  if (!ctx.ignore.excluded(path)) return TarFilter::kInclude;
  if (!is_dir) return TarFilter::kSkip;
  // An excluded directory is looked into where something under it may still be sent.
  bool holds_dockerfile = !ctx.outside && ctx.dockerfile.starts_with(path + "/");
  return holds_dockerfile || ctx.ignore.has_exceptions() ? TarFilter::kSkipButLookInside
                                                         : TarFilter::kSkip;
}

// Prints a build's events as Docker's plain progress does, on stderr.
class BuildPrinter {
 public:
  BuildPrinter(std::string name, bool quiet) : name_(std::move(name)), quiet_(quiet) {}

  // One event; returns the final image JSON on "done", an Error on "error".
  Result<std::optional<json>> on(const json& ev) {
    std::string type = ev.value("type", "");
    if (type == "warning") {
      end_line();
      err("space: warning: " + escape_text(text(ev, "message")) + "\n");
    } else if (type == "step") {
      end_line();
      ++steps_;
      err("Step " + number(ev, "step") + "/" + number(ev, "of") + " : " +
          escape_text(text(ev, "instruction")) + "\n");
    } else if (type == "output") {
      if (!quiet_) output(text(ev, "data"));
    } else if (type == "step_done") {
      end_line();
      bool cached = ev.value("cached", false);
      if (cached) ++cached_;
      double secs = ev.contains("duration_s") && ev["duration_s"].is_number()
                        ? ev["duration_s"].get<double>()
                        : 0;
      char took[32];
      std::snprintf(took, sizeof took, "%.1fs", secs);
      err(cached ? std::string(" ---> cached\n") : " ---> done in " + std::string(took) + "\n");
    } else if (type == "error") {
      end_line();
      return fail(api_error(500, json{{"error", ev.value("error", json::object())}}.dump()));
    } else if (type == "done") {
      end_line();
      return std::optional<json>(ev.value("image", json::object()));
    }
    return std::optional<json>();
  }

  void summary(const json& image, double secs) {
    uint64_t size = image.contains("size_bytes") && image["size_bytes"].is_number_unsigned()
                        ? image["size_bytes"].get<uint64_t>()
                        : 0;
    err("space: built image " + name_ + " (" + format_size(size) + ", " + std::to_string(steps_) +
        (steps_ == 1 ? " step, " : " steps, ") + std::to_string(cached_) + " cached) in " +
        seconds(secs) + "\n");
  }

  static std::string seconds(double secs) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1fs", secs);
    return s;
  }

 private:
  static std::string text(const json& ev, const char* key) {
    return ev.contains(key) && ev[key].is_string() ? ev[key].get<std::string>() : "";
  }
  static std::string number(const json& ev, const char* key) {
    return ev.contains(key) && ev[key].is_number_unsigned()
               ? std::to_string(ev[key].get<uint64_t>())
               : "?";
  }
  void err(const std::string& s) { write_all(STDERR_FILENO, s); }
  // A step's output comes from inside a sandbox: escaped (escape_text), but its lines and tabs
  // kept; a lone CR (progress bars) starts a new line.
  void output(std::string_view data) {
    std::string out;
    size_t start = 0;
    for (size_t i = 0; i <= data.size(); ++i) {
      if (i < data.size() && data[i] != '\n' && data[i] != '\t' && data[i] != '\r') continue;
      out += escape_text(data.substr(start, i - start));
      if (i < data.size()) {
        if (data[i] == '\r') {
          if (i + 1 < data.size() && data[i + 1] == '\n') ++i;
          out += '\n';
        } else {
          out += data[i];
        }
      }
      start = i + 1;
    }
    if (out.empty()) return;
    at_line_start_ = out.back() == '\n';
    err(out);
  }
  void end_line() {
    if (!at_line_start_) err("\n");
    at_line_start_ = true;
  }

  std::string name_;
  bool quiet_;
  size_t steps_ = 0, cached_ = 0;
  bool at_line_start_ = true;
};

}  // namespace

Result<int> cmd_image_build(const Args& a, const Client& c) {
  const std::string path = TRY(image_path(a.name));
  BuildContext ctx = TRY(prepare_context(a));
  std::string query = TRY(build_query(a, ctx.dockerfile));
  auto start = Clock::now();
  Connection conn = TRY(c.connect());
  TarWriteOptions options{.keep_owners = false,
                          .filter = [&](const std::string& path, bool is_dir) {
                            return context_filter(ctx, path, is_dir);
                          }};
  if (ctx.outside) options.extra_files.emplace_back(ctx.dockerfile, *ctx.outside);
  uint64_t sent = 0;
  auto upload = [&]() -> Result<void> {
    TRY_VOID(conn.start_chunked("POST", path + "/build" + query, "application/x-tar"));
    TRY_VOID(write_tar(
        ctx.dir,
        [&](std::string_view bytes) -> Result<void> {
          sent += bytes.size();
          return conn.write_chunk(bytes);
        },
        options));
    return conn.end_chunks();
  };
  auto uploaded = upload();
  // spaced may refuse the build (a bad name, an existing image) before it has read the whole
  // context: its answer says more than the broken pipe.
  auto head = conn.read_head();
  if (!head) return fail(uploaded ? std::move(head.error()) : std::move(uploaded.error()));
  int status = *head;
  if (status >= 400) {
    std::string body = TRY(conn.read_body(1 << 20));
    return fail(api_error(status, body));
  }
  if (!uploaded) return fail(std::move(uploaded.error()));
  if (!a.quiet) {
    write_all(STDERR_FILENO, "space: sent the build context of " + ctx.dir.native() + " (" +
                                 format_size(sent) + ")\n");
  }
  BuildPrinter printer(a.name, a.quiet);
  std::optional<json> image;
  TRY_VOID(conn.for_each_line([&](std::string_view line) -> Result<bool> {
    json ev = json::parse(line, nullptr, false);
    if (!ev.is_object()) return true;
    // --json: the API's events as they come, one a line (the last one "done" with the image,
    // or "error"); the progress still goes to stderr.
    if (a.json) write_all(STDOUT_FILENO, dump_json(ev) + "\n");
    image = TRY(printer.on(ev));
    return !image.has_value();
  }));
  if (!image) {
    return fail(Code::kProtocol,
                "the daemon ended the build stream without a result; see spaced's log");
  }
  printer.summary(*image, std::chrono::duration<double>(Clock::now() - start).count());
  return 0;
}

Result<int> cmd_image_build_vm(const Args& a, const Client& c) {
  Connection conn = TRY(c.connect());
  TRY_VOID(conn.send("POST", TRY(image_path(a.name)) + "/vm", ""));
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
