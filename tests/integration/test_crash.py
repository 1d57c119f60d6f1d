"""Crash safety (docs/crash-safety.md): spaced killed with SIGKILL at every named step of every
multi-step operation, restarted, and held to the invariants:

- nothing of a sandbox is left on the host (cgroups, processes, mounts, state entries) unless
  the sandbox is listed and works (an exec answers);
- a rollback never ends with a destroyed sandbox: it runs, on the snapshot or on its old state;
- every listed snapshot restores; every sandbox's audit chain verifies;
- SQLite's write-ahead log stays bounded while spaced runs.

Each failpoint (SPACE_FAILPOINTS, src/common/failpoint.cc) has a scenario here, and the table
is checked against the sources, so a new point without a scenario fails this suite. A bounded
crash soak (kills at random moments under concurrent clients) closes it; SPACE_CRASH_SOAK_ROUNDS
makes it longer (`make crash-soak`)."""

import io
import json
import os
import random
import re
import signal
import subprocess
import tarfile
import threading
import time

from harness import SPACED, SpaceTestCase, main

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")


def failpoint_table():
    out = subprocess.run([SPACED, "--failpoints"], capture_output=True, text=True, check=True)
    return [line.split("\t", 1)[0] for line in out.stdout.splitlines() if line.strip()]


def failpoints_in_sources():
    names = set()
    for dirpath, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".cc") and f != "failpoint.cc":
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    names.update(re.findall(r'\bfailpoint\("([^"]+)"\)', fh.read()))
    return names


class CrashBase(SpaceTestCase):

    def restart(self, failpoint=None):
        """Stops spaced (SIGTERM: sandboxes outlive it) and starts it again, armed or not."""
        self.daemon.stop(signal.SIGTERM)
        self.daemon.extra_env = {"SPACE_FAILPOINTS": failpoint} if failpoint else {}
        self.daemon.start()

    def wait_killed(self, failpoint, timeout=60):
        """Waits for spaced to die at `failpoint`; checks it died by SIGKILL there."""
        try:
            rc = self.daemon.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail("spaced did not reach failpoint %s in %ss; log:\n%s" %
                      (failpoint, timeout, self.daemon.log_tail()))
        self.assertEqual(rc, -signal.SIGKILL, "spaced exit status at %s" % failpoint)
        self.assertIn("failpoint %s: killing" % failpoint, self.daemon.log_text())

    def start_clean(self):
        self.daemon.extra_env = {}
        self.daemon.start()

    def snapshots(self, sid=None):
        out = self.space_ok("snapshots", *([sid] if sid else []), "--json")
        data = json.loads(out)
        return data["snapshots"] if isinstance(data, dict) else data

    def check_invariants(self, before, ids):
        """Every listed sandbox works and its audit verifies; every listed snapshot of `ids`
        restores; then with everything removed nothing is left on the host."""
        listed = self.list_ids()
        for sid in listed:
            self.assertEqual(self.exec_ok(sid, "echo", "ok"), "ok\n", "listed %s works" % sid)
        for sid in ids:
            rc, out, err = self.space("audit", sid, "--verify")
            self.assertEqual(rc, 0, "audit of %s verifies: %s %s" % (sid, out, err))
            for snap in self.snapshots(sid):
                restored = self.space_ok("restore", snap["id"]).strip().splitlines()[-1]
                self.known_ids.add(restored)
                self.assertEqual(self.exec_ok(restored, "echo", "ok"), "ok\n")
                self.space_ok("rm", restored)
        for sid in listed:
            self.space_ok("rm", "--force", sid)
        self.assert_no_leaks(before, timeout=20)


