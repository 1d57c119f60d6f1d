// The CLI's commands end to end inside a unit test: a real ApiServer on a Unix socket in a
// temporary directory, in front of a test double (api::testing::FakeService or a subclass of
// it), and each command run with its stdout and stderr (and optionally stdin) captured.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../api/fake_service.h"
#include "api/server.h"
#include "cli/commands.h"

namespace space::cli::testing {

struct Captured {
  Result<int> result = 0;
  std::string out, err;
};

// All of what was written to `fd`, from its start.
inline std::string slurp(int fd) {
  std::string s;
  ::lseek(fd, 0, SEEK_SET);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

// Runs fn with stdout/stderr (and optionally stdin) redirected to temporary files.
inline Captured capture(const std::function<Result<int>()>& fn,
                        std::optional<std::string> stdin_data = std::nullopt) {
  std::fflush(stdout);
  std::fflush(stderr);
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  int saved_out = ::dup(1), saved_err = ::dup(2), saved_in = ::dup(0);
  ::dup2(fileno(out), 1);
  ::dup2(fileno(err), 2);
  FILE* in = nullptr;
  if (stdin_data) {
    in = std::tmpfile();
    std::fwrite(stdin_data->data(), 1, stdin_data->size(), in);
    std::fflush(in);
    ::lseek(fileno(in), 0, SEEK_SET);
    ::dup2(fileno(in), 0);
  }
  Captured c;
  c.result = fn();
  std::fflush(stdout);
  ::dup2(saved_out, 1);
  ::dup2(saved_err, 2);
  ::dup2(saved_in, 0);
  ::close(saved_out);
  ::close(saved_err);
  ::close(saved_in);
  c.out = slurp(fileno(out));
  c.err = slurp(fileno(err));
  std::fclose(out);
  std::fclose(err);
  if (in != nullptr) std::fclose(in);
  return c;
}

// A fixture serving `Service` for the test's commands.
template <class Service>
class ServedCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/space-cli-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = (dir_ / "space.sock").native();
    auto s = api::ApiServer::listen(socket_, svc_);
    ASSERT_TRUE(s) << s.error().message();
    server_ = std::move(*s);
    thread_ = std::thread([this] { server_->serve(); });
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  Args args(std::vector<std::string> argv) {
    argv.insert(argv.begin(), "space");
    ParseOutcome p = parse_args(argv);
    EXPECT_TRUE(p.args) << p.err;
    return p.args.value_or(Args{});
  }
  Captured run(std::vector<std::string> argv, std::optional<std::string> stdin_data = {}) {
    Args a = args(std::move(argv));
    Client client(socket_);
    return capture([&] { return run_command(a, client); }, std::move(stdin_data));
  }

  Service svc_;
  std::filesystem::path dir_;
  std::string socket_;
  std::unique_ptr<api::ApiServer> server_;
  std::thread thread_;
};

}  // namespace space::cli::testing
