"""The code interpreter of spaced's E2B door (src/e2b/interpreter.cc, docs/e2b.md): E2B's
official `@e2b/code-interpreter` npm package (tests/e2b, pinned by its lock file) drives a
spaced whose "e2b" listener it reaches through nothing but E2B_API_URL, E2B_SANDBOX_URL and
E2B_API_KEY: state across runs, stdout and stderr callbacks, the last expression's text, a
matplotlib figure as PNG, errors with name, value and traceback, env vars of one run, contexts
(create, run in, list, restart, remove), a runCode timeout that interrupts an endless loop and
leaves the context alive, and kill. Plain HTTP checks the wire: the lines /execute streams, the
errors, and the bound on contexts per sandbox.
"""

import http.client
import json
import os
import subprocess

from e2b_support import E2B_DIR, E2bDoorTestCase
from harness import main


# Each script prints one JSON line (its last line of stdout): what the test asserts on. Run with
# `node --input-type=module` in tests/e2b, so that the packages resolve from its node_modules.
PRELUDE = """
import { Sandbox } from "@e2b/code-interpreter";
const out = {};
const thrown = async (p) => {
  try { await p; return null; } catch (e) {
    return { name: e.constructor.name, message: e.message };
  }
};
"""

BASICS = PRELUDE + """
const sbx = await Sandbox.create();
out.id = sbx.sandboxId;
try {
  await sbx.runCode("x = 1");
  const two = await sbx.runCode("x += 1\\nx");
  out.text = two.text;
  out.count = two.executionCount;
  const stdout = [], stderr = [];
  const logs = await sbx.runCode(
    "import sys\\nprint('hello', x)\\nprint('oops', file=sys.stderr)\\n" +
    "sys.stdout.write('a\\\\nb\\\\n')",
    { onStdout: (m) => stdout.push(m.line), onStderr: (m) => stderr.push(m.line) });
  out.stdout = stdout.join("");
  out.stderr = stderr.join("");
  out.logs = logs.logs;
  const err = await sbx.runCode("def f():\\n    return 1 / 0\\nf()");
  out.error = err.error ? { name: err.error.name, value: err.error.value,
                            traceback: err.error.traceback } : null;
  out.errorText = err.text ?? null;
  const plot = await sbx.runCode(
    "import matplotlib.pyplot as plt\\nplt.plot([1, 2, 3], [4, 1, 9])\\nplt.title('t')\\n" +
    "plt.show()");
  out.plot = plot.results.map((r) => ({ png: r.png ? r.png.slice(0, 12) : null,
                                        formats: r.formats(), main: r.isMainResult }));
  out.plotError = plot.error ? plot.error.value : null;
  const html = await sbx.runCode(
    "class H:\\n    def _repr_html_(self):\\n        return '<b>hi</b>'\\n" +
    "    def __repr__(self):\\n        return 'H()'\\nH()");
  out.html = html.results.map((r) => ({ text: r.text, html: r.html, main: r.isMainResult }));
  const envs = await sbx.runCode("import os\\nos.environ.get('E2B_T')", { envs: { E2B_T: "v1" } });
  out.env = envs.text;
  out.envAfter = (await sbx.runCode("os.environ.get('E2B_T')")).text;
  out.cwd = (await sbx.runCode("os.getcwd()")).text;
  out.results = [];
  await sbx.runCode("print('r')\\n42", { onResult: (r) => out.results.push(r.text) });
} finally {
  await sbx.kill();
}
out.afterKill = await thrown(sbx.runCode("1"));
out.running = await sbx.isRunning();
console.log(JSON.stringify(out));
process.exit(0);  // runCode leaves its request timer behind when it throws
"""

