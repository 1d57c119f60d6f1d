// Requests (`ps`, `kill`, `resync`, `stat`, `sync`, `walk`, `read`, `write`, `mkdir`, `symlink`,
// `remove`) and the file transfers some of them start. `read` data is flow-controlled by the
// stream window; `walk` and `read` produce data only while the channel's output queue is short,
// so a slow daemon bounds the agent's memory.
#include <fcntl.h>
#include <linux/random.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <unordered_map>

#include "agent/agent.h"
#include "agent/proc_table.h"
#include "agent/response.h"
#include "common/hex.h"

namespace space::agent {
namespace {

constexpr size_t kMaxArgvBytes = 4096;  // per process in a `ps` answer
constexpr size_t kMaxFailedWriteStreams = 4096;

}  // namespace

void Agent::respond(uint32_t stream, const Result<json>& r) {
  send(proto::FrameType::kResponse, stream, r ? ok_payload(*r) : error_payload(r.error()));
}

void Agent::on_request(uint32_t stream, std::string_view payload) {
  auto result = [&]() -> Result<std::optional<json>> {
    // nlohmann throws on misuse only; the helpers check types first, this is the backstop.
    try {
      json req = TRY(parse_object(payload));
      std::string op = TRY(req_string(req, "op"));
      if (reads_.contains(stream) || walks_.contains(stream) || writes_.contains(stream) ||
          stream_execs_.contains(stream))
        return fail(Code::kAlreadyExists, "stream " + std::to_string(stream) + " is already active",
                    EEXIST);
      failed_writes_.erase(stream);
      auto path = [&]() -> Result<std::string> {
        std::string p = TRY(req_string(req, "path"));
        TRY_VOID(check_sandbox_path(p));
        return p;
      };
      auto mode = [&](mode_t fallback) -> Result<mode_t> {
        return static_cast<mode_t>(TRY(opt_int(req, "mode", 0, 07777)).value_or(fallback));
      };
      if (op == "ps") return std::optional<json>(TRY(do_ps()));
      if (op == "kill") {
        TRY_VOID(do_kill(req));
        return std::optional<json>(json::object());
      }
      if (op == "resync") {
        TRY_VOID(do_resync(req));
        return std::optional<json>(json::object());
      }
      if (op == "stat") {
        // Not TRY inside the braces: see common/error.h, TRY.
        json st = TRY(stat_path(*resolver_, TRY(path())));
        return std::optional<json>(json{{"stat", std::move(st)}});
      }
      if (op == "sync") {
        TRY_VOID(do_sync());
        return std::optional<json>(json::object());
      }
      if (op == "mkdir") {
        std::string p = TRY(path());
        TRY_VOID(make_dir(*resolver_, p, TRY(mode(0755)), TRY(opt_bool(req, "parents", false))));
        return std::optional<json>(json::object());
      }
      if (op == "symlink") {
        std::string p = TRY(path());
        TRY_VOID(make_symlink(*resolver_, p, TRY(req_string(req, "target"))));
        return std::optional<json>(json::object());
      }
      if (op == "remove") {
        std::string p = TRY(path());
        TRY_VOID(remove_path(*resolver_, p, TRY(opt_bool(req, "recursive", false))));
        return std::optional<json>(json::object());
      }
      if (op == "read") {
        reads_[stream] = ReadTransfer{TRY(open_for_read(*resolver_, TRY(path()))), 0, 0};
        return std::optional<json>();  // answered when the transfer ends
      }
      if (op == "walk") {
        auto depth = TRY(opt_int(req, "depth", 1, static_cast<int64_t>(kMaxWalkDepth)));
        walks_[stream].walker = std::make_unique<Walker>(TRY(Walker::open(
            *resolver_, TRY(path()), static_cast<size_t>(depth.value_or(kMaxWalkDepth)))));
        return std::optional<json>();
      }
      if (op == "write") {
        std::string p = TRY(path());
        mode_t m = TRY(mode(0644));
        bool parents = TRY(opt_bool(req, "parents", false));
        auto fd = open_for_write(*resolver_, p, m, parents);
        if (!fd) {
          // Answered at once; the data frames already on their way are ignored.
          if (failed_writes_.size() >= kMaxFailedWriteStreams) failed_writes_.clear();
          failed_writes_.insert(stream);
          return std::unexpected(std::move(fd.error()));
        }
        writes_[stream] = WriteTransfer{std::move(*fd), 0};
        return std::optional<json>();
      }
      return fail(Code::kInvalidArgument, "unknown op \"" + op + "\"", EINVAL);
    } catch (const std::exception& ex) {
      return fail(Code::kInvalidArgument, std::string("bad request: ") + ex.what(), EINVAL);
    }
  }();
  if (!result) return respond(stream, std::unexpected(std::move(result.error())));
  if (*result) respond(stream, std::move(**result));
}

Result<void> Agent::do_sync() {
  // syncfs on the root's file system: in a microVM the overlay, which syncs its upper layer's
  // file system (the writable disk), so that the host reads what the guest wrote (`space diff`).
  // It blocks the loop while the guest's dirty pages go to the disk: bounded by the guest's
  // memory and disk speed, and asked for only by a diff.
  UniqueFd root(::openat(resolver_->root_fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return fail_sys("open", "\"/\"");
  if (::syncfs(root.get()) != 0) return fail_sys("syncfs", "\"/\"");
  return {};
}

Result<void> Agent::do_resync(const json& req) {
  // Only a guest's agent (device or vsock channel) owns its machine's clock and entropy pool; a
  // jail's agent (socketpair channel) shares the host kernel's (and lacks the capabilities).
  if (!opts_.guest_channel())
    return fail(Code::kPermissionDenied, "resync is for microVM guests", EPERM);
  std::string hostname = TRY(req_string(req, "hostname"));
  int64_t time_ns = TRY(opt_int(req, "time_ns", 1, INT64_MAX)).value_or(0);
  std::string hex = TRY(req_string(req, "seed"));
  if (hostname.empty() || hostname.size() > 64 ||
      hostname.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
    return fail(Code::kInvalidArgument, "resync: bad hostname", EINVAL);
  if (time_ns == 0) return fail(Code::kInvalidArgument, "resync: time_ns is required", EINVAL);
  std::string seed;
  if (hex.empty() || hex.size() > 512 || !from_hex(hex, &seed))
    return fail(Code::kInvalidArgument, "resync: seed must be 1-256 bytes of lowercase hex",
                EINVAL);
  // The entropy first: everything after it (the TLS of the next request) draws on a state that
  // no other copy of this machine has.
  // struct rand_pool_info: two ints, then the bytes.
  alignas(int) uint8_t pool[2 * sizeof(int) + 256] = {};
  const int n = static_cast<int>(seed.size()), bits = n * 8;
  std::memcpy(pool, &bits, sizeof bits);
  std::memcpy(pool + sizeof(int), &n, sizeof n);
  std::memcpy(pool + 2 * sizeof(int), seed.data(), seed.size());
  UniqueFd rnd(::open("/dev/urandom", O_RDWR | O_CLOEXEC));
  if (!rnd) return fail_sys("open", "/dev/urandom");
  if (::ioctl(rnd.get(), RNDADDENTROPY, pool) != 0) return fail_sys("ioctl", "RNDADDENTROPY");
  if (::ioctl(rnd.get(), RNDRESEEDCRNG) != 0) return fail_sys("ioctl", "RNDRESEEDCRNG");
  struct timespec ts {
    static_cast<time_t>(time_ns / 1000000000), static_cast<long>(time_ns % 1000000000)
  };
  if (::clock_settime(CLOCK_REALTIME, &ts) != 0) return fail_sys("clock_settime");
  if (::sethostname(hostname.data(), hostname.size()) != 0) return fail_sys("sethostname");
  return {};
}

Result<json> Agent::do_ps() {
  std::vector<ProcEntry> procs = scan_procs();
  std::sort(procs.begin(), procs.end(),
            [](const ProcEntry& a, const ProcEntry& b) { return a.pid < b.pid; });
  std::unordered_map<pid_t, pid_t> parent;
  for (const ProcEntry& p : procs) parent[p.pid] = p.ppid;
  json list = json::array();
  size_t budget = proto::kMaxPayload - 1024;
  size_t used = 0;
  bool truncated = false;
  for (const ProcEntry& p : procs) {
    // The exec a process belongs to: the nearest shim among its ancestors (or itself).
    json stream = nullptr;
    pid_t cur = p.pid;
    for (int hops = 0; hops < 4096 && cur > 0; ++hops) {
      if (auto s = shims_.find(cur); s != shims_.end()) {
        stream = s->second.stream;
        break;
      }
      auto up = parent.find(cur);
      if (up == parent.end()) break;
      cur = up->second;
    }
    json entry = {{"pid", p.pid},
                  {"ppid", p.ppid},
                  {"uid", read_euid(p.pid)},
                  {"state", std::string(1, p.state)},
                  {"argv", read_cmdline(p.pid, kMaxArgvBytes)},
                  {"stream", stream}};
    std::string text = dump_json(entry);
    if (used + text.size() + 1 > budget) {
      truncated = true;
      break;
    }
    used += text.size() + 1;
    list.push_back(std::move(entry));
  }
  json out = {{"processes", std::move(list)}};
  if (truncated) out["truncated"] = true;
  return out;
}

Result<void> Agent::do_kill(const json& req) {
  auto pid = TRY(opt_int(req, "pid", INT_MIN, INT_MAX));
  if (!pid) return fail(Code::kInvalidArgument, "\"pid\" is required", EINVAL);
  if (*pid <= 1 || *pid == ::getpid())
    return fail(Code::kInvalidArgument, "refusing to signal pid " + std::to_string(*pid), EINVAL);
  int sig = static_cast<int>(TRY(opt_int(req, "signal", 0, 64)).value_or(SIGTERM));
  if (::kill(static_cast<pid_t>(*pid), sig) < 0)
    return fail_sys("kill", std::to_string(*pid) + " " + std::to_string(sig));
  return {};
}

void Agent::on_data_frame(uint32_t stream, std::string&& payload) {
  if (failed_writes_.contains(stream)) {
    if (payload.empty()) failed_writes_.erase(stream);
    return;
  }
  auto it = writes_.find(stream);
  if (it == writes_.end()) return;  // no write on this stream: nothing to deliver to
  WriteTransfer& t = it->second;
  if (payload.empty()) {
    uint64_t size = t.size;
    int fd = t.fd.release();
    writes_.erase(it);
    if (::close(fd) < 0 && errno != EINTR)
      return respond(stream, fail_sys("close", "written file"));
    return respond(stream, json{{"size", size}});
  }
  size_t off = 0;
  while (off < payload.size()) {
    ssize_t n = ::write(t.fd.get(), payload.data() + off, payload.size() - off);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    Error err = n < 0 ? Error::sys("write", "file") : Error::sys("write", "file", EIO);
    writes_.erase(it);
    failed_writes_.insert(stream);
    return respond(stream, std::unexpected(std::move(err)));
  }
  t.size += payload.size();
}

bool Agent::pump_transfers() {
  if (!channel_) return false;
  bool more = false;
  static char buf[kReadChunk];
  for (auto it = reads_.begin(); it != reads_.end();) {
    if (channel_->queued() >= kOutputHighWater) return false;  // EPOLLOUT wakes us
    ReadTransfer& t = it->second;
    if (t.unacked >= proto::kStreamWindow) {
      ++it;
      continue;
    }
    size_t want = std::min<uint64_t>(kReadChunk, proto::kStreamWindow - t.unacked);
    ssize_t n;
    do {
      n = ::read(t.fd.get(), buf, want);
    } while (n < 0 && errno == EINTR);
    uint32_t stream = it->first;
    if (n > 0) {
      send(proto::FrameType::kData, stream, std::string_view(buf, static_cast<size_t>(n)));
      t.size += static_cast<uint64_t>(n);
      t.unacked += static_cast<uint64_t>(n);
      more = true;
      ++it;
      continue;
    }
    Result<json> r =
        n == 0 ? Result<json>(json{{"size", t.size}}) : Result<json>(fail_sys("read", "file"));
    it = reads_.erase(it);
    send(proto::FrameType::kData, stream, "");
    respond(stream, r);
  }
  // Walk listings are flow-controlled like reads: entries are produced into `pending` and sent
  // in frames of at most the window's room (an entry may span two frames).
  for (auto it = walks_.begin(); it != walks_.end();) {
    if (channel_->queued() >= kOutputHighWater) return false;
    WalkTransfer& t = it->second;
    uint32_t stream = it->first;
    if (t.pending.empty() && !t.done) t.done = !t.walker->next(t.pending, kReadChunk);
    uint64_t room = proto::kStreamWindow - std::min<uint64_t>(t.unacked, proto::kStreamWindow);
    if (!t.pending.empty() && room > 0) {
      size_t n = std::min<size_t>({t.pending.size(), kReadChunk, room});
      send(proto::FrameType::kData, stream, std::string_view(t.pending).substr(0, n));
      t.pending.erase(0, n);
      t.unacked += n;
    }
    if (!t.pending.empty() || !t.done) {
      if (t.unacked < proto::kStreamWindow) more = true;
      ++it;
      continue;
    }
    json done = {{"count", t.walker->count()}};
    if (t.walker->truncated()) done["truncated"] = true;
    it = walks_.erase(it);
    send(proto::FrameType::kData, stream, "");
    respond(stream, done);
  }
  return more;
}

void Agent::drop_transfers() {
  reads_.clear();
  walks_.clear();
  writes_.clear();
  failed_writes_.clear();
}

}  // namespace space::agent
