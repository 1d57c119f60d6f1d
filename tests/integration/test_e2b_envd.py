"""The E2B door's envd (port 49983: process.Process, filesystem.Filesystem, REST /files, /envs)
driven by E2B's OFFICIAL JS SDK (npm `e2b`, pinned in tests/e2b by its lock file), with only
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY pointing it at spaced (docs/e2b.md); and the
protocol's error paths (malformed Connect envelopes, bad JSON, unknown RPCs, a wrong access
token) from raw HTTP."""
import http.client
import json
import os
import signal
import struct
import subprocess

from e2b_support import E2B_DIR, E2bDoorTestCase
from harness import SPACE, main


PRELUDE = r"""
import { Sandbox, CommandExitError } from "e2b";
const out = {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const sbx = await Sandbox.create({ timeoutMs: 600000 });
try {
%s
} finally {
  if (!out.killed) await sbx.kill();
}
console.log("RESULT " + JSON.stringify(out));
"""


class E2bEnvdBase(E2bDoorTestCase):
    """spaced with the E2B door, a key in E2B's form, and the helpers."""

    @classmethod
    def space_cls(cls, *args):
        env = dict(os.environ, SPACE_SOCKET=cls.daemon.socket)
        p = subprocess.run([SPACE] + list(args), env=env, capture_output=True, text=True,
                           timeout=60)
        return p.returncode, p.stdout, p.stderr

    # -- helpers ------------------------------------------------------------------------------

    def node(self, body, timeout=180):
        """Runs `body` inside PRELUDE (a sandbox `sbx` made through the SDK, results in `out`)
        with only E2B's three variables set; returns `out`."""
        p = subprocess.run(["node", "--input-type=module", "-e", PRELUDE % body], cwd=E2B_DIR,
                           env=self.e2b_env(), capture_output=True, text=True, timeout=timeout)
        lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode != 0 or not lines:
            self.fail("node failed (rc %s):\nstdout: %s\nstderr: %s\nspaced: %s" %
                      (p.returncode, p.stdout[-3000:], p.stderr[-3000:],
                       self.daemon.log_tail(20)))
        return json.loads(lines[-1][len("RESULT "):])

    def raw(self, method, path, body=b"", headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=30)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
        finally:
            c.close()

    def raw_sandbox(self):
        """A sandbox made through the control plane: (id, envd access token)."""
        st, _, body = self.raw("POST", "/sandboxes", json.dumps({"templateID": "base"}),
                               {"X-API-KEY": self.key, "Content-Type": "application/json"})
        self.assertEqual(st, 201, body)
        j = json.loads(body)
        self.addCleanup(self.raw, "DELETE", "/sandboxes/" + j["sandboxID"], b"",
                        {"X-API-KEY": self.key})
        return j["sandboxID"], j["envdAccessToken"]


