"""The E2B door's control plane (src/e2b/control.cc, docs/e2b.md) driven by E2B's official JS SDK
(npm `e2b`, pinned in tests/e2b/package-lock.json), unchanged, with only E2B_API_URL,
E2B_SANDBOX_URL and E2B_API_KEY set: create with metadata, envs and a timeout; getInfo; list
with metadata and state filters and pages; setTimeout; pause and connect (which resumes);
autoPause (onTimeout "pause"); kill; metrics; snapshots (create, list, a sandbox from one,
delete) and fork; what the door does not serve answers a clear error, never a 500; a bad key is
an AuthenticationError; a token of another profile cannot see the sandbox. An E2B sandbox is a
SPACE sandbox: `space ls` and `space inspect` show it, `space exec` runs in it.
"""

import datetime
import http.client
import json
import os
import pathlib
import subprocess
import time

from e2b_support import E2B_DIR, E2bDoorTestCase
from harness import main

E2B_SDK = pathlib.Path(E2B_DIR, "node_modules", "e2b", "dist", "index.mjs").as_uri()

# What every script starts with: the SDK, the script's arguments (ARGS), and `thrown`, which
# settles a promise into {value} or {error: class name, message, notFound, auth}.
PRELUDE = """
import * as e2b from %s;
const { Sandbox, NotFoundError, SandboxNotFoundError, AuthenticationError, SandboxError } = e2b;
const ARGS = JSON.parse(process.argv[2] || "{}");
const thrown = async (p) => {
  try { return { value: await p }; }
  catch (e) {
    return { error: e.constructor.name, message: String(e.message),
             notFound: e instanceof NotFoundError, sandboxNotFound: e instanceof SandboxNotFoundError,
             auth: e instanceof AuthenticationError, statusCode: e.statusCode ?? null };
  }
};
const out = (v) => console.log(JSON.stringify(v));
""" % json.dumps(E2B_SDK)


class E2bControlTest(E2bDoorTestCase):
    # -- helpers ------------------------------------------------------------------------------

    def e2b_key(self, name, profile):
        """`space token create --e2b`: the token as an E2B API key."""
        rc, out, err = self.space("token", "create", "--name", name, "--profile", profile,
                                  "--op", "read,create,exec,files,lifecycle", "--ttl", "1h",
                                  "--e2b")
        self.assertEqual(rc, 0, err)
        key = out.strip()
        self.assertRegex(key, r"^e2b_[0-9a-f]{76}$")
        self.assertIn("E2B_API_KEY", err)
        return key

    def node(self, body, args=None, key=None, timeout=180):
        """Runs PRELUDE + `body` with node, only the E2B variables set (and PATH, HOME); returns
        the JSON of its last line of stdout."""
        script = os.path.join(self.tmp, "e2b-%d.mjs" % time.monotonic_ns())
        with open(script, "w") as f:
            f.write(PRELUDE + body)
        p = subprocess.run(["node", script, json.dumps(args or {})], env=self.e2b_env(key),
                           capture_output=True, text=True, timeout=timeout)
        self.assertEqual(p.returncode, 0, "node failed:\n%s\n%s" % (p.stdout, p.stderr))
        lines = p.stdout.strip().splitlines()
        self.assertTrue(lines, "no output; stderr:\n%s" % p.stderr)
        for line in [l for l in lines if l.startswith("{") or l.startswith("[")]:
            self._learn_ids(line)
        return json.loads(lines[-1])

    def raw(self, method, path, body=None, key=None):
        """One request to the door without the SDK: (status, headers, JSON body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=60)
        headers = {"X-API-KEY": key if key is not None else self.key}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            raw = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, (
                json.loads(raw) if raw else None)
        finally:
            conn.close()

    def kill_all(self, ids, key=None):
        for sid in ids:
            self.raw("DELETE", "/sandboxes/" + sid, key=key)

    # -- the lifecycle ------------------------------------------------------------------------

    def test_create_info_timeout_kill(self):
        r = self.node("""
