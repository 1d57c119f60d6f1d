// The CLI's commands end to end over a real socket, against the real ApiServer in front of the
// FakeService test double: what they print on stdout and stderr, what they send, and the exit
// codes (the command's own, 125 for SPACE failures, 127 when a program cannot start).
#include "cli/commands.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include "cli/tar.h"
#include "served_cli.h"

namespace space::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::Captured;

class CommandsTest : public testing::ServedCli<api::testing::FakeService> {
 protected:
  std::string create() {
    auto c = run({"create"});
    EXPECT_TRUE(c.result && *c.result == 0);
    std::string id = c.out.substr(0, c.out.find('\n'));
    EXPECT_EQ(id.rfind("sb_", 0), 0u) << c.out;
    return id;
  }
};

TEST_F(CommandsTest, CreateListInspectRemove) {
  auto c = run({"create", "--memory", "64M", "--env", "A=1", "--json"});
  ASSERT_TRUE(c.result) << c.result.error().message();
  json sandbox = json::parse(c.out);
  EXPECT_EQ(svc_.last_create.limits.memory_bytes, 64u << 20);
  EXPECT_EQ(svc_.last_create.env, std::vector<std::string>{"A=1"});
  std::string id = sandbox["id"];

  auto ls = run({"ls"});
  EXPECT_EQ(ls.out.substr(0, ls.out.find('\n')), "ID       STATE    RUNTIME  IMAGE  PROFILE  AGE");
  EXPECT_NE(ls.out.find(id + "  running  linux    host   test"), std::string::npos) << ls.out;
  auto ls_json = json::parse(run({"ls", "--json"}).out);
  ASSERT_TRUE(ls_json.is_array());
  EXPECT_EQ(ls_json[0]["id"], id);
  EXPECT_EQ(json::parse(run({"inspect", id}).out)["id"], id);

  EXPECT_EQ(*run({"pause", id}).result, 0);
  EXPECT_EQ(json::parse(run({"inspect", id, "--json"}).out)["state"], "paused");
  EXPECT_EQ(*run({"resume", id}).result, 0);
  EXPECT_EQ(*run({"rm", id, "--force"}).result, 0);
  auto gone = run({"inspect", id});
  ASSERT_FALSE(gone.result);
  EXPECT_EQ(gone.result.error().code(), Code::kNotFound);
  EXPECT_NE(gone.result.error().message().find("space ls"), std::string::npos);
}

TEST_F(CommandsTest, ExecStreamsAndExitsWithTheCommandsCode) {
  std::string id = create();
  auto both = run({"exec", id, "--", "both"});
  ASSERT_TRUE(both.result) << both.result.error().message();
  EXPECT_EQ(*both.result, 3);
  EXPECT_EQ(both.out, "out");
  EXPECT_EQ(both.err, std::string("err\0\xff", 5));

  auto echo = run({"exec", id, "--", "echo", "a", "b"}, std::string());  // stdin: empty file
  EXPECT_EQ(*echo.result, 0);
  EXPECT_EQ(echo.out, "a b\n");

  auto missing = run({"exec", id, "--", "missing"});
  EXPECT_EQ(*missing.result, 127);
  EXPECT_NE(missing.err.find("space: exec \"missing\": No such file"), std::string::npos);

  auto unknown = run({"exec", "sb_nope", "--", "echo"});
  ASSERT_FALSE(unknown.result);
  EXPECT_EQ(unknown.result.error().code(), Code::kNotFound);
}

TEST_F(CommandsTest, ExecForwardsStdin) {
  std::string id = create();
  std::string data(300000, 'q');
  data += "end";
  auto cat = run({"exec", id, "--", "cat"}, data);
  ASSERT_TRUE(cat.result) << cat.result.error().message();
  EXPECT_EQ(*cat.result, 0);
  EXPECT_EQ(cat.out, data);
}

TEST_F(CommandsTest, ExecDetachAndSnapshotFlag) {
  std::string id = create();
  auto d = run({"exec", id, "--detach", "--", "sleep"});
  EXPECT_EQ(*d.result, 0);
  EXPECT_EQ(d.out, "42\n");
  EXPECT_EQ(d.err, "");

  auto s = run({"exec", id, "--snapshot", "--", "echo", "hi"});
  ASSERT_TRUE(s.result) << s.result.error().message();
  EXPECT_EQ(*s.result, 0);
  EXPECT_EQ(s.out, "hi\n");
  auto snaps = svc_.list_snapshots(id);
  ASSERT_TRUE(snaps);
  ASSERT_EQ(snaps->size(), 1u);
  std::string snap = (*snaps)[0].id;
  EXPECT_EQ((*snaps)[0].kind, "exec");
  EXPECT_EQ(s.err, "space: snapshot " + snap + " taken before this command\n");

  auto sd = run({"exec", id, "--snapshot", "--detach", "--", "sleep"});
  EXPECT_EQ(*sd.result, 0);
  EXPECT_EQ(sd.out, "42\n");
  EXPECT_EQ(sd.err.rfind("space: snapshot snap_", 0), 0u) << sd.err;
  EXPECT_EQ(svc_.list_snapshots(id)->size(), 2u);
}