CONTEXTS = PRELUDE + """
const sbx = await Sandbox.create();
out.id = sbx.sandboxId;
out.traffic = !!sbx.trafficAccessToken;
try {
  await sbx.runCode("shared = 'default'");
  const ctx = await sbx.createCodeContext();
  out.ctx = ctx;
  await sbx.runCode("y = 5", { context: ctx });
  out.inCtx = (await sbx.runCode("y * 2", { context: ctx })).text;
  out.sharedInCtx = (await sbx.runCode("'shared' in globals()", { context: ctx })).text;
  out.yInDefault = (await sbx.runCode("'y' in globals()")).text;
  const tmp = await sbx.createCodeContext({ cwd: "/tmp", language: "python" });
  out.tmpCwd = (await sbx.runCode("import os\\nos.getcwd()", { context: tmp })).text;
  out.listed = (await sbx.listCodeContexts()).map((c) => c.id);
  await sbx.restartCodeContext(ctx);
  out.afterRestart = (await sbx.runCode("'y' in globals()", { context: ctx })).text;
  await sbx.removeCodeContext(ctx.id);
  out.listedAfterRemove = (await sbx.listCodeContexts()).map((c) => c.id);
  out.removedRun = await thrown(sbx.runCode("1", { context: ctx }));
  out.otherLanguage = await thrown(sbx.createCodeContext({ language: "r" }));
  out.runLanguage = await thrown(sbx.runCode("1", { language: "java" }));
  out.defaultStill = (await sbx.runCode("shared")).text;
  // A timeout in a context of its own interrupts its run; the context keeps its variables.
  await sbx.runCode("z = 'kept'", { context: tmp });
  out.ctxLoop = await thrown(sbx.runCode("import time\\nwhile True:\\n    time.sleep(0.01)",
                                         { context: tmp, timeoutMs: 1500 }));
  out.ctxAfter = (await sbx.runCode("z", { context: tmp, timeoutMs: 20000 })).text;
} finally {
  await sbx.kill();
}
console.log(JSON.stringify(out));
process.exit(0);  // runCode leaves its request timer behind when it throws
"""

TIMEOUT = PRELUDE + """
const sbx = await Sandbox.create();
out.id = sbx.sandboxId;
try {
  await sbx.runCode("x = 41");
  const t0 = Date.now();
  out.loop = await thrown(sbx.runCode("while True:\\n    pass", { timeoutMs: 2000 }));
  out.loopSeconds = (Date.now() - t0) / 1000;
  const t1 = Date.now();
  const after = await sbx.runCode("x + 1", { timeoutMs: 20000 });
  out.after = after.text;
  out.afterError = after.error ? after.error.name : null;
  out.afterSeconds = (Date.now() - t1) / 1000;
} finally {
  await sbx.kill();
}
console.log(JSON.stringify(out));
process.exit(0);  // runCode leaves its request timer behind when it throws
"""


