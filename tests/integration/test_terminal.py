"""Interactive terminals: `space exec -it ID -- bash` driven through a real pseudo-terminal
(Python's pty module) — a tty inside, the window size and its changes (SIGWINCH), Ctrl-C
reaching the command and not the CLI, the exit code, the local terminal restored — and the
upgraded API connection itself (POST .../exec, Upgrade: space-terminal): JSON lines both ways,
a client that hangs up or speaks nonsense leaves nothing running."""

import base64
import fcntl
import json
import os
import pty
import select
import signal
import socket
import struct
import termios
import time

from harness import SPACE, SpaceTestCase, main, wait_for


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class PtySession:
    """The CLI on the slave side of a pty this test holds the master of."""

    def __init__(self, argv, env, rows=30, cols=100):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its terminal is the pty's slave
            try:
                set_size(0, rows, cols)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.out = b""

    def send(self, data):
        os.write(self.fd, data)

    def expect(self, needle, timeout=20):
        end = time.monotonic() + timeout
        while needle not in self.out:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError("%r not seen; output so far: %r" % (needle, self.out[-2000:]))
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError("the session ended before %r; output: %r"
                                         % (needle, self.out[-2000:]))
                self.out += chunk
        at = self.out.index(needle) + len(needle)
        seen, self.out = self.out[:at], self.out[at:]
        return seen

    def wait_exit(self, timeout=20):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                r, _, _ = select.select([self.fd], [], [], 0.1)
                if r:
                    self.out += os.read(self.fd, 65536)
            except OSError:
                pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        raise AssertionError("the CLI did not exit; output: %r" % self.out[-2000:])