const t0 = Date.now();
const sb = await Sandbox.create({ metadata: { owner: "it", "run id": "a=b&c d" },
                                  envs: { FOO: "bar baz" }, timeoutMs: 120000 });
const info = await Sandbox.getInfo(sb.sandboxId);
await sb.setTimeout(600000);
const later = await sb.getInfo();
out({ id: sb.sandboxId, t0, info, later, token: sb.envdAccessToken ?? null,
      running: (await Sandbox.list().nextItems()).map((s) => s.sandboxId) });
""")
        sid = r["id"]
        self.assertRegex(sid, r"^sb_")
        info = r["info"]
        self.assertEqual(info["metadata"], {"owner": "it", "run id": "a=b&c d"})
        self.assertEqual(info["state"], "running")
        self.assertEqual(info["sandboxId"], sid)
        self.assertEqual(info["templateId"], "host", "base is the host image by default")
        self.assertGreaterEqual(info["cpuCount"], 1)
        self.assertIsInstance(info["envdVersion"], str)
        self.assertEqual(info["lifecycle"], {"onTimeout": "kill", "autoResume": False})
        end = _ms(info["endAt"]) - r["t0"]
        self.assertTrue(100_000 < end < 140_000, "endAt %s ms after create" % end)
        end = _ms(r["later"]["endAt"]) - r["t0"]
        self.assertTrue(580_000 < end < 640_000, "after setTimeout: %s ms" % end)
        self.assertRegex(r["token"] or "", r"^[0-9a-f]{12}\.[0-9a-f]{64}$", "envdAccessToken")
        self.assertIn(sid, r["running"])

        # A SPACE sandbox like any other: `space ls`, `space inspect`, `space exec`.
        rc, out, err = self.space("ls")
        self.assertEqual(rc, 0, err)
        self.assertIn(sid, out)
        insp = self.inspect(sid)
        self.assertEqual(insp["profile"], "test")
        self.assertEqual(insp["env"].get("FOO"), "bar baz")
        rc, out, err = self.space("exec", sid, "--", "sh", "-c", "echo $FOO")
        self.assertEqual((rc, out), (0, "bar baz\n"), err)

        r = self.node("""
const killed = await Sandbox.kill(ARGS.id);
const again = await Sandbox.kill(ARGS.id);
const info = await thrown(Sandbox.getInfo(ARGS.id));
const timeout = await thrown(Sandbox.setTimeout(ARGS.id, 1000));
out({ killed, again, info, timeout });
""", {"id": sid})
        self.assertIs(r["killed"], True)
        self.assertIs(r["again"], False, "kill of a gone sandbox answers false (404)")
        self.assertEqual(r["info"]["error"], "SandboxNotFoundError", r)
        self.assertTrue(r["info"]["notFound"])
        self.assertTrue(r["timeout"]["sandboxNotFound"], r)
        self.assertNotIn(sid, self.list_ids())

    def test_list_filters_and_pages(self):
        r = self.node("""
const made = [];
for (let i = 0; i < 5; i++)
  made.push((await Sandbox.create({ metadata: { suite: "pages", n: String(i),
                                                parity: i % 2 ? "odd" : "even",
                                                odd: i === 3 ? "50% & a=b+c" : "plain" } })).sandboxId);
const pages = [];
const p = Sandbox.list({ query: { metadata: { suite: "pages" } }, limit: 2 });
while (p.hasNext) pages.push((await p.nextItems()).map((s) => s.sandboxId));
const odd = (await Sandbox.list({ query: { metadata: { suite: "pages", parity: "odd" } } })
  .nextItems()).map((s) => s.sandboxId);
const special = (await Sandbox.list({ query: { metadata: { odd: "50% & a=b+c" } } })
  .nextItems()).map((s) => s.sandboxId);
const none = await Sandbox.list({ query: { metadata: { suite: "nothing" } } }).nextItems();
await Sandbox.pause(made[1]);
const paused = (await Sandbox.list({ query: { state: ["paused"], metadata: { suite: "pages" } } })
  .nextItems()).map((s) => s.sandboxId);
