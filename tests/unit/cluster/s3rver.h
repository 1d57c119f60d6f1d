// An S3-compatible server on loopback for the S3 store's tests: the npm package s3rver
// (tests/cluster/package.json) started on a free port with a temporary data directory and one
// bucket, and stopped (killed, reaped) with the object. Its node_modules are installed with
// `npm ci` on first use when absent (under a lock: ctest runs tests in parallel); where node or
// npm cannot provide it, available() is false and why() says so, for GTEST_SKIP.
// s3rver accepts any well-formed SigV4 header without checking the signature, so the signer
// itself is checked against AWS's examples in sigv4_test.cc.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "unit/snapshot/test_tree.h"

extern char** environ;

namespace space::cluster::testing {

inline std::filesystem::path s3rver_package_dir() {
  if (const char* d = ::getenv("SPACE_S3RVER_DIR")) return d;
  // tests/unit/cluster/s3rver.h -> tests/cluster
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "cluster";
}

class S3rver {
 public:
  static constexpr const char* kAccessKey = "S3RVER";
  static constexpr const char* kSecretKey = "S3RVER";

  explicit S3rver(const std::string& bucket = "space-test") : bucket_(bucket) {
    const std::filesystem::path pkg = s3rver_package_dir();
    const std::filesystem::path bin = pkg / "node_modules" / "s3rver" / "bin" / "s3rver.js";
    const std::filesystem::path script = pkg / "s3rver_sigv4.js";
    if (!std::filesystem::exists(bin) && !install(pkg)) return;
    if (!std::filesystem::exists(bin)) {
      why_ = "s3rver is not installed in " + pkg.string() + " and `npm ci` there failed";
      return;
    }
    int out[2];
    if (::pipe2(out, O_CLOEXEC) < 0) {
      why_ = "pipe2 failed";
      return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    const std::string err_log = log_ / "stderr";
    posix_spawn_file_actions_addopen(&fa, 2, err_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    // s3rver's ListObjectsV2 continuation tokens are DES-encrypted: OpenSSL 3 (Node 17+) has
    // DES in its legacy provider only.
    std::vector<std::string> args = {"node", "--openssl-legacy-provider", script.string(),
                                     data_.path(), bucket_};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = ::posix_spawnp(&pid_, "node", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    if (rc != 0) {
      ::close(out[0]);
      pid_ = -1;
      why_ = "node is not installed (apt-get install nodejs)";
      return;
    }
    // "S3rver listening on 127.0.0.1:PORT"
    std::string text;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::smatch m;
    static const std::regex kListening("listening on 127\\.0\\.0\\.1:([0-9]+)");
    while (std::chrono::steady_clock::now() < deadline) {
      struct pollfd p = {out[0], POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (std::regex_search(text, m, kListening)) {
        port_ = std::stoi(m[1]);
        break;
      }
    }
    out_fd_ = out[0];  // kept open: nothing more is written to it (silent)
    if (port_ == 0)
      why_ = "s3rver did not start: " + text.substr(0, 2000) + refusals().substr(0, 2000);
  }
  ~S3rver() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  S3rver(const S3rver&) = delete;
  S3rver& operator=(const S3rver&) = delete;

  bool available() const { return port_ != 0; }
  const std::string& why() const { return why_; }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // s3://bucket/<prefix>?endpoint=...&region=us-east-1
  std::string url(const std::string& prefix = "cluster") const {
    return "s3://" + bucket_ + "/" + prefix + "?endpoint=" + endpoint() + "&region=us-east-1";
  }
  const std::string& data_dir() const { return data_.path(); }
  // What the server wrote on stderr: a "SIGV4 REFUSED ..." line per request whose signature
  // did not verify.
  std::string refusals() const { return snapshot::testing::read_file(log_ / "stderr"); }

 private:
  bool install(const std::filesystem::path& pkg) {
    if (!std::filesystem::exists(pkg / "package-lock.json")) {
      why_ = "no " + (pkg / "package-lock.json").string();
      return false;
    }
    const std::string lock = (pkg / ".install.lock").string();
    int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::flock(fd, LOCK_EX);
    bool ok = std::filesystem::exists(pkg / "node_modules" / "s3rver" / "bin" / "s3rver.js");
    if (!ok) {
      const std::string cmd =
          "cd '" + pkg.string() + "' && timeout 300 npm ci --no-audit --no-fund >/dev/null 2>&1";
      ok = std::system(cmd.c_str()) == 0;
      if (!ok) why_ = "s3rver is not installed in " + pkg.string() + " and `npm ci` failed";
    }
    if (fd >= 0) ::close(fd);
    return ok;
  }

  std::string bucket_;
  snapshot::testing::TempDir data_, log_;
  pid_t pid_ = -1;
  int port_ = 0;
  int out_fd_ = -1;
  std::string why_;
};

}  // namespace space::cluster::testing
