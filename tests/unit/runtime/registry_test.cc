// The runtimes' two tables held together: every name users can write (proto/runtime_names.h)
// has a factory (runtime/registry.h), every registered runtime is in the names' table, and what
// each factory makes calls itself by its registered name.
#include "runtime/registry.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>
#include <string>

#include "proto/runtime_names.h"

namespace space::runtime {
namespace {
namespace fs = std::filesystem;

TEST(RuntimeRegistry, EveryNameHasAFactoryAndEveryFactoryAName) {
  std::set<std::string_view> names, registered;
  for (const proto::RuntimeName& n : proto::kRuntimeNames) {
    EXPECT_TRUE(names.insert(n.name).second) << "named twice: " << n.name;
    EXPECT_FALSE(n.about.empty()) << n.name;
  }
  for (const RegisteredRuntime& r : registered_runtimes()) {
    EXPECT_TRUE(registered.insert(r.name).second) << "registered twice: " << r.name;
    EXPECT_NE(r.make, nullptr) << r.name;
    EXPECT_TRUE(proto::is_runtime_name(r.name)) << r.name << " is not in proto::kRuntimeNames";
  }
  EXPECT_EQ(names, registered);
  EXPECT_TRUE(proto::is_runtime_name(proto::kDefaultRuntime));
}

TEST(RuntimeRegistry, EachFactoryMakesTheRuntimeOfItsName) {
  char tmpl[] = "/tmp/space-registry-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  fs::path dir = tmpl;
  RuntimeSettings s;
  s.state_dir = dir;
  s.agent = dir / "space-agent";
  s.kernel = dir / "vmlinux";  // missing: the VM runtimes are made anyway and say so
  s.initrd = dir / "initrd.img";
  s.egress_ports = {3128, 443, 80};
  for (const RegisteredRuntime& r : registered_runtimes()) {
    auto rt = r.make(s);
    ASSERT_TRUE(rt) << r.name << ": " << rt.error().message();
    EXPECT_EQ((*rt)->name(), r.name);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST(RuntimeNames, ListsTheNamesInOrder) {
  EXPECT_EQ(proto::runtime_names(), "linux, qemu or firecracker");
  EXPECT_EQ(proto::runtime_names(" | ", " | "), "linux | qemu | firecracker");
  EXPECT_TRUE(proto::is_runtime_name("qemu"));
  EXPECT_FALSE(proto::is_runtime_name("docker"));
  EXPECT_FALSE(proto::is_runtime_name(""));
  EXPECT_FALSE(proto::is_runtime_name("Linux"));
}

}  // namespace
}  // namespace space::runtime
