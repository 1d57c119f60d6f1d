"""`space mcp` against a real spaced: the official MCP TypeScript SDK client drives every tool
(tests/mcp/mcp.test.mjs, `npm ci` pinned by its package-lock.json), then raw JSON-RPC over the
pipes checks what the SDK hides: version negotiation, malformed and unknown messages, that the
session's sandboxes go when it ends (stdin closed, SIGTERM) and stay with --keep, that a session
acts on no sandbox but its own unless --sandbox or --all-sandboxes say so, and the port and
terminal tools against real servers and programs in a sandbox.
"""

import json
import os
import signal
import subprocess
import textwrap
import unittest

from harness import REPO, SPACE, SpaceTestCase, npm_ci, wait_for

MCP_TESTS = os.path.join(REPO, "tests", "mcp")


class Session:
    """`space mcp` as a child with JSON-RPC over its pipes."""

    def __init__(self, env, *args):
        self.p = subprocess.Popen([SPACE, "mcp"] + list(args), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.next_id = 0

    def send_raw(self, line):
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()

    def read(self):
        line = self.p.stdout.readline()
        if not line:
            raise AssertionError("space mcp closed stdout; stderr: %s" % self.p.stderr.read()[-2000:])
        return json.loads(line)

    def request(self, method, params=None):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send_raw(json.dumps(msg))
        answer = self.read()
        assert answer.get("id") == self.next_id, answer
        return answer

    def tool(self, name, /, **arguments):
        return self.request("tools/call", {"name": name, "arguments": arguments})["result"]

    def initialize(self):
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "raw", "version": "0"}})
        self.send_raw(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        return self

    def text(self, result):
        return "".join(c["text"] for c in result["content"] if c["type"] == "text")

    def close(self, timeout=30):
        self.p.stdin.close()
        rc = self.p.wait(timeout)
        self.p.stdout.close()
        return rc

    def stderr_text(self):
        with self.p.stderr:
            return self.p.stderr.read().decode()


class McpTest(SpaceTestCase):
    @classmethod
    def prepare_class(cls):
        npm_ci(MCP_TESTS)

    def mcp_env(self):
        env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
        env.pop("SPACE_API", None)
        return env

    def live_ids(self):
        return set(self.list_ids())

    def test_the_official_sdk_client_drives_every_tool(self):
        before = self.live_ids()
        env = dict(self.mcp_env(), SPACE_BIN=SPACE)
        p = subprocess.run(["node", "--test", "--test-reporter=spec", "mcp.test.mjs"], cwd=MCP_TESTS,
                           env=env, capture_output=True, text=True, timeout=300)
        print(p.stdout[-5000:])
        self.assertEqual(p.returncode, 0, p.stdout[-6000:] + p.stderr[-3000:])
        self.assertRegex(p.stdout, r"fail 0")
        # The client closed the session: its sandboxes are gone.
        wait_for(lambda: self.live_ids() == before, what="the session's sandboxes to be destroyed")

    def test_protocol_edges(self):
        s = Session(self.mcp_env())
        try:
            init = s.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "raw", "version": "0"}})
            self.assertEqual(init["result"]["protocolVersion"], "2025-06-18")
            self.assertEqual(init["result"]["capabilities"], {"tools": {"listChanged": False}})
            s.send_raw(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            self.assertEqual(s.request("ping")["result"], {})
            # A version this server does not know: it answers with its newest.
            newer = s.request("initialize", {"protocolVersion": "2099-01-01", "capabilities": {},
                                             "clientInfo": {"name": "raw", "version": "0"}})
            self.assertEqual(newer["result"]["protocolVersion"], "2025-11-25")
            s.send_raw("{not json")
            self.assertEqual(s.read()["error"]["code"], -32700)
            s.send_raw(json.dumps({"id": 99, "method": "ping"}))  # no "jsonrpc"
            self.assertEqual(s.read()["error"]["code"], -32600)
            self.assertEqual(s.request("resources/list")["error"]["code"], -32601)
            self.assertEqual(s.request("tools/call", {"name": "nope"})["error"]["code"], -32602)
            self.assertEqual(s.request("tools/call", {"name": "run_command", "arguments": [1]})
                             ["error"]["code"], -32602)
            # Output is bounded: head and tail of 100 KB, the middle counted.
            r = s.tool("run_command", command="python3 -c \"print('x' * 100000)\"; echo END")
            out = r["structuredContent"]["stdout"]
            self.assertLess(len(out), 40000)
            self.assertTrue(out.startswith("xxxx") and out.endswith("END\n"), out[-50:])
            self.assertIn("bytes not shown", out)
            self.assertEqual(s.close(), 0)
        finally:
            if s.p.poll() is None:
                s.p.kill()
                s.p.wait()
            s.stderr_text()

    def test_session_end_destroys_its_sandboxes_unless_keep(self):
        before = self.live_ids()
        # SIGTERM ends the session like a closed stdin.
        s = Session(self.mcp_env())
        sid = s.tool("create_sandbox")["structuredContent"]["sandbox_id"]
        self.known_ids.add(sid)
        info = self.inspect(sid)
        self.assertIsNotNone(info.get("expires_at"), "a session's sandboxes get a lifetime")
        s.p.send_signal(signal.SIGTERM)
        self.assertEqual(s.p.wait(30), 128 + signal.SIGTERM)
        s.close()
        s.stderr_text()
        wait_for(lambda: self.live_ids() == before, what="the sandbox of a SIGTERMed session")
        # --keep leaves them.
        s = Session(self.mcp_env(), "--keep")
        sid = s.tool("run_command", command="echo made > /root/kept")["structuredContent"]
        self.assertEqual(s.close(), 0)
        kept = self.live_ids() - before
        self.assertEqual(len(kept), 1)
        kid = kept.pop()
        self.known_ids.add(kid)
        self.assertIn("keeping sandbox " + kid, s.stderr_text())
        self.assertEqual(self.exec_ok(kid, "cat", "/root/kept"), "made\n")
        self.api("DELETE", "/v1/sandboxes/%s" % kid)


    def session(self, *args):
        """A started, initialized session, ended (and its pipes closed) when the test ends."""
        s = Session(self.mcp_env(), *args).initialize()

        def end():
            if s.p.poll() is None:
                s.close()
            s.stderr_text()
        self.addCleanup(end)
        return s

    def assert_refused(self, s, result, what):
        self.assertTrue(result["isError"], "%s was not refused: %r" % (what, result))
        text = s.text(result)
        self.assertIn("error (permission_denied)", text, what)
        # Said for a model: the tools to use, and what the operator can do.
        self.assertIn("list_sandboxes", text, what)
        self.assertIn("--sandbox", text, what)
        self.assertNotIn("`space ", text, what)

    def test_a_session_acts_only_on_its_own_sandboxes(self):
        other = self.create()  # another task's sandbox, made outside this session
        self.space_ok("snapshot", other, "--name", "theirs")
        s = self.session()
        mine = s.tool("create_sandbox")["structuredContent"]["sandbox_id"]
        self.known_ids.add(mine)

        # Every tool that names a sandbox refuses the other one, before asking spaced.
        run = s.tool("run_command", sandbox_id=other, command="touch /root/reached")
        self.assert_refused(s, run, "run_command")
        self.assertIn(other, s.text(run))
        self.assert_refused(s, s.tool("destroy_sandbox", sandbox_id=other), "destroy_sandbox")
        for name, args in [("run_code", {"code": "open('/root/reached', 'w')"}),
                           ("write_file", {"path": "/root/reached", "content": "x"}),
                           ("read_file", {"path": "/etc/hostname"}),
                           ("list_files", {"path": "/root"}),
                           ("snapshot", {}),
                           ("rollback", {"snapshot": "theirs"}),
                           ("list_snapshots", {}),
                           ("wait_for_port", {"port": 80, "timeout_seconds": 0}),
                           ("http_request", {"port": 80, "wait_seconds": 0})]:
            self.assert_refused(s, s.tool(name, sandbox_id=other, **args), name)
        # An id that does not exist gets the same answer: a model learns nothing by guessing.
        self.assert_refused(s, s.tool("run_command", sandbox_id="sb_000000000000", command="true"),
                            "an unknown id")

        # Its snapshots are out of reach too, by name and by id.
        theirs = [x["id"] for x in self.api_list("/v1/sandboxes/%s/snapshots" % other,
                                                  "snapshots")]
        self.assertEqual(len(theirs), 1)
        for snap in ("theirs", theirs[0]):
            for name, args in [("rollback", {"sandbox_id": mine, "snapshot": snap}),
                               ("restore_snapshot", {"snapshot": snap})]:
                r = s.tool(name, **args)
                self.assertTrue(r["isError"], r)
                self.assertIn("error (permission_denied)", s.text(r))
                self.assertIn("list_snapshots", s.text(r))
        self.assertEqual(s.tool("list_snapshots")["structuredContent"]["snapshots"], [])

        # The other sandbox is untouched and alive.
        self.assertEqual(self.inspect(other)["state"], "running")
        self.assertNotIn("reached", self.exec_ok(other, "ls", "-a", "/root"))

        # Only the session's own are listed.
        listed = s.tool("list_sandboxes")["structuredContent"]["sandboxes"]
        self.assertEqual([x["sandbox_id"] for x in listed], [mine])
        self.assertTrue(listed[0]["created_by_this_session"])

        # A snapshot of its own sandbox: listed, and restored into a sandbox the session owns.
        s.tool("run_command", sandbox_id=mine, command="echo kept > /root/state")
        snap = s.tool("snapshot", sandbox_id=mine, name="mine-1")["structuredContent"]
        snaps = s.tool("list_snapshots")["structuredContent"]["snapshots"]
        self.assertEqual([x["snapshot_id"] for x in snaps], [snap["snapshot_id"]])
        restored = s.tool("restore_snapshot", snapshot="mine-1")
        self.assertFalse(restored["isError"], restored)
        fork = restored["structuredContent"]["sandbox_id"]
        self.known_ids.add(fork)
        self.assertIsNotNone(self.inspect(fork).get("expires_at"), "a restored one has a lifetime")
        r = s.tool("run_command", sandbox_id=fork, command="cat /root/state")
        self.assertEqual(r["structuredContent"]["stdout"], "kept\n")
        self.assertEqual(sorted(x["sandbox_id"] for x in
                                s.tool("list_sandboxes")["structuredContent"]["sandboxes"]),
                         sorted([mine, fork]))

        # A sandbox of its own that it destroyed: spaced's answer, its hint naming a tool.
        s.tool("destroy_sandbox", sandbox_id=fork)
        gone = s.tool("run_command", sandbox_id=fork, command="true")
        self.assertTrue(gone["isError"])
        self.assertNotIn("permission_denied", s.text(gone))
        self.assertNotIn("`space ", s.text(gone))
        self.assertRegex(s.text(gone), r"create_sandbox|list_sandboxes")

        # The session ends: its sandboxes go, the other stays.
        self.assertEqual(s.close(), 0)
        wait_for(lambda: mine not in self.live_ids(), what="the session's sandbox to go")
        self.assertIn(other, self.live_ids())
        self.assertEqual(self.inspect(other)["state"], "running")

    def test_the_operator_can_name_more_sandboxes(self):
        other = self.create()
        # --sandbox ID: that one too, and it is the default target until the session makes one.
        s = self.session("--sandbox", other)
        r = s.tool("run_command", command="echo from-mcp > /root/note")
        self.assertFalse(r["isError"], r)
        self.assertEqual(self.exec_ok(other, "cat", "/root/note"), "from-mcp\n")
        listed = s.tool("list_sandboxes")["structuredContent"]["sandboxes"]
        self.assertEqual([(x["sandbox_id"], x["created_by_this_session"]) for x in listed],
                         [(other, False)])
        third = self.create()
        self.assert_refused(s, s.tool("run_command", sandbox_id=third, command="true"), "a third")
        self.assertEqual(s.close(), 0)
        self.assertEqual(self.inspect(other)["state"], "running",
                         "a named sandbox is not the session's to destroy at its end")

        # --all-sandboxes: every one, listed and destroyable.
        s = self.session("--all-sandboxes")
        ids = [x["sandbox_id"] for x in s.tool("list_sandboxes")["structuredContent"]["sandboxes"]]
        self.assertIn(other, ids)
        self.assertIn(third, ids)
        d = s.tool("destroy_sandbox", sandbox_id=third)
        self.assertFalse(d["isError"], d)
        self.assertNotIn(third, self.live_ids())
        self.assertEqual(s.close(), 0)
        self.assertIn(other, self.live_ids())

        # A --sandbox that names nothing stops the server at once, saying which.
        p = subprocess.run([SPACE, "mcp", "--sandbox", "sb_000000000000"], input=b"",
                           capture_output=True, env=self.mcp_env(), timeout=30)
        self.assertEqual(p.returncode, 125)
        self.assertIn(b"--sandbox sb_000000000000", p.stderr)

    def test_ports_wait_and_http(self):
        s = self.session()
        sid = s.tool("create_sandbox")["structuredContent"]["sandbox_id"]
        self.known_ids.add(sid)
        # Nothing listens yet: a quick check fails, with what to do.
        r = s.tool("wait_for_port", port=8000, timeout_seconds=0)
        self.assertTrue(r["isError"])
        self.assertIn("nothing listens on port 8000", s.text(r))
        self.assertIn("run_command", s.text(r))
        r = s.tool("wait_for_port", port=8000, timeout_seconds=0.6)
        self.assertIn("error (timeout)", s.text(r))

        # python3 -m http.server, started in the background a second from now.
        s.tool("write_file", path="/srv/www/hello.txt", content="hello from the sandbox\n")
        s.tool("write_file", path="/srv/www/big.txt", content="0123456789" * 10000)
        r = s.tool("run_command", command="cd /srv/www && (sleep 1; exec python3 -m http.server "
                   "8000 --bind 127.0.0.1) > /tmp/server.log 2>&1 &")
        self.assertEqual(r["structuredContent"]["exit_code"], 0, r)
        r = s.tool("wait_for_port", port=8000, timeout_seconds=30)
        self.assertFalse(r["isError"], r)
        self.assertTrue(r["structuredContent"]["listening"])
        self.assertGreater(r["structuredContent"]["waited_seconds"], 0)

        r = s.tool("http_request", port=8000, path="/hello.txt")
        self.assertFalse(r["isError"], r)
        st = r["structuredContent"]
        self.assertEqual((st["status"], st["body"], st["truncated"]),
                         (200, "hello from the sandbox\n", False))
        self.assertEqual(st["headers"]["content-length"], "23")
        self.assertTrue(s.text(r).startswith("HTTP 200 OK\n"), s.text(r)[:200])
        r = s.tool("http_request", port=8000, path="/nothing-here")
        self.assertEqual(r["structuredContent"]["status"], 404)
        # The body is bounded.
        r = s.tool("http_request", port=8000, path="/big.txt", max_bytes=1000)
        st = r["structuredContent"]
        self.assertEqual((st["status"], len(st["body"]), st["truncated"]), (200, 1000, True))
        self.assertIn("max_bytes", s.text(r))
        r = s.tool("http_request", port=8000, path="/big.txt", method="HEAD")
        self.assertEqual((r["structuredContent"]["status"], r["structuredContent"]["body"]),
                         (200, ""))

        # Methods, headers, bodies and a chunked answer, against a small echo server.
        s.tool("write_file", path="/srv/echo.py", content=textwrap.dedent("""\
            import json
            from http.server import BaseHTTPRequestHandler, HTTPServer

            class H(BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"

                def do_POST(self):
                    n = int(self.headers.get("Content-Length", 0))
                    out = json.dumps({"method": self.command, "path": self.path,
                                      "type": self.headers.get("Content-Type"),
                                      "x": self.headers.get("X-Test"),
                                      "body": self.rfile.read(n).decode()}).encode()
                    self.send_response(201)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for i in range(0, len(out), 7):
                        part = out[i:i + 7]
                        self.wfile.write(b"%x\\r\\n%s\\r\\n" % (len(part), part))
                    self.wfile.write(b"0\\r\\n\\r\\n")

                do_PUT = do_POST

            HTTPServer(("0.0.0.0", 8081), H).serve_forever()
            """))
        s.tool("run_command", command="python3 /srv/echo.py > /tmp/echo.log 2>&1 &")
        r = s.tool("http_request", port=8081, method="POST", path="/items?x=1",
                   headers={"X-Test": "yes"}, body='{"a": 1}', wait_seconds=30)
        self.assertFalse(r["isError"], r)
        self.assertEqual(r["structuredContent"]["status"], 201)
        self.assertEqual(json.loads(r["structuredContent"]["body"]),
                         {"method": "POST", "path": "/items?x=1", "type": "application/json",
                          "x": "yes", "body": '{"a": 1}'})
        r = s.tool("http_request", port=8081, method="PUT", body="plain words")
        self.assertEqual(json.loads(r["structuredContent"]["body"])["type"],
                         "text/plain; charset=utf-8")
        # A server that never answers, and one that stops halfway through its body.
        s.tool("write_file", path="/srv/stall.py", content=textwrap.dedent("""\
            import socket, sys, time
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", int(sys.argv[1])))
            s.listen()
            c = s.accept()[0]
            if sys.argv[2] == "half":
                c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 100\\r\\n\\r\\nhalf")
            time.sleep(120)
            """))
        s.tool("run_command", command="python3 /srv/stall.py 8082 mute > /dev/null 2>&1 & "
                                      "python3 /srv/stall.py 8083 half > /dev/null 2>&1 &")
        r = s.tool("http_request", port=8082, timeout_seconds=1, wait_seconds=30)
        self.assertTrue(r["isError"], r)
        self.assertIn("error (timeout)", s.text(r))
        self.assertIn("did not answer within", s.text(r))
        r = s.tool("http_request", port=8083, timeout_seconds=1, wait_seconds=30)
        self.assertFalse(r["isError"], r)
        st = r["structuredContent"]
        self.assertEqual((st["status"], st["body"], st["truncated"]), (200, "half", True))
        self.assertIn("did not come within", s.text(r))
        # Arguments that would split the request are refused.
        for bad in [{"path": "/a b"}, {"path": "x"}, {"headers": {"X": "a\r\nEvil: 1"}},
                    {"headers": {"Bad Name": "1"}}, {"method": "TRACE"}, {"port": 0}]:
            args = dict({"port": 8000}, **bad)
            r = s.tool("http_request", **args)
            self.assertTrue(r["isError"], bad)
            self.assertIn("invalid_argument", s.text(r), bad)
        self.assertEqual(s.close(), 0)

    def test_run_command_on_a_terminal(self):
        s = self.session()
        r = s.tool("run_command", command="test -t 0 && echo on a tty || echo no tty")
        self.assertEqual(r["structuredContent"]["stdout"], "no tty\n")
        r = s.tool("run_command", command="test -t 0 && echo on a tty || echo no tty", tty=True)
        self.assertFalse(r["isError"], r)
        self.assertEqual(r["structuredContent"]["stdout"], "on a tty\n")
        self.assertEqual(r["structuredContent"]["exit_code"], 0)
        self.assertIn("--- terminal ---", s.text(r))
        # Colours and carriage returns are gone; the input is typed at once (typeahead, which
        # the terminal echoes when it arrives), and the program reads it.
        r = s.tool("run_command", tty=True, input="world\n",
                   command="printf '\\033[1;31mred\\033[0m\\n'; printf 'step 1\\rstep 2\\n'; "
                           "printf 'name? '; read name; echo hello $name")
        out = r["structuredContent"]["stdout"]
        self.assertNotIn("\x1b", out)
        self.assertNotIn("step 1", out)
        self.assertIn("red\nstep 2\n", out)
        self.assertRegex(out, r"(?m)^world$")
        self.assertTrue(out.endswith("hello world\n"), out)
        # Input without a terminal is stdin.
        r = s.tool("run_command", command="read a; read b; echo $b $a", input="1\n2\n")
        self.assertEqual(r["structuredContent"]["stdout"], "2 1\n")
        # A program reading more gets end of input, not a hang.
        r = s.tool("run_command", command="cat; echo done", tty=True, input="typed\n",
                   timeout_seconds=20)
        self.assertFalse(r["structuredContent"]["timed_out"], r)
        self.assertTrue(r["structuredContent"]["stdout"].endswith("done\n"), r)
        self.assertEqual(s.close(), 0)

if __name__ == "__main__":
    unittest.main()
