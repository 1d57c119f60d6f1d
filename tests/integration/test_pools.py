"""Warm pools (docs/pools.md): a configured pool fills up to its size in the background; a create
of the pool's template claims a started sandbox and personalizes it (env, secrets' placeholders,
egress, CA, lifetime); the pool refills; a claimed sandbox is torn down on `rm`, never given back;
other templates take the cold path; stopping spaced (cleanly or by SIGKILL) leaves nothing of
the pool behind; a bad pool config is refused with a clear error. Without "pools" in its config
spaced keeps a default pool, shown by `space doctor` and /metrics, whose sandboxes cannot be
told from cold ones; `"pools": []` turns it off."""

import json
import os
import re
import signal
import subprocess
import time

from harness import (SPACED, Daemon, SpaceTestCase, main, proc_cmdline, proc_pids, proc_ppid,
                     read_text, safe_rmtree, wait_for)

POOL_SIZE = 2
SECRET = "s3cr3t-pool-value"


def metric(text, name, **labels):
    """The value of a metric line `name{labels...}` (labels matched as a subset)."""
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"^(\w+)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


class PoolTest(SpaceTestCase):

    @classmethod
    def daemon_config(cls):
        return {
            "profiles": {"test": {}, "live": {}},
            "secrets": {"API_TOKEN": {"value": SECRET, "hosts": ["api.example.test"],
                                      "profiles": ["test"]}},
            "pools": [{"profile": "test", "size": POOL_SIZE}],
        }

    def metrics(self):
        r = self.api("GET", "/metrics")
        self.assertEqual(r.status, 200)
        return r.body.decode()

    def pool(self, name):
        return metric(self.metrics(), name, profile="test", image="host")

    def wait_full(self):
        wait_for(lambda: self.pool("space_pool_ready") == POOL_SIZE, timeout=30,
                 what="the warm pool to fill up to %d" % POOL_SIZE)

    def test_claim_personalize_refill(self):
        self.wait_full()
        hits = self.pool("space_pool_hits_total")
        sid = self.create("--env", "GREETING=hello-from-pool", "--secret", "API_TOKEN")
        self.assertEqual(self.pool("space_pool_hits_total"), hits + 1, "the create was not a hit")
        # Personalized: env, placeholder (never the secret), hostname = id, its own CA.
        env = self.exec_ok(sid, "env")
        self.assertIn("GREETING=hello-from-pool", env)
        self.assertNotIn(SECRET, env)
        placeholder = re.search(r"^API_TOKEN=(.+)$", env, re.M)
        self.assertTrue(placeholder, env)
        self.assertEqual(self.exec_ok(sid, "hostname").strip(), sid)
        ca = self.exec_ok(sid, "cat", "/etc/space/ca.crt")
        self.assertIn("BEGIN CERTIFICATE", ca)
        bundle = self.exec_ok(sid, "cat", "/etc/space/ca-bundle.crt")
        self.assertTrue(bundle.rstrip().endswith(ca.rstrip()), "the bundle lacks the sandbox CA")
        # Owned by sandbox root, as the agent would have written them; diff leaves them out.
        self.assertEqual(self.exec_ok(sid, "stat", "-c", "%u:%g %a", "/etc/space/ca.crt",
                                      "/etc/space").split("\n")[:2], ["0:0 644", "0:0 755"])
        self.assertEqual(self.exec_ok(sid, "stat", "-c", "%u:%g %a", "/etc").strip(),
                         "0:0 755")
        diff = json.loads(self.space_ok("diff", sid, "--json"))
        self.assertEqual([c for c in diff.get("changes", diff) if "/etc/space" in json.dumps(c)],
                         [], diff)
        # The audit log says it came from the pool.
        events = [json.loads(l) for l in self.space_ok("audit", sid, "--json").splitlines()
                  if l.strip()]
        create = [e for e in events if e["kind"] == "sandbox.create"]
        self.assertEqual(len(create), 1, events)
        self.assertTrue(create[0]["data"].get("warm_pool"), create[0])
        self.assertEqual(create[0]["data"]["env_names"], ["GREETING"])
        # The gateway serves it: a host outside its (empty) allowlist is refused by the gateway.
        out = self.exec_ok(sid, "python3", "-c", (
            "import socket; s = socket.create_connection(('127.0.0.1', 3128), timeout=10); "
            "s.sendall(b'CONNECT nowhere.example.test:443 HTTP/1.1\\r\\n"
            "Host: nowhere.example.test:443\\r\\n\\r\\n'); print(s.recv(200).decode())"))
        self.assertRegex(out.splitlines()[0], r"^HTTP/1\.[01] 403", out)
        # A second claim gets another CA and another uid range.
        other = self.create()
        self.assertNotEqual(self.exec_ok(other, "cat", "/etc/space/ca.crt"), ca)
        self.assertNotEqual(self.inspect(other)["uid_base"], self.inspect(sid)["uid_base"])
        self.wait_full()
        self.assertGreaterEqual(self.pool("space_pool_refills_total"), POOL_SIZE + 2)

    def test_claimed_sandbox_is_torn_down_not_recycled(self):
        self.wait_full()
        before = self.snapshot_host()
        sid = self.create()
        claimed = [sid]
        agent = self.agent_pid(sid)
        self.exec_ok(sid, "sh", "-c", "echo mine > /root/mark")
        self.space_ok("rm", sid)
        self.assertFalse(os.path.exists("/proc/%d" % agent), "the agent outlived `rm`")
        self.wait_full()
        # Every later sandbox is a fresh one: new id, new agent, none of the old files.
        for _ in range(POOL_SIZE + 1):
            again = self.create()
            claimed.append(again)
            self.assertNotEqual(again, sid)
            self.assertNotEqual(self.agent_pid(again), agent)
            rc, out, _ = self.space("exec", again, "--", "cat", "/root/mark")
            self.assertNotEqual(rc, 0, "a new sandbox saw an old one's file: %r" % out)
            self.space_ok("rm", again)
        self.assertEqual(self.inspect(sid)["state"], "destroyed")
        self.wait_full()
        # What is left beyond `before` is the pool's replacements, no more, and nothing of the
        # sandboxes this test claimed.
        ok, found = False, {}
        for _ in range(60):
            found = self.leaks(before)
            ids = set(re.findall(r"sb_[0-9a-f]{12}", json.dumps(found)))
            ok = not (ids & set(claimed)) and len(ids) <= POOL_SIZE
            if ok:
                break
            time.sleep(0.25)
        self.assertTrue(ok, "left behind beyond the pool: %s" % json.dumps(found, indent=1))

    def test_other_templates_take_the_cold_path(self):
        self.wait_full()
        hits = self.pool("space_pool_hits_total")
        misses = self.pool("space_pool_misses_total")
        a = self.create("--memory", "256M")
        b = self.create("--profile", "live")
        c = self.create("--workdir", "/srv/work")  # same template, another workdir: claimed
        self.assertEqual(self.pool("space_pool_hits_total"), hits + 1)
        self.assertEqual(self.pool("space_pool_misses_total"), misses)
        self.assertEqual(self.inspect(a)["limits"]["memory"], 256 << 20)
        self.assertEqual(self.inspect(b)["profile"], "live")
        self.assertEqual(self.exec_ok(c, "pwd").strip(), "/srv/work")
        m = self.metrics()
        self.assertGreaterEqual(metric(m, "space_sandbox_create_path_seconds_count", path="pool"),
                                1)
        self.assertGreaterEqual(metric(m, "space_sandbox_create_path_seconds_count", path="cold"),
                                2)
        # The cold path's steps are measured.
        for step in ("cgroup", "netns", "clone", "child setup and exec", "agent hello"):
            self.assertIsNotNone(
                metric(m, "space_sandbox_create_step_seconds_sum", step=step), step)

    def test_pool_sandboxes_are_not_visible(self):
        self.wait_full()
        ids = set(self.list_ids())
        # Pool sandboxes have state directories and database rows ("pooled"), but no API call
        # reaches them.
        pooled = set(os.listdir(os.path.join(self.daemon.state_dir, "sandboxes"))) - ids
        self.assertEqual(len(pooled), POOL_SIZE, pooled)
        for sid in pooled:
            r = self.api("GET", "/v1/sandboxes/%s" % sid)
            self.assertIn(r.status, (404, 409), r)
            r, _ = self.api_exec(sid, ["true"])
            self.assertIn(r.status, (404, 409), r)


