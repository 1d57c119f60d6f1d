// An in-memory SandboxService test double for the API server tests: sandboxes are
// daemon::SandboxInfo structs in a map, files a map of path -> bytes, and exec runs a few scripted
// "programs" (echo, both, cat, sleep, missing, flood) whose events the tests check over a real
// socket. It records what the server asked of it (last create request, signals, killed sessions) so
// tests can assert on it. Snapshots are SnapshotInfo records (no files behind them). Not a model of
// the real daemon: only what the API layer needs.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "daemon/service.h"

namespace space::api::testing {

using daemon::ExecSession;
using nlohmann::json;

struct FakeStats {
  std::mutex mu;
  std::condition_variable cv;
  int sessions_destroyed_unfinished = 0;  // destroyed before exit: "the tree was killed"
  std::vector<int> signals;
  size_t max_unconsumed = 0;  // flow control high-water mark (flood)

  // Execs whose process tree was killed: by signal(SIGKILL), or by destroying the session
  // before it ended. Call with `mu` held.
  int kills() const {
    return sessions_destroyed_unfinished +
           static_cast<int>(std::count(signals.begin(), signals.end(), 9));
  }
};

class FakeSession : public ExecSession {
 public:
  FakeSession(std::vector<std::string> argv, bool stdin, FakeStats& stats,
              std::string snapshot = "")
      : argv_(std::move(argv)), stats_(stats) {
    const std::string& prog = argv_[0];
    if (prog == "missing") {
      Event e{Event::Kind::kExit};
      e.exit.exit_code = 127;
      e.exit.error = "exec \"missing\": No such file or directory";
      push(std::move(e));
      return;
    }
    if (prog == "flood") return;  // next_flood() makes its own events
    Event started{Event::Kind::kStarted, "", 42};
    started.snapshot = std::move(snapshot);
    push(std::move(started));
    if (prog == "echo") {
      std::string out;
      for (size_t i = 1; i < argv_.size(); ++i) out += (i > 1 ? " " : "") + argv_[i];
      push(Event{Event::Kind::kStdout, out + "\n"});
      exit_with(0);
    } else if (prog == "both") {
      push(Event{Event::Kind::kStdout, "out"});
      push(Event{Event::Kind::kStderr, std::string("err\0\xff", 5)});
      exit_with(3);
    }
    // cat: echoes stdin until it is closed; sleep: waits for a signal; flood: see next().
  }

  ~FakeSession() override {
    std::lock_guard lock(stats_.mu);
    if (!exited_) ++stats_.sessions_destroyed_unfinished;
    stats_.cv.notify_all();
  }

  Result<Event> next() override {
    if (argv_[0] == "flood") return next_flood();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !events_.empty(); });
    Event e = events_.front();
    if (e.kind != Event::Kind::kExit) events_.pop_front();
    if (e.kind == Event::Kind::kExit) exited_ = true;
    return e;
  }

  void consumed(size_t bytes) override {
    std::lock_guard lock(mu_);
    unconsumed_ -= bytes;
    cv_.notify_all();
  }

  Result<void> write_stdin(std::string_view bytes) override {
    if (argv_[0] != "cat") return fail(Code::kConflict, "stdin is closed");
    push(Event{Event::Kind::kStdout, std::string(bytes)});
    return {};
  }
  Result<void> close_stdin() override {
    if (argv_[0] == "cat") exit_with(0);
    return {};
  }
  void signal(int sig) override {
    {
      std::lock_guard lock(stats_.mu);
      stats_.signals.push_back(sig);
      stats_.cv.notify_all();
    }
    Event e{Event::Kind::kExit};
    e.exit.signal = sig;
    push(std::move(e));
  }

 private:
  // Writes 8 MiB in 64 KiB events but never runs more than 1 MiB ahead of consumed().
  Result<Event> next_flood() {
    std::unique_lock lock(mu_);
    if (!started_) {
      started_ = true;
      return Event{Event::Kind::kStarted, "", 7};
    }
    if (sent_ >= (8u << 20)) {
      exited_ = true;
      Event e{Event::Kind::kExit};
      e.exit.exit_code = 0;
      return e;
    }
    cv_.wait(lock, [&] { return unconsumed_ + 65536 <= (1u << 20) || !events_.empty(); });
    if (!events_.empty()) {  // a signal arrived
      exited_ = true;
      return events_.front();
    }
    unconsumed_ += 65536;
    sent_ += 65536;
    {
      std::lock_guard s(stats_.mu);
      stats_.max_unconsumed = std::max(stats_.max_unconsumed, unconsumed_);
    }
    return Event{Event::Kind::kStdout, std::string(65536, 'x')};
  }

  void push(Event e) {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
    cv_.notify_all();
  }
  void exit_with(int code) {
    Event e{Event::Kind::kExit};
    e.exit.exit_code = code;
    e.exit.duration_s = 0.5;
    push(std::move(e));
  }

  std::vector<std::string> argv_;
  FakeStats& stats_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool exited_ = false;
  bool started_ = false;
  size_t unconsumed_ = 0;
  size_t sent_ = 0;
};

