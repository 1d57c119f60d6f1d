// Chunk files: chunks/<first 2 hex of the SHA-256>/<other 62>, each one zstd frame (level 3) of
// at most 4 MiB of plain bytes. A chunk is written once: to a temporary file in its directory,
// made durable (a batch at a time), then renamed into place without replacing
// (RENAME_NOREPLACE); a chunk already there is never rewritten, which is the dedup. Reading treats
// the file as untrusted: size-bounded before and after decompression, and its hash checked against
// its name.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "snapshot/internal.h"

namespace space::snapshot::detail {
namespace {

constexpr int kZstdLevel = 3;

std::string sub_of(const std::string& id) { return id.substr(0, 2); }
std::string name_of(const std::string& id) { return id.substr(2); }

}  // namespace

ChunkWriter::ChunkWriter(int chunks_dir) : dir_(chunks_dir), cctx_(ZSTD_createCCtx()) {
  zbuf_.resize(ZSTD_compressBound(kMaxChunk));
}

ChunkWriter::~ChunkWriter() {
  for (const Pending& p : pending_) ::unlinkat(dir_, p.tmp.c_str(), 0);
  ZSTD_freeCCtx(cctx_);
}

Result<bool> ChunkWriter::has(const std::string& id) const {
  if (pending_ids_.contains(id)) return true;
  struct stat st;
  std::string rel = sub_of(id) + "/" + name_of(id);
  if (::fstatat(dir_, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return S_ISREG(st.st_mode);
  if (errno == ENOENT) return false;
  return fail_sys("fstatat", "chunk " + id);
}

Result<std::string> ChunkWriter::put(const uint8_t* data, size_t n) {
  std::string id = sha256_hex(data, n);
  if (TRY(has(id))) return id;
  if (new_chunks_ >= fail_after_for_test)
    return fail(Code::kInternal,
                "test hook: failing after " + std::to_string(new_chunks_) + " new chunks");
  if (!cctx_) return fail(Code::kInternal, "ZSTD_createCCtx failed");
  size_t z = ZSTD_compressCCtx(cctx_, zbuf_.data(), zbuf_.size(), data, n, kZstdLevel);
  if (ZSTD_isError(z))
    return fail(Code::kInternal, std::string("zstd compression: ") + ZSTD_getErrorName(z));

  TRY_VOID(stage(id, zbuf_.data(), z));
  return id;
}

Result<void> ChunkWriter::put_file(const std::string& id, std::string_view file) {
  if (!is_chunk_id(id)) return fail(Code::kInvalidArgument, "not a chunk id");
  if (TRY(has(id))) return {};
  return stage(id, file.data(), file.size());
}

// Writes one chunk file (compressed bytes) to a temporary name and queues it for commit().
Result<void> ChunkWriter::stage(const std::string& id, const void* file, size_t z) {
  const std::string sub = sub_of(id);
  if (!subdirs_.contains(sub)) {
    if (::mkdirat(dir_, sub.c_str(), 0700) < 0 && errno != EEXIST)
      return fail_sys("mkdirat", "chunks/" + sub);
    subdirs_.insert(sub);
  }
  const std::string tmp = sub + "/." + name_of(id) + "." + random_suffix() + ".tmp";
  int fd = ::openat(dir_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail_sys("openat", "chunks/" + tmp);
  UniqueFd out(fd);
  if (auto w = write_all(out.get(), file, z); !w) {
    ::unlinkat(dir_, tmp.c_str(), 0);
    return fail(std::move(w.error()).wrap("writing chunk " + id));
  }
  pending_.push_back({id, tmp, z});
  pending_ids_.insert(id);
  pending_bytes_ += z;
  ++new_chunks_;
  if (pending_.size() >= batch_chunks || pending_bytes_ >= batch_bytes) TRY_VOID(commit());
  return {};
}

// One syncfs() for the batch (the daemon owns this file system's store; other writers' dirty
// data is flushed too, which costs time, never correctness), then the renames.
Result<void> ChunkWriter::commit() {
  if (pending_.empty()) return {};
  if (::syncfs(dir_) < 0) return fail_sys("syncfs", "chunks");
  std::vector<Pending> batch = std::move(pending_);
  pending_.clear();
  pending_ids_.clear();
  pending_bytes_ = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Pending& p = batch[i];
    const std::string final_name = sub_of(p.id) + "/" + name_of(p.id);
    if (::renameat2(dir_, p.tmp.c_str(), dir_, final_name.c_str(), RENAME_NOREPLACE) < 0) {
      int err = errno;
      ::unlinkat(dir_, p.tmp.c_str(), 0);
      if (err == EEXIST) continue;  // a concurrent take stored the same bytes first
      for (size_t k = i + 1; k < batch.size(); ++k) ::unlinkat(dir_, batch[k].tmp.c_str(), 0);
      return fail_sys("renameat2", "chunk " + p.id, err);
    }
    new_bytes_ += p.bytes;
    committed_ = true;
  }
  return {};
}

Result<void> ChunkWriter::sync() {
  TRY_VOID(commit());
  if (committed_ && ::syncfs(dir_) < 0) return fail_sys("syncfs", "chunks");  // the renames
  committed_ = false;
  return {};
}

ChunkReader::ChunkReader(int chunks_dir) : dir_(chunks_dir), dctx_(ZSTD_createDCtx()) {}

ChunkReader::~ChunkReader() { ZSTD_freeDCtx(dctx_); }

Result<size_t> ChunkReader::get(const std::string& id, const std::string& path, uint8_t* out,
                                size_t cap) const {
  const std::string what = "chunk " + id + " of " + (path.empty() ? "/" : path);
  if (!is_chunk_id(id)) return fail(Code::kProtocol, what + " is corrupt (not a chunk id)");
  const std::string rel = sub_of(id) + "/" + name_of(id);
  // A chunk file that fails its checks is moved aside (kept as <name>.corrupt for a look, never
  // read again): the next snapshot that holds these bytes stores them anew instead of
  // referencing the bad file, and every snapshot that names the chunk restores again.
  auto corrupt = [&](std::string_view why) {
    std::string aside = rel + std::string(kQuarantineSuffix);
    bool moved = ::renameat(dir_, rel.c_str(), dir_, aside.c_str()) == 0;
    return fail(Code::kProtocol,
                what + " is corrupt (" + std::string(why) + ")" +
                    (moved ? "; it was moved aside (" + aside +
                                 "): the next snapshot holding these bytes stores them anew"
                           : std::string()));
  };
  if (!dctx_) return fail(Code::kInternal, "ZSTD_createDCtx failed");
  int fd = ::openat(dir_, rel.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return fail(Code::kProtocol, what + " is missing from the store");
    return fail(Error::sys("openat", "chunks/" + rel).wrap(what));
  }
  UniqueFd in(fd);
  struct stat st;
  if (::fstat(in.get(), &st) < 0) return fail(Error::sys("fstat").wrap(what));
  if (!S_ISREG(st.st_mode)) return corrupt("not a regular file");
  auto data = read_bounded(in.get(), ZSTD_compressBound(kMaxChunk));
  if (!data) {
    if (data.error().code() == Code::kProtocol) return corrupt("larger than any chunk");
    return fail(std::move(data.error()).wrap(what));
  }
  unsigned long long declared = ZSTD_getFrameContentSize(data->data(), data->size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) return corrupt("not zstd data");
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared > cap)
    return corrupt("holds " + std::to_string(declared) + " bytes, more than the " +
                   std::to_string(cap) + " left of the file");
  size_t n = ZSTD_decompressDCtx(dctx_, out, cap, data->data(), data->size());
  if (ZSTD_isError(n)) return corrupt(std::string("truncated or damaged: ") + ZSTD_getErrorName(n));
  if (sha256_hex(out, n) != id) return corrupt("hash mismatch");
  return n;
}

Result<void> check_chunk_file(const std::string& id, std::string_view file) {
  auto corrupt = [&](std::string_view why) {
    return fail(Code::kProtocol,
                "chunk " + id.substr(0, 64) + " is corrupt (" + std::string(why) + ")");
  };
  if (!is_chunk_id(id)) return corrupt("not a chunk id");
  if (file.size() > ZSTD_compressBound(kMaxChunk)) return corrupt("larger than any chunk");
  unsigned long long declared = ZSTD_getFrameContentSize(file.data(), file.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR) return corrupt("not zstd data");
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared > kMaxChunk)
    return corrupt("holds more than a chunk's " + std::to_string(kMaxChunk) + " bytes");
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  if (!dctx) return fail(Code::kInternal, "ZSTD_createDCtx failed");
  std::vector<uint8_t> plain(kMaxChunk);
  size_t n = ZSTD_decompressDCtx(dctx, plain.data(), plain.size(), file.data(), file.size());
  ZSTD_freeDCtx(dctx);
  if (ZSTD_isError(n)) return corrupt(std::string("truncated or damaged: ") + ZSTD_getErrorName(n));
  if (sha256_hex(plain.data(), n) != id) return corrupt("hash mismatch");
  return {};
}

}  // namespace space::snapshot::detail
