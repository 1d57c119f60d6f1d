// File operations on a sandbox: single files and tar streams in both directions, and removal
// (`space diff` is diff.cc). Paths are resolved by the agent inside the sandbox (openat2
// RESOLVE_IN_ROOT there); tar archives from clients are untrusted and their entry names are
// checked here before anything is written.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "daemon/archive_names.h"
#include "daemon/daemon.h"

namespace space::daemon {
using nlohmann::json;
using proto::FrameType;

namespace {

constexpr auto kTransferIdle = std::chrono::seconds(60);
constexpr size_t kChunk = 256 * 1024;
constexpr size_t kMaxWalkEntries = 1000000;

Result<void> check_path(const std::string& p) {
  if (p.empty() || p[0] != '/')
    return fail(Code::kInvalidArgument, "path must be absolute inside the sandbox, like /root/x");
  if (p.size() > 4096) return fail(Code::kInvalidArgument, "path is longer than 4096 bytes");
  if (p.find('\0') != std::string::npos)
    return fail(Code::kInvalidArgument, "path contains a NUL byte");
  return {};
}

struct StreamCloser {
  AgentConn* conn;
  uint32_t id;
  ~StreamCloser() { conn->close_stream(id); }
};

// Runs a `read` of one file, feeding its bytes to `sink`. Returns the size read.
Result<uint64_t> read_into(AgentConn& conn, const std::string& path,
                           const std::function<bool(std::string_view)>& sink) {
  auto s = conn.open_stream();
  StreamCloser closer{&conn, s->id()};
  TRY_VOID(conn.send_json(FrameType::kRequest, s->id(), {{"op", "read"}, {"path", path}}));
  uint64_t total = 0;
  for (;;) {
    auto f = TRY(s->pop(Clock::now() + kTransferIdle));
    if (f.type == FrameType::kData) {
      if (f.payload.empty()) continue;  // end of data; the response follows
      total += f.payload.size();
      if (!sink(f.payload)) {
        // The client went away: cancel the transfer in the agent instead of draining it (a
        // huge sparse file would otherwise keep a daemon thread busy for hours).
        (void)conn.send_json(FrameType::kSignal, s->id(), {{"signal", 9}});
        return fail(Code::kUnavailable, "the client stopped reading " + path);
      }
      conn.credit(*s, f.payload.size());
      continue;
    }
    if (f.type != FrameType::kResponse) continue;
    auto j = json::parse(f.payload, nullptr, false);
    if (!j.is_object()) return fail(Code::kProtocol, "the agent sent a malformed response");
    if (!agent_field(j, "ok", false))
      return fail(
          AgentConn::agent_error(agent_field(j, "error", json::object()), "reading " + path));
    return total;
  }
}

struct Entry {
  std::string path;  // relative to the walked directory
  std::string type;
  uint32_t mode = 0;
  uint64_t size = 0;
  int64_t mtime = 0;
  std::string target;
};

// depth 0: the whole tree; 1: the directory's own entries. At most `max_entries`.
Result<std::vector<Entry>> walk(AgentConn& conn, const std::string& path, int depth = 0,
                                size_t max_entries = kMaxWalkEntries) {
  auto s = conn.open_stream();
  StreamCloser closer{&conn, s->id()};
  json req = {{"op", "walk"}, {"path", path}};
  if (depth > 0) req["depth"] = depth;
  TRY_VOID(conn.send_json(FrameType::kRequest, s->id(), req));
  std::vector<Entry> out;
  std::string pending;
  for (;;) {
    auto f = TRY(s->pop(Clock::now() + kTransferIdle));
    if (f.type == FrameType::kData) {
      conn.credit(*s, f.payload.size());
      pending += f.payload;
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        auto j = json::parse(pending.substr(0, nl), nullptr, false);
        pending.erase(0, nl + 1);
        if (!j.is_object() || !j.contains("path") || !j["path"].is_string() ||
            !j.contains("type") || !j["type"].is_string())
          return fail(Code::kProtocol, "the agent sent a malformed walk entry");
        Entry e;
        e.path = j["path"].get<std::string>();
        e.type = j["type"].get<std::string>();
        e.mode = agent_field(j, "mode", 0644u) & 07777;
        e.size = agent_field(j, "size", uint64_t{0});
        e.mtime = agent_field(j, "mtime", int64_t{0});
        if (j.contains("target") && j["target"].is_string()) e.target = j["target"];
        out.push_back(std::move(e));
        if (out.size() > max_entries)
          return fail(Code::kResourceExhausted,
                      "more than " + std::to_string(max_entries) + " entries under " + path);
      }
      if (pending.size() > 1 << 20) return fail(Code::kProtocol, "walk entry too long");
      continue;
    }
    if (f.type != FrameType::kResponse) continue;
    auto j = json::parse(f.payload, nullptr, false);
    if (!j.is_object()) return fail(Code::kProtocol, "the agent sent a malformed response");
    if (!agent_field(j, "ok", false))
      return fail(
          AgentConn::agent_error(agent_field(j, "error", json::object()), "listing " + path));
    return out;
  }
}

// Sends `source`'s bytes as a `write` of `path`.
Result<void> write_from(AgentConn& conn, const std::string& path, uint32_t mode, bool parents,
                        const ChunkSource& source) {
  auto s = conn.open_stream();
  StreamCloser closer{&conn, s->id()};
  TRY_VOID(conn.send_json(
      FrameType::kRequest, s->id(),
      {{"op", "write"}, {"path", path}, {"mode", mode & 07777}, {"parents", parents}}));
  auto early = [&]() -> std::optional<Error> {
    while (auto f = s->try_pop()) {
      if (f->type != FrameType::kResponse) continue;
      auto j = json::parse(f->payload, nullptr, false);
      if (j.is_object() && !agent_field(j, "ok", false))
        return AgentConn::agent_error(agent_field(j, "error", json::object()), "writing " + path);
      return Error(Code::kProtocol, "the agent answered a write before its data ended");
    }
    return std::nullopt;
  };
  std::string buf;
  for (;;) {
    TRY_VOID(source(buf));
    if (auto e = early()) return fail(std::move(*e));
    if (buf.empty()) break;
    std::string_view v(buf);
    while (!v.empty()) {
      size_t n = std::min(v.size(), kChunk);
      TRY_VOID(conn.send(FrameType::kData, s->id(), v.substr(0, n)));
      v.remove_prefix(n);
    }
  }
  TRY_VOID(conn.send(FrameType::kData, s->id(), {}));
  for (;;) {
    auto f = TRY(s->pop(Clock::now() + kTransferIdle));
    if (f.type != FrameType::kResponse) continue;
    auto j = json::parse(f.payload, nullptr, false);
    if (!j.is_object()) return fail(Code::kProtocol, "the agent sent a malformed response");
    if (!agent_field(j, "ok", false))
      return fail(
          AgentConn::agent_error(agent_field(j, "error", json::object()), "writing " + path));
    return {};
  }
}

std::string join(const std::string& dir, const std::string& rel) {
  if (rel.empty() || rel == ".") return dir;
  return dir == "/" ? "/" + rel : dir + "/" + rel;
}

}  // namespace