class E2bInterpreterTest(E2bDoorTestCase):
    # -- helpers ------------------------------------------------------------------------------

    def node(self, script, timeout=180):
        p = subprocess.run(["node", "--input-type=module"], input=script, cwd=E2B_DIR,
                           env=self.e2b_env(),
                           capture_output=True, text=True, timeout=timeout)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        self._learn_ids(p.stdout, p.stderr)
        self.assertEqual(p.returncode, 0, "node failed:\n%s\n%s\nspaced:\n%s" %
                         (p.stdout[-3000:], p.stderr[-3000:], self.daemon.log_tail()))
        self.assertTrue(lines, "no JSON line from node:\n%s\n%s" % (p.stdout, p.stderr))
        return json.loads(lines[-1])

    def e2b(self, method, path, body=None, headers=None, timeout=60):
        """(status, parsed body or raw text) of a request to the E2B listener."""
        conn = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=timeout)
        try:
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers=h)
            r = conn.getresponse()
            data = r.read().decode()
            try:
                return r.status, json.loads(data)
            except ValueError:
                return r.status, data
        finally:
            conn.close()

    def raw_sandbox(self):
        """A sandbox made through the control plane: (id, envd access token)."""
        st, sb = self.e2b("POST", "/v2/sandboxes", {"templateID": "code-interpreter-v1"},
                          headers={"X-API-KEY": self.key})
        self.assertEqual(st, 201, sb)
        self.known_ids.add(sb["sandboxID"])
        self.addCleanup(self.e2b, "DELETE", "/sandboxes/" + sb["sandboxID"],
                        headers={"X-API-KEY": self.key})
        return sb["sandboxID"], sb["envdAccessToken"]

    def side(self, sid, token, method, path, body=None, timeout=60):
        return self.e2b(method, path, body, timeout=timeout,
                        headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999",
                                 "X-Access-Token": token})

    def context_processes(self, sid):
        """The sockets of the context processes (interpreter.py serve SOCKET) in sandbox sid."""
        procs = self.api_list("/v1/sandboxes/%s/processes" % sid, "processes")
        return sorted(p["argv"][3] for p in procs
                      if len(p.get("argv") or []) >= 4 and p["argv"][2] == "serve")

    # -- the official SDK ---------------------------------------------------------------------

    def test_run_code(self):
        r = self.node(BASICS)
        self.assertEqual(r["text"], "2", r)
        self.assertEqual(r["count"], 2, r)
        self.assertEqual(r["stdout"], "hello 2\na\nb\n", r)
        self.assertEqual(r["stderr"], "oops\n", r)
        # Whole lines, as E2B's kernel sends them, not each write of print().
        self.assertEqual("".join(r["logs"]["stdout"]), "hello 2\na\nb\n", r)
        self.assertTrue(all(t.endswith("\n") for t in r["logs"]["stdout"]), r)
        self.assertEqual(r["logs"]["stderr"], ["oops\n"], r)
        self.assertEqual(r["error"]["name"], "ZeroDivisionError", r)
        self.assertEqual(r["error"]["value"], "division by zero", r)
        self.assertIn('"<cell>", line 2, in f', r["error"]["traceback"], r)
        self.assertIn("ZeroDivisionError", r["error"]["traceback"], r)
        self.assertNotIn("interpreter.py", r["error"]["traceback"], r)
        self.assertIsNone(r["errorText"], r)
        self.assertIsNone(r["plotError"], r)
        self.assertEqual(len(r["plot"]), 1, r)
        self.assertEqual(r["plot"][0]["png"], "iVBORw0KGgoA", r)  # base64 of PNG's signature
        self.assertFalse(r["plot"][0]["main"], r)
        self.assertEqual(r["html"], [{"text": "H()", "html": "<b>hi</b>", "main": True}], r)
        self.assertEqual(r["env"], "'v1'", r)
        self.assertIsNone(r.get("envAfter"), r)  # None is no result: text undefined
        self.assertEqual(r["cwd"], "'/home/user'", r)
        self.assertEqual(r["results"], ["42"], r)
        self.assertIsNotNone(r["afterKill"], r)
        self.assertFalse(r["running"], r)
        info = self.api("GET", "/v1/sandboxes/" + r["id"])
        self.assertTrue(info.status == 404 or (info.json or {}).get("destroyed_at"), info)

    def require_traffic_token(self):
        """@e2b/code-interpreter sends no X-Access-Token on /contexts, only the traffic access
        token create answered (trafficAccessToken), which the door takes as the same secret."""
        st, sb = self.e2b("POST", "/v2/sandboxes", {"templateID": "code-interpreter-v1"},
                          headers={"X-API-KEY": self.key})
        self.assertEqual(st, 201, sb)
        self.e2b("DELETE", "/sandboxes/" + sb["sandboxID"], headers={"X-API-KEY": self.key})
        self.assertEqual(sb.get("trafficAccessToken"), sb["envdAccessToken"],
                         "create must answer trafficAccessToken (= envdAccessToken), or the SDK's "
                         "context calls carry no token: %r" % sb)

    def test_contexts(self):
        self.require_traffic_token()
        r = self.node(CONTEXTS)
        self.assertTrue(r["traffic"], r)
        self.assertEqual(r["ctx"]["language"], "python", r)
        self.assertEqual(r["inCtx"], "10", r)
        self.assertEqual(r["sharedInCtx"], "False", r)
        self.assertEqual(r["yInDefault"], "False", r)
        self.assertEqual(r["tmpCwd"], "'/tmp'", r)
        self.assertIn(r["ctx"]["id"], r["listed"], r)
        self.assertEqual(len(r["listed"]), 3, r)  # the default, ctx, tmp
        self.assertEqual(r["afterRestart"], "False", r)
        self.assertNotIn(r["ctx"]["id"], r["listedAfterRemove"], r)
        self.assertEqual(len(r["listedAfterRemove"]), 2, r)
        self.assertEqual(r["removedRun"]["name"], "NotFoundError", r)
        self.assertIn("400", r["otherLanguage"]["message"], r)
        self.assertIn("400", r["runLanguage"]["message"], r)
        self.assertEqual(r["defaultStill"], "'default'", r)
        self.assertEqual(r["ctxLoop"]["name"], "TimeoutError", r)
        self.assertEqual(r["ctxAfter"], "'kept'", r)

    def test_timeout_interrupts(self):
        r = self.node(TIMEOUT)
        self.assertEqual(r["loop"]["name"], "TimeoutError", r)
        self.assertLess(r["loopSeconds"], 10, r)
        self.assertEqual(r["after"], "42", r)
        self.assertIsNone(r["afterError"], r)
        self.assertLess(r["afterSeconds"], 10, r)  # the loop was interrupted, not queued behind

    # -- the wire -----------------------------------------------------------------------------

    def test_wire(self):
        sid, token = self.raw_sandbox()
        st, lines = self.side(sid, token, "POST", "/execute",
                              {"code": "print('hi')\n{'a': 1}", "context_id": None})
        self.assertEqual(st, 200, lines)
        events = [json.loads(l) for l in lines.splitlines()]
        types = [e["type"] for e in events]
        self.assertEqual(types, ["stdout", "result", "number_of_executions", "end_of_execution"],
                         events)
        self.assertEqual(events[0]["text"], "hi\n")
        self.assertIsInstance(events[0]["timestamp"], int)
        self.assertEqual(events[1]["text"], "{'a': 1}")
        self.assertTrue(events[1]["is_main_result"])
        self.assertEqual(events[2]["execution_count"], 1)

        st, health = self.side(sid, token, "GET", "/health")
        self.assertEqual((st, health), (200, "OK"))
        st, ctxs = self.side(sid, token, "GET", "/contexts")
        self.assertEqual(st, 200, ctxs)
        self.assertEqual(len(ctxs), 1, ctxs)
        self.assertEqual(ctxs[0]["cwd"], "/home/user")

        # Errors: E2B's shape, statuses the SDKs map.
        st, e = self.side(sid, token, "POST", "/execute", {"code": "1", "language": "js"})
        self.assertEqual(st, 400, e)
        self.assertIn("python", e["message"])
        st, e = self.side(sid, token, "POST", "/execute",
                          {"code": "1", "language": "python", "context_id": ctxs[0]["id"]})
        self.assertEqual(st, 400, e)
        st, e = self.side(sid, token, "POST", "/execute", {"code": "1", "context_id": "../x"})
        self.assertEqual(st, 404, e)
        st, e = self.side(sid, token, "DELETE", "/contexts/nope")
        self.assertEqual(st, 404, e)
        st, e = self.side(sid, token, "POST", "/contexts", {"cwd": "relative"})
        self.assertEqual(st, 400, e)
        st, e = self.side(sid, token, "GET", "/nothing")
        self.assertEqual(st, 404, e)
        st, e = self.e2b("POST", "/contexts", {}, headers={"E2b-Sandbox-Id": sid,
                                                         "E2b-Sandbox-Port": "49999"})
        self.assertEqual(st, 401, e)
        st, e = self.e2b("POST", "/contexts", {}, headers={
            "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999",
            "E2B-Traffic-Access-Token": "0" * 64})
        self.assertEqual(st, 401, e)
        st, c = self.e2b("POST", "/contexts", {}, headers={
            "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999",
            "E2B-Traffic-Access-Token": token})
        self.assertEqual(st, 200, c)

        # The bound: 16 contexts per sandbox, the default included.
        made = 2
        while made < 16:
            st, c = self.side(sid, token, "POST", "/contexts", {})
            self.assertEqual(st, 200, c)
            made += 1
        st, e = self.side(sid, token, "POST", "/contexts", {})
        self.assertEqual(st, 429, e)
        self.assertIn("16", e["message"])
        self.assertEqual(len(self.context_processes(sid)), 16)
        st, e = self.side(sid, token, "DELETE", "/contexts/" + c["id"])
        self.assertEqual(st, 204, e)
        self.assertNotIn(c["id"], "".join(self.context_processes(sid)))  # its process is gone
        st, c = self.side(sid, token, "POST", "/contexts", {})
        self.assertEqual(st, 200, c)

        # A dead context says so (its process killed behind spaced's back), and restarts.
        r, _ = self.api_exec(sid, ["sh", "-c", "kill -KILL $(cat /tmp/.space/e2b/ctx-%s.sock.pid)"
                                   % c["id"]])
        self.assertEqual(r.status, 200, r)
        st, lines = self.side(sid, token, "POST", "/execute", {"code": "1", "context_id": c["id"]})
        self.assertEqual(st, 200, lines)
        self.assertIn("ContextError", lines)
        self.assertIn("end_of_execution", lines)
        st, e = self.side(sid, token, "POST", "/contexts/%s/restart" % c["id"])
        self.assertEqual(st, 204, e)
        self.assertEqual([p for p in self.context_processes(sid) if c["id"] in p],
                         ["/tmp/.space/e2b/ctx-%s.sock" % c["id"]])
        st, e = self.side(sid, token, "POST", "/contexts/%s/restart" % c["id"])
        self.assertEqual(st, 204, e)  # a live one: its process is replaced, not doubled
        self.assertEqual(len([p for p in self.context_processes(sid) if c["id"] in p]), 1)
        st, lines = self.side(sid, token, "POST", "/execute",
                              {"code": "6*7", "context_id": c["id"]})
        self.assertIn('"text":"42"', lines.replace(" ", ""))

    def test_destroyed_sandbox(self):
        sid, token = self.raw_sandbox()
        st, _ = self.side(sid, token, "POST", "/execute", {"code": "1"})
        self.assertEqual(st, 200)
        st, _ = self.e2b("DELETE", "/sandboxes/" + sid, headers={"X-API-KEY": self.key})
        self.assertEqual(st, 204)
        st, e = self.side(sid, token, "POST", "/execute", {"code": "1"})
        self.assertEqual(st, 502, e)
        st, e = self.side(sid, token, "GET", "/contexts")
        self.assertEqual(st, 502, e)


if __name__ == "__main__":
    main()
