// The `space` command line: every command and option of DESIGN.md §1 parses into the right
// Args, bad usage exits 125 with a message, and flags become valid API request bodies.
#include "cli/args.h"

#include <gtest/gtest.h>

namespace space::cli {
namespace {

ParseOutcome parse(std::vector<std::string> argv) {
  argv.insert(argv.begin(), "space");
  return parse_args(argv);
}

Args ok(std::vector<std::string> argv) {
  ParseOutcome p = parse(argv);
  EXPECT_TRUE(p.args.has_value()) << p.err;
  return p.args.value_or(Args{});
}

void usage_error(std::vector<std::string> argv, std::string_view needle) {
  ParseOutcome p = parse(argv);
  EXPECT_FALSE(p.args.has_value());
  EXPECT_EQ(p.exit_code, 125);
  EXPECT_EQ(p.err.rfind("space: ", 0), p.err.find("space: "));
  EXPECT_NE(p.err.find(needle), std::string::npos) << p.err;
}

TEST(Args, RunWithEveryOption) {
  Args a = ok({"run",          "--runtime", "qemu",         "--image",   "deb",   "--profile",
               "live",         "--memory",  "1G",           "--cpus",    "1.5",   "--pids",
               "64",           "--disk",    "4G",           "--timeout", "10m",   "--env",
               "A=1",          "--env",     "B=2",          "--secret",  "GH",    "--allow",
               "pypi.org:443", "--allow",   "*.github.com", "--workdir", "/work", "--",
               "sh",           "-c",        "echo --memory"});
  EXPECT_EQ(a.command, "run");
  EXPECT_EQ(a.sandbox.runtime, "qemu");
  EXPECT_EQ(a.sandbox.image, "deb");
  EXPECT_EQ(a.sandbox.profile, "live");
  EXPECT_EQ(a.sandbox.memory, "1G");
  EXPECT_EQ(a.sandbox.cpus, "1.5");
  EXPECT_EQ(a.sandbox.pids, "64");
  EXPECT_EQ(a.sandbox.disk, "4G");
  EXPECT_EQ(a.sandbox.timeout, "10m");
  EXPECT_EQ(a.sandbox.env, (std::vector<std::string>{"A=1", "B=2"}));
  EXPECT_EQ(a.sandbox.secrets, std::vector<std::string>{"GH"});
  EXPECT_EQ(a.sandbox.allow, (std::vector<std::string>{"pypi.org:443", "*.github.com"}));
  EXPECT_EQ(a.sandbox.workdir, "/work");
  EXPECT_EQ(a.cmd, (std::vector<std::string>{"sh", "-c", "echo --memory"}));

  auto body = create_body(a.sandbox);
  ASSERT_TRUE(body) << body.error().message();
  EXPECT_EQ((*body)["memory"], 1ull << 30);
  EXPECT_EQ((*body)["disk"], 4ull << 30);
  EXPECT_EQ((*body)["cpus"], 1.5);
  EXPECT_EQ((*body)["pids"], 64);
  EXPECT_EQ((*body)["timeout"], 600.0);
  EXPECT_EQ((*body)["env"], (nlohmann::json{{"A", "1"}, {"B", "2"}}));
  EXPECT_EQ((*body)["secrets"], nlohmann::json{"GH"});
  EXPECT_EQ((*body)["workdir"], "/work");
  EXPECT_EQ((*body)["runtime"], "qemu");
}

TEST(Args, RunWithoutDashDash) {
  Args a = ok({"run", "--memory", "64M", "echo", "hi"});
  EXPECT_EQ(a.cmd, (std::vector<std::string>{"echo", "hi"}));
  EXPECT_EQ(create_body(Args{}.sandbox)->size(), 0u);  // no flags: the daemon's defaults
  usage_error({"run", "ls", "-la"}, "after `--`");
  // No command: the image's default command (the daemon refuses it where there is none).
  EXPECT_TRUE(ok({"run"}).cmd.empty());
  EXPECT_TRUE(ok({"run", "--image", "app", "--"}).cmd.empty());
  usage_error({"run", "ls", "--", "-la"}, "whole command after `--`");
}

TEST(Args, CreateAndExec) {
  Args c = ok({"create", "--memory", "256M", "--json"});
  EXPECT_EQ(c.command, "create");
  EXPECT_TRUE(c.json);

  Args e = ok({"exec", "sb_1", "--timeout", "30s", "--env", "X=1", "--cwd", "/tmp", "--detach",
               "--", "python3", "-c", "print(1)"});
  EXPECT_EQ(e.command, "exec");
  EXPECT_EQ(e.id, "sb_1");
  EXPECT_TRUE(e.detach);
  EXPECT_FALSE(e.snapshot);
  EXPECT_EQ(e.cmd, (std::vector<std::string>{"python3", "-c", "print(1)"}));
  auto body = exec_body(e);
  ASSERT_TRUE(body);
  EXPECT_EQ((*body)["cmd"], (nlohmann::json{"python3", "-c", "print(1)"}));
  EXPECT_EQ((*body)["timeout"], 30.0);
  EXPECT_EQ((*body)["env"], (nlohmann::json{{"X", "1"}}));
  EXPECT_EQ((*body)["cwd"], "/tmp");
  EXPECT_EQ((*body)["detach"], true);
  EXPECT_TRUE(ok({"exec", "sb_1", "--snapshot", "--", "ls"}).snapshot);
  usage_error({"exec", "--", "ls"}, "id is required");
  usage_error({"exec", "sb_1"}, "no command given");
}

TEST(Args, OtherCommands) {
  Args ps = ok({"ps", "sb_1"});
  EXPECT_EQ(ps.command, "ps");
  EXPECT_EQ(ps.id, "sb_1");
  Args kill = ok({"kill", "sb_1", "42", "--signal", "KILL"});
  EXPECT_EQ(kill.pid, "42");
  EXPECT_EQ(kill.signal, "KILL");
  Args cp = ok({"cp", "./dir", "sb_1:/root/dir"});
  EXPECT_EQ(cp.src, "./dir");
  EXPECT_EQ(cp.dst, "sb_1:/root/dir");
  EXPECT_TRUE(ok({"ls", "--json"}).json);
  EXPECT_FALSE(ok({"ls"}).json);
  EXPECT_EQ(ok({"inspect", "sb_1", "--json"}).id, "sb_1");
  Args rm = ok({"rm", "sb_1", "--force"});
  EXPECT_TRUE(rm.force);
  EXPECT_EQ(ok({"pause", "sb_1"}).command, "pause");
  EXPECT_EQ(ok({"resume", "sb_1"}).command, "resume");
  EXPECT_EQ(ok({"diff", "sb_1"}).command, "diff");
  EXPECT_TRUE(ok({"doctor", "--json"}).json);
  Args imp = ok({"image", "import", "deb", "/tmp/rootfs.tar.zst"});
  EXPECT_EQ(imp.command, "image import");
  EXPECT_EQ(imp.name, "deb");
  EXPECT_EQ(imp.path, "/tmp/rootfs.tar.zst");
  EXPECT_EQ(ok({"image", "ls"}).command, "image ls");
  EXPECT_EQ(ok({"image", "rm", "deb"}).name, "deb");
  EXPECT_TRUE(ok({"audit", "sb_1", "--verify"}).verify);

  usage_error({}, "subcommand is required");
  usage_error({"frobnicate"}, "unknown command \"frobnicate\"; `space --help` lists the commands");
  usage_error({"kill", "sb_1"}, "pid is required");
  usage_error({"ls", "--", "x"}, "takes no command");
  usage_error({"image"}, "subcommand is required");
  usage_error({"rm"}, "id is required");
}

TEST(Args, SnapshotCommands) {
  Args snap = ok({"snapshot", "sb_1", "--name", "before-migrate", "--json"});
  EXPECT_EQ(snap.command, "snapshot");
  EXPECT_EQ(snap.id, "sb_1");
  EXPECT_EQ(snap.name, "before-migrate");
  EXPECT_TRUE(snap.json);
  EXPECT_EQ(ok({"snapshot", "sb_1"}).name, "");
  Args rm = ok({"snapshot", "rm", "snap_1", "nightly"});
  EXPECT_EQ(rm.command, "snapshot rm");
  EXPECT_EQ(rm.snaps, (std::vector<std::string>{"snap_1", "nightly"}));
  EXPECT_TRUE(rm.id.empty());
  usage_error({"snapshot"}, "id is required");
  usage_error({"snapshot", "--name", "x"}, "id is required");
  usage_error({"snapshot", "rm"}, "snaps is required");

  Args all = ok({"snapshots"});
  EXPECT_EQ(all.command, "snapshots");
  EXPECT_TRUE(all.id.empty());
  Args one = ok({"snapshots", "sb_1", "--json"});
  EXPECT_EQ(one.id, "sb_1");
  EXPECT_TRUE(one.json);

  Args rb = ok({"rollback", "sb_1", "snap_1", "--json"});
  EXPECT_EQ(rb.command, "rollback");
  EXPECT_EQ(rb.id, "sb_1");
  EXPECT_EQ(rb.snap, "snap_1");
  EXPECT_TRUE(rb.json);
  usage_error({"rollback", "sb_1"}, "snap is required");

  Args restore = ok({"restore", "nightly", "--profile", "test", "--json"});
  EXPECT_EQ(restore.command, "restore");
  EXPECT_EQ(restore.snap, "nightly");
  EXPECT_EQ(restore.sandbox.profile, "test");
  EXPECT_TRUE(restore.json);
  usage_error({"restore"}, "snap is required");
  usage_error({"restore", "s", "--", "x"}, "takes no command");

  EXPECT_EQ(ok({"diff", "sb_1", "--since", "nightly"}).since, "nightly");
  EXPECT_EQ(ok({"diff", "sb_1"}).since, "");

  Args e = ok({"exec", "sb_1", "--snapshot", "--", "make"});
  EXPECT_TRUE(e.snapshot);
  EXPECT_EQ((*exec_body(e))["snapshot"], true);
  EXPECT_FALSE(exec_body(ok({"exec", "sb_1", "--", "make"}))->contains("snapshot"));

  Args run = ok({"run", "--snapshot-every", "10m", "--", "sh"});
  EXPECT_EQ(run.sandbox.snapshot_every, "10m");
  EXPECT_EQ((*create_body(run.sandbox))["snapshot_every"], 600.0);
  EXPECT_EQ((*create_body(ok({"create", "--snapshot-every", "0"}).sandbox))["snapshot_every"], 0.0);
  EXPECT_FALSE(create_body(ok({"create"}).sandbox)->contains("snapshot_every"));
}

TEST(Args, TokenCommands) {
  Args c = ok({"token", "create", "--name", "ci", "--profile", "test", "--op", "read", "--op",
               "exec,files", "--ttl", "24h", "--json"});
  EXPECT_EQ(c.command, "token create");
  EXPECT_EQ(c.name, "ci");
  EXPECT_EQ(c.profiles, std::vector<std::string>{"test"});
  EXPECT_EQ(c.ops, (std::vector<std::string>{"read", "exec", "files"}));
  EXPECT_EQ(c.ttl, "24h");
  EXPECT_TRUE(c.json);
  EXPECT_FALSE(c.e2b);
  EXPECT_TRUE(ok({"token", "create", "--name", "e2b", "--profile", "test", "--op", "create",
                  "--ttl", "1h", "--e2b"})
                  .e2b);
  EXPECT_EQ(
      ok({"token", "create", "--name", "all", "--profile", "*", "--op", "admin", "--ttl", "1h"})
          .profiles,
      std::vector<std::string>{"*"});
  EXPECT_EQ(ok({"token", "ls", "--json"}).command, "token ls");
  Args rm = ok({"token", "rm", "0123456789ab"});
  EXPECT_EQ(rm.command, "token rm");
  EXPECT_EQ(rm.id, "0123456789ab");
  usage_error({"token"}, "subcommand is required");
  usage_error({"token", "create", "--name", "ci", "--op", "read", "--ttl", "1h"}, "--profile");
  usage_error({"token", "create", "--name", "ci", "--profile", "test", "--op", "read"}, "--ttl");
  usage_error({"token", "create", "--profile", "test", "--op", "read", "--ttl", "1h"}, "--name");
  usage_error({"token", "rm"}, "id is required");
}

TEST(Args, HelpListsEveryCommandAndExitsZero) {
  ParseOutcome p = parse({"--help"});
  EXPECT_FALSE(p.args);
  EXPECT_EQ(p.exit_code, 0);
  for (const char* cmd :
       {"run",      "create",    "exec",     "ps",      "kill",  "cp",     "ls",
        "inspect",  "rm",        "pause",    "resume",  "diff",  "doctor", "image",
        "snapshot", "snapshots", "rollback", "restore", "audit", "token"}) {
    EXPECT_NE(p.out.find(std::string("  ") + cmd + " "), std::string::npos) << cmd;
  }
  ParseOutcome sub = parse({"run", "--help"});
  EXPECT_EQ(sub.exit_code, 0);
  for (const char* opt :
       {"--runtime", "--image", "--profile", "--memory", "--cpus", "--pids", "--disk", "--timeout",
        "--env", "--secret", "--allow", "--workdir", "--snapshot-every"}) {
    EXPECT_NE(sub.out.find(opt), std::string::npos) << opt;
  }
}

TEST(Args, FlagValuesAreValidatedBeforeSending) {
  auto bad = [](SandboxFlags f, std::string_view needle) {
    auto r = create_body(f);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code(), Code::kInvalidArgument);
    EXPECT_NE(r.error().message().find(needle), std::string::npos) << r.error().message();
  };
  bad({.memory = "5Q"}, "--memory");
  bad({.disk = "-1"}, "--disk");
  bad({.cpus = "0"}, "--cpus");
  bad({.cpus = "abc"}, "--cpus");
  bad({.pids = "4"}, "--pids");
  bad({.pids = "1e3"}, "--pids");
  bad({.timeout = "forever"}, "--timeout");
  bad({.timeout = "0"}, "--timeout");
  bad({.runtime = "docker"}, "--runtime");
  bad({.env = {"NOEQUALS"}}, "K=V");
  bad({.env = {"=x"}}, "K=V");
  bad({.snapshot_every = "often"}, "--snapshot-every");
  bad({.snapshot_every = "500ms"}, "--snapshot-every must be 0 (off) or at least 1s");
  bad({.snapshot_every = "-1m"}, "--snapshot-every");
  EXPECT_EQ((*env_object({"A=b=c", "E="}, "--env"))["A"], "b=c");
}

TEST(Args, Signals) {
  EXPECT_EQ(*parse_signal(""), 15);
  EXPECT_EQ(*parse_signal("9"), 9);
  EXPECT_EQ(*parse_signal("KILL"), 9);
  EXPECT_EQ(*parse_signal("sigint"), 2);
  EXPECT_EQ(*parse_signal("SIGHUP"), 1);
  EXPECT_FALSE(parse_signal("0"));
  EXPECT_FALSE(parse_signal("65"));
  EXPECT_FALSE(parse_signal("SIGNOPE"));
}

}  // namespace
}  // namespace space::cli
