// A client of QEMU's machine protocol (QMP) on a Unix socket: JSON commands, one at a time,
// answered in order; asynchronous events in between are skipped. Everything QEMU sends is
// parsed as untrusted input (bounded line length, JSON errors are errors, never exceptions).
// Used by the qemu runtime for pause/resume (stop/cont), status and migration.
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "common/fd.h"

namespace space::runtime::qemu {

class Qmp {
 public:
  // Connects to `path`, retrying until `timeout` while the socket does not exist yet or
  // refuses (QEMU is starting), reads the greeting and leaves capabilities negotiation.
  static Result<Qmp> connect(const std::filesystem::path& path, std::chrono::milliseconds timeout);

  // Runs `command` with `args` and returns its "return" value; an {"error":...} answer becomes
  // an Error with QEMU's class and description.
  Result<nlohmann::json> execute(const std::string& command,
                                 const nlohmann::json& args = nlohmann::json::object(),
                                 std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // `getfd`: passes `fd` to QEMU under `name` (SCM_RIGHTS), for migration to or from a file.
  Result<void> send_fd(const std::string& name, int fd,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10));

  int fd() const { return fd_.get(); }

 private:
  explicit Qmp(UniqueFd fd) : fd_(std::move(fd)) {}
  Result<void> send_line(const std::string& line, int pass_fd);
  // The next JSON object QEMU sends (events included).
  Result<nlohmann::json> read_message(std::chrono::steady_clock::time_point deadline);
  Result<nlohmann::json> await_answer(std::chrono::steady_clock::time_point deadline,
                                      const std::string& what);

  UniqueFd fd_;
  std::string buf_;
};

}  // namespace space::runtime::qemu
