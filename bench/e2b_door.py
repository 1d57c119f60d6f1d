#!/usr/bin/env python3
"""What the E2B door adds (docs/e2b.md): the same operations through SPACE's own API and through
spaced's E2B listener, alternated call by call on one spaced, each on a kept-alive connection.

Rows, over plain HTTP on loopback with a token (SPACE: Bearer; E2B: X-API-KEY, and the sandbox's
X-Access-Token on its sandbox side):
  - create: POST /v1/sandboxes against POST /v2/sandboxes (each deleted after, untimed);
  - get: GET /v1/sandboxes/{id} against GET /sandboxes/{id};
  - command `true`: POST /v1/sandboxes/{id}/exec to its exit event against envd's
    process.Process/Start (Connect, application/connect+json) to its end event;
  - create -> first output with each side's official client: SPACE's TypeScript SDK
    (Sandbox.create, commands.run("echo hi") until onStdout) against E2B's `e2b` package with
    E2B_API_URL/E2B_SANDBOX_URL/E2B_API_KEY pointing at the door (node, alternated in one process).
Reported: medians and p90 in ms, the difference of the medians (the door's cost; the issue's
target is at most 1 ms p50) and the ratio. The config has no warm pool ("pools": []), so creates
take the cold path on both doors.

  python3 bench/e2b_door.py --work /tmp/x --out bench/results/e2b-door-DATE.md [--n 100]
"""

import argparse
import datetime
import http.client
import json
import os
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
os.environ.setdefault("SPACE_BUILD_DIR", os.path.abspath(
    os.path.join(REPO, os.environ.get("BUILD_DIR", "build-release"))))
import bench as base  # noqa: E402
from harness import SPACE, Daemon, free_port, npm_ci  # noqa: E402


class Client:
    """A kept-alive HTTP connection; reconnects when the server closed it."""

    def __init__(self, port, headers):
        self.port, self.headers = port, headers
        self.conn = None

    def call(self, method, path, body=None, headers=None, raw_body=None):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                h = dict(self.headers)
                h.update(headers or {})
                data = raw_body
                if body is not None:
                    data = json.dumps(body).encode()
                    h.setdefault("Content-Type", "application/json")
                t0 = time.perf_counter()
                self.conn.request(method, path, body=data, headers=h)
                r = self.conn.getresponse()
                raw = r.read()
                dt = time.perf_counter() - t0
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, raw, dt
            except (http.client.HTTPException, OSError):
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def envelope(message):
    data = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(data)) + data


