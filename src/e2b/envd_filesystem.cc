// envd's filesystem.Filesystem Connect service over SandboxService's file operations.
//
// Stat, ListDir and Remove map onto stat/list_dir/remove; MakeDir and Move run mkdir -p and
// mv -T in the sandbox (the service has no mkdir or rename). Watching (WatchDir, and the
// CreateWatcher/GetWatcherEvents/RemoveWatcher trio) is done by polling in the daemon, not with
// inotify in the sandbox: WatchDir lists the directory (recursively if asked) every
// kPollInterval and reports what appeared (EVENT_TYPE_CREATE), went (REMOVE), changed size or
// mtime (WRITE) or mode (CHMOD); a watcher compares against its previous listing each time
// GetWatcherEvents is called. A change undone between two polls is not seen, and a rename reads
// as a REMOVE and a CREATE.
//
// EntryInfo's owner and group are "root" (the daemon's file operations do not report them),
// its modified_time comes from the parent directory's listing.
#include <sys/random.h>

#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>

#include "e2b/connect.h"
#include "e2b/handlers.h"

namespace space::e2b {

namespace {

using nlohmann::json;

constexpr auto kPollInterval = std::chrono::milliseconds(500);
constexpr size_t kMaxWatchers = 1024;
constexpr size_t kMaxWatchEntries = 20'000;

std::string file_type(const std::string& t) {
  if (t == "file") return "FILE_TYPE_FILE";
  if (t == "dir") return "FILE_TYPE_DIRECTORY";
  if (t == "symlink") return "FILE_TYPE_SYMLINK";
  return "FILE_TYPE_UNSPECIFIED";
}

std::string permissions(const std::string& type, uint32_t mode) {
  std::string s = type == "dir" ? "d" : type == "symlink" ? "L" : "-";
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) s += (mode & (0400u >> i)) ? rwx[i] : '-';
  return s;
}

std::string rfc3339(int64_t t) {
  std::time_t tt = std::time_t(t);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string base_name(const std::string& path) {
  if (path == "/") return "/";
  return path.substr(path.rfind('/') + 1);
}

std::string dir_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

json entry_json(const std::string& path, const daemon::FileStat& st, std::optional<int64_t> mtime) {
  json e = {{"name", base_name(path)},
            {"type", file_type(st.type)},
            {"path", path},
            {"size", std::to_string(st.size)},
            {"mode", st.mode & 07777},
            {"permissions", permissions(st.type, st.mode & 07777)},
            {"owner", "root"},
            {"group", "root"}};
  if (mtime) e["modifiedTime"] = rfc3339(*mtime);
  if (st.type == "symlink") e["symlinkTarget"] = st.target;
  return e;
}

// The entry of `path`, with its mtime from its parent's listing.
Result<json> entry_of(Call& call, const std::string& path) {
  auto st = TRY(call.service.stat(call.sandbox_id, path));
  std::optional<int64_t> mtime;
  if (path != "/")
    if (auto entries = call.service.list_dir(call.sandbox_id, dir_name(path)))
      for (auto& e : *entries)
        if (e.name == base_name(path)) {
          mtime = e.mtime;
          break;
        }
  return entry_json(path, st, mtime);
}

Result<std::string> path_field(Call& call, const json& msg, const char* key = "path") {
  auto it = msg.find(key);
  if (it == msg.end() || !it->is_string())
    return fail(Code::kInvalidArgument, std::string(key) + " (a string) is required");
  EnvdUser user = TRY(envd_user(call, envd_username(call.ex)));
  return envd_path(user, it->get<std::string>());
}

Result<void> require_dir(Call& call, const std::string& path) {
  auto st = TRY(call.service.stat(call.sandbox_id, path));
  if (st.type != "dir") return fail(Code::kInvalidArgument, "path " + path + " is not a directory");
  return {};
}

Result<void> stat(Call& call, const json& msg) {
  std::string path = TRY(path_field(call, msg));
  json entry = TRY(entry_of(call, path));  // outside the braces: see common/error.h, TRY
  return connect::respond(call.ex, {{"entry", std::move(entry)}});
}

Result<void> make_dir(Call& call, const json& msg) {
  EnvdUser user = TRY(envd_user(call, envd_username(call.ex)));
  std::string path = TRY(path_field(call, msg));
  if (auto st = call.service.stat(call.sandbox_id, path)) {
    if (st->type == "dir")
      return fail(Code::kAlreadyExists, "directory " + path + " already exists");
    return fail(Code::kInvalidArgument, "path " + path + " exists and is not a directory");
  }
  TRY_VOID_CTX(envd_run(call, {"mkdir", "-p", "--", path}, user.exec_user),
               "making directory " + path);
  json entry = TRY(entry_of(call, path));  // outside the braces: see common/error.h, TRY
  return connect::respond(call.ex, {{"entry", std::move(entry)}});
}

Result<void> move(Call& call, const json& msg) {
  EnvdUser user = TRY(envd_user(call, envd_username(call.ex)));
  std::string src = TRY(path_field(call, msg, "source"));
  std::string dst = TRY(path_field(call, msg, "destination"));
  TRY_VOID(call.service.stat(call.sandbox_id, src));  // not_found when missing
  TRY_VOID_CTX(envd_run(call, {"mkdir", "-p", "--", dir_name(dst)}, user.exec_user),
               "making the destination's directory");
  TRY_VOID_CTX(envd_run(call, {"mv", "-T", "--", src, dst}, user.exec_user),
               "moving " + src + " to " + dst);
  json entry = TRY(entry_of(call, dst));  // outside the braces: see common/error.h, TRY
  return connect::respond(call.ex, {{"entry", std::move(entry)}});
}

// The entries below `dir` to `depth` levels, as (path, entry), in listing order.
Result<void> walk(Call& call, const std::string& dir, uint32_t depth, size_t limit,
                  const std::function<void(const std::string&, const daemon::DirEntry&)>& each,
                  size_t& count) {
  auto entries = TRY(call.service.list_dir(call.sandbox_id, dir));
  for (auto& e : entries) {
    if (++count > limit)
      return fail(Code::kResourceExhausted, "more than " + std::to_string(limit) +
                                                " entries below " + dir + "; list less deep");
    std::string p = join(dir, e.name);
    each(p, e);
    if (depth > 1 && e.stat.type == "dir") {
      auto r = walk(call, p, depth - 1, limit, each, count);
      if (!r && r.error().code() != Code::kNotFound && r.error().code() != Code::kPermissionDenied)
        return r;
    }
  }
  return {};
}

Result<uint32_t> depth_of(const json& msg) {
  auto it = msg.find("depth");
  if (it == msg.end() || it->is_null()) return 1u;
  if (it->is_number_unsigned()) return uint32_t(std::min<uint64_t>(it->get<uint64_t>(), 1000));
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    if (!s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos)
      return uint32_t(std::min<uint64_t>(std::stoull(s), 1000));
  }
  return fail(Code::kInvalidArgument, "depth must be a non-negative integer");
}

Result<void> list_dir(Call& call, const json& msg) {
  std::string path = TRY(path_field(call, msg));
  uint32_t depth = TRY(depth_of(msg));
  if (depth == 0) depth = 1;
  TRY_VOID(require_dir(call, path));
  json entries = json::array();
  size_t count = 0;
  TRY_VOID(walk(
      call, path, depth, daemon::kMaxListEntries,
      [&](const std::string& p, const daemon::DirEntry& e) {
        entries.push_back(entry_json(p, e.stat, e.mtime));
      },
      count));
  return connect::respond(call.ex, {{"entries", entries}});
}

Result<void> remove(Call& call, const json& msg) {
  std::string path = TRY(path_field(call, msg));
  TRY_VOID(call.service.stat(call.sandbox_id, path));
  TRY_VOID(call.service.remove(call.sandbox_id, path, /*recursive=*/true));
  return connect::respond(call.ex, json::object());
}

// --- watching, by polling
struct Seen {
  std::string type;
  uint64_t size = 0;
  uint32_t mode = 0;
  int64_t mtime = 0;
  json entry;
};
using Listing = std::map<std::string, Seen>;  // name relative to the watched directory

Result<Listing> listing(Call& call, const std::string& dir, bool recursive) {
  Listing out;
  size_t count = 0;
  TRY_VOID(walk(
      call, dir, recursive ? 64 : 1, kMaxWatchEntries,
      [&](const std::string& p, const daemon::DirEntry& e) {
        out[p.substr(dir == "/" ? 1 : dir.size() + 1)] =
            Seen{e.stat.type, e.stat.size, e.stat.mode, e.mtime, entry_json(p, e.stat, e.mtime)};
      },
      count));
  return out;
}

json diff(const Listing& before, const Listing& after, bool include_entry) {
  json events = json::array();
  auto ev = [&](const std::string& name, const char* type, const Seen* s) {
    json e = {{"name", name}, {"type", type}};
    if (include_entry && s) e["entry"] = s->entry;
    events.push_back(std::move(e));
  };
  for (auto& [name, s] : after) {
    auto it = before.find(name);
    if (it == before.end()) {
      ev(name, "EVENT_TYPE_CREATE", &s);
    } else if (it->second.type != s.type) {
      ev(name, "EVENT_TYPE_REMOVE", nullptr);
      ev(name, "EVENT_TYPE_CREATE", &s);
    } else if (s.type != "dir" && (it->second.size != s.size || it->second.mtime != s.mtime)) {
      ev(name, "EVENT_TYPE_WRITE", &s);
    } else if (it->second.mode != s.mode) {
      ev(name, "EVENT_TYPE_CHMOD", &s);
    }
  }
  for (auto& [name, s] : before)
    if (!after.count(name)) ev(name, "EVENT_TYPE_REMOVE", nullptr);
  return events;
}

Result<void> watch_dir(Call& call, const json& msg) {
  std::string path = TRY(path_field(call, msg));
  bool recursive = msg.value("recursive", false);
  bool include_entry = msg.value("includeEntry", false);
  TRY_VOID(require_dir(call, path));
  Listing seen = TRY(listing(call, path, recursive));
  connect::Stream st(call.ex);
  TRY_VOID(st.begin());
  TRY_VOID(st.send({{"start", json::object()}}));
  const auto keepalive = std::chrono::seconds(connect::keepalive_interval(call.ex).value_or(50));
  auto last_write = std::chrono::steady_clock::now();
  for (;;) {
    std::this_thread::sleep_for(kPollInterval);
    if (call.ex.server_stopping()) {
      Error e(Code::kUnavailable, "spaced is shutting down");
      return st.end(&e);
    }
    auto now_seen = listing(call, path, recursive);
    if (!now_seen) {
      Error e = now_seen.error().code() == Code::kNotFound
                    ? Error(Code::kNotFound, "the watched directory " + path + " went away")
                    : std::move(now_seen.error());
      if (e.code() != Code::kNotFound && !call.service.inspect(call.sandbox_id))
        e = Error(Code::kUnavailable, "sandbox " + call.sandbox_id + " went away");
      return st.end(&e);
    }
    for (auto& e : diff(seen, *now_seen, include_entry)) {
      TRY_VOID(st.send({{"filesystem", e}}));
      last_write = std::chrono::steady_clock::now();
    }
    seen = std::move(*now_seen);
    if (std::chrono::steady_clock::now() - last_write >= keepalive) {
      TRY_VOID(st.send({{"keepalive", json::object()}}));
      last_write = std::chrono::steady_clock::now();
    }
  }
}

struct Watcher {
  std::string sandbox, path;
  bool recursive = false, include_entry = false;
  Listing seen;
  std::chrono::steady_clock::time_point used;
};
std::mutex g_watch_mu;
std::map<std::string, std::shared_ptr<Watcher>> g_watchers;

std::string new_watcher_id() {
  unsigned char b[12];
  if (::getrandom(b, sizeof b, 0) != ssize_t(sizeof b))
    for (auto& c : b) c = static_cast<unsigned char>(std::rand());
  std::string id = "w_";
  static const char* hex = "0123456789abcdef";
  for (auto c : b) {
    id += hex[c >> 4];
    id += hex[c & 15];
  }
  return id;
}

Result<void> create_watcher(Call& call, const json& msg) {
  auto w = std::make_shared<Watcher>();
  w->sandbox = call.sandbox_id;
  w->path = TRY(path_field(call, msg));
  w->recursive = msg.value("recursive", false);
  w->include_entry = msg.value("includeEntry", false);
  TRY_VOID(require_dir(call, w->path));
  w->seen = TRY(listing(call, w->path, w->recursive));
  w->used = std::chrono::steady_clock::now();
  std::string id;
  {
    std::lock_guard l(g_watch_mu);
    // Watchers unused for an hour go first.
    std::erase_if(g_watchers, [](auto& kv) {
      return std::chrono::steady_clock::now() - kv.second->used > std::chrono::hours(1);
    });
    if (g_watchers.size() >= kMaxWatchers)
      return fail(Code::kResourceExhausted,
                  std::to_string(kMaxWatchers) + " watchers exist; remove some (RemoveWatcher)");
    do id = new_watcher_id();
    while (g_watchers.count(id));
    g_watchers[id] = w;
  }
  return connect::respond(call.ex, {{"watcherId", id}});
}

Result<std::shared_ptr<Watcher>> watcher_of(Call& call, const json& msg) {
  auto it = msg.find("watcherId");
  if (it == msg.end() || !it->is_string())
    return fail(Code::kInvalidArgument, "watcherId (a string) is required");
  std::lock_guard l(g_watch_mu);
  auto w = g_watchers.find(it->get<std::string>());
  if (w == g_watchers.end() || w->second->sandbox != call.sandbox_id)
    return fail(Code::kNotFound, "watcher " + it->get<std::string>() + " not found");
  return w->second;
}

Result<void> get_watcher_events(Call& call, const json& msg) {
  auto w = TRY(watcher_of(call, msg));
  Listing now_seen = TRY(listing(call, w->path, w->recursive));
  json events;
  {
    std::lock_guard l(g_watch_mu);
    events = diff(w->seen, now_seen, w->include_entry);
    w->seen = std::move(now_seen);
    w->used = std::chrono::steady_clock::now();
  }
  return connect::respond(call.ex, {{"events", events}});
}

Result<void> remove_watcher(Call& call, const json& msg) {
  auto w = TRY(watcher_of(call, msg));
  std::lock_guard l(g_watch_mu);
  g_watchers.erase(msg["watcherId"].get<std::string>());
  return connect::respond(call.ex, json::object());
}

}  // namespace

Result<void> envd_filesystem(Call& call, std::string_view method) {
  static const std::vector<Rpc> kRpcs = {
      {"Stat", stat, false},
      {"MakeDir", make_dir, false},
      {"Move", move, false},
      {"ListDir", list_dir, false},
      {"Remove", remove, false},
      {"WatchDir", watch_dir, true},
      {"CreateWatcher", create_watcher, false},
      {"GetWatcherEvents", get_watcher_events, false},
      {"RemoveWatcher", remove_watcher, false},
  };
  return serve_rpc(call, "filesystem.Filesystem", method, kRpcs);
}

}  // namespace space::e2b