TEST_F(CommandsTest, RunCreatesExecsAndDestroys) {
  auto r = run({"run", "--memory", "32M", "--timeout", "1m", "--", "echo", "hi", "there"});
  ASSERT_TRUE(r.result) << r.result.error().message();
  EXPECT_EQ(*r.result, 0);
  EXPECT_EQ(r.out, "hi there\n");
  EXPECT_EQ(svc_.last_create.limits.memory_bytes, 32u << 20);
  EXPECT_TRUE(svc_.list()->empty()) << "run must destroy its sandbox";

  auto f = run({"run", "--", "both"});
  EXPECT_EQ(*f.result, 3);
  EXPECT_TRUE(svc_.list()->empty());
  auto bad = run({"run", "--memory", "1K", "--", "echo"});
  ASSERT_FALSE(bad.result);
  EXPECT_NE(bad.result.error().message().find("minimum of 16M"), std::string::npos);
  EXPECT_TRUE(svc_.list()->empty());
}

TEST_F(CommandsTest, Snapshots) {
  std::string id = create();
  auto taken = run({"snapshot", id, "--name", "before-migrate"});
  ASSERT_TRUE(taken.result) << taken.result.error().message();
  std::string snap = taken.out.substr(0, taken.out.find('\n'));
  EXPECT_EQ(snap.rfind("snap_", 0), 0u) << taken.out;
  EXPECT_EQ(taken.out, snap + "\n");
  auto as_json = run({"snapshot", id, "--json"});
  ASSERT_TRUE(as_json.result);
  json second = json::parse(as_json.out);
  EXPECT_TRUE(second["name"].is_null());
  EXPECT_EQ(second["sandbox"], id);
  auto dup = run({"snapshot", id, "--name", "before-migrate"});
  ASSERT_FALSE(dup.result);
  EXPECT_EQ(dup.result.error().code(), Code::kAlreadyExists);

  auto table = run({"snapshots", id});
  ASSERT_TRUE(table.result);
  // Columns are aligned; compare with runs of spaces squeezed to one.
  std::string squeezed = std::regex_replace(table.out, std::regex(" +"), " ");
  EXPECT_EQ(squeezed.substr(0, squeezed.find('\n')), "ID NAME KIND CREATED FILES SIZE NEW EXPIRES");
  EXPECT_TRUE(std::regex_search(
      squeezed, std::regex(snap + " before-migrate manual [0-9]+[smhd] ago 3 3M 1M never\n")))
      << table.out;
  EXPECT_NE(table.out.find("ID   "), std::string::npos) << "aligned";
  auto listed = json::parse(run({"snapshots", id, "--json"}).out);
  ASSERT_TRUE(listed.is_array());
  EXPECT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[1]["id"], snap);  // newest first
  std::string other = create();
  ASSERT_TRUE(run({"snapshot", other}).result);
  EXPECT_EQ(json::parse(run({"snapshots", "--json"}).out).size(), 3u) << "no ID: every snapshot";
  EXPECT_EQ(json::parse(run({"snapshots", other, "--json"}).out).size(), 1u);

  EXPECT_EQ(run({"diff", id, "--since", "before-migrate"}).out, "A /since/" + snap + "\n");

  auto rb = run({"rollback", id, "before-migrate"});
  ASSERT_TRUE(rb.result) << rb.result.error().message();
  std::string saved = svc_.list_snapshots(id)->at(0).id;
  EXPECT_EQ(rb.out, "rolled back " + id + " to " + snap + "; the state before is snapshot " +
                        saved + "; processes were restarted\n");
  auto rb_json = json::parse(run({"rollback", id, snap, "--json"}).out);
  EXPECT_EQ(rb_json["rollback"]["snapshot"], snap);

  auto restored = run({"restore", snap});
  ASSERT_TRUE(restored.result) << restored.result.error().message();
  std::string new_id = restored.out.substr(0, restored.out.find('\n'));
  EXPECT_EQ(new_id.rfind("sb_", 0), 0u);
  EXPECT_NE(new_id, id);
  EXPECT_EQ(svc_.restored_from, snap);
  EXPECT_EQ(json::parse(run({"restore", "before-migrate", "--json"}).out)["profile"], "test");
  auto cross = run({"restore", snap, "--profile", "live"});
  ASSERT_FALSE(cross.result);
  EXPECT_EQ(cross.result.error().code(), Code::kPermissionDenied);

  // rm: every snapshot named is tried; a failure is reported and makes the exit code 125.
  auto rm = run({"snapshot", "rm", snap, "snap_nope", second["id"]});
  ASSERT_TRUE(rm.result);
  EXPECT_EQ(*rm.result, 125);
  EXPECT_EQ(
      rm.err,
      "space: unknown snapshot snap_nope; `space snapshots ID` lists a sandbox's snapshots\n");
  EXPECT_FALSE(svc_.get_snapshot(snap));
  EXPECT_FALSE(svc_.get_snapshot(second["id"]));
  EXPECT_EQ(*run({"snapshot", "rm", saved}).result, 0);

  auto unknown = run({"rollback", id, "snap_nope"});
  ASSERT_FALSE(unknown.result);
  EXPECT_EQ(unknown.result.error().code(), Code::kNotFound);
  EXPECT_NE(unknown.result.error().message().find("space snapshots ID"), std::string::npos);
}