const running = (await Sandbox.list({ query: { state: ["running"], metadata: { suite: "pages" } } })
  .nextItems()).map((s) => s.sandboxId);
const both = (await Sandbox.list({ query: { state: ["running", "paused"],
                                            metadata: { suite: "pages" } } })
  .nextItems()).map((s) => s.sandboxId);
out({ made, pages, odd, special, none, paused, running, both });
""")
        made = r["made"]
        try:
            self.assertEqual([len(p) for p in r["pages"]], [2, 2, 1], r["pages"])
            flat = [s for p in r["pages"] for s in p]
            self.assertEqual(sorted(flat), sorted(made), "every sandbox once")
            self.assertEqual(flat, list(reversed(made)), "newest first")
            self.assertEqual(sorted(r["odd"]), sorted([made[1], made[3]]))
            self.assertEqual(r["special"], [made[3]], "keys and values are URL-decoded")
            self.assertEqual(r["none"], [])
            self.assertEqual(r["paused"], [made[1]])
            self.assertEqual(sorted(r["running"]), sorted(set(made) - {made[1]}))
            self.assertEqual(sorted(r["both"]), sorted(made))
            # The raw header, and a token this door did not give.
            status, headers, body = self.raw("GET", "/v2/sandboxes?limit=1")
            self.assertEqual(status, 200)
            self.assertIn("x-next-token", headers)
            status, _, body = self.raw("GET", "/v2/sandboxes?nextToken=garbage")
            self.assertEqual(status, 400, body)
            self.assertEqual(body["code"], 400)
            self.assertIn("nextToken", body["message"])
            status, _, body = self.raw("GET", "/v2/sandboxes?limit=0")
            self.assertEqual(status, 400, body)
            status, _, body = self.raw("GET", "/v2/sandboxes?state=sleeping")
            self.assertEqual(status, 400, body)
        finally:
            self.kill_all(made)

    def test_pause_and_connect(self):
        r = self.node("""
const sb = await Sandbox.create({ timeoutMs: 60000 });
const first = await sb.pause();
const second = await Sandbox.pause(sb.sandboxId);
const paused = await sb.getInfo();
out({ id: sb.sandboxId, first, second, paused });
""")
        sid = r["id"]
        try:
            self.assertIs(r["first"], True)
            self.assertIs(r["second"], False, "pausing a paused sandbox answers false (409)")
            self.assertEqual(r["paused"]["state"], "paused")
            self.assertEqual(self.inspect(sid)["state"], "paused")
            r = self.node("""
const t0 = Date.now();
const sb = await Sandbox.connect(ARGS.id, { timeoutMs: 900000 });
const info = await sb.getInfo();
const again = await Sandbox.connect(ARGS.id);
const after = await Sandbox.getInfo(ARGS.id);
const missing = await thrown(Sandbox.connect("sb_000000000000"));
out({ t0, id: sb.sandboxId, token: sb.envdAccessToken, info, after, missing });
""", {"id": sid})
            self.assertEqual(r["id"], sid)
            self.assertEqual(r["info"]["state"], "running")
            self.assertEqual(self.inspect(sid)["state"], "running")
            end = _ms(r["info"]["endAt"]) - r["t0"]
            self.assertTrue(850_000 < end < 950_000, "connect's timeout: %s ms" % end)
            self.assertEqual(r["after"]["endAt"], r["info"]["endAt"],
                             "connecting to a running sandbox never shortens its life")
            self.assertRegex(r["token"], r"^[0-9a-f]{12}\.[0-9a-f]{64}$")
            self.assertTrue(r["missing"]["sandboxNotFound"], r["missing"])
            rc, out, err = self.space("exec", sid, "--", "echo", "thawed")
            self.assertEqual((rc, out), (0, "thawed\n"), err)
            # E2B's older resume route: 409 on a running sandbox.
            status, _, body = self.raw("POST", "/sandboxes/%s/resume" % sid, {"timeout": 60})
            self.assertEqual((status, body["code"]), (409, 409), body)
        finally:
            self.kill_all([sid])

    def test_auto_pause(self):
        r = self.node("""
