"""Warm pools (docs/pools.md): a configured pool fills up to its size in the background; a create
of the pool's template claims a started sandbox and personalizes it (env, secrets' placeholders,
egress, CA, lifetime); the pool refills; a claimed sandbox is torn down on `rm`, never given back;
other templates take the cold path; stopping spaced (cleanly or by SIGKILL) leaves nothing of
the pool behind; a bad pool config is refused with a clear error."""

import json
import os
import re
import signal
import subprocess
import time

from harness import (SPACED, Daemon, SpaceTestCase, main, proc_cmdline, proc_pids, proc_ppid,
                     safe_rmtree, wait_for)

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