TEST_F(CommandsTest, SnapshotsOfADaemonWithoutAStore) {
  svc_.keeps_snapshots = false;
  std::string id = create();
  auto r = run({"snapshot", id});
  ASSERT_FALSE(r.result);
  EXPECT_EQ(r.result.error().code(), Code::kUnimplemented);
  EXPECT_NE(r.result.error().message().find("keeps no snapshots"), std::string::npos);
  // (stdout is not checked: the in-process server logs the 501 there.)
}

TEST_F(CommandsTest, RunAndCreateSendSnapshotEvery) {
  ASSERT_TRUE(run({"create", "--snapshot-every", "10m"}).result);
  EXPECT_DOUBLE_EQ(*svc_.last_create.snapshot_every_s, 600);
  ASSERT_TRUE(run({"run", "--snapshot-every", "0", "--", "echo"}).result);
  EXPECT_EQ(*svc_.last_create.snapshot_every_s, 0);
  ASSERT_TRUE(run({"create"}).result);
  EXPECT_FALSE(svc_.last_create.snapshot_every_s);
}

TEST_F(CommandsTest, PsKillDiffDoctor) {
  std::string id = create();
  auto ps = run({"ps", id});
  EXPECT_EQ(ps.out, "PID  PPID  UID  STATE  COMMAND\n1    0     0    S      space-agent\n");
  EXPECT_EQ(*run({"kill", id, "1", "--signal", "KILL"}).result, 0);
  EXPECT_EQ(svc_.stats.signals.back(), 9);
  EXPECT_EQ(*run({"kill", id, "1"}).result, 0);
  EXPECT_EQ(svc_.stats.signals.back(), 15);
  EXPECT_FALSE(run({"kill", id, "x1"}).result);
  EXPECT_FALSE(run({"kill", id, "1", "--signal", "NOPE"}).result);

  EXPECT_EQ(run({"diff", id}).out, "C /etc/hosts\nA /root/new\nD /tmp/x\n");
  EXPECT_EQ(json::parse(run({"diff", id, "--json"}).out)["deleted"][0], "/tmp/x");
  EXPECT_EQ(run({"doctor", "--all"}).out,
            "caps:\n  - name: CAP_KILL\n    why: signals\nnamespaces:\n  user: yes\n");
  // The summary tolerates a report that lacks what it looks for, and points at --all.
  EXPECT_NE(run({"doctor"}).out.find("`space doctor --all` shows every check"), std::string::npos);
  EXPECT_EQ(json::parse(run({"doctor", "--json"}).out)["namespaces"]["user"], true);
}