class FakeService : public daemon::SandboxService {
 public:
  FakeStats stats;
  daemon::CreateRequest last_create;
  std::map<std::string, std::string> files;  // "/path" -> bytes
  std::map<std::string, uint32_t> modes;
  std::string last_tar;  // body of the last write_tar
  std::string last_tar_dir;
  std::string tar_to_serve = "TARDATA";  // what read_tar sends
  size_t image_bytes = 0;
  bool last_destroy_wait = true;  // the `wait` of the last destroy

  Result<daemon::SandboxInfo> create(const daemon::CreateRequest& req) override {
    std::lock_guard lock(mu_);
    last_create = req;
    std::string id = "sb_" + std::to_string(1000 + sandboxes_.size());
    daemon::SandboxInfo info{.id = id,
                             .state = daemon::SandboxState::kRunning,
                             .runtime = req.runtime,
                             .image = req.image,
                             .profile = req.profile,
                             .created_at = kCreatedAt,
                             .limits = {.memory = req.limits.memory_bytes,
                                        .cpus = req.limits.cpus,
                                        .pids = req.limits.pids,
                                        .disk = req.limits.disk_bytes}};
    sandboxes_[id] = info;
    return info;
  }
  Result<std::vector<daemon::SandboxInfo>> list() override {
    std::lock_guard lock(mu_);
    std::vector<daemon::SandboxInfo> out;
    for (auto& [id, info] : sandboxes_) out.push_back(info);
    return out;
  }
  Result<daemon::SandboxInfo> inspect(const std::string& id) override {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return unknown(id);
    return it->second;
  }
  Result<void> destroy(const std::string& id, bool force, bool wait = true) override {
    std::lock_guard lock(mu_);
    if (sandboxes_.erase(id) == 0) return unknown(id);
    last_destroy_wait = wait;
    return {};
  }
  Result<std::unique_ptr<ExecSession>> exec(const std::string& id,
                                            const daemon::ExecRequest& req) override {
    TRY(inspect(id));
    std::string snap;
    if (req.snapshot) snap = TRY(take(id, "", "exec")).id;
    return std::unique_ptr<ExecSession>(new FakeSession(req.argv, req.stdin, stats, snap));
  }
  Result<std::vector<daemon::ProcessInfo>> processes(const std::string& id) override {
    TRY(inspect(id));
    return std::vector<daemon::ProcessInfo>{
        {.pid = 1, .ppid = 0, .uid = 0, .state = "S", .argv = {"space-agent"}}};
  }
  Result<void> kill(const std::string& id, int pid, int sig) override {
    TRY(inspect(id));
    if (pid != 1) return fail(Code::kNotFound, "no process " + std::to_string(pid));
    std::lock_guard lock(stats.mu);
    stats.signals.push_back(sig);
    return {};
  }
  Result<daemon::FileStat> stat(const std::string& id, const std::string& path) override {
    TRY(inspect(id));
    std::lock_guard lock(mu_);
    if (path == "/" || path == "/dir") return daemon::FileStat{"dir", 0755, 0, ""};
    if (path == "/link") return daemon::FileStat{"symlink", 0777, 4, "/etc"};
    auto it = files.find(path);
    if (it == files.end()) return fail(Code::kNotFound, path + ": no such file");
    return daemon::FileStat{"file", modes[path], it->second.size(), ""};
  }
  Result<UniqueFd> connect_port(const std::string& id, uint16_t) override {
    TRY(inspect(id));
    return fail(Code::kUnimplemented, "the fake service forwards no ports");
  }
  Result<daemon::SandboxInfo> set_timeout(const std::string& id, double timeout_s) override {
    auto info = TRY(inspect(id));
    info.expires_at = kCreatedAt + timeout_s;
    return info;
  }
  Result<std::vector<daemon::DirEntry>> list_dir(const std::string& id,
                                                 const std::string& path) override {
    auto st = TRY(stat(id, path));
    if (st.type != "dir") return fail(Code::kInvalidArgument, path + " is not a directory");
    std::vector<daemon::DirEntry> out;
    std::string prefix = path == "/" ? "/" : path + "/";
    for (auto& [p, data] : files) {
      if (!p.starts_with(prefix) || p.find('/', prefix.size()) != std::string::npos) continue;
      out.push_back({p.substr(prefix.size()), {"file", modes[p], data.size(), ""}, 1700000000});
    }
    return out;
  }
  Result<void> read_file(const std::string& id, const std::string& path,
                         const daemon::ChunkSink& sink) override {
    std::string data;
    {
      std::lock_guard lock(mu_);
      data = files[path];
    }
    for (size_t i = 0; i < data.size(); i += 3) {
      if (!sink(std::string_view(data).substr(i, 3))) return fail(Code::kUnavailable, "aborted");
    }
    return {};
  }
  Result<void> read_tar(const std::string& id, const std::string& path,
                        const daemon::ChunkSink& sink) override {
    for (size_t i = 0; i < tar_to_serve.size(); i += 4096) {
      if (!sink(std::string_view(tar_to_serve).substr(i, 4096))) {
        return fail(Code::kUnavailable, "aborted");
      }
    }
    return {};
  }
  Result<void> write_file(const std::string& id, const std::string& path, uint32_t mode,
                          const daemon::ChunkSource& source, bool = false) override {
    TRY(inspect(id));
    std::string all = TRY(drain(source));
    std::lock_guard lock(mu_);
    files[path] = all;
    modes[path] = mode;
    return {};
  }
  Result<void> write_tar(const std::string& id, const std::string& path,
                         const daemon::ChunkSource& source) override {
    TRY(inspect(id));
    std::string all = TRY(drain(source));
    std::lock_guard lock(mu_);
    last_tar = all;
    last_tar_dir = path;
    return {};
  }
  Result<void> remove(const std::string& id, const std::string& path, bool recursive) override {
    TRY(inspect(id));
    std::lock_guard lock(mu_);
    if (files.erase(path) == 0) return fail(Code::kNotFound, path + ": no such file");
    return {};
  }
  Result<daemon::Diff> diff(const std::string& id) override {
    TRY(inspect(id));
    return daemon::Diff{.added = {"/root/new"}, .changed = {"/etc/hosts"}, .deleted = {"/tmp/x"}};
  }

