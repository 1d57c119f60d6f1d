"""The TypeScript SDK (sdk/typescript) against a real spaced: builds it with the TypeScript
compiler from npm (`npm ci`, pinned by package-lock.json), runs its node:test suite
(sdk/typescript/test/) against this class's daemon, over the Unix socket and over the TCP
listener with tokens (test/*.test.mjs: ports and terminals too), and runs the README's quick
start and its ports and terminals example as pasted; and stops the class's spaced
(SIGTERM, SIGKILL) under a command attached through the SDK, which throws DaemonRestartError.
"""

import json
import os
import pathlib
import queue
import re
import signal
import subprocess
import tempfile
import threading
import unittest

from harness import REPO, SpaceTestCase, npm_ci

SDK = os.path.join(REPO, "sdk", "typescript")

# Runs `echo start; sleep 30` attached in sandbox argv[2], prints STARTED once "start" arrived,
# then one JSON line: how commands.run ended.
ATTACHED_RUN = """
import { Client, DaemonRestartError, Sandbox, UnavailableError } from %s;
const client = new Client({ socketPath: process.env.SPACE_SOCKET });
const sb = await Sandbox.connect(process.argv[2], { client });
let out = "", told = false;
const onStdout = (text) => {
  out += text;
  if (!told && out.includes("start\\n")) { told = true; console.log("STARTED"); }
};
try {
  const r = await sb.commands.run("echo start; sleep 30", { onStdout });
  console.log(JSON.stringify({ result: r }));
} catch (e) {
  console.log(JSON.stringify({ name: e.constructor.name, restart: e instanceof DaemonRestartError,
    unavailable: e instanceof UnavailableError, code: e.code, reason: e.reason,
    sandboxId: e.sandboxId, pid: e.pid, message: e.message }));
}
""" % json.dumps(pathlib.Path(SDK, "dist", "index.js").as_uri())


def run(argv, cwd, env=None, timeout=600):
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(argv), p.returncode,
                                                          p.stdout[-4000:], p.stderr[-4000:]))
    return p


def build_sdk():
    """npm ci, then `npm run build` (tsc, and the code interpreter's script into dist/)."""
    npm_ci(SDK)
    run(["npm", "run", "--silent", "build"], SDK)