class FailpointTest(CrashBase):
    """One test per failpoint: the operation cut there, spaced restarted, the invariants held."""

    def setUp(self):
        if not self.daemon.alive():
            self.start_clean()
        self.before = self.snapshot_host()
        self.before["daemon_fds"] = self.before["daemon_namespaces"] = None

    def cut(self, failpoint, *op, setup_restart=True):
        """Restarts spaced armed at `failpoint`, runs `space OP` (which loses its daemon),
        waits for the kill and starts spaced again, unarmed."""
        if setup_restart:
            self.restart(failpoint)
        rc, out, err = self.space(*op, timeout=120)
        self.assertNotEqual(rc, 0, "space %s succeeded although spaced was killed: %s" %
                            (" ".join(op), out))
        self.wait_killed(failpoint)
        self.start_clean()

    def state(self, sid):
        r = self.api("GET", "/v1/sandboxes/%s" % sid)
        return r.json.get("state") if r.status == 200 else None

    # -- create ---------------------------------------------------------------------------------

    def create_cut(self, failpoint, listed_after):
        self.restart(failpoint)
        ids_before = set(self.list_ids())
        rc, out, err = self.space("create", timeout=120)
        self.assertNotEqual(rc, 0, out)
        self.wait_killed(failpoint)
        self._learn_ids(self.daemon.log_text())
        self.start_clean()
        new = set(self.list_ids()) - ids_before
        if listed_after:
            self.assertEqual(len(new), 1, "the sandbox recorded running is listed again")
        else:
            self.assertEqual(new, set(), "a create cut before it ran is not listed")
            self.assertIn("interrupted while being created", self.daemon.log_text())
        self.check_invariants(self.before, sorted(new))

    def test_create_after_record(self):
        self.create_cut("create.after_record", False)

    def test_create_after_runtime(self):
        self.create_cut("create.after_runtime", False)

    def test_create_after_agent(self):
        self.create_cut("create.after_agent", False)

    def test_create_after_attach(self):
        self.create_cut("create.after_attach", False)

    def test_create_after_running(self):
        self.create_cut("create.after_running", True)

    def test_restore_cut_after_runtime(self):
        # A restore is a create populated from a snapshot: the same points, the same rules.
        sid = self.create()
        self.exec_ok(sid, "sh", "-c", "echo kept > /root/f")
        snap = json.loads(self.space_ok("snapshot", sid, "--json"))["id"]
        self.restart("create.after_runtime")
        ids_before = set(self.list_ids())
        rc, out, _ = self.space("restore", snap, timeout=120)
        self.assertNotEqual(rc, 0, out)
        self.wait_killed("create.after_runtime")
        self.start_clean()
        self.assertEqual(set(self.list_ids()) - ids_before, set())
        self.check_invariants(self.before, [sid])

    # -- destroy --------------------------------------------------------------------------------

    def destroy_cut(self, failpoint, *rm_opts, paused=False):
        sid = self.create()
        self.space_ok("exec", sid, "--detach", "--", "sleep", "1000")
        if paused:  # its processes frozen: the teardown at restart must still end them
            self.space_ok("pause", sid)
        self.cut(failpoint, "rm", *rm_opts, sid)
        self.assertNotIn(sid, self.list_ids(), "a destroy cut midway is finished at restart")
        self.assertEqual(self.state(sid), "destroyed")
        self.check_invariants(self.before, [sid])

    def test_destroy_after_intent(self):
        self.destroy_cut("destroy.after_intent")

    def test_destroy_of_a_paused_sandbox_after_intent(self):
        self.destroy_cut("destroy.after_intent", paused=True)

    def test_destroy_after_teardown(self):
        self.destroy_cut("destroy.after_teardown")

    # -- snapshot -------------------------------------------------------------------------------

    def snapshot_cut(self, failpoint):
        sid = self.create()
        self.exec_ok(sid, "sh", "-c", "echo before > /root/f")
        name = "cut-" + sid
        self.cut(failpoint, "snapshot", sid, "--name", name)
        self.assertIn(sid, self.list_ids())
        # Not left frozen: an exec answers at once, and its files are as they were.
        self.assertEqual(self.exec_ok(sid, "cat", "/root/f"), "before\n")
        self.assertEqual(self.state(sid), "running")
        self.assertEqual([s for s in self.snapshots(sid) if s.get("name") == name], [],
                         "a snapshot whose record was never written is not listed")
        # The name was never taken: a snapshot by it works now.
        self.space_ok("snapshot", sid, "--name", name)
        self.check_invariants(self.before, [sid])

    def test_snapshot_after_freeze(self):
        self.snapshot_cut("snapshot.after_freeze")

    def test_snapshot_after_manifest(self):
        self.snapshot_cut("snapshot.after_manifest")

    # -- rollback -------------------------------------------------------------------------------

    def rollback_cut(self, failpoint, expect):
        sid = self.create()
        self.exec_ok(sid, "sh", "-c", "echo v1 > /root/f")
        # Snapshot names are a profile's for now (issue 36): one per test.
        name = "v1-" + sid
        self.space_ok("snapshot", sid, "--name", name)
        self.exec_ok(sid, "sh", "-c", "echo v2 > /root/f")
        self.cut(failpoint, "rollback", sid, name)
        self.assertIn(sid, self.list_ids(), "a rollback never ends with a destroyed sandbox")
        self.assertEqual(self.state(sid), "running")
        self.assertEqual(self.exec_ok(sid, "cat", "/root/f"), expect)
        # The state before was saved first: it is listed and holds v2.
        saved = [s for s in self.snapshots(sid) if s.get("kind") == "rollback"]
        self.assertEqual(len(saved), 1, self.snapshots(sid))
        restored = self.space_ok("restore", saved[0]["id"]).strip().splitlines()[-1]
        self.known_ids.add(restored)
        self.assertEqual(self.exec_ok(restored, "cat", "/root/f"), "v2\n")
        self.space_ok("rm", restored)
        if expect == "v1\n":
            r = self.api("GET", "/v1/sandboxes/%s/audit" % sid)
            self.assertEqual(r.status, 200, r)
            outcomes = [e["data"].get("outcome", "") for e in r.json["events"]
                        if e["kind"] == "sandbox.rollback"]
            self.assertTrue(any("after spaced restarted" in o for o in outcomes), outcomes)
        self.check_invariants(self.before, [sid])

    def test_rollback_after_save(self):
        # Killed before the intent was written: the sandbox goes on, on its old state.
        self.rollback_cut("rollback.after_save", "v2\n")

    def test_rollback_after_intent(self):
        self.rollback_cut("rollback.after_intent", "v1\n")

    def test_rollback_after_stop(self):
        self.rollback_cut("rollback.after_stop", "v1\n")

    def test_rollback_after_start(self):
        self.rollback_cut("rollback.after_start", "v1\n")

    # -- pause and resume -----------------------------------------------------------------------

    def test_pause_after_freeze(self):
        sid = self.create()
        self.cut("pause.after_freeze", "pause", sid)
        self.assertEqual(self.state(sid), "running", "the record said running: it runs")
        self.check_invariants(self.before, [sid])

    def test_resume_after_thaw(self):
        sid = self.create()
        self.space_ok("pause", sid)
        self.cut("resume.after_thaw", "resume", sid)
        self.assertEqual(self.state(sid), "paused", "the record said paused: it is paused")
        self.space_ok("resume", sid)
        self.check_invariants(self.before, [sid])

    # -- images ---------------------------------------------------------------------------------

    def image_tar(self):
        path = os.path.join(self.tmp, "img.tar")
        with tarfile.open(path, "w") as tar:
            data = b"an image cut short\n"
            ti = tarfile.TarInfo("etc/marker")
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
        return path

    def images_dir_entries(self):
        return sorted(os.listdir(os.path.join(self.daemon.state_dir, "images")))

    def image_cut(self, failpoint, name, remove=False):
        tar = self.image_tar()
        if remove:
            self.space_ok("image", "import", name, tar)
            self.cut(failpoint, "image", "rm", name)
        else:
            self.cut(failpoint, "image", "import", name, tar)
        images = json.loads(self.space_ok("image", "ls", "--json"))
        self.assertNotIn(name, [i["name"] for i in images])
        self.assertEqual(self.images_dir_entries(), ["host"],
                         "nothing of the cut import or removal is left")
        # The name is free again.
        self.space_ok("image", "import", name, tar)
        self.space_ok("image", "rm", name)
        self.assertEqual(self.images_dir_entries(), ["host"])

    def test_image_after_unpack(self):
        self.image_cut("image.after_unpack", "cut-unpack")

    def test_image_after_install(self):
        self.image_cut("image.after_install", "cut-install")

    def test_image_remove_after_record(self):
        self.image_cut("image.remove_after_record", "cut-remove", remove=True)

    # -- the table ------------------------------------------------------------------------------

    def test_every_failpoint_has_a_scenario(self):
        table = failpoint_table()
        self.assertEqual(len(table), len(set(table)), "names are unique")
        self.assertEqual(set(table), failpoints_in_sources(),
                         "the table (spaced --failpoints) and the failpoint(...) calls in src/ "
                         "name the same points")
        tested = set()
        for name in dir(self):
            if name.startswith("test_"):
                src = getattr(self, name).__func__.__code__.co_consts
                tested.update(c for c in src if isinstance(c, str) and c in table)
        tested |= PoolCrashTest.COVERS | BuildCrashTest.COVERS
        self.assertEqual(sorted(set(table) - tested), [], "failpoints without a scenario")


