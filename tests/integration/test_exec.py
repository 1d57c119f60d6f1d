"""Running commands: exit codes and signals, stdout/stderr separation, stdin, environment and
cwd, 200 MB of output streamed with the daemon's memory bounded, exec timeouts that kill the
whole process tree, ps and kill, and the raw NDJSON exec stream of the API."""

import hashlib
import json
import os
import subprocess
import time

from harness import SPACE, MiB, RssSampler, SpaceTestCase, decode_events, main, wait_for


class ExecTest(SpaceTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sid = cls.create_for_class()

    def test_user(self):
        probe = "id -u; id -g; echo $HOME $USER; pwd"
        r, ev = self.api_exec(self.sid, ["sh", "-c", probe], user="nobody")
        out = b"".join(e.get("bytes", b"") for e in ev if e["type"] == "stdout").decode()
        # nobody's home (/nonexistent) does not exist: it starts in /.
        self.assertEqual(out, "65534\n65534\n/nonexistent nobody\n/\n")
        rc, out, err = self.space("exec", self.sid, "--user", "1000:1000", "--cwd", "/tmp", "--",
                                  "sh", "-c", probe)
        self.assertEqual((rc, out), (0, "1000\n1000\n/\n/tmp\n"), err)
        r, ev = self.api_exec(self.sid, ["id", "-u"], user=1000)
        self.assertEqual(ev[-1].get("exit_code"), 0, ev)
        # Another user is not root: root's files stay out of reach.
        rc, _, err = self.space("exec", self.sid, "--user", "user", "--",
                                "sh", "-c", "echo x > /root/by-user")
        self.assertNotEqual(rc, 0)
        self.assertIn("ermission denied", err)
        rc, _, err = self.space("exec", self.sid, "--user", "user", "--", "ls", "/root")
        self.assertNotEqual(rc, 0)
        # Files it makes are its own.
        self.space_ok("exec", self.sid, "--user", "user", "--", "touch", "/tmp/by-user")
        self.assertEqual(self.exec_ok(self.sid, "stat", "-c", "%u:%g", "/tmp/by-user"), "1000:1000\n")
        rc, _, err = self.space("exec", self.sid, "--user", "nosuch", "--", "true")
        self.assertEqual(rc, 125)
        self.assertIn('no user "nosuch" in the sandbox\'s /etc/passwd', err)
        for bad in ("", "a b", "../x", -1, True, "x" * 65):
            with self.subTest(user=bad):
                r, _ = self.api_exec(self.sid, ["true"], user=bad)
                self.assert_api_error(r, 400, 400)

    def test_exit_codes(self):
        for code in (0, 1, 3, 42, 255):
            rc, _, err = self.space("exec", self.sid, "--", "sh", "-c", "exit %d" % code)
            self.assertEqual(rc, code, err)

    def test_killed_by_signal(self):
        rc, _, err = self.space("exec", self.sid, "--", "sh", "-c", "kill -9 $$")
        self.assertEqual(rc, 137, err)
        rc, _, err = self.space("exec", self.sid, "--", "sh", "-c", "kill -TERM $$")
        self.assertEqual(rc, 143, err)
        rc, _, err = self.space("run", "--", "sh", "-c", "kill -9 $$")
        self.assertEqual(rc, 137, err)

    def test_command_not_found_and_not_executable(self):
        rc, _, err = self.space("exec", self.sid, "--", "/no/such/program")
        self.assertEqual(rc, 127, err)
        rc, _, err = self.space("exec", self.sid, "--", "no-such-program-in-path")
        self.assertEqual(rc, 127, err)
        rc, _, err = self.space("exec", self.sid, "--", "/etc/passwd")
        self.assertEqual(rc, 126, err)

    def test_stdout_stderr_separation(self):
        rc, out, err = self.space("exec", self.sid, "--", "sh", "-c",
                                  "echo out1; echo err1 >&2; echo out2; echo err2 >&2")
        self.assertEqual(rc, 0)
        self.assertEqual(out, "out1\nout2\n")
        self.assertIn("err1\nerr2\n", err)
        self.assertNotIn("out", err)

    def test_binary_output_is_exact(self):
        rc, out, _ = self.space("exec", self.sid, "--", "python3", "-c",
                                "import sys; sys.stdout.buffer.write(bytes(range(256)) * 4096)",
                                binary=True)
        self.assertEqual(rc, 0)
        self.assertEqual(out, bytes(range(256)) * 4096)

    def test_stdin(self):
        rc, out, err = self.space("exec", self.sid, "--", "cat", input="hi\n")
        self.assertEqual((rc, out), (0, "hi\n"), err)
        # Larger than the flow-control window, in both directions.
        data = os.urandom(3 * MiB + 17)
        rc, out, err = self.space("exec", self.sid, "--", "cat", input=data, binary=True,
                                  timeout=120)
        self.assertEqual(rc, 0, err)
        self.assertEqual(hashlib.sha256(out).hexdigest(), hashlib.sha256(data).hexdigest())
        rc, out, _ = self.space("exec", self.sid, "--", "wc", "-c", input=data)
        self.assertEqual(out.strip(), str(len(data)))

    def test_stdin_from_shell_pipe(self):
        p = subprocess.run("echo hi | '%s' exec %s -- cat" % (SPACE, self.sid), shell=True,
                           capture_output=True, env=self.env(), timeout=60)
        self.assertEqual((p.returncode, p.stdout), (0, b"hi\n"), p.stderr)

    def test_env_and_cwd(self):
        out = self.space_ok("exec", self.sid, "--env", "FOO=1", "--env", "BAR=two words",
                            "--cwd", "/tmp", "--", "sh", "-c", 'echo "$FOO|$BAR"; pwd')
        self.assertEqual(out, "1|two words\n/tmp\n")
        out = self.exec_ok(self.sid, "sh", "-c", 'echo "$HOME"; echo "$PATH"')
        home, path = out.splitlines()
        self.assertTrue(home.startswith("/"))
        self.assertIn("/usr/bin", path)

    def test_200_mb_output_streams_with_bounded_daemon_memory(self):
        sampler = RssSampler(self.daemon.pid)
        sampler.start()
        p = subprocess.Popen([SPACE, "exec", self.sid, "--", "head", "-c", "200M", "/dev/zero"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env())
        total, nonzero = 0, False
        t0 = time.monotonic()
        try:
            while True:
                chunk = p.stdout.read(1 << 20)
                if not chunk:
                    break
                total += len(chunk)
                if not nonzero and chunk.count(0) != len(chunk):
                    nonzero = True
                if time.monotonic() - t0 > 300:
                    break
        finally:
            if p.poll() is None and time.monotonic() - t0 > 300:
                p.kill()
            rc = p.wait(60)
            growth = sampler.stop()
            err = p.stderr.read()
            p.stdout.close()
            p.stderr.close()
        elapsed = time.monotonic() - t0
        print("200 MB streamed in %.1fs (%.0f MB/s); daemon RSS growth %.1f MB" %
              (elapsed, 200 / elapsed, growth / MiB))
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(total, 200 * MiB)
        self.assertFalse(nonzero)
        self.assertLess(growth, 150 * MiB, "daemon RSS grew by %d MB" % (growth // MiB))

    def test_slow_reader_does_not_lose_output(self):
        # The client reads slowly: the process blocks instead of the output being dropped.
        p = subprocess.Popen([SPACE, "exec", self.sid, "--", "sh", "-c",
                              "head -c 8M /dev/zero; echo done >&2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env())
        time.sleep(2)
        data, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0)
        self.assertEqual(len(data), 8 * MiB)
        self.assertIn(b"done", err)

    def test_timeout_kills_whole_process_tree(self):
        sid = self.create()
        t0 = time.monotonic()
        rc, out, err = self.space("exec", sid, "--timeout", "2", "--", "sh", "-c",
                                  "setsid sleep 1000 & sleep 1000", timeout=60)
        elapsed = time.monotonic() - t0
        self.assertNotEqual(rc, 0, (out, err))
        self.assertLess(elapsed, 15, "exec --timeout 2 returned after %.1fs" % elapsed)

        def no_sleep_left():
            rc, out, _ = self.space("ps", sid)
            return rc == 0 and "sleep" not in out
        wait_for(no_sleep_left, timeout=10, what="the timed-out exec's processes to go")
        procs = self.api_list("/v1/sandboxes/%s/processes" % sid, "processes")
        self.assertFalse([p for p in procs if "sleep" in " ".join(p.get("argv", []))], procs)

    def test_background_processes_outlive_the_exec(self):
        """What a command leaves running in the background survives its exec: the CLI hangs up
        as soon as it reads the exit event, and that must not count as the client going away
        mid-exec (which kills the tree). Before the fix this lost some of the sleepers."""
        sid = self.create()
        for i in range(12):
            self.exec_ok(sid, "sh", "-c", "sleep 10%02d > /dev/null 2>&1 &" % i)

        def sleepers():
            procs = self.api_list("/v1/sandboxes/%s/processes" % sid, "processes")
            return sorted(p["argv"][1] for p in procs if p.get("argv", [None])[0] == "sleep")
        wait_for(lambda: len(sleepers()) == 12, timeout=10,
                 what="12 backgrounded sleepers (found %r)" % sleepers())
        time.sleep(0.5)
        self.assertEqual(sleepers(), ["10%02d" % i for i in range(12)])

    def test_detach_ps_and_kill(self):
        sid = self.create()
        self.space_ok("exec", sid, "--detach", "--", "sleep", "1000")
        rc, out, _ = self.space("ps", sid)
        self.assertEqual(rc, 0)
        self.assertIn("sleep", out)
        procs = self.api_list("/v1/sandboxes/%s/processes" % sid, "processes")
        sleepers = [p for p in procs if p.get("argv", [None])[0] == "sleep"]
        self.assertEqual(len(sleepers), 1, procs)
        pid = sleepers[0]["pid"]
        self.space_ok("kill", sid, str(pid))
        wait_for(lambda: "sleep" not in self.space("ps", sid)[1], timeout=10,
                 what="the killed sleep to go")
        # pid 1 (the agent) cannot be killed through the API.
        rc, _, err = self.space("kill", sid, "1")
        self.assertEqual(rc, 125, err)
        self.assertEqual(self.exec_ok(sid, "echo", "alive"), "alive\n")

    def test_api_exec_stream(self):
        r, events = self.api_exec(self.sid, ["sh", "-c", "echo hi; echo err >&2; exit 4"])
        self.assertEqual(r.status, 200, r)
        types = [e["type"] for e in events]
        self.assertEqual(types[0], "started", events)
        self.assertEqual(types[-1], "exit", events)
        self.assertIsInstance(events[0].get("pid"), int)
        out = b"".join(e["bytes"] for e in events if e["type"] == "stdout")
        err = b"".join(e["bytes"] for e in events if e["type"] == "stderr")
        self.assertEqual((out, err), (b"hi\n", b"err\n"))
        self.assertEqual(events[-1].get("exit_code"), 4, events[-1])

    def test_api_exec_with_stdin(self):
        # The exec body is the JSON object, a newline, then the raw stdin bytes.
        data = os.urandom(300000)
        body = json.dumps({"cmd": ["sha256sum"], "stdin": True}).encode() + b"\n" + data
        r = self.api("POST", "/v1/sandboxes/%s/exec" % self.sid, body,
                     headers={"Content-Type": "application/json"})
        self.assertEqual(r.status, 200, r)
        events = decode_events(r.body)
        out = b"".join(e["bytes"] for e in events if e["type"] == "stdout")
        self.assertEqual(out.split()[0].decode(), hashlib.sha256(data).hexdigest())
        self.assertEqual(events[-1].get("exit_code"), 0, events[-1])

    def test_api_exec_env_cwd_and_not_found(self):
        r, events = self.api_exec(self.sid, ["sh", "-c", "echo $X; pwd"], env={"X": "y"},
                                  cwd="/tmp")
        self.assertEqual(r.status, 200, r)
        out = b"".join(e["bytes"] for e in events if e["type"] == "stdout")
        self.assertEqual(out, b"y\n/tmp\n")
        r, events = self.api_exec(self.sid, ["/no/such/binary"])
        # Either a 200 stream ending in exit 127 with an error, or a 4xx error.
        if r.status == 200:
            self.assertEqual(events[-1]["type"], "exit")
            self.assertEqual(events[-1].get("exit_code"), 127, events)
        else:
            self.assert_api_error(r)

    def test_api_exec_timeout_reports_timed_out(self):
        r, events = self.api_exec(self.sid, ["sleep", "100"], timeout=1)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(events[-1]["type"], "exit")
        self.assertTrue(events[-1].get("timed_out"), events[-1])

    def test_concurrent_execs(self):
        procs = [subprocess.Popen([SPACE, "exec", self.sid, "--", "sh", "-c",
                                   "sleep 0.5; echo %d" % i],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env())
                 for i in range(8)]
        outs = [p.communicate(timeout=60) for p in procs]
        self.assertEqual([p.returncode for p in procs], [0] * 8, [o[1] for o in outs])
        self.assertEqual([o[0] for o in outs], [b"%d\n" % i for i in range(8)])


if __name__ == "__main__":
    main()