class TypeScriptSdkTest(SpaceTestCase):
    API_LISTEN = True

    @classmethod
    def prepare_class(cls):
        build_sdk()

    def token(self, ops):
        r = self.api("POST", "/v1/tokens", {"name": "ts-" + "-".join(ops), "profiles": ["test"],
                                            "ops": ops, "ttl": "1h"})
        self.assertEqual(r.status, 201, r.body)
        return r.json["token"]

    def test_node_test_suite(self):
        env = dict(os.environ, SPACE_SOCKET=self.daemon.socket,
                   SPACE_TEST_API="http://127.0.0.1:%d" % self.port,
                   SPACE_TEST_TOKEN=self.token(["read", "create", "exec", "files", "lifecycle"]),
                   SPACE_TEST_RO_TOKEN=self.token(["read"]))
        env.pop("SPACE_API", None)
        p = subprocess.run(["node", "--test", "--test-reporter=spec", "test/"], cwd=SDK, env=env,
                           capture_output=True, text=True, timeout=300)
        print(p.stdout[-6000:])
        self.assertEqual(p.returncode, 0, p.stdout[-6000:] + p.stderr[-3000:])
        self.assertRegex(p.stdout, r"pass [1-9]")
        self.assertRegex(p.stdout, r"fail 0")
        self.assertNotRegex(p.stdout, r"skipped [1-9]")

    # -- spaced restarts under an attached command ---------------------------------------------

    def run_attached_while_spaced_stops(self, sig):
        """Runs ATTACHED_RUN in a new sandbox, stops this class's spaced with `sig` once "start"
        arrived and starts it again (for the tests after this one); returns the sandbox and what
        commands.run threw. The sandbox outlived spaced: it answers after the restart."""
        sid = self.create()
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "attached.mjs")
            with open(script, "w") as fh:
                fh.write(ATTACHED_RUN)
            env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
            env.pop("SPACE_API", None)
            node = subprocess.Popen(["node", script, sid], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            lines = queue.Queue()

            def read_lines():
                for line in node.stdout:
                    lines.put(line)

            reader = threading.Thread(target=read_lines, daemon=True)
            reader.start()
            try:
                try:
                    first = lines.get(timeout=60)
                except queue.Empty:
                    first = None
                self.assertEqual(first, "STARTED\n", "node printed %r" % first)
                rc = self.daemon.stop(sig)
                self.assertIn(rc, (-signal.SIGKILL,) if sig == signal.SIGKILL
                              else (0, -signal.SIGTERM), self.daemon.log_tail())
                self.assertEqual(node.wait(timeout=30), 0, node.stderr.read())
                reader.join(10)
            finally:
                if node.poll() is None:
                    node.kill()
                    node.wait()
                if not self.daemon.alive():
                    self.daemon.start()
        got = []
        while not lines.empty():
            got.append(lines.get())
        self.assertEqual(len(got), 1, got)
        outcome = json.loads(got[0])
        self.assertNotIn("result", outcome, "the command ended normally")
        self.assertEqual(self.space_ok("exec", sid, "--", "echo", "back"), "back\n")
        return sid, outcome

    def assert_restart_error(self, sid, e, reason):
        self.assertEqual((e["name"], e["restart"], e["unavailable"]),
                         ("DaemonRestartError", True, True), e)
        self.assertEqual((e["code"], e["reason"], e["sandboxId"]), ("unavailable", reason, sid), e)
        self.assertGreater(e["pid"] or 0, 0, e)
        self.assertIn('reconnect with Sandbox.connect("%s")' % sid, e["message"])
        self.assertIn("commands.list()", e["message"])

    def test_spaced_sigterm_under_an_attached_command_throws_daemon_restart_error(self):
        # spaced's error event carries "reason": "shutdown" (src/api/exec.cc).
        sid, e = self.run_attached_while_spaced_stops(signal.SIGTERM)
        self.assert_restart_error(sid, e, "shutdown")
        self.assertIn("spaced is shutting down", e["message"])

    def test_spaced_sigkill_under_an_attached_command_throws_daemon_restart_error(self):
        # No error event: the connection just closes.
        sid, e = self.run_attached_while_spaced_stops(signal.SIGKILL)
        self.assert_restart_error(sid, e, "connection_lost")
        self.assertIn("the connection to spaced closed before the command", e["message"])
        self.assertIn("may have restarted or crashed", e["message"])

    def test_readme_quick_start_runs_as_pasted(self):
        with open(os.path.join(SDK, "README.md")) as fh:
            block = re.search(r"```js\n(.*?)```", fh.read(), re.S).group(1)
        with tempfile.TemporaryDirectory() as app:
            # An app that depends on the package, as `npm install ./sdk/typescript` leaves it.
            os.makedirs(os.path.join(app, "node_modules"))
            os.symlink(SDK, os.path.join(app, "node_modules", "space-sandbox"))
            with open(os.path.join(app, "main.mjs"), "w") as fh:
                fh.write(block)
            env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
            env.pop("SPACE_API", None)
            p = subprocess.run(["node", "main.mjs"], cwd=app, env=env, capture_output=True,
                               text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["42", "hello.py"])

    def test_readme_ports_and_terminals_run_as_pasted(self):
        with open(os.path.join(SDK, "README.md")) as fh:
            text = fh.read()
        section = text[text.index("## Ports and terminals"):]
        block = re.search(r"```js\n(.*?)```", section, re.S).group(1)
        with tempfile.TemporaryDirectory() as app:
            os.makedirs(os.path.join(app, "node_modules"))
            os.symlink(SDK, os.path.join(app, "node_modules", "space-sandbox"))
            with open(os.path.join(app, "main.mjs"), "w") as fh:
                fh.write(block)
            env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
            env.pop("SPACE_API", None)
            p = subprocess.run(["node", "main.mjs"], cwd=app, env=env, capture_output=True,
                               text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["hello from the sandbox", "3 true"])


if __name__ == "__main__":
    unittest.main()
