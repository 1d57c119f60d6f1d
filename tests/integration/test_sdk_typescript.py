"""The TypeScript SDK (sdk/typescript) against a real spaced: builds it with the TypeScript
compiler from npm (`npm ci`, pinned by package-lock.json), runs its node:test suite
(sdk/typescript/test/) against this class's daemon, over the Unix socket and over the TCP
listener with tokens (test/*.test.mjs: ports and terminals too), and runs the README's quick
start and its ports and terminals example as pasted, and its install line on a fresh copy; and
stops the class's spaced (SIGTERM, SIGKILL) under a command attached through the SDK, which throws
DaemonRestartError.
"""

import json
import os
import pathlib
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import unittest

from cli_hints import spaced_cli_hints
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
    sandboxId: e.sandboxId, pid: e.pid, message: e.message, serverMessage: e.serverMessage }));
}
""" % json.dumps(pathlib.Path(SDK, "dist", "index.js").as_uri())


# In sandbox argv[2], at once and each silent for 75 s with no timeout given: commands.run, the
# same with onStdout, a background command's wait(), runCode in a context of its own. Prints one
# JSON line: how each ended.
SILENT_RUN = """
import { Client, Sandbox } from %s;
const client = new Client({ socketPath: process.env.SPACE_SOCKET });
const sb = await Sandbox.connect(process.argv[2], { client });
const settle = (p) => p.then((value) => ({ value }),
                             (e) => ({ error: `${e.constructor.name}: ${e.message}` }));
const seen = [];
const handle = await sb.commands.run("sleep 75; echo done", { background: true });
const context = await sb.createCodeContext();
const t0 = Date.now();
const [run, onStdout, wait, code] = await Promise.all([
  settle(sb.commands.run("sleep 75; echo done")),
  settle(sb.commands.run("sleep 75; echo done", { onStdout: (text) => seen.push(text) })),
  settle(handle.wait()),
  settle(sb.runCode("import time\\ntime.sleep(75)\\nprint('done')", { context })),
]);
console.log(JSON.stringify({ seconds: (Date.now() - t0) / 1000, run, onStdout, wait, code, seen }));
""" % json.dumps(pathlib.Path(SDK, "dist", "index.js").as_uri())

# What the SDK throws for malformed ids and broken connections (servers of this script's own on
# Unix sockets in directory argv[3]), and what a command that cannot start returns, in sandbox
# argv[2]. Prints one JSON line.
FAILURES = """
import net from "node:net";
import path from "node:path";
import { Client, CommandExitError, Sandbox, SpaceError } from %s;
const client = new Client({ socketPath: process.env.SPACE_SOCKET });
const thrown = async (p) => {
  try { await p; return { name: null }; }
  catch (e) {
    return { name: e.constructor.name, typed: e instanceof SpaceError, message: e.message };
  }
};
const out = { ids: {}, connections: {}, starts: [] };
for (const bad of ["hello world", "a/b", "..", "", "sb_\\u00e9", "sb_1\\r\\nHost: x", "%%zz"])
  out.ids[bad] = await thrown(Sandbox.connect(bad, { client }));