SDK_SCRIPT = r"""
import { Sandbox as Space } from "space-sandbox";
import { Sandbox as E2B } from "e2b";
const n = Number(process.argv[2]);
const out = { space: [], e2b: [] };
async function space() {
  const t0 = performance.now();
  const sb = await Space.create({ timeoutMs: 600_000 });
  let first = 0;
  await sb.commands.run("echo hi", { onStdout: () => { if (!first) first = performance.now(); } });
  out.space.push(first - t0);
  await sb.destroy();
}
async function e2b() {
  const t0 = performance.now();
  const sb = await E2B.create({ timeoutMs: 600_000 });
  let first = 0;
  await sb.commands.run("echo hi", { onStdout: () => { if (!first) first = performance.now(); } });
  out.e2b.push(first - t0);
  await sb.kill();
}
for (let i = 0; i < 3; i++) { await space(); await e2b(); }
out.space = []; out.e2b = [];
for (let i = 0; i < n; i++) {
  if (i % 2 === 0) { await space(); await e2b(); } else { await e2b(); await space(); }
}
console.log(JSON.stringify(out));
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=int(os.environ.get("BENCH_N", "100")))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    api_port, e2b_port = free_port(), free_port()
    d = Daemon(os.path.join(a.work, "spaced"), name="spaced-e2b", config={
        "api_listen": "127.0.0.1:%d" % api_port,
        "e2b": {"listen": "127.0.0.1:%d" % e2b_port},
        "pools": [],
    })
    os.makedirs(d.root, exist_ok=True)
    try:
        d.start()
        env = dict(os.environ, SPACE_SOCKET=d.socket)
        out = subprocess.run([SPACE, "token", "create", "--name", "bench", "--ttl", "2h", "--profile", "*"] +
                             ["--op=" + op for op in ("read", "create", "exec", "files",
                                                      "lifecycle")], env=env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit("space token create failed: " + out.stderr)
        out = out.stdout
        token = next(w for w in out.split() if w.startswith("spt_"))
        key = "e2b_" + token[4:16] + token[17:]
        space = Client(api_port, {"Authorization": "Bearer " + token})
        door = Client(e2b_port, {"X-API-KEY": key})
        rows = []

        def measure(name, fs, fe, n):
            s, e = [], []
            for _ in range(3):
                fs(), fe()
            for i in range(n):
                if i % 2 == 0:
                    s.append(fs())
                    e.append(fe())
                else:
                    e.append(fe())
                    s.append(fs())
            add_row(name, s, e)

        def add_row(name, s, e):
            ms, me = statistics.median(s) * 1000, statistics.median(e) * 1000
            rows.append((name, ms, pct(s, 90) * 1000, me, pct(e, 90) * 1000, me - ms, me / ms))
            print("%-34s SPACE %.2f ms, E2B door %.2f ms (%+.2f)" % (name, ms, me, me - ms))

        def space_create():
            st, raw, dt = space.call("POST", "/v1/sandboxes", {})
            assert st == 201, raw
            st, raw2, _ = space.call("DELETE", "/v1/sandboxes/%s?force=true" % json.loads(raw)["id"])
            assert st == 204, raw2
            return dt

        def e2b_create():
            st, raw, dt = door.call("POST", "/v2/sandboxes", {"templateID": "base"})
            assert st == 201, raw
            st, raw2, _ = door.call("DELETE", "/sandboxes/%s" % json.loads(raw)["sandboxID"])
            assert st == 204, raw2
            return dt

        measure("create (linux, no pool)", space_create, e2b_create, max(10, a.n // 2))

        st, raw, _ = door.call("POST", "/v2/sandboxes", {"templateID": "base", "timeout": 3600})
        assert st == 201, raw
        made = json.loads(raw)
        sid, access = made["sandboxID"], made["envdAccessToken"]
        envd = Client(e2b_port, {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983",
                                 "X-Access-Token": access})

        def space_get():
            st, raw, dt = space.call("GET", "/v1/sandboxes/" + sid)
            assert st == 200, raw
            return dt

        def e2b_get():
            st, raw, dt = door.call("GET", "/sandboxes/" + sid)
            assert st == 200, raw
            return dt

        def space_exec():
            st, raw, dt = space.call("POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
            assert st == 200 and b'"exit"' in raw, raw
            return dt

        start = envelope({"process": {"cmd": "true", "args": []}})

        def e2b_exec():
            st, raw, dt = envd.call("POST", "/process.Process/Start", raw_body=start,
                                    headers={"Content-Type": "application/connect+json"})
            assert st == 200 and b'"end"' in raw, raw
            return dt

        measure("get a sandbox", space_get, e2b_get, a.n)
        measure("command `true` to its exit", space_exec, e2b_exec, a.n)
        door.call("DELETE", "/sandboxes/" + sid)

        # The official clients, create -> first output.
        e2b_dir = os.path.join(REPO, "tests", "e2b")
        npm_ci(e2b_dir)
        app = os.path.join(a.work, "sdk-bench")
        os.makedirs(os.path.join(app, "node_modules"), exist_ok=True)
        for name, target in (("space-sandbox", os.path.join(REPO, "sdk", "typescript")),
                             ("e2b", os.path.join(e2b_dir, "node_modules", "e2b"))):
            link = os.path.join(app, "node_modules", name)
            if not os.path.lexists(link):
                os.symlink(os.path.abspath(target), link)
        with open(os.path.join(app, "main.mjs"), "w") as f:
            f.write(SDK_SCRIPT)
        nenv = dict(os.environ, SPACE_API="http://127.0.0.1:%d" % api_port, SPACE_TOKEN=token,
                    E2B_API_URL="http://127.0.0.1:%d" % e2b_port,
                    E2B_SANDBOX_URL="http://127.0.0.1:%d" % e2b_port, E2B_API_KEY=key,
                    NODE_PATH=os.path.join(e2b_dir, "node_modules"))
        nenv.pop("SPACE_SOCKET", None)
        p = subprocess.run(["node", "main.mjs", str(max(10, a.n // 4))], cwd=app, env=nenv,
                           capture_output=True, text=True, timeout=1800)
        if p.returncode != 0:
            raise SystemExit("the SDK row failed:\n" + p.stderr[-3000:])
        got = json.loads(p.stdout.strip().splitlines()[-1])
        add_row("create -> first output (SDKs)", [x / 1000 for x in got["space"]],
                [x / 1000 for x in got["e2b"]])

        lines = [
            "# The E2B door: what it adds — %s" % datetime.date.today().isoformat(),
            "",
            "Machine: %s, %d CPUs, kernel %s; build %s (%s). One spaced, SPACE's API and the "
            "E2B door alternated call by call, each on a kept-alive HTTP connection on loopback "
            "with a token; no warm pool. %d calls per row (creates: %d; SDK rows: %d, "
            "node, SPACE's TypeScript SDK against E2B's `e2b` %s)." % (
                base.cpu_model(), os.cpu_count(), os.uname().release, base.git_rev(),
                base.build_type(os.environ['SPACE_BUILD_DIR']), a.n, max(10, a.n // 2),
                max(10, a.n // 4), json.load(open(os.path.join(
                    e2b_dir, "node_modules", "e2b", "package.json")))["version"]),
            "",
            "| operation | SPACE API p50 (ms) | p90 | E2B door p50 (ms) | p90 | added p50 (ms) | "
            "ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, ms, s90, me, e90, add, ratio in rows:
            lines.append("| %s | %.2f | %.2f | %.2f | %.2f | %+.2f | %.2fx |" %
                         (name, ms, s90, me, e90, add, ratio))
        lines += ["", "Rerun: `BENCH_ONLY=e2b make bench` (or `python3 bench/e2b_door.py "
                  "--work DIR --out FILE --n N`)."]
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("wrote", a.out)
    finally:
        d.stop()


if __name__ == "__main__":
    main()