const sb = await Sandbox.create({ timeoutMs: 2000, lifecycle: { onTimeout: "pause" } });
out({ id: sb.sandboxId, info: await sb.getInfo() });
""")
        sid = r["id"]
        try:
            self.assertEqual(r["info"]["lifecycle"]["onTimeout"], "pause")
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and self.inspect(sid)["state"] != "paused":
                time.sleep(0.3)
            self.assertEqual(self.inspect(sid)["state"], "paused",
                             "its lifetime paused it instead of destroying it")
            time.sleep(1.5)
            info = self.inspect(sid)
            self.assertEqual(info["state"], "paused", "and it stays paused")
            # ... for a week at most: a paused sandbox still holds memory and disk.
            left = datetime.datetime.fromisoformat(info["expires_at"].replace("Z", "+00:00")) - \
                datetime.datetime.now(datetime.timezone.utc)
            self.assertGreater(left.total_seconds(), 7 * 86400 - 120)
            self.assertLessEqual(left.total_seconds(), 7 * 86400)
            r = self.node("""
await Sandbox.connect(ARGS.id, { timeoutMs: 60000 });
out({ info: await Sandbox.getInfo(ARGS.id) });
""", {"id": sid})
            self.assertEqual(r["info"]["state"], "running")
        finally:
            self.kill_all([sid])

    def test_metrics(self):
        r = self.node("""
const sb = await Sandbox.create();
const metrics = await sb.getMetrics();
await sb.kill();
const gone = await thrown(Sandbox.getMetrics(sb.sandboxId));
out({ metrics, gone });
""")
        self.assertEqual(len(r["metrics"]), 1, r)
        m = r["metrics"][0]
        self.assertGreater(m["memUsed"], 0)
        self.assertGreaterEqual(m["memTotal"], m["memUsed"])
        self.assertGreaterEqual(m["cpuCount"], 1)
        self.assertTrue(0 <= m["cpuUsedPct"] <= 100)
        self.assertLess(abs(_ms(m["timestamp"]) / 1000 - time.time()), 60)
        self.assertTrue(r["gone"]["sandboxNotFound"], r["gone"])

    def test_snapshots_and_fork(self):
        r = self.node("""
const sb = await Sandbox.create({ metadata: { from: "snapshots" } });
out({ id: sb.sandboxId });
""")
        sid = r["id"]
        made = [sid]
        try:
            rc, _, err = self.space("exec", sid, "--", "sh", "-c", "echo kept > /root/kept.txt")
            self.assertEqual(rc, 0, err)
            r = self.node("""
const sb = await Sandbox.connect(ARGS.id);
const snap = await sb.createSnapshot({ name: "e2b-snap" });
const unnamed = await Sandbox.createSnapshot(ARGS.id);
const listed = [];
const p = Sandbox.listSnapshots({ sandboxId: ARGS.id, limit: 1 });
while (p.hasNext) listed.push(...(await p.nextItems()));
const byName = await Sandbox.listSnapshots({ name: "e2b-snap" }).nextItems();
const fromSnap = await Sandbox.create(snap.snapshotId, { timeoutMs: 120000 });
const fromInfo = await fromSnap.getInfo();
const forks = await Sandbox.fork(ARGS.id, { count: 2, timeoutMs: 120000 });
const deleted = await Sandbox.deleteSnapshot(unnamed.snapshotId);
const deletedAgain = await Sandbox.deleteSnapshot(unnamed.snapshotId);
const missing = await thrown(Sandbox.createSnapshot("sb_000000000000"));
out({ snap, unnamed, listed, byName, fromSnap: fromSnap.sandboxId, fromInfo,
      forks: forks.map((f) => f instanceof Error ? { error: f.message } : f.sandboxId),
      deleted, deletedAgain, missing });