  // Snapshots: records in a list, newest last; a snapshot outlives its sandbox. With
  // keeps_snapshots false the service answers as one without a snapshot store does.
  bool keeps_snapshots = true;
  Result<daemon::SnapshotInfo> snapshot(const std::string& id,
                                        const daemon::SnapshotRequest& req) override {
    if (!keeps_snapshots) return SandboxService::snapshot(id, req);
    return take(id, req.name, "manual");
  }
  Result<std::vector<daemon::SnapshotInfo>> list_snapshots(const std::string& id) override {
    if (!keeps_snapshots) return SandboxService::list_snapshots(id);
    bool live = inspect(id).has_value();
    std::lock_guard lock(mu_);
    std::vector<daemon::SnapshotInfo> out;
    for (auto it = snapshots_.rbegin(); it != snapshots_.rend(); ++it)
      if (it->sandbox == id) out.push_back(*it);
    if (!live && out.empty()) return unknown(id);
    return out;
  }
  Result<std::vector<daemon::SnapshotInfo>> all_snapshots() override {
    if (!keeps_snapshots) return SandboxService::all_snapshots();
    std::lock_guard lock(mu_);
    return std::vector<daemon::SnapshotInfo>(snapshots_.rbegin(), snapshots_.rend());
  }
  Result<daemon::SnapshotInfo> get_snapshot(const std::string& snap) override {
    if (!keeps_snapshots) return SandboxService::get_snapshot(snap);
    std::lock_guard lock(mu_);
    return find_snapshot(snap);
  }
  Result<void> delete_snapshot(const std::string& snap) override {
    if (!keeps_snapshots) return SandboxService::delete_snapshot(snap);
    std::lock_guard lock(mu_);
    daemon::SnapshotInfo s = TRY(find_snapshot(snap));
    std::erase_if(snapshots_, [&](const daemon::SnapshotInfo& x) { return x.id == s.id; });
    return {};
  }
  Result<daemon::SandboxInfo> rollback(const std::string& id, const std::string& snap) override {
    if (!keeps_snapshots) return SandboxService::rollback(id, snap);
    daemon::SandboxInfo sandbox = TRY(inspect(id));
    daemon::SnapshotInfo s;
    {
      std::lock_guard lock(mu_);
      s = TRY(find_snapshot(snap));
    }
    if (s.profile != sandbox.profile)
      return fail(Code::kPermissionDenied, "a snapshot never restores into another profile");
    if (s.image != sandbox.image)
      return fail(Code::kInvalidArgument, "the snapshot is of another image");
    daemon::SnapshotInfo saved = TRY(take(id, "", "rollback"));
    sandbox.rollback = daemon::SandboxInfo::Rollback{
        .snapshot = s.id, .saved_as = saved.id, .processes = "restarted"};
    return sandbox;
  }
  Result<daemon::SandboxInfo> restore(const std::string& snap,
                                      const std::optional<std::string>& profile) override {
    if (!keeps_snapshots) return SandboxService::restore(snap, profile);
    daemon::SnapshotInfo s;
    {
      std::lock_guard lock(mu_);
      s = TRY(find_snapshot(snap));
    }
    if (profile && *profile != s.profile)
      return fail(Code::kPermissionDenied, "a snapshot never restores into another profile");
    daemon::CreateRequest req;
    req.profile = s.profile;
    req.image = s.image;
    daemon::SandboxInfo info = TRY(create(req));
    restored_from = s.id;
    info.restored_from = s.id;
    return info;
  }
  Result<daemon::Diff> diff_since(const std::string& id, const std::string& snap) override {
    if (!keeps_snapshots) return SandboxService::diff_since(id, snap);
    TRY(inspect(id));
    std::lock_guard lock(mu_);
    daemon::SnapshotInfo s = TRY(find_snapshot(snap));
    return daemon::Diff{.added = {"/since/" + s.id}};
  }
  std::string restored_from;  // the snapshot id of the last restore