class BuildCrashTest(CrashBase):
    """An image build cut at each of its failpoints (its own daemon: the steps a cut build
    finished stay in the build cache, which FailpointTest's image checks would see)."""

    COVERS = {"image.build.after_run", "image.build.after_step", "image.build.after_install"}
    setUp = FailpointTest.setUp
    cut = FailpointTest.cut
    images_dir_entries = FailpointTest.images_dir_entries

    def build_cut(self, failpoint):
        """A build (FROM a busybox image, RUN, COPY) cut at `failpoint`: after the restart no
        image of that name, no staging or half-made tree, no step sandbox; the rebuild works."""
        from vm_image import busybox_tar
        base = os.path.join(self.tmp, "busybox.tar.gz")
        busybox_tar(base, ["sh", "echo", "cat"])
        self.space_ok("image", "import", "cut-base", base)
        ctx = os.path.join(self.tmp, "ctx-" + failpoint)
        os.makedirs(ctx)
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write("FROM cut-base\nRUN echo ran > /ran\nCOPY file /copied\n")
        with open(os.path.join(ctx, "file"), "w") as f:
            f.write("copied\n")
        self.cut(failpoint, "image", "build", "cut-built", ctx)
        images = json.loads(self.space_ok("image", "ls", "--json"))
        self.assertNotIn("cut-built", [i["name"] for i in images])
        self.assertEqual(self.list_ids(), [], "the step's sandbox is gone")
        left = [e for e in self.images_dir_entries()
                if e.startswith((".build-", ".install-")) or e == "cut-built"]
        self.assertEqual(left, [], "nothing of the cut build is left")
        out = self.space_ok("image", "build", "cut-built", ctx)
        sid = self.space_ok("create", "--image", "cut-built").strip().splitlines()[-1]
        self.known_ids.add(sid)
        self.assertEqual(self.exec_ok(sid, "cat", "/ran", "/copied"), "ran\ncopied\n", out)
        self.space_ok("rm", "-f", sid)
        self.space_ok("image", "rm", "cut-built")
        self.space_ok("image", "rm", "cut-base")
        self.check_invariants(self.before, [])

    def test_image_build_after_run(self):
        self.build_cut("image.build.after_run")

    def test_image_build_after_step(self):
        self.build_cut("image.build.after_step")

    def test_image_build_after_install(self):
        self.build_cut("image.build.after_install")