namespace {

// Records one file API operation in the audit log when it goes out of scope: path, bytes
// moved and whether it succeeded (set `ok` just before the successful return).
struct FileAudit {
  Daemon* d;
  std::string id, kind, path;
  uint64_t bytes = 0;
  bool ok = false;
  json extra = json::object();
  ~FileAudit() {
    json j = {{"path", path}, {"bytes", bytes}, {"ok", ok}};
    j.update(extra);
    d->audit(id, kind, std::move(j));
  }
  ChunkSink counting(const ChunkSink& sink) {
    return [this, &sink](std::string_view b) {
      bytes += b.size();
      return sink(b);
    };
  }
  ChunkSource counting(const ChunkSource& source) {
    return [this, &source](std::string& out) -> Result<void> {
      TRY_VOID(source(out));
      bytes += out.size();
      return {};
    };
  }
};

}  // namespace

Result<FileStat> Daemon::stat(const std::string& id, const std::string& path) {
  TRY_VOID(check_path(path));
  auto sb = TRY(running(id));
  auto r = TRY_CTX(sb->conn->request({{"op", "stat"}, {"path", path}}), "stat " + path);
  if (!r.contains("stat") || !r["stat"].is_object())
    return fail(Code::kProtocol, "the agent sent a malformed stat");
  auto& st = r["stat"];
  FileStat fs;
  fs.type = agent_field(st, "type", std::string("other"));
  if (fs.type != "file" && fs.type != "dir" && fs.type != "symlink") fs.type = "other";
  fs.mode = agent_field(st, "mode", 0u) & 07777;
  fs.size = agent_field(st, "size", uint64_t{0});
  if (st.contains("target") && st["target"].is_string())
    fs.target = st["target"].get<std::string>().substr(0, 4096);
  return fs;
}

