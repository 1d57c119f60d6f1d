"""The Python SDK (sdk/python, space_sandbox) against a real spaced: every call of its public
surface, its errors, and the README's quick start pasted as is.

Run by ctest as integration.test_sdk_python; the SDK is imported from the source tree.
"""

import dataclasses
import io
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

from harness import REPO, SpaceTestCase, free_port, wait_for

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))
import space_sandbox  # noqa: E402
from space_sandbox import (AuthenticationError, Client, CommandExitError, ConflictError,  # noqa: E402
                           DaemonRestartError, InvalidArgumentError, NotFoundError,
                           PermissionDeniedError, Sandbox, SpaceError, SpaceTimeoutError,
                           UnavailableError)


class PythonSdkTest(SpaceTestCase):
    API_LISTEN = True

    @classmethod
    def prepare_class(cls):
        cls.client = Client(socket_path=cls.daemon.socket)
        cls.sb = Sandbox.create(client=cls.client, timeout="10m")
        cls.known_ids.add(cls.sb.id)

    def tearDown(self):
        self.assertTrue(self.daemon.alive(), "spaced died:\n%s" % self.daemon.log_tail())

    # -- commands -----------------------------------------------------------------------------

    def test_run_returns_output_and_exit_code(self):
        r = self.sb.commands.run("echo out; echo err >&2; exit 3")
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, "out\n", "err\n"))
        self.assertFalse(r.ok)
        self.assertIsNone(r.signal)
        self.assertGreater(r.pid, 0)
        r = self.sb.commands.run(["printf", "%s|", "a b", "$HOME"], env={"X": "1"}, cwd="/tmp")
        self.assertEqual(r.stdout, "a b|$HOME|")
        self.assertEqual(self.sb.commands.run("echo $X; pwd", env={"X": "1"}, cwd="/tmp").stdout,
                         "1\n/tmp\n")
        self.assertEqual(self.sb.commands.run(["cat"], stdin=b"\x00\xffbytes").stdout_bytes,
                         b"\x00\xffbytes")
        self.assertEqual(self.sb.commands.run("id -u; echo $USER", user="nobody").stdout,
                         "65534\nnobody\n")
        with self.assertRaises(CommandExitError) as cm:
            self.sb.commands.run("echo nope >&2; exit 7", check=True)
        self.assertEqual(cm.exception.result.exit_code, 7)
        self.assertIn("nope", str(cm.exception))
        # A program that cannot start: 127 and why.
        r = self.sb.commands.run(["/no/such/program"])
        self.assertEqual(r.exit_code, 127)
        self.assertTrue(r.error)

    def test_timeout_kills_the_command(self):
        t0 = time.monotonic()
        r = self.sb.commands.run("sleep 30", timeout=0.5)
        self.assertTrue(r.timed_out)
        self.assertLess(time.monotonic() - t0, 15)

    def test_output_handlers_see_output_as_it_comes(self):
        seen = []
        first_at = []

        def on_out(text):
            if not first_at:
                first_at.append(time.monotonic())
            seen.append(text)

        t0 = time.monotonic()
        r = self.sb.commands.run("echo early; sleep 1.5; echo late", on_stdout=on_out)
        end = time.monotonic()
        self.assertEqual("".join(seen), "early\nlate\n")
        self.assertEqual(r.stdout, "early\nlate\n")
        self.assertLess(first_at[0] - t0, end - t0 - 1.0, "the first line came only at the end")

    def test_background_command_wait_and_kill(self):
        h = self.sb.commands.run("echo started; sleep 60; echo never", background=True)
        self.assertGreater(h.pid, 0)
        self.assertTrue(h.running)
        wait_for(lambda: "started" in h.stdout, what="first output of a background command")
        pids = [p["pid"] for p in self.sb.commands.list()]
        self.assertIn(h.pid, pids)
        with self.assertRaises(space_sandbox.SpaceTimeoutError):
            h.wait(timeout=0.2)
        h.kill()
        r = h.wait(timeout=10)
        self.assertEqual(r.signal, 9)
        self.assertIsNone(r.exit_code)
        self.assertNotIn("never", r.stdout)
        wait_for(lambda: not any("sleep" in " ".join(p.get("argv", []))
                                 for p in self.sb.commands.list()),
                 what="the killed command's sleep to be gone")
        # One that ends by itself.
        h = self.sb.commands.run("echo hi; exit 4", background=True)
        r = h.wait(timeout=30)
        self.assertEqual((r.exit_code, r.stdout), (4, "hi\n"))
        with self.assertRaises(CommandExitError):
            h.wait(check=True)

    def test_background_commands_outlive_their_program_and_can_be_followed_again(self):
        # Started by one program (a child Python process that then exits) ...
        prog = ("import sys; sys.path.insert(0, %r)\n"
                "from space_sandbox import Sandbox, Client\n"
                "sb = Sandbox.connect(%r, client=Client(socket_path=%r))\n"
                "h = sb.commands.run('echo one; echo err >&2; read x < /tmp/go-sdk; echo two $x;"
                " exit 5', background=True)\n"
                "print(h.pid)\n") % (os.path.join(REPO, "sdk", "python"), self.sb.id, self.daemon.socket)
        self.sb.commands.run("mkfifo /tmp/go-sdk", check=True)
        out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        pid = int(out.strip())
        # ... it runs on, and another handle follows it: kept output first, then new output.
        seen = []
        h = self.sb.commands.connect(pid, on_stdout=seen.append)
        self.assertTrue(h.detached)
        wait_for(lambda: "one\n" in h.stdout, what="the kept output")
        self.assertEqual(h.stderr, "err\n")
        self.assertTrue(h.running)
        self.sb.commands.run("echo now > /tmp/go-sdk", check=True)
        r = h.wait(timeout=30)
        self.assertEqual((r.exit_code, r.stdout, r.pid), (5, "one\ntwo now\n", pid))
        self.assertEqual("".join(seen), "one\ntwo now\n")
        # Ended commands can be read again; a disconnect leaves a running one alone.
        self.assertEqual(self.sb.commands.connect(pid).wait(timeout=10).exit_code, 5)
        h = self.sb.commands.run("sleep 60", background=True)
        h.disconnect()
        self.assertFalse(h.running)
        self.assertIn(h.pid, [p["pid"] for p in self.sb.commands.list()])
        again = self.sb.commands.connect(h.pid)
        again.kill()
        self.assertEqual(again.wait(timeout=10).signal, 9)
        # A command that cannot start says why; a pid not started detached has no logs.
        r = self.sb.commands.run("/no/such/program", background=True).wait(timeout=10)
        self.assertEqual(r.exit_code, 127)
        with self.assertRaises(NotFoundError):
            self.sb.commands.connect(1)

    def test_a_command_that_cannot_start_says_why_in_stderr(self):
        # A missing cwd (126), an unknown user (125), a missing program (127): the reason is
        # result.error, and stderr (empty otherwise) carries it as a line, where agents read.
        for cmd, kw, code, named in ((["true"], {"cwd": "/no/such/dir"}, 126, "/no/such/dir"),
                                     (["true"], {"user": "nosuchuser"}, 125, "nosuchuser"),
                                     (["/no/such/program"], {}, 127, "/no/such/program")):
            r = self.sb.commands.run(cmd, **kw)
            self.assertEqual(r.exit_code, code, r)
            self.assertIn(named, r.error or "")
            self.assertEqual(r.stderr, r.error + "\n")
            self.assertEqual(r.stderr_bytes, r.stderr.encode())
            with self.assertRaises(CommandExitError) as cm:
                self.sb.commands.run(cmd, check=True, **kw)
            self.assertIn(r.error, str(cm.exception))
            detached = self.sb.commands.run(cmd, background=True, **kw).wait(timeout=10)
            self.assertEqual((detached.exit_code, detached.stderr), (code, r.stderr))
        # A shell that started says it itself; its stderr is left as it is.
        r = self.sb.commands.run("no-such-command-here")
        self.assertEqual(r.exit_code, 127)
        self.assertIsNone(r.error)
        self.assertIn("no-such-command-here: not found", r.stderr)

    # -- long, silent commands ----------------------------------------------------------------

    def test_silent_commands_run_past_a_minute_without_a_timeout(self):
        # Without timeout= nothing bounds a command's stream: not the Client's timeout (60 s) nor
        # spaced's idle timeout between requests (60 s). At once, each silent for 75 s: run(),
        # run(on_stdout=), a background command's wait(), run_code(), and run() over TCP.
        sb = self.sb
        token = self.api("POST", "/v1/tokens", {"name": "long", "profiles": ["test"],
                                                "ops": ["read", "exec"], "ttl": "1h"}).json["token"]
        remote = Sandbox.connect(sb.id, client=Client(api_url="http://127.0.0.1:%d" % self.port,
                                                      token=token))
        context = sb.create_code_context()
        seen = []
        handle = sb.commands.run("sleep 75; echo done", background=True)
        calls = {
            "run": lambda: sb.commands.run("sleep 75; echo done"),
            "on_stdout": lambda: sb.commands.run("sleep 75; echo done", on_stdout=seen.append),
            "wait": handle.wait,
            "run_code": lambda: sb.run_code("import time\ntime.sleep(75)\nprint('done')",
                                            context=context),
            "tcp": lambda: remote.commands.run("sleep 75; echo done"),
        }
        outcome = {}

        def call(name):
            try:
                outcome[name] = calls[name]()
            except BaseException as e:  # noqa: BLE001 - handed to the test
                outcome[name] = e

        t0 = time.monotonic()
        threads = [threading.Thread(target=call, args=(n,), daemon=True) for n in calls]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        self.assertGreater(time.monotonic() - t0, 74)
        self.assertEqual(sorted(outcome), sorted(calls), "still waiting: %r" % outcome)
        for name in ("run", "on_stdout", "wait", "tcp"):
            r = outcome[name]
            self.assertIsInstance(r, space_sandbox.CommandResult, "%s: %r" % (name, r))
            self.assertEqual((r.exit_code, r.stdout), (0, "done\n"), name)
        self.assertEqual("".join(seen), "done\n")
        ex = outcome["run_code"]
        self.assertIsInstance(ex, space_sandbox.Execution, repr(ex))
        self.assertIsNone(ex.error, ex.error)
        self.assertEqual(ex.stdout, ["done", "\n"])

    # -- code interpreter ---------------------------------------------------------------------

    def test_code_interpreter_keeps_state_and_reports_results(self):
        sb = self.sb
        ex = sb.run_code("x = 41\nprint('side effect')\nx + 1")
        self.assertIsNone(ex.error)
        self.assertEqual(ex.text, "42")
        self.assertEqual(ex.stdout, ["side effect", "\n"])
        self.assertEqual(sb.run_code("x").text, "41")  # the variable survived
        self.assertIsNone(sb.run_code("y = x * 2").text)  # a statement: no value

        ex = sb.run_code("def f():\n    return 1 / 0\nf()")
        self.assertEqual(ex.error.name, "ZeroDivisionError")
        self.assertIn("<cell>", ex.error.traceback)
        self.assertNotIn("interpreter.py", ex.error.traceback)
        self.assertEqual(sb.run_code("y").text, "82")  # an error does not end the context

        # Rich display: an object's HTML, and a matplotlib figure as PNG.
        ex = sb.run_code("class T:\n    def _repr_html_(self):\n        return '<b>hi</b>'\nT()")
        self.assertEqual(ex.results[0].html, "<b>hi</b>")
        self.assertIn("text/html", ex.results[0].formats)
        ex = sb.run_code("import matplotlib.pyplot as plt\n"
                         "plt.figure(figsize=(2, 1), dpi=50)\nplt.plot([1, 2, 3])\n"
                         "print('plotted')")
        self.assertIsNone(ex.error, ex.error and ex.error.traceback)
        pngs = [r.png for r in ex.results if r.png]
        self.assertEqual(len(pngs), 1, ex)
        self.assertEqual(pngs[0][:8], b"\x89PNG\r\n\x1a\n")
        width, height = int.from_bytes(pngs[0][16:20], "big"), int.from_bytes(pngs[0][20:24], "big")
        self.assertTrue(50 <= width <= 120 and 20 <= height <= 70, (width, height))

        # Streaming, separate contexts, and a timeout that interrupts the run but not the context.
        seen = []
        sb.run_code("for i in range(3): print(i)", on_stdout=seen.append)
        self.assertEqual("".join(seen), "0\n1\n2\n")
        other = sb.create_code_context()
        self.assertEqual(sb.run_code("x", context=other).error.name, "NameError")
        t0 = time.monotonic()
        ex = sb.run_code("import time\nwhile True:\n    time.sleep(0.05)", timeout=1)
        self.assertEqual(ex.error.name, "KeyboardInterrupt")
        self.assertLess(time.monotonic() - t0, 15)
        self.assertEqual(sb.run_code("x").text, "41")

    # -- files --------------------------------------------------------------------------------

    def test_files_write_read_list_remove(self):
        f = self.sb.files
        f.write("/tmp/sdk/a.txt", "héllo\n")
        f.write("/tmp/sdk/b.bin", b"\x00\x01\x02", mode=0o600)
        big = os.urandom(3 * 1024 * 1024 + 17)
        f.write("/tmp/sdk/big", io.BytesIO(big))
        f.write("/tmp/sdk/chunks", (bytes([i]) * 1000 for i in range(50)))
        self.assertEqual(f.read("/tmp/sdk/a.txt"), "héllo\n")
        self.assertEqual(f.read("/tmp/sdk/b.bin", format="bytes"), b"\x00\x01\x02")
        self.assertEqual(b"".join(f.read("/tmp/sdk/big", format="stream")), big)
        self.assertEqual(f.read_bytes("/tmp/sdk/chunks"),
                         b"".join(bytes([i]) * 1000 for i in range(50)))
        self.sb.commands.run("mkdir -p /tmp/sdk/sub/deeper && touch /tmp/sdk/sub/inner && "
                             "ln -s a.txt /tmp/sdk/link", check=True)

        entries = {e.name: e for e in f.list("/tmp/sdk")}
        self.assertEqual(sorted(entries), ["a.txt", "b.bin", "big", "chunks", "link", "sub"])
        self.assertEqual(entries["a.txt"].path, "/tmp/sdk/a.txt")
        self.assertEqual((entries["a.txt"].type, entries["a.txt"].size), ("file", 7))
        self.assertEqual(entries["b.bin"].mode, 0o600)
        self.assertEqual(entries["big"].size, len(big))
        self.assertEqual(entries["sub"].type, "dir")
        self.assertEqual((entries["link"].type, entries["link"].target), ("symlink", "a.txt"))
        self.assertGreater(entries["a.txt"].mtime, 1.6e9)
        self.assertEqual([(e.name, e.type) for e in f.list("/tmp/sdk/sub")],
                         [("deeper", "dir"), ("inner", "file")])  # one level only

        st = f.stat("/tmp/sdk/b.bin")
        self.assertEqual((st.type, st.size, st.mode), ("file", 3, 0o600))
        self.assertTrue(f.exists("/tmp/sdk/a.txt"))
        self.assertFalse(f.exists("/tmp/sdk/missing"))
        with self.assertRaises(NotFoundError):
            f.read("/tmp/sdk/missing")
        with self.assertRaises(NotFoundError):
            f.list("/tmp/sdk/missing")
        with self.assertRaises(InvalidArgumentError):
            f.list("/tmp/sdk/a.txt")
        with self.assertRaises(IsADirectoryError):
            f.read("/tmp/sdk")

        f.remove("/tmp/sdk/a.txt")
        self.assertFalse(f.exists("/tmp/sdk/a.txt"))
        with self.assertRaises(SpaceError):
            f.remove("/tmp/sdk")  # not empty, not recursive
        f.remove("/tmp/sdk", recursive=True)
        self.assertFalse(f.exists("/tmp/sdk"))

    def test_directories_up_and_down(self):
        f = self.sb.files
        f.make_dir("/tmp/made/deep")
        self.assertEqual(f.stat("/tmp/made/deep").type, "dir")
        f.make_dir("/tmp/made/deep")  # again: no error
        with tempfile.TemporaryDirectory() as local:
            src = os.path.join(local, "src")
            os.makedirs(os.path.join(src, "pkg"))
            with open(os.path.join(src, "pkg", "mod.py"), "w") as fh:
                fh.write("X = 42\n")
            with open(os.path.join(src, "main.py"), "w") as fh:
                fh.write("from pkg.mod import X\nprint(X)\n")
            f.upload_dir(src, "/tmp/proj")
            self.assertEqual(self.sb.commands.run("cd /tmp/proj && python3 main.py").stdout, "42\n")
            self.sb.commands.run("echo made > /tmp/proj/out.txt", check=True)
            dst = os.path.join(local, "dst")
            f.download_dir("/tmp/proj", dst)
            with open(os.path.join(dst, "out.txt")) as fh:
                self.assertEqual(fh.read(), "made\n")
            with open(os.path.join(dst, "pkg", "mod.py")) as fh:
                self.assertEqual(fh.read(), "X = 42\n")

    # -- life cycle, snapshots, audit ---------------------------------------------------------

    def test_lifecycle_snapshots_and_audit(self):
        with Sandbox.create(client=self.client, env={"GREETING": "hi"}, memory="256M") as sb:
            self.known_ids.add(sb.id)
            self.assertEqual(sb.info.state, "running")
            self.assertEqual(sb.info.limits["memory"], 256 << 20)
            self.assertEqual(sb.commands.run("echo $GREETING").stdout, "hi\n")
            self.assertIn(sb.id, [s.id for s in Sandbox.list(client=self.client)])
            again = Sandbox.connect(sb.id, client=self.client)
            self.assertEqual(again.commands.run("hostname").exit_code, 0)

            self.assertIsNone(sb.info.expires_at)
            self.assertIsNotNone(sb.set_timeout("1h").expires_at)
            self.assertEqual(sb.pause().state, "paused")
            with self.assertRaises(ConflictError):
                sb.commands.run("true")
            self.assertEqual(sb.resume().state, "running")

            sb.files.write("/root/state.txt", "v1")
            snap = sb.snapshot(name="sdk-v1-%s" % sb.id)
            self.assertEqual(snap.kind, "manual")
            self.assertIn(snap.id, [s.id for s in sb.snapshots()])
            sb.files.write("/root/state.txt", "v2")
            self.assertIn("/root/state.txt", sb.diff()["added"])
            rb = sb.rollback(snap)
            self.assertEqual(rb["snapshot"], snap.id)
            self.assertEqual(sb.files.read("/root/state.txt"), "v1")

            restored = Sandbox.restore(snap, client=self.client)
            self.known_ids.add(restored.id)
            try:
                self.assertNotEqual(restored.id, sb.id)
                self.assertEqual(restored.files.read("/root/state.txt"), "v1")
            finally:
                restored.destroy()
            self.assertFalse(restored.is_running())

            kinds = [e["kind"] for e in sb.audit()]
            for k in ("sandbox.create", "exec.start", "exec.end", "file.write", "sandbox.pause"):
                self.assertIn(k, kinds)
            self.assertTrue(sb.verify_audit()["ok"])
            sid = sb.id
        # Destroyed on leaving the block; calls now fail clearly.
        wait_for(lambda: not Sandbox.connect(sid, client=self.client).is_running()
                 if sid in [s.id for s in Sandbox.list(client=self.client)] else True,
                 what="the sandbox to be destroyed")
        gone = Sandbox(sb.info, self.client)
        with self.assertRaises((NotFoundError, ConflictError)):
            gone.commands.run("true")
        gone.destroy()  # idempotent
        wait_for(lambda: any(e["kind"] == "sandbox.destroy" for e in gone.audit()),
                 what="sandbox.destroy in the audit log (the with block destroys in the background)")

    # -- ports and terminals ------------------------------------------------------------------

    def test_ports_forward_a_server_inside_and_wait_for_it(self):
        sb = self.sb
        url = sb.get_url(8000)
        self.assertRegex(url, r"^http://127\.0\.0\.1:\d+$")
        self.assertEqual(sb.get_host(8000), url[len("http://"):])  # one forward per port
        # Nothing listens yet: the local connection is reset at once, not left hanging.
        t0 = time.monotonic()
        with self.assertRaises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(url + "/", timeout=30).read()
        self.assertLess(time.monotonic() - t0, 5, "a connection to a closed port hung")
        t0 = time.monotonic()
        with self.assertRaises(SpaceTimeoutError) as cm:
            sb.wait_for_port(8000, timeout=1)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertIn("nothing listens on port 8000", str(cm.exception))
        self.assertIsInstance(cm.exception, TimeoutError)

        page = "served from %s\n" % sb.id
        sb.files.write("/root/site/index.html", page)
        sb.files.write("/root/site/big", os.urandom(1 << 20))
        big = sb.files.read_bytes("/root/site/big")
        server = sb.commands.run("cd /root/site && exec python3 -m http.server 8000 "
                                 "--bind 127.0.0.1", background=True)
        try:
            sb.wait_for_port(8000, timeout=30)
            with urllib.request.urlopen(url + "/index.html", timeout=30) as r:
                self.assertEqual(r.read().decode(), page)
            with urllib.request.urlopen(url + "/big", timeout=30) as r:
                self.assertEqual(r.read(), big)
            # Over the TCP listener with a token, through another Sandbox object.
            token = self.api("POST", "/v1/tokens", {"name": "sdk-ports", "profiles": ["test"],
                                                    "ops": ["read", "exec"], "ttl": "1h"})
            token = token.json["token"]
            remote = Sandbox.connect(sb.id, client=Client(api_url="http://127.0.0.1:%d" % self.port,
                                                          token=token))
            remote.wait_for_port(8000, timeout=10)
            with urllib.request.urlopen(remote.get_url(8000) + "/index.html", timeout=30) as r:
                self.assertEqual(r.read().decode(), page)
            remote.close()
            # close() stops the forwards; the next get_url starts a new one.
            sb.close()
            with self.assertRaises(OSError):
                urllib.request.urlopen(url + "/index.html", timeout=5).read()
            with urllib.request.urlopen(sb.get_url(8000) + "/index.html", timeout=30) as r:
                self.assertEqual(r.read().decode(), page)
        finally:
            server.kill()
            sb.close()
        for bad in (0, 65536, "80"):
            with self.assertRaises(InvalidArgumentError):
                sb.get_host(bad)
        # A destroyed sandbox: waiting fails at once, with the API's error.
        gone = Sandbox.create(client=self.client)
        self.known_ids.add(gone.id)
        gone.destroy()
        t0 = time.monotonic()
        with self.assertRaises((NotFoundError, ConflictError)):
            gone.wait_for_port(8000, timeout=30)
        self.assertLess(time.monotonic() - t0, 10)

    def test_pty_runs_bash_on_a_terminal(self):
        seen = []
        term = self.sb.pty.create("bash", rows=24, cols=80, on_data=seen.append)
        self.assertGreater(term.pid, 0)
        self.assertTrue(term.running)
        term.send_input("echo hi $((1+2))\n")
        wait_for(lambda: b"hi 3" in term.output, timeout=20, what="hi 3 from bash")
        term.send_input("stty size; tty\n")
        wait_for(lambda: b"24 80" in term.output, timeout=20, what="stty size 24 80")
        term.resize(40, 100)
        term.send_input(b"stty size\n")
        wait_for(lambda: b"40 100" in term.output, timeout=20, what="stty size after resize")
        self.assertIn(b"/dev/pts/", term.output)
        with self.assertRaises(InvalidArgumentError):
            term.resize(0, 80)  # refused here: the session goes on
        term.send_input("exit 3\n")
        self.assertEqual(term.wait(timeout=20), 3)
        self.assertEqual((term.exit_code, term.signal, term.running), (3, None, False))
        self.assertEqual(b"".join(seen), term.output)
        self.assertEqual(b"".join(term), term.output)  # iterating: the same output
        with self.assertRaises(ConflictError):
            term.send_input("true\n")
        term.close()  # after the end: nothing to do

        # cwd and env; TERM is set.
        with self.sb.pty.create("echo $X $TERM; pwd", cwd="/tmp", env={"X": "x1"}) as t:
            self.assertEqual(t.wait(timeout=20), 0)
            self.assertIn(b"x1 xterm-256color\r\n/tmp\r\n", t.output)
        self.assertEqual(self.sb.pty.create(["/no/such/program"]).wait(timeout=20), 127)

    def test_pty_kill_and_close_end_the_command(self):
        term = self.sb.pty.create("sleep 100")
        t0 = time.monotonic()
        term.kill()
        self.assertEqual(term.wait(timeout=20), 128 + 9)
        self.assertEqual((term.exit_code, term.signal), (None, 9))
        self.assertLess(time.monotonic() - t0, 10)
        term = self.sb.pty.create("sleep 100")
        with self.assertRaises(SpaceTimeoutError):
            term.wait(timeout=0.2)  # still running: it runs on
        self.assertTrue(term.running)
        term.kill(15)
        self.assertEqual(term.wait(timeout=20), 128 + 15)
        term = self.sb.pty.create("sleep 101")
        term.close()  # hanging up kills its tree
        self.assertFalse(term.running)
        wait_for(lambda: not any("sleep 101" in " ".join(p.get("argv", []))
                                 for p in self.sb.commands.list()),
                 timeout=20, what="the hung-up terminal's sleep to be gone")
        with self.assertRaises(NotFoundError):
            Sandbox(dataclasses.replace(self.sb.info, id="sb_000000000000"),
                    self.client).pty.create("bash")

    # -- errors and connections ---------------------------------------------------------------

    def test_errors_are_typed_and_say_what_to_do(self):
        with self.assertRaises(NotFoundError) as cm:
            Sandbox.connect("sb_nonexistent", client=self.client)
        self.assertEqual(cm.exception.status, 404)
        self.assertEqual(cm.exception.code, "not_found")
        with self.assertRaises(InvalidArgumentError) as cm:
            Sandbox.create(client=self.client, memory="1X")
        self.assertIn("memory", str(cm.exception))
        nowhere = Client(socket_path=os.path.join(self.tmp, "nothing.sock"))
        with self.assertRaises(UnavailableError) as cm:
            Sandbox.list(client=nowhere)
        self.assertIn("spaced is not running", str(cm.exception))

    def test_error_hints_name_sdk_methods_not_the_cli(self):
        # spaced's hints name its CLI (`space ls`); the SDK's name its calls, spaced's own text
        # is in server_message, the code is spaced's.
        def check(cm, code, sdk, cli):
            e = cm.exception
            self.assertEqual(e.code, code, e)
            self.assertIn(sdk, e.message)
            self.assertIn(sdk, str(e))
            self.assertNotIn("`space ", e.message)
            self.assertNotIn(sdk, e.server_message)
            self.assertIn(cli, e.server_message)

        with self.assertRaises(NotFoundError) as cm:
            Sandbox.connect("sb_000000000000", client=self.client)
        check(cm, "not_found", "`Sandbox.list()` lists sandboxes", "`space ls` lists sandboxes")
        with self.assertRaises(InvalidArgumentError) as cm:
            Sandbox.create(client=self.client, secrets=["no-such-secret"])
        check(cm, "invalid_argument", '`secrets=["no-such-secret"]`: no such secret',
              "--secret no-such-secret: no such secret")

        sb = Sandbox.create(client=self.client, timeout="10m")
        self.known_ids.add(sb.id)
        try:
            sb.pause()
            with self.assertRaises(ConflictError) as cm:
                sb.commands.run("true")
            check(cm, "conflict", "is paused; `sandbox.resume()` first",
                  "`space resume %s` first" % sb.id)
            sb.resume()
            sb.snapshot(name="hint-%s" % sb.id)
            with self.assertRaises(space_sandbox.AlreadyExistsError) as cm:
                sb.snapshot(name="hint-%s" % sb.id)
            # spaced phrases this one for every caller already ("pick another name").
            self.assertIn("; pick another name", cm.exception.message)
            self.assertNotIn("--name", cm.exception.message)
        finally:
            sb.destroy()
        with self.assertRaises(ConflictError) as cm:
            sb.commands.run("true")
        check(cm, "conflict", "create a new one with `Sandbox.create()`",
              "create a new one with `space create`")

    def test_malformed_ids_are_typed_errors_that_say_what_an_id_looks_like(self):
        for bad in ("hello world", "a/b", "..", "", "sb_\u00e9", "sb_1\r\nHost: x", "%zz", None):
            with self.assertRaises(InvalidArgumentError, msg=repr(bad)) as cm:
                Sandbox.connect(bad, client=self.client)
            self.assertIn("sandbox ids look like sb_0123abcd", str(cm.exception))
        with self.assertRaises(InvalidArgumentError) as cm:
            Sandbox.restore("no such/snapshot", client=self.client)
        self.assertIn("snapshot id (snap_...) or name", str(cm.exception))
        with self.assertRaises(NotFoundError):  # well formed, unknown: spaced says so
            Sandbox.connect("sb_000000000000", client=self.client)

    def test_connection_failures_are_typed_errors(self):
        # Whatever the connection does, the SDK raises its own errors, never the stdlib's.
        def listen(name, answer):
            path = os.path.join(self.tmp, name + ".sock")
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(path)
            srv.listen(4)
            self.addCleanup(srv.close)

            def serve():
                while True:
                    try:
                        c, _ = srv.accept()
                    except OSError:
                        return
                    with c:
                        c.recv(65536)
                        answer(c)
            threading.Thread(target=serve, daemon=True).start()
            return Client(socket_path=path, timeout=0.5)

        cases = [
            ("closes", lambda c: None, UnavailableError, "broke"),
            ("not-http", lambda c: c.sendall(b"SSH-2.0-x\r\n\r\n"), space_sandbox.ProtocolError,
             "not spaced"),
            ("cut", lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{"),
             UnavailableError, "broke"),
            ("not-json", lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"),
             space_sandbox.ProtocolError, "not JSON"),
            ("silent", lambda c: time.sleep(2), SpaceTimeoutError, "sent nothing for 0.5s"),
        ]
        for name, answer, cls, words in cases:
            with self.assertRaises(cls, msg=name) as cm:
                Sandbox.list(client=listen(name, answer))
            self.assertIn(words, str(cm.exception))
        self.assertIsInstance(cm.exception, TimeoutError)  # SpaceTimeoutError is one
        with self.assertRaises(UnavailableError) as cm:
            Sandbox.list(client=Client(api_url="http://127.0.0.1:%d" % free_port()))
        self.assertIn("refused the connection", str(cm.exception))

    # -- spaced restarts under an attached command ---------------------------------------------

    def run_attached_while_spaced_stops(self, sig):
        """Runs `echo start; sleep 30` attached (commands.run, in a thread), stops this class's
        spaced with `sig` once "start" arrived, and starts spaced again for the tests after this
        one. Returns what run() raised. Then reconnects as the error says: the sandbox outlived
        spaced and answers; what is left of the command is killed."""
        out, seen, outcome = [], threading.Event(), {}

        def on_out(text):
            out.append(text)
            if "start\n" in "".join(out):
                seen.set()

        def run():
            try:
                outcome["result"] = self.sb.commands.run("echo start; sleep 30", on_stdout=on_out)
            except BaseException as e:  # noqa: BLE001 - handed to the test
                outcome["error"] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        try:
            self.assertTrue(seen.wait(30), "no \"start\" from the command: %r" % outcome)
            rc = self.daemon.stop(sig)
            self.assertIn(rc, (-signal.SIGKILL,) if sig == signal.SIGKILL
                          else (0, -signal.SIGTERM), self.daemon.log_tail())
            t.join(30)
            self.assertFalse(t.is_alive(), "commands.run still waits after spaced stopped")
        finally:
            if not self.daemon.alive():
                self.daemon.start()
        sb = Sandbox.connect(self.sb.id, client=self.client)
        for p in sb.commands.list():
            if "sleep 30" in " ".join(p.get("argv", [])):
                try:
                    sb.commands.kill(p["pid"], 9)
                except (NotFoundError, ConflictError):
                    pass  # gone meanwhile
        wait_for(lambda: not any("sleep 30" in " ".join(p.get("argv", []))
                                 for p in sb.commands.list()),
                 what="the command's sleep to be gone")
        self.assertEqual(sb.commands.run("echo back").stdout, "back\n")
        self.assertNotIn("result", outcome, "the command ended normally: %r" % outcome)
        return outcome.get("error")

    def assert_restart_error(self, e, reason):
        self.assertIsInstance(e, DaemonRestartError, repr(e))
        self.assertIsInstance(e, UnavailableError)  # `except UnavailableError` still catches it
        self.assertEqual((e.code, e.reason, e.sandbox_id), ("unavailable", reason, self.sb.id))
        self.assertGreater(e.pid or 0, 0)
        self.assertIn("reconnect with Sandbox.connect(%r)" % self.sb.id, str(e))
        self.assertIn("commands.list()", str(e))

    def test_spaced_sigterm_under_an_attached_command_raises_daemon_restart_error(self):
        # spaced's error event carries "reason": "shutdown" (src/api/exec.cc).
        e = self.run_attached_while_spaced_stops(signal.SIGTERM)
        self.assert_restart_error(e, "shutdown")
        self.assertIn("spaced is shutting down", str(e))
        # Its hint names the SDK's argument; spaced's own text names the CLI's.
        self.assertIn("`sandbox.commands.run(cmd, background=True)`", str(e))
        self.assertNotIn("`space ", str(e))
        self.assertIn("`space exec --detach`", e.server_message)

    def test_spaced_sigkill_under_an_attached_command_raises_daemon_restart_error(self):
        # No error event: the connection just closes.
        e = self.run_attached_while_spaced_stops(signal.SIGKILL)
        self.assert_restart_error(e, "connection_lost")
        self.assertIn("the connection to spaced closed before the command", str(e))
        self.assertIn("may have restarted or crashed", str(e))

    def test_tcp_listener_with_tokens(self):
        r = self.api("POST", "/v1/tokens", {"name": "sdk", "profiles": ["test"],
                                            "ops": ["read", "create", "exec", "files", "lifecycle"],
                                            "ttl": "1h"})
        self.assertEqual(r.status, 201, r.body)
        token = r.json["token"]
        remote = Client(api_url="http://127.0.0.1:%d" % self.port, token=token)
        with Sandbox.create(client=remote) as sb:
            self.known_ids.add(sb.id)
            self.assertEqual(sb.commands.run("echo over tcp").stdout, "over tcp\n")
            sb.files.write("/root/t", b"x")
            self.assertEqual(sb.files.read_bytes("/root/t"), b"x")
        with self.assertRaises(AuthenticationError):
            Sandbox.list(client=Client(api_url="http://127.0.0.1:%d" % self.port))
        with self.assertRaises(AuthenticationError):
            Sandbox.list(client=Client(api_url="http://127.0.0.1:%d" % self.port,
                                       token="spt_000000000000_" + "0" * 64))
        readonly = self.api("POST", "/v1/tokens", {"name": "ro", "profiles": ["test"],
                                                   "ops": ["read"], "ttl": "1h"}).json["token"]
        with self.assertRaises(PermissionDeniedError):
            Sandbox.create(client=Client(api_url="http://127.0.0.1:%d" % self.port, token=readonly))
        # From the environment, as the CLI reads it.
        env = dict(os.environ, SPACE_API="http://127.0.0.1:%d" % self.port, SPACE_TOKEN=token)
        out = subprocess.run([sys.executable, "-c",
                              "import space_sandbox as s; print(len(s.Sandbox.list()) >= 1)"],
                             env=dict(env, PYTHONPATH=os.path.join(REPO, "sdk", "python")),
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.stdout.strip(), "True", out.stderr)

    def test_readme_quick_start_runs_as_pasted(self):
        with open(os.path.join(REPO, "sdk", "python", "README.md")) as fh:
            text = fh.read()
        blocks = re.findall(r"```python\n(.*?)```", text, re.S)
        self.assertTrue(blocks, "no python block in sdk/python/README.md")
        env = dict(os.environ, SPACE_SOCKET=self.daemon.socket,
                   PYTHONPATH=os.path.join(REPO, "sdk", "python"))
        env.pop("SPACE_API", None)
        p = subprocess.run([sys.executable, "-c", blocks[0]], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("42", p.stdout)

    def test_readme_ports_and_terminals_run_as_pasted(self):
        with open(os.path.join(REPO, "sdk", "python", "README.md")) as fh:
            text = fh.read()
        section = text[text.index("## Ports and terminals"):]
        block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        env = dict(os.environ, SPACE_SOCKET=self.daemon.socket,
                   PYTHONPATH=os.path.join(REPO, "sdk", "python"))
        env.pop("SPACE_API", None)
        p = subprocess.run([sys.executable, "-c", block], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["hello from the sandbox", "3", "True"])

    def test_repo_readme_python_block_runs_as_pasted(self):
        with open(os.path.join(REPO, "README.md")) as fh:
            text = fh.read()
        section = text[text.index("### From Python"):]
        block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
        env.pop("SPACE_API", None)
        p = subprocess.run([sys.executable, "-c", block], env=env, cwd=REPO, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["42", "['hello.py']"])

    def test_example_agent_loop(self):
        script = os.path.join(REPO, "examples", "agent_loop.py")
        with open(script) as fh:
            self.assertLessEqual(len(fh.read().splitlines()), 40)
        with tempfile.TemporaryDirectory() as out:
            png = os.path.join(out, "plot.png")
            env = dict(os.environ, SPACE_SOCKET=self.daemon.socket,
                       PYTHONPATH=os.path.join(REPO, "sdk", "python"))
            env.pop("SPACE_API", None)
            p = subprocess.run([sys.executable, script, png], env=env, capture_output=True,
                               text=True, timeout=180)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(">>> len(data)\n1000\n", p.stdout)
            self.assertIn("plot saved to " + png, p.stdout)
            with open(png, "rb") as fh:
                self.assertEqual(fh.read(8), b"\x89PNG\r\n\x1a\n")


    def test_example_first_day_runs(self):
        """examples/first_day.py: the first day's agent loop, as a user runs it."""
        script = os.path.join(REPO, "examples", "first_day.py")
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ, SPACE_SOCKET=self.daemon.socket,
                       PYTHONPATH=os.path.join(REPO, "sdk", "python"))
            env.pop("SPACE_API", None)
            p = subprocess.run([sys.executable, script, out], env=env, capture_output=True,
                               text=True, timeout=240)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.splitlines(), [
                "tests: 1", "tests after the patch: 0", "after rm -rf: False",
                "after rollback: 0", "plot: " + os.path.join(out, "plot.png"),
                "served: return a + b"])
            with open(os.path.join(out, "plot.png"), "rb") as fh:
                self.assertEqual(fh.read(8), b"\x89PNG\r\n\x1a\n")

