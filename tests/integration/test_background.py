"""Detached commands keep their output and their end: GET .../processes/{pid}/logs (kept,
followed), GET .../wait, `space logs` and `space wait`; bounded (the last 1 MiB, 64 commands a
sandbox); a follower that hangs up leaves nothing behind in spaced; a destroyed sandbox ends
them with the reason."""

import json
import os
import socket
import threading
import time

from harness import MiB, SpaceTestCase, UnixHTTPConnection, decode_events, main, wait_for


class BackgroundTest(SpaceTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sid = cls.create_for_class("--pids", "512")

    def detach(self, cmd, sid=None, **fields):
        r = self.api("POST", "/v1/sandboxes/%s/exec" % (sid or self.sid),
                     dict({"cmd": cmd, "detach": True}, **fields))
        self.assertEqual(r.status, 202, r.body)
        pid = r.json["pid"]
        self.assertIsInstance(pid, int, r.json)
        return pid

    def logs(self, pid, follow=False, sid=None, timeout=60):
        r = self.api("GET", "/v1/sandboxes/%s/processes/%d/logs%s"
                     % (sid or self.sid, pid, "?follow=true" if follow else ""), timeout=timeout)
        self.assertEqual(r.status, 200, r.body)
        return decode_events(r.body)

    def wait_api(self, pid, timeout=None, sid=None):
        q = "" if timeout is None else "?timeout=%s" % timeout
        return self.api("GET", "/v1/sandboxes/%s/processes/%d/wait%s" % (sid or self.sid, pid, q),
                        timeout=120)

    def test_output_and_exit_are_kept(self):
        pid = self.detach(["sh", "-c", "echo one; echo two >&2; sleep 0.2; echo three; exit 7"])
        r = self.wait_api(pid, timeout=30)
        self.assertEqual(r.status, 200, r.body)
        self.assertEqual((r.json["pid"], r.json["running"]), (pid, False))
        self.assertEqual(r.json["exit"]["exit_code"], 7, r.json)
        ev = self.logs(pid)
        self.assertEqual(ev[0], {"type": "started", "pid": pid, "dropped": 0})
        streams = [(e["type"], e["bytes"]) for e in ev if e["type"] in ("stdout", "stderr")]
        self.assertEqual(streams, [("stdout", b"one\n"), ("stderr", b"two\n"),
                                   ("stdout", b"three\n")])
        self.assertEqual(ev[-1]["type"], "exit")
        self.assertEqual(ev[-1]["exit_code"], 7)
        # The CLI: stdout and stderr apart; wait exits with the command's code.
        rc, out, err = self.space("logs", self.sid, str(pid))
        self.assertEqual((rc, out, err), (0, "one\nthree\n", "two\n"))
        rc, out, err = self.space("wait", self.sid, str(pid))
        self.assertEqual(rc, 7, err)
        # Reading is not consuming: the same again.
        self.assertEqual(self.logs(pid), ev)
        # Audited like any exec, with how it ended.
        audit = self.api("GET", "/v1/sandboxes/%s/audit" % self.sid).json["events"]
        ends = [e for e in audit if e["kind"] == "exec.end" and e["data"].get("pid") == pid]
        self.assertEqual(len(ends), 1, ends)
        self.assertEqual(ends[0]["data"]["exit_code"], 7)

    def test_follow_streams_until_the_end(self):
        self.exec_ok(self.sid, "mkfifo", "/tmp/go-follow")
        pid = self.detach(["sh", "-c", "echo start; read x < /tmp/go-follow; echo after $x"])
        got = []
        t0 = time.monotonic()

        def follow():
            got.extend(self.logs(pid, follow=True))
        th = threading.Thread(target=follow)
        th.start()
        time.sleep(1.0)
        self.assertTrue(th.is_alive(), "follow ended while the command still runs: %s" % got)
        self.exec_ok(self.sid, "sh", "-c", "echo now > /tmp/go-follow")
        th.join(30)
        self.assertFalse(th.is_alive())
        self.assertGreater(time.monotonic() - t0, 1.0)
        out = b"".join(e["bytes"] for e in got if e["type"] == "stdout")
        self.assertEqual(out, b"start\nafter now\n")
        self.assertEqual(got[-1]["type"], "exit")
        self.assertEqual(got[-1]["exit_code"], 0)
        # The CLI follows too, and returns once the command ended.
        pid = self.detach(["sh", "-c", "for i in 1 2 3; do echo $i; sleep 0.3; done"])
        rc, out, err = self.space("logs", "--follow", self.sid, str(pid))
        self.assertEqual((rc, out), (0, "1\n2\n3\n"), err)

    def test_the_last_mebibyte_is_kept(self):
        # 3 MiB of numbered 16-byte lines: the first 2 MiB are dropped, the rest arrives whole.
        pid = self.detach(["python3", "-c",
                           "import sys\n"
                           "for i in range(3 * 65536): sys.stdout.write('%015d\\n' % i)\n"])
        self.assertFalse(self.wait_api(pid, timeout=60).json["running"])
        ev = self.logs(pid)
        self.assertEqual(ev[0]["dropped"], 2 * MiB)
        out = b"".join(e["bytes"] for e in ev if e["type"] == "stdout")
        self.assertEqual(len(out), MiB)
        lines = out.split(b"\n")[:-1]
        self.assertEqual(int(lines[0]), 2 * 65536)
        self.assertEqual(int(lines[-1]), 3 * 65536 - 1)
        rc, out, err = self.space("logs", self.sid, str(pid))
        self.assertEqual(rc, 0)
        self.assertIn("2097152 bytes of earlier output are no longer kept", err)

    def test_wait_timeout_kill_and_exec_timeout(self):
        pid = self.detach(["sleep", "300"])
        r = self.wait_api(pid, timeout=0.2)
        self.assertEqual(r.json, {"pid": pid, "running": True, "exit": None})
        rc, _, err = self.space("wait", "--timeout", "0.2", self.sid, str(pid))
        self.assertEqual(rc, 124, err)
        self.assertIn("still runs after 0.2", err)
        self.space_ok("kill", self.sid, str(pid), "--signal", "KILL")
        rc, _, _ = self.space("wait", self.sid, str(pid))
        self.assertEqual(rc, 128 + 9)
        # The exec's timeout holds for a detached command too.
        pid = self.detach(["sleep", "300"], timeout=1)
        r = self.wait_api(pid, timeout=30)
        self.assertFalse(r.json["running"], r.json)
        self.assertTrue(r.json["exit"]["timed_out"], r.json)

    def test_unknown_pids_are_clear_errors(self):
        r = self.api("GET", "/v1/sandboxes/%s/processes/1/logs" % self.sid)
        self.assert_api_error(r, 404, 404, "not_found")
        self.assertIn("only commands started detached", r.json["error"]["message"])
        # A command run attached keeps nothing.
        _, ev = self.api_exec(self.sid, ["sh", "-c", "echo $$"])
        pid = int(ev[-2]["bytes"]) if ev[-2]["type"] == "stdout" else ev[0]["pid"]
        self.assert_api_error(self.wait_api(pid, timeout=1), 404, 404, "not_found")
        rc, _, err = self.space("logs", self.sid, "12x")
        self.assertEqual(rc, 125)
        self.assertIn("bad pid", err)

    def test_at_most_64_running_then_a_clear_refusal(self):
        sid = self.create("--pids", "512")
        try:
            pids = [self.detach(["sleep", "300"], sid=sid) for _ in range(64)]
            r = self.api("POST", "/v1/sandboxes/%s/exec" % sid,
                         {"cmd": ["sleep", "300"], "detach": True})
            self.assert_api_error(r, 429, 429, "resource_exhausted")
            self.assertIn("64 detached commands already run", r.json["error"]["message"])
            # One ends: its record makes room (the oldest ended one goes).
            self.space_ok("kill", sid, str(pids[5]), "--signal", "KILL")
            wait_for(lambda: not self.wait_api(pids[5], sid=sid, timeout=5).json["running"],
                     what="the killed command's end")
            new = self.detach(["echo", "hi"], sid=sid)
            self.assertFalse(self.wait_api(new, sid=sid, timeout=30).json["running"])
            self.assert_api_error(self.wait_api(pids[5], sid=sid, timeout=1), 404, 404)
            self.assertTrue(self.wait_api(pids[6], sid=sid, timeout=0).json["running"])
        finally:
            self.space("rm", "--force", sid)

    def test_followers_that_hang_up_leave_nothing_in_spaced(self):
        pid = self.detach(["sleep", "300"])
        tasks = lambda: len(os.listdir("/proc/%d/task" % self.daemon.pid))
        # A first round warms spaced's kept connection threads; the second must not add any.
        for rnd in range(2):
            if rnd == 1:
                before = tasks()
            conns = []
            for _ in range(12):
                c = UnixHTTPConnection(self.daemon.socket, timeout=30)
                c.request("GET", "/v1/sandboxes/%s/processes/%d/logs?follow=true" % (self.sid, pid))
                resp = c.getresponse()
                self.assertEqual(resp.status, 200)
                self.assertIn(b'"started"', resp.fp.readline() + resp.fp.readline())
                conns.append((c, resp))
            for _ in range(12):
                c = UnixHTTPConnection(self.daemon.socket, timeout=30)
                c.request("GET", "/v1/sandboxes/%s/processes/%d/wait" % (self.sid, pid))
                conns.append((c, None))
            time.sleep(0.5)
            for c, _ in conns:
                c.sock.shutdown(socket.SHUT_RDWR)
                c.close()
            # Each gone client is noticed (within the 1 s check) and its threads end.
            wait_for(lambda: tasks() <= (before if rnd else 10 ** 6) + 2, timeout=15,
                     what="spaced's threads back to %s (now %d)" % (rnd and before, tasks()))
        self.space_ok("kill", self.sid, str(pid), "--signal", "KILL")

    def test_a_destroyed_sandbox_ends_them_with_the_reason(self):
        sid = self.create()
        pid = self.detach(["sleep", "300"], sid=sid)
        got = {}

        def waiter():
            got["wait"] = self.wait_api(pid, sid=sid)

        def follower():
            got["logs"] = self.api("GET", "/v1/sandboxes/%s/processes/%d/logs?follow=true"
                                   % (sid, pid), timeout=60)
        ths = [threading.Thread(target=waiter), threading.Thread(target=follower)]
        for t in ths:
            t.start()
        time.sleep(0.5)
        self.space_ok("rm", sid)  # a detached command never blocks rm without --force
        for t in ths:
            t.join(30)
            self.assertFalse(t.is_alive())
        self.assert_api_error(got["wait"], 409, 409, "conflict")
        self.assertIn("was destroyed while the command ran", got["wait"].json["error"]["message"])
        ev = decode_events(got["logs"].body)
        self.assertEqual(ev[-1]["type"], "error", ev)
        self.assertIn("destroyed", ev[-1]["error"]["message"])


if __name__ == "__main__":
    main()