class E2bEnvdTest(E2bEnvdBase):
    """Every envd feature through E2B's SDK, and the protocol's error paths."""

    # -- commands -----------------------------------------------------------------------------

    def test_run_output_exit_code_envs_cwd(self):
        out = self.node(r"""
          const r = await sbx.commands.run("echo hi; echo err >&2");
          out.stdout = r.stdout; out.stderr = r.stderr; out.code = r.exitCode;
          try { await sbx.commands.run("echo partial; exit 3"); out.threw = false; }
          catch (e) { out.threw = e instanceof CommandExitError; out.failCode = e.exitCode;
                      out.failStdout = e.stdout; }
          out.env = (await sbx.commands.run("echo $FOO", { envs: { FOO: "bar baz" } })).stdout;
          out.cwd = (await sbx.commands.run("pwd", { cwd: "/tmp" })).stdout;
          out.home = (await sbx.commands.run("pwd; echo $HOME")).stdout;
          out.rootHome = (await sbx.commands.run("echo $HOME", { user: "root" })).stdout;
          out.e2b = (await sbx.commands.run("echo $E2B_SANDBOX $E2B_SANDBOX_ID")).stdout;
          out.id = sbx.sandboxId;
        """)
        self.assertEqual(out["e2b"], "true %s\n" % out["id"], "E2B's variables inside")
        self.assertEqual(out["stdout"], "hi\n")
        self.assertEqual(out["stderr"], "err\n")
        self.assertEqual(out["code"], 0)
        self.assertTrue(out["threw"], out)
        self.assertEqual(out["failCode"], 3)
        self.assertEqual(out["failStdout"], "partial\n")
        self.assertEqual(out["env"], "bar baz\n")
        self.assertEqual(out["cwd"], "/tmp\n")
        self.assertEqual(out["home"], "/home/user\n/home/user\n")
        self.assertEqual(out["rootHome"], "/root\n")

    def test_on_stdout_streams(self):
        out = self.node(r"""
          const chunks = []; const times = [];
          const t0 = Date.now();
          const r = await sbx.commands.run(
            "for i in 1 2 3; do echo line$i; sleep 0.4; done; echo oops >&2",
            { onStdout: (d) => { chunks.push(d); times.push(Date.now() - t0); },
              onStderr: (d) => { out.err = (out.err || "") + d; } });
          out.chunks = chunks; out.times = times; out.stdout = r.stdout;
        """)
        self.assertEqual("".join(out["chunks"]), "line1\nline2\nline3\n")
        self.assertEqual(out["stdout"], "line1\nline2\nline3\n")
        self.assertEqual(out["err"], "oops\n")
        self.assertGreaterEqual(len(out["chunks"]), 2, "output arrives as it is written")
        self.assertGreater(out["times"][-1] - out["times"][0], 300)

    def test_background_list_connect_kill(self):
        out = self.node(r"""
          const h = await sbx.commands.run("echo started; sleep 120", { background: true });
          out.pid = h.pid;
          await sleep(500);
          out.listed = (await sbx.commands.list()).map((p) => ({ pid: p.pid, cmd: p.cmd,
                                                                 args: p.args }));
          await h.disconnect();
          await sleep(300);
          out.stillListed = (await sbx.commands.list()).some((p) => p.pid === h.pid);
          const h2 = await sbx.commands.connect(h.pid);
          out.connectedPid = h2.pid;
          out.killed1 = await sbx.commands.kill(h.pid);
          try { await h2.wait(); out.waitThrew = false; }
          catch (e) { out.waitThrew = true; out.waitName = e.name; out.waitCode = e.exitCode; }
          await sleep(300);
          out.afterList = (await sbx.commands.list()).some((p) => p.pid === h.pid);
          out.killed2 = await sbx.commands.kill(h.pid);
          try { await sbx.commands.connect(999999); out.connectMissing = "ok"; }
          catch (e) { out.connectMissing = e.name; }
        """)
        self.assertTrue(any(p["pid"] == out["pid"] and p["cmd"] == "/bin/bash"
                            for p in out["listed"]), out)
        self.assertTrue(out["stillListed"], "a disconnected command runs on")
        self.assertEqual(out["connectedPid"], out["pid"])
        self.assertTrue(out["killed1"])
        self.assertTrue(out["waitThrew"])
        self.assertEqual(out["waitName"], "CommandExitError")
        self.assertFalse(out["afterList"])
        self.assertFalse(out["killed2"], "killing a gone pid answers false (not_found)")
        self.assertEqual(out["connectMissing"], "NotFoundError")

    def test_stdin(self):
        out = self.node(r"""
          const h = await sbx.commands.run("cat; echo EOF", { background: true, stdin: true });
          await sbx.commands.sendStdin(h.pid, "hello\n");
          await sbx.commands.sendStdin(h.pid, new Uint8Array([119, 111, 114, 108, 100, 10]));
          await sbx.commands.closeStdin(h.pid);
          const r = await h.wait();
          out.stdout = r.stdout;
          // A command started without stdin reads EOF at once.
          out.noStdin = (await sbx.commands.run("cat; echo done")).stdout;
        """)
        self.assertEqual(out["stdout"], "hello\nworld\nEOF\n")
        self.assertEqual(out["noStdin"], "done\n")

    def test_silent_command_of_70_seconds(self):
        out = self.node(r"""
          const t0 = Date.now();
          const r = await sbx.commands.run("sleep 70; echo done", { timeoutMs: 0 });
          out.stdout = r.stdout; out.secs = (Date.now() - t0) / 1000;
        """, timeout=200)
        self.assertEqual(out["stdout"], "done\n")
        self.assertGreaterEqual(out["secs"], 69)

    def test_kill_sandbox_during_command(self):
        out = self.node(r"""
          const p = sbx.commands.run("sleep 60").then(() => null, (e) => e);
          await sleep(1500);
          await Sandbox.kill(sbx.sandboxId);
          out.killed = true;
          const e = await p;
          out.result = e ? e.name : "ok";
          out.message = e ? String(e.message) : "";
        """)
        # E2B's SDK reports a sandbox gone mid-command as a TimeoutError (Connect unavailable).
        self.assertEqual(out["result"], "TimeoutError", out)
        self.assertIn("went away", out["message"])

    def test_pty(self):
        out = self.node(r"""
          let data = "";
          const dec = new TextDecoder();
          const h = await sbx.pty.create({ cols: 80, rows: 24,
                                           onData: (d) => { data += dec.decode(d); } });
          out.pid = h.pid;
          await sbx.pty.sendInput(h.pid, new TextEncoder().encode("stty size\n"));
          for (let i = 0; i < 50 && !data.includes("24 80"); i++) await sleep(100);
          out.first = data.includes("24 80");
          await sbx.pty.resize(h.pid, { cols: 100, rows: 30 });
          await sbx.pty.sendInput(h.pid, new TextEncoder().encode("stty size; tty\n"));
          for (let i = 0; i < 50 && !data.includes("30 100"); i++) await sleep(100);
          out.resized = data.includes("30 100");
          out.tty = /\/dev\/pts\//.test(data);
          out.listed = (await sbx.commands.list()).some((p) => p.pid === h.pid);
          out.killed = await sbx.pty.kill(h.pid);
          try { await h.wait(); out.wait = "ok"; } catch (e) { out.wait = e.name; }
          out.killed = false;
        """)
        self.assertTrue(out["first"], out)
        self.assertTrue(out["resized"], out)
        self.assertTrue(out["tty"], out)
        self.assertTrue(out["listed"])
        self.assertEqual(out["wait"], "CommandExitError")

    # -- files --------------------------------------------------------------------------------

    def test_files_write_read(self):
        out = self.node(r"""
          const info = await sbx.files.write("/tmp/a.txt", "hello e2b");
          out.info = info;
          out.text = await sbx.files.read("/tmp/a.txt");
          await sbx.files.write("bytes.bin", new Uint8Array([0, 1, 2, 255, 10]));
          out.bytes = Array.from(await sbx.files.read("bytes.bin", { format: "bytes" }));
          out.relPath = (await sbx.commands.run("ls /home/user/bytes.bin")).stdout;
          const big = "0123456789abcdef".repeat(40000);
          const gi = await sbx.files.write("/tmp/g/big.txt", big, { gzip: true });
          out.gzipInfo = gi;
          out.gzipBack = (await sbx.files.read("/tmp/g/big.txt", { gzip: true })) === big;
          out.plainBack = (await sbx.files.read("/tmp/g/big.txt")) === big;
          out.octet = await sbx.files.write("/tmp/o.txt", "octet", { useOctetStream: true });
          out.octetBack = await sbx.files.read("/tmp/o.txt");
          out.empty = await sbx.files.write("/tmp/empty", "");
          out.emptyBack = await sbx.files.read("/tmp/empty");
          try { await sbx.files.read("/tmp/nope"); out.missing = "ok"; }
          catch (e) { out.missing = e.name; }
          try { await sbx.files.read("/tmp"); out.dir = "ok"; }
          catch (e) { out.dir = e.name; }
        """)
        self.assertEqual((out["info"]["name"], out["info"]["type"]), ("a.txt", "file"))
        self.assertEqual(out["info"]["path"], "/tmp/a.txt")
        self.assertEqual(out["text"], "hello e2b")
        self.assertEqual(out["bytes"], [0, 1, 2, 255, 10])
        self.assertEqual(out["relPath"], "/home/user/bytes.bin\n")
        self.assertEqual(out["gzipInfo"]["path"], "/tmp/g/big.txt")
        self.assertTrue(out["gzipBack"])
        self.assertTrue(out["plainBack"])
        self.assertEqual(out["octet"]["path"], "/tmp/o.txt")
        self.assertEqual(out["octetBack"], "octet")
        self.assertEqual(out["emptyBack"], "")
        self.assertEqual(out["missing"], "FileNotFoundError")
        self.assertEqual(out["dir"], "InvalidArgumentError")

    def test_files_write_many(self):
        out = self.node(r"""
          const r = await sbx.files.write([
            { path: "/tmp/m/a.txt", data: "A" },
            { path: "/tmp/m/sub/b.txt", data: "BB" },
            { path: "rel/c.txt", data: new Uint8Array([67]) },
          ]);
          out.paths = r.map((e) => e.path);
          out.back = await Promise.all(["/tmp/m/a.txt", "/tmp/m/sub/b.txt",
                                        "/home/user/rel/c.txt"].map((p) => sbx.files.read(p)));
        """)
        self.assertEqual(out["paths"], ["/tmp/m/a.txt", "/tmp/m/sub/b.txt",
                                        "/home/user/rel/c.txt"])
        self.assertEqual(out["back"], ["A", "BB", "C"])

    def test_filesystem_rpcs(self):
        out = self.node(r"""
          await sbx.files.write("/tmp/t/one.txt", "1");
          await sbx.files.write("/tmp/t/d/two.txt", "22");
          await sbx.files.write("/tmp/t/d/e/three.txt", "333");
          const names = (l) => l.map((e) => e.path).sort();
          out.depth1 = names(await sbx.files.list("/tmp/t"));
          out.depth2 = names(await sbx.files.list("/tmp/t", { depth: 2 }));
          out.depth9 = names(await sbx.files.list("/tmp/t", { depth: 9 }));
          out.exists = [await sbx.files.exists("/tmp/t/one.txt"),
                        await sbx.files.exists("/tmp/t/none")];
          const i = await sbx.files.getInfo("/tmp/t/d/two.txt");
          out.info = { name: i.name, type: i.type, path: i.path, size: i.size, mode: i.mode,
                       permissions: i.permissions,
                       mtime: i.modifiedTime instanceof Date && !isNaN(i.modifiedTime) };
          out.dirType = (await sbx.files.getInfo("/tmp/t/d")).type;
          out.made = [await sbx.files.makeDir("/tmp/t/new/deep"),
                      await sbx.files.makeDir("/tmp/t/new/deep")];
          out.madeType = (await sbx.files.getInfo("/tmp/t/new/deep")).type;
          const moved = await sbx.files.rename("/tmp/t/one.txt", "/tmp/t/moved/uno.txt");
          out.moved = moved.path;
          out.movedBack = await sbx.files.read("/tmp/t/moved/uno.txt");
          out.oldGone = !(await sbx.files.exists("/tmp/t/one.txt"));
          await sbx.files.remove("/tmp/t/d");
          out.removed = !(await sbx.files.exists("/tmp/t/d"));
          try { await sbx.files.remove("/tmp/t/d"); out.removeMissing = "ok"; }
          catch (e) { out.removeMissing = e.name; }
          try { await sbx.files.list("/tmp/t/moved/uno.txt"); out.listFile = "ok"; }
          catch (e) { out.listFile = e.name; }
          try { await sbx.files.getInfo("/nope/x"); out.infoMissing = "ok"; }
          catch (e) { out.infoMissing = e.name; }
        """)
        self.assertEqual(out["depth1"], ["/tmp/t/d", "/tmp/t/one.txt"])
        self.assertEqual(out["depth2"], ["/tmp/t/d", "/tmp/t/d/e", "/tmp/t/d/two.txt",
                                         "/tmp/t/one.txt"])
        self.assertEqual(out["depth9"], ["/tmp/t/d", "/tmp/t/d/e", "/tmp/t/d/e/three.txt",
                                         "/tmp/t/d/two.txt", "/tmp/t/one.txt"])
        self.assertEqual(out["exists"], [True, False])
        self.assertEqual(out["info"], {"name": "two.txt", "type": "file",
                                       "path": "/tmp/t/d/two.txt", "size": 2, "mode": 0o644,
                                       "permissions": "-rw-r--r--", "mtime": True})
        self.assertEqual(out["dirType"], "dir")
        self.assertEqual(out["made"], [True, False])
        self.assertEqual(out["madeType"], "dir")
        self.assertEqual(out["moved"], "/tmp/t/moved/uno.txt")
        self.assertEqual(out["movedBack"], "1")
        self.assertTrue(out["oldGone"])
        self.assertTrue(out["removed"])
        self.assertEqual(out["removeMissing"], "FileNotFoundError")
        self.assertEqual(out["listFile"], "InvalidArgumentError")
        self.assertEqual(out["infoMissing"], "FileNotFoundError")

    def test_watch_dir(self):
        out = self.node(r"""
          await sbx.files.makeDir("/tmp/w");
          await sbx.files.write("/tmp/w/old.txt", "x");
          const events = [];
          const h = await sbx.files.watchDir("/tmp/w", (e) => events.push(e));
          await sbx.files.write("/tmp/w/new.txt", "hello");
          await sleep(1500);
          await sbx.files.write("/tmp/w/new.txt", "hello again, longer");
          await sleep(1500);
          await sbx.files.remove("/tmp/w/old.txt");
          await sleep(1500);
          await h.stop();
          out.events = events.map((e) => [e.name, e.type]);
        """)
        ev = out["events"]
        self.assertIn(["new.txt", "create"], ev)
        self.assertIn(["new.txt", "write"], ev)
        self.assertIn(["old.txt", "remove"], ev)

    def test_envs(self):
        sid, token = self.raw_sandbox()
        st, h, body = self.raw("GET", "/envs", headers={"E2b-Sandbox-Id": sid,
                                                        "X-Access-Token": token})
        self.assertEqual(st, 200, body)
        self.assertIsInstance(json.loads(body), dict)

    def test_watchers_by_polling(self):
        """CreateWatcher / GetWatcherEvents / RemoveWatcher (the SDKs' non-streaming watch)."""
        sid, token = self.raw_sandbox()
        base = {"E2b-Sandbox-Id": sid, "X-Access-Token": token,
                "Content-Type": "application/json"}

        def call(method, msg):
            st, _, body = self.raw("POST", "/filesystem.Filesystem/" + method,
                                   json.dumps(msg), base)
            return st, json.loads(body)

        self.assertEqual(call("MakeDir", {"path": "/tmp/pw"})[0], 200)
        st, j = call("CreateWatcher", {"path": "/tmp/pw", "recursive": True})
        self.assertEqual(st, 200, j)
        wid = j["watcherId"]
        st, _, body = self.raw("POST", "/files?path=/tmp/pw/sub/f.txt", b"x",
                               dict(base, **{"Content-Type": "application/octet-stream"}))
        self.assertEqual(st, 200, body)
        st, j = call("GetWatcherEvents", {"watcherId": wid})
        self.assertEqual(st, 200, j)
        self.assertIn({"name": "sub/f.txt", "type": "EVENT_TYPE_CREATE"}, j["events"])
        self.assertIn({"name": "sub", "type": "EVENT_TYPE_CREATE"}, j["events"])
        self.assertEqual(call("GetWatcherEvents", {"watcherId": wid}), (200, {"events": []}))
        self.assertEqual(call("RemoveWatcher", {"watcherId": wid}), (200, {}))
        st, j = call("GetWatcherEvents", {"watcherId": wid})
        self.assertEqual((st, j["code"]), (404, "not_found"))

    # -- the protocol's errors, from raw HTTP ---------------------------------------------------

    def test_envd_access_token_is_bound_to_its_sandbox_and_api_token(self):
        """An envd access token opens only its own sandbox, only for what the API token that
        got it may do, and only while that token holds: a stolen one from another sandbox, a
        forged one and one whose API token was revoked are refused."""
        def key_of(*ops, name):
            rc, out, err = self.space_cls("token", "create", "--name", name, "--ttl", "1h",
                                          "--profile", "test", *sum([["--op", o] for o in ops], []))
            self.assertEqual(rc, 0, err)
            tok = out.strip()
            return tok, "e2b_" + tok[4:16] + tok[17:]

        def create(key):
            st, _, body = self.raw("POST", "/sandboxes", json.dumps({"templateID": "base"}),
                                   {"X-API-KEY": key, "Content-Type": "application/json"})
            self.assertEqual(st, 201, body)
            j = json.loads(body)
            self.addCleanup(self.raw, "DELETE", "/sandboxes/" + j["sandboxID"], b"",
                            {"X-API-KEY": self.key})
            return j["sandboxID"], j["envdAccessToken"]

        def stat(sid, token):
            st, _, body = self.raw("POST", "/filesystem.Filesystem/Stat",
                                   json.dumps({"path": "/tmp"}),
                                   {"E2b-Sandbox-Id": sid, "X-Access-Token": token,
                                    "Content-Type": "application/json"})
            return st, body

        a, token_a = self.raw_sandbox()
        b, token_b = self.raw_sandbox()
        self.assertEqual(stat(a, token_a)[0], 200)
        # Another sandbox's token, a forged one, none.
        self.assertEqual(stat(a, token_b)[0], 401)
        tid, mac = token_a.split(".")
        self.assertEqual(stat(a, "0123456789ab." + mac)[0], 401)
        self.assertEqual(stat(a, tid + "." + "0" * 64)[0], 401)
        self.assertEqual(stat(a, "")[0], 401)
        # A token that may create but not touch files: its envd token cannot either.
        _, no_files = key_of("create", "lifecycle", "read", name="no-files")
        c, token_c = create(no_files)
        st, body = stat(c, token_c)
        self.assertEqual(st, 403, body)
        self.assertIn("files", json.loads(body)["message"])
        # Revoking the API token revokes the envd tokens it got.
        full, full_key = key_of("create", "lifecycle", "read", "exec", "files", name="revoked")
        d, token_d = create(full_key)
        self.assertEqual(stat(d, token_d)[0], 200)
        # A command's stream open when the token is revoked ends with the refusal (the process
        # runs on, as when a client leaves).
        import time
        msg = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "echo up; sleep 60"]}})
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=30)
        c.request("POST", "/process.Process/Start",
                  body=struct.pack(">BI", 0, len(msg)) + msg.encode(),
                  headers={"E2b-Sandbox-Id": d, "X-Access-Token": token_d,
                           "Content-Type": "application/connect+json"})
        stream = c.getresponse()
        self.assertEqual(stream.status, 200)
        rc, _, err = self.space_cls("token", "rm", full[4:16])
        self.assertEqual(rc, 0, err)
        t0 = time.monotonic()
        data = stream.read()  # to the end of the stream
        self.assertLess(time.monotonic() - t0, 10, "the stream ended soon after the revocation")
        c.close()
        last = data
        while last:
            flags, n = struct.unpack(">BI", last[:5])
            if flags & 2:
                break
            last = last[5 + n:]
        self.assertTrue(last, "an end-of-stream envelope: %r" % data[-200:])
        end = json.loads(last[5:])
        self.assertEqual(end["error"]["code"], "unauthenticated", end)
        st, body = stat(d, token_d)
        self.assertEqual(st, 401, body)
        self.assertIn("revoked", json.loads(body)["message"])

    def test_protocol_errors(self):
        sid, token = self.raw_sandbox()
        base = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}

        def rpc(path, body, ctype="application/json", extra=None):
            return self.raw("POST", path, body, dict(base, **{"Content-Type": ctype},
                                                     **(extra or {})))

        def envelopes(data):
            msgs = []
            while data:
                flags, n = struct.unpack(">BI", data[:5])
                msgs.append((flags, json.loads(data[5:5 + n])))
                data = data[5 + n:]
            return msgs

        # bad JSON (unary) -> 400 invalid_argument
        st, _, body = rpc("/filesystem.Filesystem/Stat", b"{not json")
        self.assertEqual(st, 400, body)
        self.assertEqual(json.loads(body)["code"], "invalid_argument")
        # a unary RPC: a missing file is not_found
        st, _, body = rpc("/filesystem.Filesystem/Stat", json.dumps({"path": "/nope"}))
        self.assertEqual(st, 404, body)
        self.assertEqual(json.loads(body)["code"], "not_found")
        # unknown RPC -> 501 unimplemented naming what is served
        st, _, body = rpc("/process.Process/Frobnicate", b"{}")
        self.assertEqual(st, 501, body)
        j = json.loads(body)
        self.assertEqual(j["code"], "unimplemented")
        self.assertIn("SendInput", j["message"])
        st, _, body = rpc("/nosuch.Service/Method", b"{}")
        self.assertEqual(st, 501, body)
        self.assertIn("filesystem.Filesystem", json.loads(body)["message"])
        # a malformed envelope on a streaming RPC -> an end-of-stream error
        st, h, body = rpc("/process.Process/Start", b"\x00\x00\x00\x00\x09{}",
                          "application/connect+json")
        self.assertEqual(st, 200, body)
        self.assertEqual(h["content-type"], "application/connect+json")
        msgs = envelopes(body)
        self.assertEqual(msgs[-1][0], 2)
        self.assertEqual(msgs[-1][1]["error"]["code"], "invalid_argument")
        # an envelope around bad JSON
        bad = b"{oops"
        st, h, body = rpc("/process.Process/Start", struct.pack(">BI", 0, len(bad)) + bad,
                          "application/connect+json")
        self.assertEqual(envelopes(body)[-1][1]["error"]["code"], "invalid_argument")
        # a streaming RPC sent as unary -> invalid_argument
        st, _, body = rpc("/process.Process/Start", b"{}")
        self.assertEqual(st, 400, body)
        # a raw Start works: start, data, end envelopes
        msg = json.dumps({"process": {"cmd": "/bin/echo", "args": ["raw"]}}).encode()
        st, h, body = rpc("/process.Process/Start", struct.pack(">BI", 0, len(msg)) + msg,
                          "application/connect+json")
        msgs = envelopes(body)
        self.assertIn("start", msgs[0][1]["event"])
        self.assertEqual(msgs[1][1]["event"]["data"]["stdout"], "cmF3Cg==")
        self.assertEqual(msgs[2][1]["event"]["end"]["exitCode"], 0)
        self.assertEqual(msgs[-1], (2, {}))
        # /files errors are E2B's {"code", "message"}
        st, _, body = self.raw("GET", "/files?path=/nope", headers=base)
        self.assertEqual(st, 404, body)
        self.assertEqual(json.loads(body)["code"], 404)
        st, _, body = self.raw("POST", "/files?path=/tmp/x", b"data",
                               dict(base, **{"Content-Type": "text/plain"}))
        self.assertEqual(st, 400, body)
        # an unknown user
        st, _, body = rpc("/filesystem.Filesystem/Stat", json.dumps({"path": "/"}),
                          extra={"Authorization": "Basic bm9ib2R5eHl6Og=="})
        self.assertEqual(st, 400, body)
        # a wrong access token -> 401
        st, _, body = rpc("/filesystem.Filesystem/Stat", json.dumps({"path": "/"}),
                          extra={"X-Access-Token": "0" * 64})
        self.assertEqual(st, 401, body)
        st, _, body = self.raw("GET", "/files?path=/etc/hostname",
                               headers=dict(base, **{"X-Access-Token": "bad"}))
        self.assertEqual(st, 401, body)


