// The snapshot store (cas.h): opening the store directory, taking snapshots (walk, chunks, sealed
// manifest), loading, listing, removing, restoring, garbage collection and stats. Layout under
// the root (all 0700, owned by the daemon):
//   lock                      flock()ed: shared by take(), exclusive by gc()
//   manifests/<id>.json       sealed manifests (manifest.cc), written tmp + fsync + rename
//   chunks/ab/<62 hex>        zstd chunks (chunks.cc)
//   **/.*.tmp                 a write in progress, or left by a crash: gc() removes them
#include "snapshot/cas.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <system_error>
#include <unordered_set>

#include "common/clock.h"
#include "snapshot/internal.h"

namespace space::snapshot {

using detail::ChunkReader;
using detail::ChunkWriter;

namespace {

constexpr size_t kMinKeyBytes = 32;
constexpr size_t kMaxManifestBytes = Store::kMaxManifestFileBytes;

Result<UniqueFd> open_subdir(int root, const char* name) {
  if (::mkdirat(root, name, 0700) < 0 && errno != EEXIST) return fail_sys("mkdirat", name);
  int fd = ::openat(root, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fail_sys("openat", name);
  return UniqueFd(fd);
}

bool is_tmp(const std::string& name) { return name.size() > 4 && name.ends_with(".tmp"); }

Result<void> check_id(const std::string& id) {
  if (!detail::valid_id(id))
    return fail(Code::kInvalidArgument, "invalid snapshot id \"" + id.substr(0, 200) + "\"");
  return {};
}

}  // namespace

Store::Store(UniqueFd root, UniqueFd chunks, UniqueFd manifests, std::string key,
             StoreOptions options)
    : root_(std::move(root)),
      chunks_(std::move(chunks)),
      manifests_(std::move(manifests)),
      key_(std::move(key)),
      options_(std::move(options)) {}

Result<std::unique_ptr<Store>> Store::open(const std::filesystem::path& root, std::string key,
                                           StoreOptions options) {
  if (key.size() < kMinKeyBytes)
    return fail(Code::kInvalidArgument, "the snapshot key must have at least 32 bytes");
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return fail(Code::kInternal, "creating " + root.string() + ": " + ec.message());
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fail_sys("open", root.string());
  UniqueFd dir(fd);
  if (::fchmod(dir.get(), 0700) < 0) return fail_sys("fchmod", root.string());
  UniqueFd chunks = TRY_CTX(open_subdir(dir.get(), "chunks"), root.string());
  UniqueFd manifests = TRY_CTX(open_subdir(dir.get(), "manifests"), root.string());
  int lfd = ::openat(dir.get(), "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lfd < 0) return fail_sys("openat", root.string() + "/lock");
  ::close(lfd);
  return std::unique_ptr<Store>(new Store(std::move(dir), std::move(chunks), std::move(manifests),
                                          std::move(key), std::move(options)));
}

// A new open file description each time, so two calls in one process exclude each other too.
Result<UniqueFd> Store::lock(bool exclusive) const {
  int fd = ::openat(root_.get(), "lock", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fail_sys("openat", "lock");
  UniqueFd l(fd);
  while (::flock(l.get(), exclusive ? LOCK_EX : LOCK_SH) < 0)
    if (errno != EINTR) return fail_sys("flock", "lock");
  return l;
}

Result<Manifest> Store::take(int dir_fd, const std::string& id, const Manifest* parent,
                             std::map<std::string, std::string> labels,
                             const std::function<void(uint64_t)>& progress) {
  TRY_VOID(check_id(id));
  const std::string ctx = "taking snapshot " + id;
  for (const auto& [k, v] : labels)
    if (!detail::valid_utf8(k) || !detail::valid_utf8(v))
      return fail(Code::kInvalidArgument, ctx + ": label \"" + k + "\" is not UTF-8");
  struct stat st;
  const std::string file = id + ".json";
  if (::fstatat(manifests_.get(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
    return fail(Code::kAlreadyExists, ctx + ": a snapshot with this id exists");
  UniqueFd held = TRY_CTX(lock(false), ctx);

  Manifest m;
  m.id = id;
  m.parent = parent ? parent->id : "";
  m.labels = std::move(labels);
  m.created_at = options_.clock ? options_.clock() : now_s();
  ChunkWriter writer(chunks_.get());
  detail::TakeContext tc{&options_, &writer, parent, progress};
  TRY_VOID_CTX(detail::walk_tree(dir_fd, tc, &m), ctx);
  TRY_VOID_CTX(writer.sync(), ctx);
  m.new_bytes = writer.new_bytes();
  TRY_VOID_CTX(detail::validate(m, options_), ctx + ": the tree makes an invalid manifest");
  TRY_VOID_CTX(write_manifest(m), ctx);
  return m;
}

Result<void> Store::write_manifest(const Manifest& m) {
  return write_manifest_file(m.id, detail::seal(m, key_));
}

Result<void> Store::write_manifest_file(const std::string& id, const std::string& text) {
  const std::string name = id + ".json";
  const std::string tmp = "." + name + "." + detail::random_suffix() + ".tmp";
  int fd = ::openat(manifests_.get(), tmp.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail_sys("openat", "manifests/" + tmp);
  UniqueFd out(fd);
  auto written = [&]() -> Result<void> {
    TRY_VOID(detail::write_all(out.get(), text.data(), text.size()));
    TRY_VOID(detail::fsync_fd(out.get(), "manifests/" + tmp));
    out.reset();
    if (::renameat2(manifests_.get(), tmp.c_str(), manifests_.get(), name.c_str(),
                    RENAME_NOREPLACE) < 0) {
      if (errno == EEXIST) return fail(Code::kAlreadyExists, "a snapshot with this id exists");
      return fail_sys("renameat2", "manifests/" + name);
    }
    return {};
  }();
  if (!written) {
    ::unlinkat(manifests_.get(), tmp.c_str(), 0);
    return written;
  }
  return detail::fsync_fd(manifests_.get(), "manifests");
}

Result<std::string> Store::read_manifest_file(const std::string& id) const {
  TRY_VOID(check_id(id));
  const std::string name = id + ".json";
  int fd = ::openat(manifests_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return fail(Code::kNotFound, "no snapshot " + id);
    return fail(Error::sys("openat", "manifests/" + name).wrap("loading snapshot " + id));
  }
  UniqueFd in(fd);
  auto text = detail::read_bounded(in.get(), kMaxManifestBytes);
  if (!text) return fail(std::move(text.error()).wrap("loading manifest " + id));
  return text;
}

Result<Manifest> Store::load(const std::string& id) const {
  std::string text = TRY(read_manifest_file(id));
  return detail::unseal(text, id, key_, options_);
}

Result<Store::Sealed> Store::load_sealed(const std::string& id) const {
  Sealed out;
  out.file = TRY(read_manifest_file(id));
  out.manifest = TRY(detail::unseal(out.file, id, key_, options_));
  return out;
}

std::vector<std::string> Store::stored_chunks(const Manifest& m) {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen{detail::zero_chunk().id};
  for (const Entry& e : m.entries)
    for (const std::string& id : e.chunks)
      if (seen.insert(id).second) out.push_back(id);
  return out;
}

Result<bool> Store::has_chunk(const std::string& chunk_id) const {
  if (!detail::is_chunk_id(chunk_id))
    return fail(Code::kInvalidArgument, "\"" + chunk_id.substr(0, 80) + "\" is not a chunk id");
  return ChunkWriter(chunks_.get()).has(chunk_id);
}

Result<std::string> Store::chunk_file(const std::string& chunk_id) const {
  if (!detail::is_chunk_id(chunk_id))
    return fail(Code::kInvalidArgument, "\"" + chunk_id.substr(0, 80) + "\" is not a chunk id");
  const std::string rel = chunk_id.substr(0, 2) + "/" + chunk_id.substr(2);
  int fd = ::openat(chunks_.get(), rel.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return fail(Code::kNotFound, "chunk " + chunk_id + " is not in the store");
    return fail_sys("openat", "chunks/" + rel);
  }
  UniqueFd in(fd);
  struct stat st;
  if (::fstat(in.get(), &st) < 0) return fail_sys("fstat", "chunks/" + rel);
  if (!S_ISREG(st.st_mode))
    return fail(Code::kProtocol, "chunk " + chunk_id + " is corrupt (not a regular file)");
  auto data = detail::read_bounded(in.get(), kMaxChunkFileBytes);
  if (!data) {
    if (data.error().code() == Code::kProtocol)
      return fail(Code::kProtocol, "chunk " + chunk_id + " is corrupt (larger than any chunk)");
    return fail(std::move(data.error()).wrap("reading chunk " + chunk_id));
  }
  TRY_VOID(detail::check_chunk_file(chunk_id, *data));
  return data;
}

Result<Store::ImportResult> Store::import(const std::string& id, const std::string& sealed_file,
                                          const ChunkFetcher& fetch) {
  TRY_VOID(check_id(id));
  const std::string ctx = "importing snapshot " + id;
  ImportResult out;
  if (auto here = read_manifest_file(id); here) {
    if (*here == sealed_file) {
      out.already_present = true;
      return out;
    }
    return fail(Code::kAlreadyExists, ctx + ": another snapshot with this id is stored here");
  } else if (here.error().code() != Code::kNotFound) {
    return fail(std::move(here.error()).wrap(ctx));
  }
  if (sealed_file.size() > kMaxManifestFileBytes)
    return fail(Code::kProtocol, ctx + ": manifest " + id + " is larger than " +
                                     std::to_string(kMaxManifestFileBytes) + " bytes");
  // The MAC first: nothing of the manifest (not even its chunk list) is used before it holds.
  Manifest m = TRY_CTX(detail::unseal(sealed_file, id, key_, options_), ctx);
  // Shared with take(): gc() cannot free the chunks kept here before the manifest lands.
  UniqueFd held = TRY_CTX(lock(false), ctx);
  ChunkWriter writer(chunks_.get());
  for (const std::string& chunk : stored_chunks(m)) {
    if (TRY_CTX(writer.has(chunk), ctx)) {
      ++out.chunks_present;
      continue;
    }
    std::string file = TRY_CTX(fetch(chunk), ctx + ": fetching chunk " + chunk);
    TRY_VOID_CTX(detail::check_chunk_file(chunk, file), ctx);
    TRY_VOID_CTX(writer.put_file(chunk, file), ctx);
    ++out.chunks_fetched;
    out.bytes_fetched += file.size();
  }
  TRY_VOID_CTX(writer.sync(), ctx);
  if (auto w = write_manifest_file(id, sealed_file); !w) {
    // Another import of the same snapshot (a concurrent pull) landed first: the same bytes are
    // success.
    if (w.error().code() == Code::kAlreadyExists) {
      if (auto here = read_manifest_file(id); here && *here == sealed_file) {
        out.already_present = true;
        return out;
      }
    }
    return fail(std::move(w.error()).wrap(ctx));
  }
  return out;
}

std::vector<std::string> Store::list() const {
  std::vector<std::string> ids;
  auto names = detail::list_dir(manifests_.get());
  if (!names) return ids;
  for (const std::string& n : *names) {
    if (!n.ends_with(".json")) continue;
    std::string id = n.substr(0, n.size() - 5);
    if (detail::valid_id(id)) ids.push_back(std::move(id));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

Result<void> Store::remove(const std::string& id) {
  TRY_VOID(check_id(id));
  const std::string name = id + ".json";
  if (::unlinkat(manifests_.get(), name.c_str(), 0) < 0) {
    if (errno == ENOENT) return fail(Code::kNotFound, "no snapshot " + id);
    return fail(Error::sys("unlinkat", "manifests/" + name).wrap("removing snapshot " + id));
  }
  return detail::fsync_fd(manifests_.get(), "manifests");
}

Result<void> Store::restore(const Manifest& m, int dir_fd) const {
  ChunkReader reader(chunks_.get());
  auto r = detail::restore_tree(m, dir_fd, reader, options_);
  if (!r) return fail(std::move(r.error()).wrap("snapshot " + m.id));
  return {};
}

Result<void> Store::verify(const Manifest& m) const {
  ChunkReader reader(chunks_.get());
  std::unordered_set<std::string> seen;
  std::vector<uint8_t> buf(detail::kMaxChunk);
  seen.insert(detail::zero_chunk().id);  // known content, restored as a hole without reading
  for (const Entry& e : m.entries)
    for (const std::string& id : e.chunks)
      if (seen.insert(id).second)
        TRY_VOID_CTX(reader.get(id, e.path, buf.data(), buf.size()), "snapshot " + m.id);
  return {};
}

Result<Store::GcResult> Store::gc() {
  UniqueFd held = TRY_CTX(lock(true), "gc");
  GcResult out;
  // With the lock held alone no take() is writing, so every temporary file is a crash's.
  for (const std::string& n : TRY_CTX(detail::list_dir(manifests_.get()), "gc: manifests"))
    if (is_tmp(n)) ::unlinkat(manifests_.get(), n.c_str(), 0);

  std::unordered_set<std::string> live;
  std::string unreadable;
  for (const std::string& id : list()) {
    auto m = load(id);
    if (!m) {
      if (m.error().code() == Code::kNotFound) continue;  // removed meanwhile
      unreadable += (unreadable.empty() ? "" : "; ") + m.error().message();
      continue;
    }
    for (const Entry& e : m->entries) live.insert(e.chunks.begin(), e.chunks.end());
  }
  for (const std::string& sub : TRY_CTX(detail::list_dir(chunks_.get()), "gc: chunks")) {
    int fd = ::openat(chunks_.get(), sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // not a chunk directory
    UniqueFd dir(fd);
    bool removed = false;
    for (const std::string& n : TRY_CTX(detail::list_dir(dir.get()), "gc: chunks/" + sub)) {
      struct stat st;
      if (::fstatat(dir.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
      const bool tmp = is_tmp(n);
      const std::string id = sub + n;
      if (!tmp && (!detail::is_chunk_id(id) || !unreadable.empty() || live.contains(id)))
        continue;  // unknown files are left alone; nothing is freed while a manifest is unread
      if (::unlinkat(dir.get(), n.c_str(), 0) < 0) continue;
      removed = true;
      if (tmp) continue;
      ++out.chunks;
      out.bytes += static_cast<uint64_t>(st.st_size);
    }
    if (removed) TRY_VOID_CTX(detail::fsync_fd(dir.get(), "chunks/" + sub), "gc");
  }
  if (!unreadable.empty())
    return fail(Code::kProtocol,
                "gc freed no chunk, since some manifests do not load (remove "
                "or restore them): " +
                    unreadable);
  return out;
}

StoreStats Store::stats() const {
  StoreStats s;
  auto subs = detail::list_dir(chunks_.get());
  if (!subs) return s;
  for (const std::string& sub : *subs) {
    int fd = ::openat(chunks_.get(), sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    UniqueFd dir(fd);
    auto names = detail::list_dir(dir.get());
    if (!names) continue;
    for (const std::string& n : *names) {
      struct stat st;
      if (n.ends_with(detail::kQuarantineSuffix)) ++s.quarantined;
      if (!detail::is_chunk_id(sub + n) ||
          ::fstatat(dir.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
        continue;
      ++s.chunks;
      s.stored_bytes += static_cast<uint64_t>(st.st_size);
    }
  }
  return s;
}

Result<Manifest> Store::scan(int dir_fd, const StoreOptions& options) {
  Manifest m;
  detail::TakeContext tc{&options, nullptr, nullptr, {}};
  TRY_VOID_CTX(detail::walk_tree(dir_fd, tc, &m), "scanning the tree");
  return m;
}

nlohmann::json Store::diff(const Manifest* from, const Manifest& to) {
  return detail::diff(from, to);
}

}  // namespace space::snapshot
