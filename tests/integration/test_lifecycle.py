"""Sandbox lifecycle through the real CLI and API: create, ls, inspect, rm, run, pause/resume,
lifetime timeouts, and 200 create/destroy cycles that must leave the host as it was."""

import json
import time

from harness import SpaceTestCase, main, proc_cpu_ticks, wait_for


class LifecycleTest(SpaceTestCase):

    def test_health(self):
        r = self.api("GET", "/v1/health")
        self.assertEqual(r.status, 200, r)
        self.assertIsInstance(r.json, dict)

    def test_run_hello_world_python(self):
        rc, out, err = self.space("run", "--", "python3", "-c", 'print("hello")')
        self.assertEqual((rc, out), (0, "hello\n"), err)

    def test_create_ls_inspect_rm(self):
        before = self.snapshot_host()
        sid = self.create()
        self.assertIn(sid, self.list_ids())
        rc, out, _ = self.space("ls")
        self.assertEqual(rc, 0)
        self.assertIn(sid, out)

        info = self.inspect(sid)
        self.assertEqual(info["id"], sid)
        self.assertEqual(info["state"], "running")
        self.assertIn("usage", info)
        self.assertIsInstance(info["usage"].get("memory_bytes"), int)
        self.assertIsInstance(info["usage"].get("oom_kills"), int)

        r = self.api("GET", "/v1/sandboxes/%s" % sid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json["id"], sid)

        self.space_ok("rm", sid)
        self.assertNotIn(sid, self.list_ids())
        # A removed sandbox is gone, or still shown (for a while) as destroyed.
        rc, out, err = self.space("inspect", sid, "--json")
        if rc == 0:
            self.assertEqual(json.loads(out)["state"], "destroyed")
        else:
            self.assertEqual(rc, 125, (out, err))
        rc, _, err = self.space("rm", sid)
        self.assertEqual(rc, 125, err)
        self.assertNotEqual(err.strip(), "")
        self.assert_no_leaks(before)

    def test_create_json(self):
        out = self.space_ok("create", "--json")
        info = json.loads(out)
        self.known_ids.add(info["id"])
        self.addCleanup(self._destroy_quietly, info["id"])
        self.assertRegex(info["id"], r"^sb_[0-9A-Za-z]+$")
        self.assertEqual(info["state"], "running")

    def test_api_create_and_delete(self):
        r = self.api("POST", "/v1/sandboxes", {"memory": "64M", "pids": 32, "cpus": 0.5})
        self.assertEqual(r.status, 201, r)
        sid = r.json["id"]
        self.addCleanup(self._destroy_quietly, sid)
        self.assertEqual(r.json["state"], "running")
        info = self.api("GET", "/v1/sandboxes/%s" % sid).json
        self.assertEqual(info["usage"].get("memory_limit", 64 << 20), 64 << 20)
        r = self.api("DELETE", "/v1/sandboxes/%s" % sid)
        self.assertEqual(r.status, 204, r)
        r = self.api("GET", "/v1/sandboxes/%s" % sid)
        if r.status == 200:
            self.assertEqual(r.json["state"], "destroyed")
        else:
            self.assert_api_error(r, 404, 404)
        r = self.api("DELETE", "/v1/sandboxes/%s" % sid)
        self.assert_api_error(r, 404, 409)

    def test_create_env_and_workdir(self):
        sid = self.create("--env", "GREETING=hi there", "--workdir", "/tmp")
        out = self.exec_ok(sid, "sh", "-c", 'echo "$GREETING"; pwd')
        self.assertEqual(out, "hi there\n/tmp\n")

    def test_run_exit_code_passthrough(self):
        for code in (0, 3, 255):
            rc, _, err = self.space("run", "--", "sh", "-c", "exit %d" % code)
            self.assertEqual(rc, code, err)

    def test_run_destroys_its_sandbox(self):
        before = self.snapshot_host()
        ids_before = set(self.list_ids())
        rc, out, err = self.space("run", "--", "hostname")
        self.assertEqual(rc, 0, err)
        sid = out.strip()
        self.assertRegex(sid, r"^sb_")
        self.assertNotIn(sid, self.list_ids())
        self.assertEqual(set(self.list_ids()), ids_before)
        self.assert_no_leaks(before)

    def test_lifetime_timeout_destroys_sandbox(self):
        before = self.snapshot_host()
        sid = self.create("--timeout", "2")
        self.assertIn(sid, self.list_ids())
        wait_for(lambda: sid not in self.list_ids(), timeout=15,
                 what="sandbox %s to expire" % sid)
        rc, _, err = self.space("exec", sid, "--", "true")
        self.assertEqual(rc, 125, err)
        self.assert_no_leaks(before)

    def test_run_with_lifetime_timeout_returns(self):
        t0 = time.monotonic()
        rc, out, err = self.space("run", "--timeout", "2", "--", "sleep", "1000", timeout=60)
        elapsed = time.monotonic() - t0
        self.assertNotEqual(rc, 0)
        self.assertLess(elapsed, 20, "space run --timeout 2 took %.1fs" % elapsed)

    def _cpu_ns(self, sid):
        usage = self.inspect(sid)["usage"]
        if isinstance(usage.get("cpu_usage_ns"), int):
            return usage["cpu_usage_ns"]
        # The daemon does not report CPU time: sum it over the sandbox's host processes.
        return sum(proc_cpu_ticks(p) for p in self.sandbox_host_pids(sid)) * 10_000_000

    def test_pause_resume(self):
        sid = self.create()
        self.space_ok("exec", sid, "--detach", "--", "sh", "-c", "while :; do :; done")
        time.sleep(0.5)
        self.space_ok("pause", sid)
        self.assertEqual(self.inspect(sid)["state"], "paused")

        # A paused sandbox uses no CPU.
        c0 = self._cpu_ns(sid)
        time.sleep(1.0)
        c1 = self._cpu_ns(sid)
        self.assertLess(c1 - c0, 20_000_000, "paused sandbox used %d ns of CPU" % (c1 - c0))

        # exec on a paused sandbox: a clear 409 (CLI: 125 with a message).
        rc, out, err = self.space("exec", sid, "--", "true", timeout=30)
        self.assertEqual(rc, 125, (out, err))
        self.assertIn("paused", err.lower())
        r, _ = self.api_exec(sid, ["true"], http_timeout=30)
        self.assert_api_error(r, 409, 409)

        self.space_ok("resume", sid)
        self.assertEqual(self.inspect(sid)["state"], "running")
        self.assertEqual(self.exec_ok(sid, "echo", "back"), "back\n")
        c2 = self._cpu_ns(sid)
        time.sleep(1.0)
        c3 = self._cpu_ns(sid)
        self.assertGreater(c3 - c2, 200_000_000, "resumed busy loop got no CPU")

    def test_pause_twice_and_resume_running(self):
        sid = self.create()
        self.space_ok("pause", sid)
        rc, _, err = self.space("pause", sid)
        self.assertIn(rc, (0, 125), err)  # idempotent or a clear conflict, never a crash
        self.space_ok("resume", sid)
        rc, _, err = self.space("resume", sid)
        self.assertIn(rc, (0, 125), err)
        self.assertEqual(self.exec_ok(sid, "echo", "ok"), "ok\n")

    def test_rm_paused_sandbox(self):
        before = self.snapshot_host()
        sid = self.create()
        self.space_ok("exec", sid, "--detach", "--", "sleep", "1000")
        self.space_ok("pause", sid)
        self.space_ok("rm", "--force", sid)
        self.assertNotIn(sid, self.list_ids())
        self.assert_no_leaks(before)

    def test_200_create_destroy_cycles_leave_nothing(self):
        before = self.snapshot_host()
        rss0 = self.daemon.rss()
        t0 = time.monotonic()
        for i in range(200):
            sid = self.space_ok("create").strip()
            self.known_ids.add(sid)
            if i % 50 == 0:
                self.assertEqual(self.exec_ok(sid, "echo", str(i)), "%d\n" % i)
            self.space_ok("rm", sid)
        elapsed = time.monotonic() - t0
        print("200 create/rm cycles: %.1fs (%.1f ms per cycle), daemon RSS %d -> %d kB" %
              (elapsed, elapsed * 5, rss0 >> 10, self.daemon.rss() >> 10))
        self.assertEqual(self.list_ids(), [])
        self.assert_no_leaks(before)
        self.assertLess(self.daemon.rss() - rss0, 64 << 20, "daemon RSS grew over 200 cycles")


if __name__ == "__main__":
    main()