Result<std::vector<DirEntry>> Daemon::list_dir(const std::string& id, const std::string& path) {
  TRY_VOID(check_path(path));
  auto sb = TRY(running(id));
  FileAudit au{this, id, "file.list", path};
  auto entries = TRY(walk(*sb->conn, path, 1, kMaxListEntries));
  std::vector<DirEntry> out;
  out.reserve(entries.size());
  for (auto& e : entries) {
    if (e.path.empty() || e.path.find('/') != std::string::npos)
      return fail(Code::kProtocol, "the agent listed \"" + e.path + "\" outside " + path);
    DirEntry d;
    d.name = std::move(e.path);
    d.stat.type = e.type;
    if (d.stat.type != "file" && d.stat.type != "dir" && d.stat.type != "symlink")
      d.stat.type = "other";
    d.stat.mode = e.mode;
    d.stat.size = e.size;
    d.stat.target = e.target.substr(0, 4096);
    d.mtime = e.mtime;
    out.push_back(std::move(d));
  }
  au.extra["entries"] = out.size();
  au.ok = true;
  return out;
}

Result<void> Daemon::read_file(const std::string& id, const std::string& path,
                               const ChunkSink& sink) {
  TRY_VOID(check_path(path));
  auto sb = TRY(running(id));
  FileAudit au{this, id, "file.read", path};
  TRY_VOID(read_into(*sb->conn, path, au.counting(sink)));
  au.ok = true;
  return {};
}

Result<void> Daemon::read_tar(const std::string& id, const std::string& path,
                              const ChunkSink& sink) {
  TRY_VOID(check_path(path));
  auto sb = TRY(running(id));
  FileAudit au{this, id, "file.read_tar", path};
  ChunkSink counted = au.counting(sink);
  auto entries = TRY(walk(*sb->conn, path));
  au.extra["entries"] = entries.size();
  struct Ctx {
    const ChunkSink* sink;
    bool failed = false;
  } ctx{&counted};
  archive* a = archive_write_new();
  struct Free {
    archive* a;
    ~Free() { archive_write_free(a); }
  } free_a{a};
  archive_write_set_format_pax_restricted(a);
  auto writer = [](archive*, void* p, const void* buf, size_t n) -> la_ssize_t {
    auto* c = static_cast<Ctx*>(p);
    if (!(*c->sink)(std::string_view(static_cast<const char*>(buf), n))) {
      c->failed = true;
      return -1;
    }
    return static_cast<la_ssize_t>(n);
  };
  if (archive_write_open(a, &ctx, nullptr, writer, nullptr) != ARCHIVE_OK)
    return fail(Code::kInternal, std::string("tar: ") + archive_error_string(a));
  auto stop = [&](const char* what) {
    if (ctx.failed) return Error(Code::kUnavailable, "the client stopped reading the archive");
    return Error(Code::kInternal, std::string(what) + ": " + archive_error_string(a));
  };
  for (auto& e : entries) {
    if (e.path.empty() || e.path == ".") continue;
    archive_entry* ae = archive_entry_new();
    struct FreeE {
      archive_entry* e;
      ~FreeE() { archive_entry_free(e); }
    } fe{ae};
    archive_entry_set_pathname(ae, e.path.c_str());
    archive_entry_set_mtime(ae, e.mtime, 0);
    archive_entry_set_perm(ae, e.mode);
    if (e.type == "dir") {
      archive_entry_set_filetype(ae, AE_IFDIR);
    } else if (e.type == "symlink") {
      archive_entry_set_filetype(ae, AE_IFLNK);
      archive_entry_set_symlink(ae, e.target.c_str());
    } else if (e.type == "file") {
      archive_entry_set_filetype(ae, AE_IFREG);
      archive_entry_set_size(ae, static_cast<la_int64_t>(e.size));
    } else {
      continue;  // devices, fifos, sockets are not copied
    }
    if (archive_write_header(a, ae) != ARCHIVE_OK) return fail(stop("tar header"));
    if (e.type != "file") continue;
    uint64_t written = 0;
    auto r = read_into(*sb->conn, join(path, e.path), [&](std::string_view d) {
      // The file may have changed since the walk: the header's size wins.
      size_t n = static_cast<size_t>(std::min<uint64_t>(d.size(), e.size - written));
      if (n > 0 && archive_write_data(a, d.data(), n) < 0) return false;
      written += n;
      return true;
    });
    if (!r) {
      if (ctx.failed) return fail(stop("tar data"));
      if (r.error().code() != Code::kNotFound) return fail(std::move(r.error()));
    }
    static const std::string zeros(64 * 1024, '\0');
    while (written < e.size) {  // it shrank or vanished: pad to the declared size
      size_t n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), e.size - written));
      if (archive_write_data(a, zeros.data(), n) < 0) return fail(stop("tar data"));
      written += n;
    }
  }
  if (archive_write_close(a) != ARCHIVE_OK) return fail(stop("finishing tar"));
  au.ok = true;
  return {};
}