TEST_F(CommandsTest, CopyFilesBothWays) {
  std::string id = create();
  fs::path local = dir_ / "notes.txt";
  std::ofstream(local) << "some notes";
  fs::permissions(local, fs::perms(0600));
  EXPECT_EQ(*run({"cp", local.native(), id + ":/root/notes.txt"}).result, 0);
  EXPECT_EQ(svc_.files["/root/notes.txt"], "some notes");
  EXPECT_EQ(svc_.modes["/root/notes.txt"], 0600u);
  // Onto an existing directory: into it.
  EXPECT_EQ(*run({"cp", local.native(), id + ":/dir"}).result, 0);
  EXPECT_EQ(svc_.files["/dir/notes.txt"], "some notes");

  svc_.files["/root/out.bin"] = std::string("\0\1\2binary", 9);
  svc_.modes["/root/out.bin"] = 0750;
  fs::path back = dir_ / "out.bin";
  EXPECT_EQ(*run({"cp", id + ":/root/out.bin", back.native()}).result, 0);
  std::ifstream in(back, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  EXPECT_EQ(content.str(), std::string("\0\1\2binary", 9));
  EXPECT_EQ(fs::status(back).permissions() & fs::perms::all, fs::perms(0750));
  // Into an existing local directory.
  fs::create_directories(dir_ / "into");
  EXPECT_EQ(*run({"cp", id + ":/root/out.bin", (dir_ / "into").native()}).result, 0);
  EXPECT_TRUE(fs::exists(dir_ / "into" / "out.bin"));

  auto missing = run({"cp", id + ":/nope", (dir_ / "x").native()});
  ASSERT_FALSE(missing.result);
  EXPECT_EQ(missing.result.error().code(), Code::kNotFound);
  EXPECT_FALSE(run({"cp", "a", "b"}).result);
  EXPECT_FALSE(run({"cp", id + ":/a", id + ":/b"}).result);
  EXPECT_FALSE(run({"cp", id + ":relative", "b"}).result);
}

TEST_F(CommandsTest, CopyDirectoriesAsTar) {
  std::string id = create();
  fs::path src = dir_ / "proj";
  fs::create_directories(src / "src");
  std::ofstream(src / "src" / "main.py") << "print(1)\n";
  fs::create_symlink("src/main.py", src / "entry");
  EXPECT_EQ(*run({"cp", src.native(), id + ":/work"}).result, 0);
  EXPECT_EQ(svc_.last_tar_dir, "/work");

  // What was uploaded is a real tar of the tree: serve it back and download it.
  svc_.tar_to_serve = svc_.last_tar;
  fs::path out = dir_ / "copy";
  auto r = run({"cp", id + ":/dir", out.native()});
  ASSERT_TRUE(r.result) << r.result.error().message();
  std::ifstream in(out / "src" / "main.py");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "print(1)");
  EXPECT_EQ(fs::read_symlink(out / "entry"), "src/main.py");
}

TEST_F(CommandsTest, Images) {
  fs::path tarball = dir_ / "rootfs.tar";
  std::ofstream(tarball) << std::string(700000, 't');
  auto r = run({"image", "import", "deb", tarball.native()});
  ASSERT_TRUE(r.result) << r.result.error().message();
  EXPECT_EQ(svc_.image_bytes, 700000u);
  EXPECT_NE(r.err.find("space: imported image deb ("), std::string::npos) << r.err;

  fs::path tree = dir_ / "tree";
  fs::create_directories(tree / "etc");
  std::ofstream(tree / "etc" / "os-release") << "ID=test\n";
  EXPECT_EQ(*run({"image", "import", "tree", tree.native()}).result, 0);
  EXPECT_GT(svc_.image_bytes, 512u);

  EXPECT_EQ(run({"image", "ls"}).out, "NAME  FORMAT  SIZE  CREATED\nhost  -       0B    3d ago\n");
  // inspect prints the API's view of one image (the test service's list has host only).
  auto inspected = run({"image", "inspect", "host"});
  ASSERT_TRUE(inspected.result) << inspected.result.error().message();
  EXPECT_NE(inspected.out.find("\"name\": \"host\""), std::string::npos) << inspected.out;
  EXPECT_NE(inspected.out.find("\"config\""), std::string::npos) << inspected.out;
  auto rm = run({"image", "rm", "host"});
  ASSERT_FALSE(rm.result);
  EXPECT_EQ(rm.result.error().code(), Code::kConflict);
  EXPECT_FALSE(run({"image", "import", "x", (dir_ / "missing").native()}).result);
}

TEST_F(CommandsTest, NoDaemon) {
  Args a = args({"ls"});
  Client nowhere((dir_ / "nothing.sock").native());
  auto r = run_command(a, nowhere);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code(), Code::kUnavailable);
  EXPECT_NE(r.error().message().find("no daemon at " + (dir_ / "nothing.sock").native()),
            std::string::npos);
  EXPECT_NE(r.error().message().find("start one with `spaced`"), std::string::npos);
}

TEST(Endpoint, Parsing) {
  auto r = parse_endpoint("sb_1:/etc/hosts");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->remote);
  EXPECT_EQ(r->id, "sb_1");
  EXPECT_EQ(r->path, "/etc/hosts");
  EXPECT_FALSE(parse_endpoint("./a:b")->remote);
  EXPECT_FALSE(parse_endpoint("/tmp/a:b")->remote);
  EXPECT_FALSE(parse_endpoint("file")->remote);
  EXPECT_FALSE(parse_endpoint(":x")->remote);
  EXPECT_FALSE(parse_endpoint("sb_1:rel"));
  EXPECT_FALSE(parse_endpoint(""));
}

}  // namespace
}  // namespace space::cli