class E2bEnvdShutdownTest(E2bEnvdBase):
    """SIGTERM to spaced while envd runs commands for E2B clients: the commands' streams end,
    spaced waits for envd's process threads (they use the daemon's exec sessions) and exits 0,
    with nothing left running. Its own daemon: the test stops it."""

    def tearDown(self):
        pass

    def test_sigterm_with_commands_running(self):
        import threading
        import time
        sid, token = self.raw_sandbox()
        hdr = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
               "Content-Type": "application/connect+json"}
        msg = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "echo up; sleep 300"]}})
        conns, ended = [], []
        for _ in range(3):
            c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=60)
            c.request("POST", "/process.Process/Start",
                      body=struct.pack(">BI", 0, len(msg)) + msg.encode(), headers=hdr)
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            conns.append((c, r))

        def drain(r):
            try:
                while r.read(4096):
                    pass
            except (OSError, http.client.HTTPException):
                pass
            ended.append(time.monotonic())
        threads = [threading.Thread(target=drain, args=(r,), daemon=True) for _, r in conns]
        for t in threads:
            t.start()
        time.sleep(1.0)  # the three commands run
        t0 = time.monotonic()
        code = self.daemon.stop(signal.SIGTERM, timeout=30)
        took = time.monotonic() - t0
        self.assertEqual(code, 0, "spaced did not exit cleanly:\n" + self.daemon.log_tail(30))
        self.assertLess(took, 25, "spaced took %.1f s to stop" % took)
        for t in threads:
            t.join(10)
        self.assertEqual(len(ended), 3, "every command's stream ended")
        self.assertNotIn("pumps still running", self.daemon.log_text())
        for c, _ in conns:
            c.close()
        # The sandbox outlived spaced; a new spaced takes it over and the cleanup destroys it.
        self.daemon.start()


if __name__ == "__main__":
    main()