""", {"id": sid})
            made.append(r["fromSnap"])
            made.extend(f for f in r["forks"] if isinstance(f, str))
            self.assertRegex(r["snap"]["snapshotId"], r"^snap_")
            self.assertEqual(r["snap"]["names"], ["e2b-snap"])
            self.assertEqual(r["unnamed"]["names"], [])
            self.assertEqual(sorted(s["snapshotId"] for s in r["listed"]),
                             sorted([r["snap"]["snapshotId"], r["unnamed"]["snapshotId"]]),
                             "both, one per page")
            self.assertEqual([s["snapshotId"] for s in r["byName"]], [r["snap"]["snapshotId"]])
            self.assertEqual(r["fromInfo"]["metadata"], {"from": "snapshots"},
                             "a sandbox from a snapshot keeps its metadata")
            self.assertEqual(len(r["forks"]), 2)
            for fork in r["forks"]:
                self.assertIsInstance(fork, str, r["forks"])
            for new in [r["fromSnap"]] + r["forks"]:
                self.assertNotEqual(new, sid)
                rc, out, err = self.space("exec", new, "--", "cat", "/root/kept.txt")
                self.assertEqual((rc, out), (0, "kept\n"), err)
            self.assertIs(r["deleted"], True)
            self.assertIs(r["deletedAgain"], False)
            self.assertTrue(r["missing"]["sandboxNotFound"], r["missing"])
            self.assertEqual(self.inspect(sid)["state"], "running", "forking left it running")
        finally:
            self.kill_all(made)

    # -- errors -------------------------------------------------------------------------------

    def test_what_is_not_served(self):
        r = self.node("""
const sb = await Sandbox.create({ timeoutMs: 60000 });
const network = await thrown(sb.updateNetwork({ allowOut: ["example.com"] }));
const volume = await thrown(e2b.Volume.list());
const withNetwork = await thrown(Sandbox.create({ network: { allowOut: ["example.com"] } }));
await sb.kill();
out({ network, volume, withNetwork });
""")
        self.assertEqual(r["network"]["statusCode"], 501, r)
        self.assertIn("profile", r["network"]["message"])
        self.assertIn("volumes", r["volume"]["message"])
        self.assertIn("501", r["volume"]["message"])
        self.assertEqual(r["withNetwork"]["statusCode"], 501, r)
        for method, path, hint in [("GET", "/teams", "space token create"),
                                   ("POST", "/v3/templates", "space image import"),
                                   ("GET", "/templates/base/builds/b1/status", "space image"),
                                   ("GET", "/secrets", "egress"),
                                   ("GET", "/sandboxes/sb_x/logs", "space audit sb_x"),
                                   ("DELETE", "/templates/base", "space image rm")]:
            status, _, body = self.raw(method, path)
            self.assertEqual((status, body["code"]), (501, 501), (path, body))
            self.assertIn(hint, body["message"], path)
        status, _, body = self.raw("GET", "/no/such/route")
        self.assertEqual((status, body["code"]), (404, 404), body)
        self.assertIn("no route for GET /no/such/route", body["message"])
        status, _, body = self.raw("POST", "/v2/sandboxes", {"templateID": 7})
        self.assertEqual(status, 400, body)
        status, _, body = self.raw("POST", "/v2/sandboxes", {"metadata": {"k": 1}})
        self.assertEqual(status, 400, body)
        self.assertIn("metadata", body["message"])
        status, _, body = self.raw("POST", "/v2/sandboxes", {"timeout": -1})
        self.assertEqual(status, 400, body)

    def test_bad_keys(self):
        for key in ["e2b_" + "0" * 76, "e2b_short", "spt_nothing"]:
            r = self.node("""
out({ list: await thrown(Sandbox.list().nextItems()),
      create: await thrown(Sandbox.create()) });