Result<void> Daemon::put_file(AgentConn& conn, const std::string& path, uint32_t mode,
                              std::string_view bytes) {
  bool sent = false;
  return write_from(conn, path, mode, true, [&](std::string& out) -> Result<void> {
    out.clear();
    if (!sent) out.assign(bytes);
    sent = true;
    return {};
  });
}

Result<void> Daemon::write_file(const std::string& id, const std::string& path, uint32_t mode,
                                const ChunkSource& source, bool parents) {
  TRY_VOID(check_path(path));
  auto sb = TRY(running(id));
  FileAudit au{this, id, "file.write", path};
  au.extra["mode"] = mode;
  TRY_VOID(write_from(*sb->conn, path, mode, parents, au.counting(source)));
  au.ok = true;
  return {};
}

Result<void> Daemon::write_tar(const std::string& id, const std::string& path,
                               const ChunkSource& source) {
  TRY_VOID(check_path(path));
  auto sb = TRY(running(id));
  FileAudit au{this, id, "file.write_tar", path};
  ChunkSource counted_source = au.counting(source);
  AgentConn& conn = *sb->conn;
  auto mk = conn.request({{"op", "mkdir"}, {"path", path}, {"mode", 0755}, {"parents", true}});
  if (!mk && mk.error().code() != Code::kAlreadyExists)
    return fail(std::move(mk.error()).wrap("creating " + path));

  auto upload = TRY(UploadArchive::open(counted_source, "tar upload"));
  archive* in = upload->get();
  for (;;) {
    archive_entry* e = nullptr;
    int r = archive_read_next_header(in, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return fail(upload->error());
    std::string rel = TRY(clean_archive_name(archive_entry_pathname(e)));
    std::string dst = join(path, rel);
    uint32_t mode = archive_entry_perm(e) & 07777;
    switch (archive_entry_filetype(e)) {
      case AE_IFDIR: {
        if (rel.empty()) break;
        auto m = conn.request({{"op", "mkdir"}, {"path", dst}, {"mode", mode}, {"parents", true}});
        if (!m && m.error().code() != Code::kAlreadyExists) return fail(std::move(m.error()));
        break;
      }
      case AE_IFLNK: {
        (void)conn.request({{"op", "remove"}, {"path", dst}, {"recursive", false}});
        TRY_VOID(
            conn.request({{"op", "symlink"},
                          {"path", dst},
                          {"target", archive_entry_symlink(e) ? archive_entry_symlink(e) : ""}}));
        break;
      }
      case AE_IFREG: {
        if (archive_entry_hardlink(e))
          return fail(Code::kUnimplemented,
                      "tar entry \"" + rel + "\" is a hard link; hard links are not copied yet");
        bool eof = false;
        TRY_VOID(write_from(conn, dst, mode, true, [&](std::string& out) -> Result<void> {
          out.clear();
          if (eof) return {};
          out.resize(kChunk);
          la_ssize_t n = archive_read_data(in, out.data(), out.size());
          if (n < 0) return fail(upload->error());
          out.resize(static_cast<size_t>(n));
          if (n == 0) eof = true;
          return {};
        }));
        break;
      }
      default:
        break;  // devices, fifos and sockets are not copied into sandboxes
    }
  }
  au.ok = true;
  return {};
}

Result<void> Daemon::remove(const std::string& id, const std::string& path, bool recursive) {
  TRY_VOID(check_path(path));
  if (path == "/") return fail(Code::kInvalidArgument, "refusing to remove /");
  auto sb = TRY(running(id));
  FileAudit au{this, id, "file.remove", path};
  au.extra["recursive"] = recursive;
  TRY_VOID(sb->conn->request({{"op", "remove"}, {"path", path}, {"recursive", recursive}}));
  au.ok = true;
  return {};
}

}  // namespace space::daemon