  Result<void> pause(const std::string& id) override {
    return set_state(id, daemon::SandboxState::kPaused);
  }
  Result<void> resume(const std::string& id) override {
    return set_state(id, daemon::SandboxState::kRunning);
  }
  Result<daemon::ImageInfo> import_image(const std::string& name,
                                         const daemon::ChunkSource& source) override {
    std::string all = TRY(drain(source));
    image_bytes = all.size();
    return daemon::ImageInfo{.name = name, .kind = "imported", .size_bytes = all.size()};
  }
  Result<std::vector<daemon::ImageInfo>> list_images() override {
    // Made three and a half days ago, as `space image ls` shows it ("3d ago").
    return std::vector<daemon::ImageInfo>{
        {.name = "host", .kind = "host", .created_at = now_s() - 3.5 * 86400}};
  }
  Result<void> remove_image(const std::string& name) override {
    if (name != "host") return fail(Code::kNotFound, "unknown image " + name);
    return fail(Code::kConflict, "the host image is built in");
  }
  daemon::Health health() override { return {.status = "ok"}; }
  std::string metrics() override { return "space_sandboxes 0\n"; }
  json doctor() override {
    return {{"namespaces", {{"user", true}}},
            {"caps", json::array({{{"name", "CAP_KILL"}, {"why", "signals"}}})}};
  }

 private:
  static std::unexpected<Error> unknown(const std::string& id) {
    return fail(Code::kNotFound, "unknown sandbox " + id + "; `space ls` lists sandboxes");
  }
  static constexpr double kCreatedAt = 1796205600;  // 2026-12-02T10:00:00Z

  // Call with mu_ held.
  Result<daemon::SnapshotInfo> find_snapshot(const std::string& ref) {
    for (auto it = snapshots_.rbegin(); it != snapshots_.rend(); ++it)
      if (it->id == ref || it->name == ref) return *it;
    return fail(Code::kNotFound, "unknown snapshot " + ref.substr(0, 80) +
                                     "; `space snapshots ID` lists a sandbox's snapshots");
  }
  Result<daemon::SnapshotInfo> take(const std::string& id, const std::string& name,
                                    const char* kind) {
    daemon::SandboxInfo sandbox = TRY(inspect(id));
    std::lock_guard lock(mu_);
    for (const auto& s : snapshots_)
      if (!name.empty() && s.name == name && s.profile == sandbox.profile)
        return fail(Code::kAlreadyExists, "a snapshot named " + name + " exists");
    char hex[32];
    std::snprintf(hex, sizeof hex, "%024x", static_cast<unsigned>(++snapshot_seq_));
    daemon::SnapshotInfo snap{.id = std::string("snap_") + hex,
                              .sandbox = id,
                              .profile = sandbox.profile,
                              .kind = kind,
                              .created_at = kCreatedAt,
                              .runtime = sandbox.runtime,
                              .image = sandbox.image,
                              .files = 3,
                              .logical_bytes = 3u << 20,
                              .new_bytes = 1u << 20,
                              .reused_files = 2,
                              .contents = "filesystem",
                              .processes = "restarted"};
    if (!name.empty()) snap.name = name;
    if (!snapshots_.empty()) snap.parent = snapshots_.back().id;
    snapshots_.push_back(snap);
    return snap;
  }
  static Result<std::string> drain(const daemon::ChunkSource& source) {
    std::string all, chunk;
    for (;;) {
      TRY_VOID(source(chunk));
      if (chunk.empty()) return all;
      all += chunk;
    }
  }
  Result<void> set_state(const std::string& id, daemon::SandboxState state) {
    std::lock_guard lock(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return unknown(id);
    it->second.state = state;
    return {};
  }

  std::mutex mu_;
  std::map<std::string, daemon::SandboxInfo> sandboxes_;
  std::vector<daemon::SnapshotInfo> snapshots_;
  int snapshot_seq_ = 0;
};

}  // namespace space::api::testing