class PoolCrashTest(CrashBase):
    """A warm pool's refill cut by a kill: its pooled sandbox is removed at the next start."""

    START_DAEMON = False
    COVERS = {"create.after_record", "create.after_runtime", "create.after_agent"}

    def test_refill_cut_leaves_nothing(self):
        self.daemon.config = {"pools": []}
        self.daemon.start()
        before = self.snapshot_host()
        before["daemon_fds"] = before["daemon_namespaces"] = None
        self.daemon.stop(signal.SIGTERM)
        for fp in sorted(self.COVERS):
            with self.subTest(failpoint=fp):
                # The refill starts with spaced: it dies before or after it first answers.
                self.daemon.config = {"pools": [{"profile": "test", "size": 1}]}
                self.daemon.extra_env = {"SPACE_FAILPOINTS": fp}
                self.daemon.start(wait=False)
                self.wait_killed(fp)
                self._learn_ids(self.daemon.log_text())
                self.daemon.config = {"pools": []}
                self.start_clean()
                self.assertIn("warm pool: never used", self.daemon.log_text())
                self.assertEqual(self.list_ids(), [])
                self.assert_no_leaks(before, timeout=20)
                self.daemon.stop(signal.SIGTERM)


class CrashSoakTest(CrashBase):
    """Kills at random moments while clients create, exec, snapshot, roll back, restore and
    destroy; after each restart every listed sandbox works, and at the end nothing is left."""

    ROUNDS = int(os.environ.get("SPACE_CRASH_SOAK_ROUNDS", "6"))
    CLIENTS = int(os.environ.get("SPACE_CRASH_SOAK_CLIENTS", "4"))

    def client(self, stop, rng, errors):
        mine = []
        while not stop.is_set():
            try:
                op = rng.random()
                if not mine or op < 0.15:  # as many creates as removes: a steady population
                    rc, out, _ = self.space("create", timeout=60)
                    if rc == 0:
                        mine.append(out.strip().splitlines()[-1])
                        self.known_ids.add(mine[-1])
                    continue
                sid = rng.choice(mine)
                if op < 0.45:
                    self.space("exec", sid, "--", "sh", "-c", "echo %d >> /root/log" % rng.randint(0, 9),
                               timeout=60)
                elif op < 0.6:
                    self.space("snapshot", sid, "--name", "s%d" % rng.randint(0, 2 ** 30),
                               timeout=60)
                elif op < 0.75:
                    snaps = self.snapshots(sid) if self.daemon.alive() else []
                    if snaps:
                        self.space("rollback", sid, rng.choice(snaps)["id"], timeout=60)
                elif op < 0.85:
                    self.space("pause", sid, timeout=60)
                    self.space("resume", sid, timeout=60)
                else:
                    self.space("rm", "--force", sid, timeout=60)
                    mine.remove(sid)
            except Exception as e:  # noqa: BLE001 - the daemon dies under the clients on purpose
                errors.append(repr(e))
                time.sleep(0.05)

    def test_random_kills_under_load(self):
        self.daemon.start()
        before = self.snapshot_host()
        before["daemon_fds"] = before["daemon_namespaces"] = None
        rng = random.Random(int(os.environ.get("SPACE_CRASH_SOAK_SEED", "1205")))
        lost = []
        for rnd in range(self.ROUNDS):
            stop = threading.Event()
            errors = []
            threads = [threading.Thread(target=self.client,
                                        args=(stop, random.Random(rng.random()), errors))
                       for _ in range(self.CLIENTS)]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(1.0, 3.0))
            listed_before = set(self.list_ids())
            self.daemon.stop(signal.SIGKILL)
            stop.set()
            for t in threads:
                t.join(120)
            self.daemon.start()
            self._learn_ids(self.daemon.log_text())
            listed = set(self.list_ids())
            for sid in listed:
                if self.inspect(sid).get("state") == "paused":  # a pause the kill cut short
                    self.space_ok("resume", sid)
                rc, out, err = self.space("exec", sid, "--", "echo", "ok", timeout=60)
                self.assertEqual((rc, out), (0, "ok\n"),
                                 "round %d: listed %s does not work: %s" % (rnd, sid, err))
            # A sandbox listed before the kill is lost only if a client destroyed it (its
            # record says why); a rollback never loses one.
            for sid in listed_before - listed:
                r = self.api("GET", "/v1/sandboxes/%s" % sid)
                reason = (r.json or {}).get("reason", "") if r.status == 200 else ""
                if "removed by the API" not in reason:
                    lost.append((rnd, sid, reason))
            print("round %d: killed with %d listed, %d listed and working after the restart, "
                  "%d client errors meanwhile" % (rnd, len(listed_before), len(listed),
                                                  len(errors)))
        self.assertEqual(lost, [], "sandboxes lost to a kill")
        for sid in self.list_ids():
            self.space_ok("rm", "--force", sid)
        for sid in sorted(self.known_ids):
            rc, out, err = self.space("audit", sid, "--verify")
            if rc == 0 or "unknown sandbox" not in err:
                self.assertEqual(rc, 0, "audit of %s: %s %s" % (sid, out, err))
        self.assert_no_leaks(before, timeout=30)
        wal = os.path.join(self.daemon.state_dir, "space.db-wal")
        self.assertLess(os.path.getsize(wal) if os.path.exists(wal) else 0, 64 << 20)


if __name__ == "__main__":
    main()
