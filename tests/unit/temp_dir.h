// A temporary directory for a unit test, removed with everything in it.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace space::test_support {

class TempDir {
 public:
  // `prefix`: the directory is /tmp/<prefix>-XXXXXX.
  explicit TempDir(const std::string& prefix = "space-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = p ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace space::test_support
