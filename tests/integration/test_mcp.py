"""`space mcp` against a real spaced: the official MCP TypeScript SDK client drives every tool
(tests/mcp/mcp.test.mjs, `npm ci` pinned by its package-lock.json), then raw JSON-RPC over the
pipes checks what the SDK hides: version negotiation, malformed and unknown messages, and that
the session's sandboxes go when it ends (stdin closed, SIGTERM) and stay with --keep.
"""

import json
import os
import signal
import subprocess
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

    def tool(self, name, **arguments):
        return self.request("tools/call", {"name": name, "arguments": arguments})["result"]

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


if __name__ == "__main__":
    unittest.main()