out.snapshot = await thrown(Sandbox.restore("no such/snapshot", { client }));
out.unknown = await thrown(Sandbox.connect("sb_000000000000", { client }));
const answers = {
  closes: (c) => c.destroy(),
  "not-http": (c) => c.end("SSH-2.0-x\\r\\n\\r\\n"),
  cut: (c) => c.end("HTTP/1.1 200 OK\\r\\nContent-Length: 99\\r\\n\\r\\n{"),
  "not-json": (c) => c.end("HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nhi"),
  silent: (c) => setTimeout(() => c.destroy(), 2000),
};
for (const [name, answer] of Object.entries(answers)) {
  const socketPath = path.join(process.argv[3], name + ".sock");
  const server = net.createServer((c) => c.once("data", () => answer(c)));
  await new Promise((r) => server.listen(socketPath, r));
  const failing = new Client({ socketPath, timeoutMs: 500 });
  out.connections[name] = await thrown(Sandbox.list({ client: failing }));
  server.close();
}
const sb = await Sandbox.connect(process.argv[2], { client });
for (const [cmd, opts] of [[["true"], { cwd: "/no/such/dir" }], [["true"], { user: "nosuchuser" }],
                           [["/no/such/program"], {}], ["no-such-command-here", {}]]) {
  const r = await sb.commands.run(cmd, opts);
  const checked = await thrown(sb.commands.run(cmd, { ...opts, check: true }));
  const detached = await (await sb.commands.run(cmd, { ...opts, background: true })).wait();
  out.starts.push({ exitCode: r.exitCode, error: r.error, stderr: r.stderr, checked,
                    detached: { exitCode: detached.exitCode, stderr: detached.stderr } });
}
console.log(JSON.stringify(out));
""" % json.dumps(pathlib.Path(SDK, "dist", "index.js").as_uri())

# Errors whose spaced message ends with a CLI hint, through the SDK: an unknown sandbox, an unknown
# secret, a command in a paused sandbox, a snapshot name taken, a destroyed sandbox; and
# cliHint()/sdkMessage() of each CLI command in the JSON list argv[2]. Prints one JSON line.
HINTS = """
import { Client, cliHint, Sandbox, sdkMessage } from %s;
const client = new Client({ socketPath: process.env.SPACE_SOCKET });
const thrown = async (p) => {
  try { await p; return { name: null }; }
  catch (e) { return { name: e.constructor.name, code: e.code, message: e.message, str: String(e),
                       serverMessage: e.serverMessage }; }
};
const out = { commands: {} };
out.unknown = await thrown(Sandbox.connect("sb_000000000000", { client }));
out.secret = await thrown(Sandbox.create({ client, secrets: ["no-such-secret"] }));
const sb = await Sandbox.create({ client, timeoutMs: 600_000 });
out.id = sb.id;
try {
  await sb.pause();
  out.paused = await thrown(sb.commands.run("true"));
  await sb.resume();
  await sb.snapshot(`hint-${sb.id}`);
  out.taken = await thrown(sb.snapshot(`hint-${sb.id}`));
} finally {
  await sb.destroy();
}
out.destroyed = await thrown(sb.commands.run("true"));
for (const command of JSON.parse(process.argv[2]))
  out.commands[command] = { hint: cliHint(command), message: sdkMessage(`x (\`${command}\`) y`) };