""", key=key)
            for what in ("list", "create"):
                self.assertEqual(r[what]["error"], "AuthenticationError", (key, r))
                self.assertTrue(r[what]["auth"])
        status, _, body = self.raw("GET", "/v2/sandboxes", key="")
        self.assertEqual(status, 401)
        self.assertIn("space token create", body["message"])
        self.assertNotIn(self.key, self.daemon.log_text())

    def test_other_profile_cannot_see(self):
        other = self.e2b_key("e2b-live", "live")
        r = self.node("""
const sb = await Sandbox.create({ metadata: { who: "test" } });
out({ id: sb.sandboxId });
""")
        sid = r["id"]
        try:
            r = self.node("""
const info = await thrown(Sandbox.getInfo(ARGS.id));
const killed = await Sandbox.kill(ARGS.id);
const pause = await thrown(Sandbox.pause(ARGS.id));
const listed = (await Sandbox.list().nextItems()).map((s) => s.sandboxId);
const mine = await Sandbox.create({ timeoutMs: 60000 });
out({ info, killed, pause, listed, mine: mine.sandboxId });
""", {"id": sid}, key=other)
            self.assertTrue(r["info"]["sandboxNotFound"], r["info"])
            self.assertIs(r["killed"], False)
            self.assertTrue(r["pause"]["sandboxNotFound"], r["pause"])
            self.assertNotIn(sid, r["listed"])
            self.assertEqual(self.inspect(sid)["state"], "running", "untouched")
            self.assertEqual(self.inspect(r["mine"])["profile"], "live",
                             "made in its token's profile")
            self.kill_all([r["mine"]], key=other)
        finally:
            self.kill_all([sid])


def _ms(rfc3339):
    """Milliseconds since the epoch of an ISO time as JSON.stringify writes a Date."""
    from datetime import datetime
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000


class E2bAutoPauseCrashTest(E2bDoorTestCase):
    """autoPause is two steps, the freeze and the record (failpoint pause.after_freeze): spaced
    killed between them comes back with the record saying running and the lifetime over;
    reconcile thaws the sandbox and the reaper pauses it again, kept for the week. Its own
    daemon: the test kills it."""

    def tearDown(self):
        pass

    def test_killed_between_freeze_and_record(self):
        import signal
        before = self.snapshot_host()
        before["daemon_fds"] = before["daemon_namespaces"] = None
        self.daemon.stop(signal.SIGTERM)
        self.daemon.extra_env = {"SPACE_FAILPOINTS": "pause.after_freeze"}
        self.daemon.start()
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=60)
        try:
            c.request("POST", "/v2/sandboxes",
                      body=json.dumps({"templateID": "base", "timeout": 1, "autoPause": True}),
                      headers={"X-API-KEY": self.key, "Content-Type": "application/json"})
            r = c.getresponse()
            made = json.loads(r.read())
            self.assertEqual(r.status, 201, made)
        finally:
            c.close()
        sid = made["sandboxID"]
        self.known_ids.add(sid)
        rc = self.daemon.proc.wait(60)  # the reaper reaches the failpoint when the second ends
        self.assertEqual(rc, -signal.SIGKILL, self.daemon.log_tail())
        self.assertIn("failpoint pause.after_freeze: killing", self.daemon.log_text())
        self.daemon.extra_env = {}
        self.daemon.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.inspect(sid)["state"] != "paused":
            time.sleep(0.3)
        info = self.inspect(sid)
        self.assertEqual(info["state"], "paused", "paused again after the restart")
        left = datetime.datetime.fromisoformat(info["expires_at"].replace("Z", "+00:00")) - \
            datetime.datetime.now(datetime.timezone.utc)
        self.assertGreater(left.total_seconds(), 7 * 86400 - 120, "kept for the week")
        self.space_ok("resume", sid)
        self.assertEqual(self.exec_ok(sid, "echo", "ok"), "ok\n")
        self.space_ok("rm", "--force", sid)
        self.assert_no_leaks(before, timeout=20)


if __name__ == "__main__":
    main()