def alive(pid):
    """A process that exists and is not a zombie waiting for the host's init to reap it."""
    stat = read_text("/proc/%d/stat" % pid)
    return bool(stat) and stat.rsplit(")", 1)[-1].split()[0] != "Z"


def default_pool_size():
    """What spaced sizes its default pool to on this host (config.cc, default_pool_size)."""
    m = re.search(r"^MemTotal:\s+(\d+) kB", read_text("/proc/meminfo"), re.M)
    return max(1, min(4, int(m.group(1)) * 1024 // (4 << 30)))


class DefaultPoolTest(SpaceTestCase):
    """A spaced whose config names no pools keeps one of the default template; a sandbox claimed
    from it and one made cold (a second spaced with `"pools": []`) look the same from inside
    and in the audit log."""

    DEFAULT_POOL = True

    @classmethod
    def daemon_config(cls):
        return {"secrets": {"API_TOKEN": {"value": SECRET, "hosts": ["api.example.test"],
                                          "profiles": ["test"]}}}

    @classmethod
    def prepare_class(cls):
        root = os.path.join(cls.tmp, "cold")
        os.makedirs(root, mode=0o755)
        cls.cold = Daemon(root, name="cold", config=dict(cls.daemon_config(), pools=[]))
        cls.cold.start()

    @classmethod
    def tearDownClass(cls):
        try:
            if getattr(cls, "cold", None) is not None:
                cls.cleanup_daemon(cls.cold)
        finally:
            super().tearDownClass()

    def metrics(self, daemon=None):
        r = self.api("GET", "/metrics", daemon=daemon)
        self.assertEqual(r.status, 200)
        return r.body.decode()

    def test_default_pool_is_on_and_shown(self):
        size = default_pool_size()
        wait_for(lambda: metric(self.metrics(), "space_pool_ready", profile="test", image="host",
                                runtime="linux") == size,
                 timeout=30, what="the default pool to fill up to %d" % size)
        self.assertEqual(metric(self.metrics(), "space_pool_size", profile="test", image="host",
                                runtime="linux"), size)
        doctor = json.loads(self.space_ok("doctor", "--json"))
        self.assertEqual(len(doctor["pools"]), 1, doctor["pools"])
        pool = doctor["pools"][0]
        self.assertTrue(pool["default"], pool)
        self.assertEqual((pool["runtime"], pool["image"], pool["profile"], pool["size"]),
                         ("linux", "host", "test", size))
        self.assertIn('"pools": []', doctor["pools_note"])
        text = self.space_ok("doctor", "--all")
        self.assertRegex(text, r"\npools:\n  - cpus: .*\n(    .*\n)*    default: yes\n")
        summary = self.space_ok("doctor")
        self.assertRegex(summary, r"\nwarm pool test/host \(linux\): \d+ of %d ready\n" % size)
        self.assertLess(len(summary.splitlines()), 20, summary)
        # "pools": [] turns it off: the cold spaced has no pool.
        self.assertIsNone(metric(self.metrics(self.cold), "space_pool_size"))
        cold_doctor = json.loads(self.space_ok("doctor", "--json", daemon=self.cold))
        self.assertEqual(cold_doctor["pools"], [])

    def sandbox_view(self, sid, daemon):
        """What a sandbox's own processes and its audit log show, with its id, its secret's
        placeholder and its start time taken out."""
        def run(*cmd):
            rc, out, err = self.space("exec", sid, "--", *cmd, daemon=daemon)
            self.assertEqual(rc, 0, (cmd, out, err))
            return out
        env = {}
        for line in run("env").splitlines():
            k, _, v = line.partition("=")
            env[k] = "<id>" if v == sid else ("<placeholder>" if k == "API_TOKEN" else v)
        mounts = sorted(" ".join(l.split()[4:5] + l.split(" - ")[1].split()[:1])
                        for l in run("cat", "/proc/self/mountinfo").splitlines())
        procs = json.loads(self.space_ok("ps", sid, "--json", daemon=daemon))
        procs = procs["processes"] if isinstance(procs, dict) else procs
        events = [json.loads(l) for l in
                  self.space_ok("audit", sid, "--json", daemon=daemon).splitlines() if l.strip()]
        self.space_ok("audit", sid, "--verify", daemon=daemon)
        diff = json.loads(self.space_ok("diff", sid, "--json", daemon=daemon))
        return {
            "hostname": run("hostname").strip().replace(sid, "<id>"),
            "id": run("id"),
            "env": env,
            "secret in env": SECRET in run("env"),
            "/tmp": run("ls", "-A", "/tmp"),
            "/root": run("ls", "-A", "/root"),
            "/etc/space": run("ls", "-A", "/etc/space"),
            "mounts": mounts,
            # An exiting process (the last exec's shim, a moment after its exit was reported)
            # is neither sandbox's, so it is not compared: it has no argv left, or still the
            # agent's, whose fork it is (the agent itself is PID 1).
            "processes": sorted(" ".join(p.get("argv", [])) for p in procs
                                if p.get("argv") and (p.get("pid") == 1 or
                                                      os.path.basename(p["argv"][0]) != "space-agent")),
            "audit": [e["kind"] for e in events],
            "diff": diff,
        }

    def test_pooled_sandbox_cannot_be_told_from_a_cold_one(self):
        size = default_pool_size()
        wait_for(lambda: metric(self.metrics(), "space_pool_ready", profile="test") == size,
                 timeout=30, what="the default pool to fill")
        hits = metric(self.metrics(), "space_pool_hits_total", profile="test")
        opts = ("--env", "GREETING=hello", "--secret", "API_TOKEN")
        pooled = self.create(*opts)
        self.assertEqual(metric(self.metrics(), "space_pool_hits_total", profile="test"), hits + 1)
        rc, out, err = self.space("create", *opts, daemon=self.cold)
        self.assertEqual(rc, 0, err)
        cold = out.strip()
        self._learn_ids(cold)
        try:
            a, b = self.sandbox_view(pooled, self.daemon), self.sandbox_view(cold, self.cold)
            self.assertEqual(a["hostname"], "<id>")
            self.assertFalse(a["secret in env"])
            self.assertEqual(a["env"]["GREETING"], "hello")
            self.assertEqual(a, b)
        finally:
            self.space("rm", "--force", cold, daemon=self.cold)


class BackgroundDestroyTest(SpaceTestCase):
    """`space run` answers once its command's exit is known; `DELETE ?wait=false` cuts the
    sandbox off at once and tears it down in the background; a spaced killed before a teardown
    finished finishes it at its next start (docs/pools.md, "Destroying in the background")."""

    def state_of(self, sid):
        r = self.api("GET", "/v1/sandboxes/%s" % sid)
        self.assertEqual(r.status, 200, r)
        return r.json["state"]

    def test_run_leaves_nothing_once_torn_down(self):
        before = self.snapshot_host()
        rc, out, err = self.space("run", "--", "hostname")
        self.assertEqual(rc, 0, err)
        sid = out.strip()
        self._learn_ids(sid)
        self.assertIn(self.state_of(sid), ("destroying", "destroyed"))
        self.assertNotIn(sid, self.list_ids())
        wait_for(lambda: self.state_of(sid) == "destroyed", timeout=15,
                 what="the background teardown of %s" % sid)
        self.assert_no_leaks(before)

    def test_delete_without_wait_cuts_off_at_once(self):
        before = self.snapshot_host()
        sid = self.create()
        self.space_ok("exec", sid, "--detach", "--", "sh", "-c", "sleep 1000 & sleep 1000 & wait")
        pids = wait_for(lambda: (lambda p: p if len(p) >= 4 else None)(self.sandbox_host_pids(sid)),
                        what="the sandbox's sleepers")
        r = self.api("DELETE", "/v1/sandboxes/%s?force=true&wait=false" % sid)
        self.assertEqual(r.status, 204, r)
        # Unreachable at once: not listed, no exec, no files; the record says so.
        self.assertNotIn(sid, self.list_ids())
        r, _ = self.api_exec(sid, ["true"])
        self.assertIn(r.status, (404, 409), r)
        self.assertIn(self.api("GET", "/v1/sandboxes/%s/files?path=/etc/hostname" % sid).status,
                      (404, 409))
        self.assertIn(self.state_of(sid), ("destroying", "destroyed"))
        wait_for(lambda: self.state_of(sid) == "destroyed", timeout=15,
                 what="the background teardown")
        wait_for(lambda: not [p for p in pids if alive(p)], what="the sandbox's processes to go")
        info = self.inspect(sid)
        self.assertEqual(info["reason"], "removed by the API")
        kinds = [json.loads(l)["kind"] for l in self.space_ok("audit", sid, "--json").splitlines()
                 if l.strip()]
        self.assertEqual(kinds[-1], "sandbox.destroy", kinds)
        self.space_ok("audit", sid, "--verify")
        self.assert_no_leaks(before)

    def test_sigkill_mid_teardown_is_finished_at_restart(self):
        """Sandboxes full of processes are deleted without waiting and spaced is SIGKILLed at
        once: some teardowns are still pending (their rows say "destroying"), and the next spaced
        finishes them. Rounds grow until one catches a teardown in flight."""
        import sqlite3
        before = self.snapshot_host()
        before["daemon_fds"] = before["daemon_namespaces"] = None
        caught = 0
        for rnd, count in enumerate((4, 8, 16)):
            ids = []
            for _ in range(count):
                sid = self.create()
                self.space_ok("exec", sid, "--detach", "--", "sh", "-c",
                              "for i in $(seq 40); do sleep 1000 & done; wait")
                ids.append(sid)
            for sid in ids:
                wait_for(lambda: len(self.sandbox_host_pids(sid)) >= 42,
                         what="%s's 40 sleepers" % sid)
            pids = [p for sid in ids for p in self.sandbox_host_pids(sid)]
            for sid in ids:
                r = self.api("DELETE", "/v1/sandboxes/%s?force=true&wait=false" % sid)
                self.assertEqual(r.status, 204, r)
            self.daemon.stop(signal.SIGKILL)
            db = sqlite3.connect(os.path.join(self.daemon.state_dir, "space.db"))
            try:
                rows = dict(db.execute(
                    "SELECT id, state FROM sandboxes WHERE id IN (%s)" % ",".join("?" * len(ids)),
                    ids).fetchall())
            finally:
                db.close()
            self.assertEqual(set(rows.values()) - {"destroying", "destroyed"}, set(), rows)
            caught = sum(1 for v in rows.values() if v == "destroying")
            self.daemon.start()
            for sid in ids:
                self.assertEqual(self.state_of(sid), "destroyed")
                self.assertEqual(self.inspect(sid)["reason"], "removed by the API")
                self.space_ok("audit", sid, "--verify")
            wait_for(lambda: not [p for p in pids if alive(p)],
                     what="the deleted sandboxes' processes to go")
            self.assert_no_leaks(before)
            if caught:
                break
        self.assertGreater(caught, 0, "no round caught a teardown in flight")


class PoolLifecycleTest(SpaceTestCase):
    """Stopping spaced removes its pool; a SIGKILLed spaced's pool is removed by the next one."""

    START_DAEMON = False

    def test_stop_and_sigkill_leave_nothing(self):
        before = self.snapshot_host()
        before["daemon_fds"] = before["daemon_namespaces"] = None
        d = Daemon(self.tmp, name="pooled", config={"pools": [{"profile": "test", "size": 3}]})
        self.daemon = d
        d.start()
        try:
            wait_for(lambda: metric(self.metrics(d), "space_pool_ready", profile="test") == 3,
                     timeout=30, what="the pool to fill")
            self.assertEqual(self.list_ids(), [])
            self.assertEqual(d.stop(signal.SIGTERM), 0)
            self.assert_no_leaks(before)
            d.start()
            wait_for(lambda: metric(self.metrics(d), "space_pool_ready", profile="test") == 3,
                     timeout=30, what="the pool to fill again")
            agents = self.pool_agents(d)
            self.assertEqual(len(agents), 3, agents)
            d.stop(signal.SIGKILL)
            self.assertTrue(all(os.path.exists("/proc/%d" % p) for p in agents))
            d.config = {}  # no pool this time: the old pool's sandboxes must still go
            d.start()
            wait_for(lambda: not any(os.path.exists("/proc/%d" % p) for p in agents),
                     timeout=15, what="the SIGKILLed spaced's pool sandboxes to be removed")
            self.assertEqual(self.list_ids(), [])
            d.stop(signal.SIGTERM)
            self.assert_no_leaks(before)
        finally:
            if d.alive():
                d.stop(signal.SIGTERM)  # removes its pool

    def metrics(self, d):
        r = self.api("GET", "/metrics", daemon=d)
        return r.body.decode() if r.status == 200 else ""

    def pool_agents(self, d):
        """Host pids of the agents this daemon started (its children: other suites may run
        sandboxes at the same time)."""
        out = []
        for pid in proc_pids():
            if os.path.basename((proc_cmdline(pid) or [""])[0]) == "space-agent" and \
                    proc_ppid(pid) == d.pid:
                out.append(pid)
        return out

    def test_failing_refills_back_off_and_show_in_doctor(self):
        d = Daemon(self.tmp, name="failing", config={"pools": [{"image": "later", "size": 1}]})
        self.daemon = d
        d.start()
        try:
            def pool():
                return json.loads(self.space_ok("doctor", "--json", daemon=d))["pools"][0]
            p = wait_for(lambda: (lambda p: p if p["refill_failures"] >= 2 else None)(pool()),
                         timeout=30, what="two failed refills of a pool of a missing image")
            self.assertEqual(p["ready"], 0)
            self.assertFalse(p["default"])
            self.assertIn("later", p["last_error"])
            # The same error again is not logged again as a warning.
            warnings = [l for l in d.log_text().splitlines()
                        if "could not start a sandbox" in l and "later" in l]
            self.assertEqual(len(warnings), 1, warnings)
        finally:
            d.stop(signal.SIGTERM)

    def test_bad_pool_configs_are_refused(self):
        cases = [
            ({"pools": [{"profile": "nope", "size": 1}]}, "names profile \"nope\""),
            ({"pools": [{"profile": "test", "size": 0}]}, "size"),
            ({"pools": [{"profile": "test"}]}, "size"),
            ({"pools": [{"profile": "test", "size": 1, "colour": "red"}]}, "colour"),
            ({"pools": [{"size": 1}, {"size": 2}]}, "same template"),
            ({"pools": [{"size": 1, "workdir": "rel"}]}, "absolute"),
        ]
        for config, expect in cases:
            with self.subTest(config=config):
                root = os.path.join(self.tmp, "bad")
                os.makedirs(root, exist_ok=True)
                path = os.path.join(root, "c.json")
                with open(path, "w") as f:
                    json.dump(config, f)
                p = subprocess.run([SPACED, "--config", path, "--state-dir",
                                    os.path.join(root, "state"), "--socket",
                                    os.path.join(root, "s.sock")],
                                   capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(expect, p.stderr.decode(), p.stderr.decode())
                safe_rmtree(root)


if __name__ == "__main__":
    main()