console.log(JSON.stringify(out));
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

    def run_node(self, script, *args, timeout=120):
        """Runs `script` (an ES module) with node, this class's spaced in $SPACE_SOCKET; the JSON
        line it printed last."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "script.mjs")
            with open(path, "w") as fh:
                fh.write(script)
            env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
            env.pop("SPACE_API", None)
            p = subprocess.run(["node", path] + [a.replace("{tmp}", d) for a in args], env=env,
                               capture_output=True, text=True, timeout=timeout)
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
        return json.loads(p.stdout.splitlines()[-1])

    def test_silent_commands_run_past_a_minute_without_a_timeout(self):
        # Nothing bounds a stream the caller gave no timeout: not the Client's timeoutMs (60 s),
        # nor spaced's idle timeout between requests (60 s). All at once, so 75 s in all.
        out = self.run_node(SILENT_RUN, self.create(), timeout=240)
        self.assertGreater(out["seconds"], 74)
        for name in ("run", "onStdout", "wait"):
            self.assertIn("value", out[name], "%s: %r" % (name, out[name]))
            r = out[name]["value"]
            self.assertEqual((r["exitCode"], r["stdout"]), (0, "done\n"), name)
        self.assertEqual("".join(out["seen"]), "done\n")
        self.assertIn("value", out["code"], out["code"])
        self.assertIsNone(out["code"]["value"]["error"])
        self.assertEqual(out["code"]["value"]["stdout"], ["done", "\n"])

    def test_failures_are_typed_errors_and_a_command_that_cannot_start_says_why(self):
        out = self.run_node(FAILURES, self.create(), "{tmp}")
        for bad, e in out["ids"].items():
            self.assertEqual((e["name"], e["typed"]), ("InvalidArgumentError", True), (bad, e))
            self.assertIn("sandbox ids look like sb_0123abcd", e["message"])
        self.assertEqual(out["snapshot"]["name"], "InvalidArgumentError", out["snapshot"])
        self.assertIn("snapshot id (snap_...) or name", out["snapshot"]["message"])
        self.assertEqual(out["unknown"]["name"], "NotFoundError", out["unknown"])
        expected = {"closes": ("UnavailableError", "closed the connection"),
                    "not-http": ("ProtocolError", "not spaced"),
                    "cut": ("UnavailableError", "broke"),
                    "not-json": ("ProtocolError", "not JSON"),
                    "silent": ("SpaceTimeoutError", "within 500 ms")}
        for name, (cls, words) in expected.items():
            e = out["connections"][name]
            self.assertEqual((e["name"], e["typed"]), (cls, True), (name, e))
            self.assertIn(words, e["message"], name)
        # A missing cwd (126), an unknown user (125), a missing program (127): the reason is in
        # result.error and, as a line, in stderr; a shell that started says it itself.
        for s, (code, named) in zip(out["starts"], ((126, "/no/such/dir"), (125, "nosuchuser"),
                                                    (127, "/no/such/program"))):
            self.assertEqual(s["exitCode"], code, s)
            self.assertIn(named, s["error"])
            self.assertEqual(s["stderr"], s["error"] + "\n")
            self.assertEqual(s["checked"]["name"], "CommandExitError", s)
            self.assertIn(s["error"], s["checked"]["message"])
            self.assertEqual(s["detached"], {"exitCode": code, "stderr": s["stderr"]})
        shell = out["starts"][3]
        self.assertEqual((shell["exitCode"], shell["error"]), (127, None), shell)
        self.assertIn("no-such-command-here: not found", shell["stderr"])

    def test_error_hints_name_sdk_methods_not_the_cli(self):
        # spaced's hints name its CLI (`space ls`); the SDK's name its calls, spaced's own text
        # is in serverMessage, the code is spaced's. And every CLI hint spaced's sources can send
        # has its phrasing in CLI_HINTS (sdk/typescript/src/errors.ts): a hint added to spaced
        # fails this until the SDK names its call, or marks it as the CLI on spaced's host.
        hints = spaced_cli_hints()
        for known in ("space ls", "space resume ID", "space snapshots ID", "space doctor"):
            self.assertIn(known, hints, "the scan of src/ found no `%s`: is it broken?" % known)
        out = self.run_node(HINTS, json.dumps(sorted(hints)))
        sid = out["id"]
        for key, (name, code, sdk, cli) in {
                "unknown": ("NotFoundError", "not_found", "`Sandbox.list()` lists sandboxes",
                            "`space ls` lists sandboxes"),
                "secret": ("InvalidArgumentError", "invalid_argument",
                           '`secrets: ["no-such-secret"]`: no such secret',
                           "--secret no-such-secret: no such secret"),
                "paused": ("ConflictError", "conflict", "is paused; `sandbox.resume()` first",
                           "`space resume %s` first" % sid),
                "destroyed": ("ConflictError", "conflict",
                              "create a new one with `Sandbox.create()`",
                              "create a new one with `space create`")}.items():
            e = out[key]
            self.assertEqual((e["name"], e["code"]), (name, code), (key, e))
            self.assertIn(sdk, e["message"], key)
            self.assertIn(sdk, e["str"], key)
            self.assertNotIn("`space ", e["message"], key)
            self.assertNotIn(sdk, e["serverMessage"], key)
            self.assertIn(cli, e["serverMessage"], key)
        for command, where in sorted(hints.items()):
            phrased = out["commands"][command]["hint"]
            self.assertIsNotNone(phrased, "`%s` (%s) has no entry in CLI_HINTS of "
                                 "sdk/typescript/src/errors.ts: name the SDK call that does it, "
                                 "or null for one only the CLI on spaced's host does"
                                 % (command, ", ".join(sorted(set(where)))))
            if "`space " in phrased:
                self.assertEqual(phrased, "`%s` on spaced's host" % command)
            else:
                self.assertRegex(phrased, r"^`(Sandbox|sandbox)\.[a-zA-Z.]+\(.*\)`$")
            self.assertEqual(out["commands"][command]["message"], "x (%s) y" % phrased)

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
        # Its hint names the SDK's option; spaced's own text names the CLI's.
        self.assertIn("`sandbox.commands.run(cmd, { background: true })`", e["message"])
        self.assertNotIn("`space ", e["message"])
        self.assertIn("`space exec --detach`", e["serverMessage"])

    def test_spaced_sigkill_under_an_attached_command_throws_daemon_restart_error(self):
        # No error event: the connection just closes.
        sid, e = self.run_attached_while_spaced_stops(signal.SIGKILL)
        self.assert_restart_error(sid, e, "connection_lost")
        self.assertIn("the connection to spaced closed before the command", e["message"])
        self.assertIn("may have restarted or crashed", e["message"])

    def test_readme_install_lines_work_on_a_fresh_checkout(self):
        # The README's install block, run as pasted at the root of a copy of the repository as a
        # fresh clone has it (no node_modules, no dist/), then the package used from there.
        with open(os.path.join(SDK, "README.md")) as fh:
            block = re.search(r"```sh\n(.*?)```", fh.read(), re.S).group(1)
        with tempfile.TemporaryDirectory() as root:
            shutil.copytree(SDK, os.path.join(root, "sdk", "typescript"),
                            ignore=shutil.ignore_patterns("node_modules", "dist"))
            interpreter = os.path.join("sdk", "python", "space_sandbox", "interpreter.py")
            os.makedirs(os.path.dirname(os.path.join(root, interpreter)))
            shutil.copy(os.path.join(REPO, interpreter), os.path.join(root, interpreter))
            env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
            env.pop("SPACE_API", None)
            run(["sh", "-ec", block], root, env=env)
            p = subprocess.run(
                ["node", "--input-type=module", "-e",
                 'import { Sandbox } from "space-sandbox";\n'
                 'console.log(Array.isArray(await Sandbox.list()));'],
                cwd=root, env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual((p.returncode, p.stdout), (0, "true\n"), p.stderr)
            self.assertTrue(os.path.isfile(os.path.join(
                root, "node_modules", "space-sandbox", "dist", "interpreter.py")))

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

    def test_example_first_day_runs(self):
        """examples/first_day.mjs: the first day's agent loop, as a user runs it."""
        script = os.path.join(REPO, "examples", "first_day.mjs")
        with tempfile.TemporaryDirectory() as app:
            os.makedirs(os.path.join(app, "node_modules"))
            os.symlink(SDK, os.path.join(app, "node_modules", "space-sandbox"))
            shutil.copy(script, os.path.join(app, "main.mjs"))
            env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
            env.pop("SPACE_API", None)
            p = subprocess.run(["node", "main.mjs", app], cwd=app, env=env, capture_output=True,
                               text=True, timeout=240)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.splitlines(), [
                "tests: 1", "tests after the patch: 0", "after rm -rf: false",
                "after rollback: 0", "plot: " + os.path.join(app, "plot.png"),
                "served: return a + b"])
            with open(os.path.join(app, "plot.png"), "rb") as fh:
                self.assertEqual(fh.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
