"""Lifetimes and idle timeouts through the real daemon: a new lifetime (`space timeout`, POST
.../timeout), an exec cut short by the lifetime says so, an idle sandbox goes while an open exec
stream keeps one, `space run` killed with SIGKILL leaves nothing once the idle timeout passes,
and the daemon-wide default and maximum lifetime (defaults.timeout, defaults.max_timeout).
"""

import json
import os
import signal
import threading
import subprocess
import time

from harness import SPACE, Daemon, SpaceTestCase, main, wait_for


class LifetimeTest(SpaceTestCase):
    def reason(self, sid):
        return self.inspect(sid).get("reason") or ""

    def destroyed(self, sid):
        return sid not in self.list_ids()

    def test_a_new_lifetime(self):
        sid = self.create()
        self.assertIsNone(self.inspect(sid).get("expires_at"))
        rc, out, err = self.space("timeout", sid, "2s")
        self.assertEqual(rc, 0, err)
        self.assertIn("now expires at 20", out)
        self.assertIsNotNone(self.inspect(sid)["expires_at"])
        self.assertTrue(any(e["kind"] == "sandbox.timeout" for e in
                            self.api("GET", "/v1/sandboxes/%s/audit" % sid).json["events"]))
        wait_for(lambda: self.destroyed(sid), timeout=15, what="the new lifetime to expire")
        rc, _, err = self.space("exec", sid, "--", "true")
        self.assertEqual(rc, 125)
        self.assertIn("lifetime timeout expired", err)
        # Extending one that is about to go keeps it.
        sid = self.create("--timeout", "2")
        r = self.api("POST", "/v1/sandboxes/%s/timeout" % sid, {"timeout": "1h"})
        self.assertEqual(r.status, 200, r.body)
        time.sleep(3)
        self.assertEqual(self.exec_ok(sid, "echo", "alive"), "alive\n")
        for body in ({}, {"timeout": -1}, {"timeout": "soon"}, {"timeout": 1, "x": 2}):
            self.assert_api_error(self.api("POST", "/v1/sandboxes/%s/timeout" % sid, body), 400, 400)
        self.assert_api_error(self.api("POST", "/v1/sandboxes/sb_000000000000/timeout",
                                       {"timeout": 5}), 404, 404)

    def test_an_exec_cut_by_the_lifetime_says_so(self):
        sid = self.create("--timeout", "2")
        r, events = self.api_exec(sid, ["sleep", "60"], http_timeout=60)
        self.assertEqual(r.status, 200)
        last = events[-1]
        self.assertEqual(last["type"], "error", events)
        self.assertEqual(last["error"]["code"], "conflict")
        self.assertIn("destroyed while the command ran: lifetime timeout expired",
                      last["error"]["message"])

    def test_idle_timeout(self):
        r = self.api("POST", "/v1/sandboxes", {"idle_timeout": 1})
        self.assertEqual(r.status, 201, r.body)
        idle = r.json["id"]
        # An open exec stream is activity: a 3 s command outlives the 1 s idle timeout.
        r = self.api("POST", "/v1/sandboxes", {"idle_timeout": 1})
        busy = r.json["id"]
        r, events = self.api_exec(busy, ["sh", "-c", "sleep 3; echo done"], http_timeout=60)
        self.assertEqual(events[-1].get("exit_code"), 0, events)
        wait_for(lambda: self.destroyed(idle), timeout=15, what="the idle sandbox to go")
        self.assertIn("idle timeout expired", self.reason(idle))
        wait_for(lambda: self.destroyed(busy), timeout=15, what="the busy one once idle")

    def test_run_killed_with_sigkill_leaves_nothing(self):
        before = set(self.list_ids())
        p = subprocess.Popen([SPACE, "run", "--", "sleep", "1000"], env=self.env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: set(self.list_ids()) - before, timeout=30, what="space run's sandbox")
        sid = (set(self.list_ids()) - before).pop()
        self.known_ids.add(sid)
        wait_for(lambda: any("sleep" in " ".join(x.get("argv", [])) for x in
                             self.api("GET", "/v1/sandboxes/%s/processes" % sid).json["processes"]),
                 what="the command to run")
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        t0 = time.monotonic()
        wait_for(lambda: self.destroyed(sid), timeout=60, interval=0.5,
                 what="the sandbox of a SIGKILLed space run")
        print("space run SIGKILLed: its sandbox went after %.1fs" % (time.monotonic() - t0))
        self.assertIn("idle timeout expired", self.reason(sid))

    def test_rm_refuses_while_a_command_runs_unless_force(self):
        sid = self.create()
        got = {}
        t = threading.Thread(target=lambda: got.update(
            zip(("r", "events"), self.api_exec(sid, ["sleep", "60"], http_timeout=60))))
        t.start()
        wait_for(lambda: any("sleep" in " ".join(x.get("argv", [])) for x in
                             self.api("GET", "/v1/sandboxes/%s/processes" % sid).json["processes"]),
                 what="the command to run")
        err = self.assert_api_error(self.api("DELETE", "/v1/sandboxes/%s" % sid), 409, 409,
                                    code="conflict")
        self.assertIn("space rm --force " + sid, err["message"])
        rc, _, stderr = self.space("rm", sid)
        self.assertEqual(rc, 125)
        self.assertIn("1 command running", stderr)
        rc, _, stderr = self.space("rm", "--force", sid)
        self.assertEqual(rc, 0, stderr)
        t.join(30)
        self.assertEqual(got["events"][-1]["type"], "error", got["events"])
        self.assertIn("destroyed while the command ran: removed by the API",
                      got["events"][-1]["error"]["message"])
        # A detached command does not block a plain rm.
        sid = self.create()
        self.space_ok("exec", sid, "--detach", "--", "sleep", "60")
        rc, _, stderr = self.space("rm", sid)
        self.assertEqual(rc, 0, stderr)

    def test_daemon_default_and_maximum_lifetime(self):
        root = os.path.join(self.tmp, "limited")
        os.makedirs(root)
        d = Daemon(root, config={"pools": [], "defaults": {"timeout": "1h", "max_timeout": "2h"}})
        d.start()
        try:
            env = dict(self.env(), SPACE_SOCKET=d.socket)
            rc, out, err = self.space("create", "--json", env=env)
            self.assertEqual(rc, 0, err)
            info = json.loads(out)
            self.known_ids.add(info["id"])
            expires = self.api("GET", "/v1/sandboxes/%s" % info["id"], daemon=d).json["expires_at"]
            self.assertIsNotNone(expires, "defaults.timeout applies")
            self.assertIsNone(self.inspect(self.create()).get("expires_at"),
                              "the class's daemon has no default lifetime")
            rc, _, err = self.space("create", "--timeout", "3h", env=env)
            self.assertEqual(rc, 125)
            self.assertIn("more than this daemon's maximum lifetime (2h", err)
            rc, _, err = self.space("timeout", info["id"], "3h", env=env)
            self.assertEqual(rc, 125)
            self.assertIn("more than a sandbox may live (2h", err)
            rc, _, err = self.space("timeout", info["id"], "90m", env=env)
            self.assertEqual(rc, 0, err)
        finally:
            self.cleanup_daemon(d)


if __name__ == "__main__":
    main()