class PythonSdkHintsTest(unittest.TestCase):
    """Every CLI hint spaced's sources can send has its SDK phrasing in CLI_HINTS
    (sdk/python/space_sandbox/errors.py): a hint added to spaced fails this until the SDK names
    its call, or marks it as the CLI on spaced's host. Needs no daemon."""

    def test_every_cli_hint_in_spaced_has_an_sdk_phrasing(self):
        from cli_hints import spaced_cli_hints
        from space_sandbox.errors import cli_hint, sdk_message
        hints = spaced_cli_hints()
        for known in ("space ls", "space resume ID", "space snapshots ID", "space doctor"):
            self.assertIn(known, hints, "the scan of src/ found no `%s`: is it broken?" % known)
        for command, where in sorted(hints.items()):
            phrased = cli_hint(command)
            self.assertIsNotNone(phrased, "`%s` (%s) has no entry in CLI_HINTS of "
                                 "sdk/python/space_sandbox/errors.py: name the SDK call that does "
                                 "it, or None for one only the CLI on spaced's host does"
                                 % (command, ", ".join(sorted(set(where)))))
            if "`space " in phrased:
                self.assertEqual(phrased, "`%s` on spaced's host" % command)
            else:
                self.assertRegex(phrased, r"^`(Sandbox|sandbox)\.[a-z_.]+\(.*\)`$")
            self.assertEqual(sdk_message("x (`%s`) y" % command), "x (%s) y" % phrased)


if __name__ == "__main__":
    unittest.main()