class TerminalTest(SpaceTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sid = cls.create_for_class()

    def cli_env(self):
        return dict(self.env(), TERM="xterm")

    def test_bash_through_a_real_pty(self):
        s = PtySession([SPACE, "exec", "-it", "--env", "PS1=PROMPT> ", self.sid, "--",
                        "bash", "--norc", "--noprofile", "-i"], self.cli_env())
        s.expect(b"PROMPT> ")
        s.send(b"tty; test -t 0 && test -t 1 && echo both-ttys; stty size\r")
        seen = s.expect(b"PROMPT> ")
        self.assertIn(b"/dev/pts/", seen)
        self.assertIn(b"both-ttys", seen)
        self.assertIn(b"30 100", seen)
        # A new window size reaches the command (the CLI gets SIGWINCH from its terminal).
        set_size(s.fd, 42, 131)
        os.kill(s.pid, signal.SIGWINCH)
        time.sleep(0.5)
        s.send(b"stty size\r")
        s.expect(b"42 131")
        s.expect(b"PROMPT> ")
        # Ctrl-C interrupts the command inside; the CLI and the shell go on.
        s.send(b"sleep 100; echo not-$((6*7))-interrupted\r")
        time.sleep(1.0)
        s.send(b"\x03")
        s.send(b"echo after-ctrl-c\r")
        seen = s.expect(b"after-ctrl-c\r\n")
        self.assertNotIn(b"not-42-interrupted", seen)
        # Keys arrive raw: a here-doc typed line by line, and the exit code comes back.
        s.send(b"exit 3\r")
        self.assertEqual(s.wait_exit(), 3)
        wait_for(lambda: not any("sleep" in " ".join(p.get("argv", [])) or
                                 "bash" in " ".join(p.get("argv", []))
                                 for p in self.api("GET", "/v1/sandboxes/%s/processes"
                                                   % self.sid).json["processes"]),
                 what="nothing left running after the terminal session")

    def test_a_killed_cli_leaves_nothing_running(self):
        s = PtySession([SPACE, "exec", "-t", self.sid, "--", "sh", "-c",
                        "echo ready; sleep 300"], self.cli_env())
        s.expect(b"ready")
        os.kill(s.pid, signal.SIGKILL)
        os.waitpid(s.pid, 0)
        os.close(s.fd)
        wait_for(lambda: not any("300" in p.get("argv", [])
                                 for p in self.api("GET", "/v1/sandboxes/%s/processes"
                                                   % self.sid).json["processes"]),
                 timeout=15, what="the sleep killed with its terminal's client")

    def test_piped_input_ends_with_ctrl_d(self):
        rc, out, err = self.space("exec", "-t", self.sid, "--", "sh", "-c",
                                  "read a; read b; echo got $a $b; cat; echo cat-ended; exit 4",
                                  input="x\ny\nrest\n")
        self.assertEqual(rc, 4, err)
        self.assertIn("got x y", out)
        self.assertIn("cat-ended", out)
        self.assertIn("\r\n", out)  # a terminal's line discipline
        rc, _, err = self.space("exec", "-t", "--detach", self.sid, "--", "true")
        self.assertEqual(rc, 125)
        self.assertIn("do not go together", err)

    # -- the API itself -----------------------------------------------------------------------

    def upgrade(self, body, protocol="space-terminal"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.connect(self.daemon.socket)
        data = json.dumps(body).encode()
        sock.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                     b"Upgrade: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                     % (self.sid.encode(), protocol.encode(), len(data)) + data)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(1)
            if not chunk:
                break
            head += chunk
        return sock, head

    def read_events(self, sock):
        buf = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        return [json.loads(l) for l in buf.splitlines() if l.strip()]

    def test_the_upgraded_connection_speaks_json_lines(self):
        sock, head = self.upgrade({"cmd": ["sh", "-c",
                                           "stty size; read l; stty size; echo got:$l; exit 5"],
                                   "rows": 10, "cols": 50})
        self.assertTrue(head.startswith(b"HTTP/1.1 101"), head)
        self.assertIn(b"Upgrade: space-terminal", head)
        first, shown = b"", b""
        while b"10 50" not in shown:  # the first size, before anything is sent
            chunk = sock.recv(65536)
            self.assertTrue(chunk, first)
            first += chunk
            shown = b"".join(base64.b64decode(json.loads(l).get("data", ""))
                             for l in first.split(b"\n")[:-1] if l.strip())
        for msg in ({"type": "resize", "rows": 11, "cols": 60},
                    {"type": "stdin", "data": base64.b64encode(b"hello\n").decode()}):
            sock.sendall(json.dumps(msg).encode() + b"\n")
        rest = self.read_events(sock)
        sock.close()
        ev = [json.loads(l) for l in first.splitlines() if l.strip()] + rest
        self.assertEqual(ev[0]["type"], "started")
        out = b"".join(base64.b64decode(e["data"]) for e in ev if e["type"] == "stdout")
        self.assertIn(b"10 50\r\n", out)
        self.assertIn(b"11 60\r\ngot:hello", out)
        self.assertEqual(ev[-1]["type"], "exit")
        self.assertEqual(ev[-1]["exit_code"], 5)
        # Refused before the upgrade: stdin/detach with a terminal, a tty size out of range.
        for body in ({"cmd": ["true"], "detach": True}, {"cmd": ["true"], "rows": 0},
                     {"cmd": ["true"], "stdin": True}):
            sock, head = self.upgrade(body)
            self.assertTrue(head.startswith(b"HTTP/1.1 400"), (body, head))
            sock.close()

    def test_nonsense_or_a_hangup_ends_the_command(self):
        for end in ("nonsense", "hangup"):
            sock, head = self.upgrade({"cmd": ["sh", "-c", "echo up; sleep 301"]})
            self.assertTrue(head.startswith(b"HTTP/1.1 101"), head)
            buf = b""
            while b"stdout" not in buf:
                buf += sock.recv(65536)
            if end == "nonsense":
                sock.sendall(b"{\"type\": \"teleport\"}\n")
                ev = self.read_events(sock)
                self.assertEqual(ev[-1]["type"], "exit", ev)
                self.assertEqual(ev[-1]["signal"], 9)
            sock.close()
            wait_for(lambda: not any("301" in p.get("argv", [])
                                     for p in self.api("GET", "/v1/sandboxes/%s/processes"
                                                       % self.sid).json["processes"]),
                     timeout=15, what="the command gone after %s" % end)


if __name__ == "__main__":
    main()
