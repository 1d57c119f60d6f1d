"""docs/e2b.md ("Moving from E2B") checked against a real spaced: its config block is the
daemon's "e2b" section (listen on a free port, and a domain for the Host-routing check); its key
block is run with bash as pasted (the port replaced); its two quick starts (`e2b`, and
`@e2b/code-interpreter` with a matplotlib PNG) run as pasted, each as main.mjs of an app whose
node_modules is tests/e2b's (npm `e2b` 2.51.0, `@e2b/code-interpreter` 2.8.0 from the lock
file), with only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set. Then the rows of its method
tables that no other E2B suite calls: isRunning, getFullInfo, betaPause, a handle's sendStdin,
closeStdin and kill, pty.connect, writeFiles, read as blob and stream, a recursive watchDir, a
user from /etc/passwd, a user port (getHost) through the door, and what the page says is not
served (uploadUrl/downloadUrl, Template, Secret); routing by Host; and E2B's SDK connecting to a sandbox `space create`
made with a secret (the sandbox holds its placeholder)."""

import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import BUILD_DIR, REPO, SpaceTestCase, free_port, main, npm_ci

E2B_DIR = os.path.join(REPO, "tests", "e2b")
DOC = os.path.join(REPO, "docs", "e2b.md")
DOMAIN = "e2b.test"
SECRET_VALUE = "docs-secret-value-0123456789"


def doc_text():
    with open(DOC) as f:
        return f.read()


def block(lang, index, after="# Moving from E2B"):
    """The index-th ```lang block after the heading `after`."""
    text = doc_text()
    section = text[text.index(after):]
    return re.findall(r"```%s\n(.*?)```" % lang, section, re.S)[index]


class E2bDocsTest(SpaceTestCase):
    API_LISTEN = True

    @classmethod
    def daemon_config(cls):
        cfg = super().daemon_config()
        cls.e2b_port = free_port()
        e2b = json.loads(block("json", 0, "## Turn it on"))["e2b"]
        assert e2b["listen"] == "127.0.0.1:3000", e2b
        e2b["listen"] = "127.0.0.1:%d" % cls.e2b_port
        e2b["domain"] = DOMAIN  # the doc's is "", headers only; Host routing is checked too
        cfg["e2b"] = e2b
        cfg["secrets"] = {"DOCS_TOKEN": {"value": SECRET_VALUE, "hosts": ["example.com"],
                                         "profiles": ["test"]}}
        return cfg

    @classmethod
    def prepare_class(cls):
        if shutil.which("node") is None:
            raise unittest.SkipTest("node is not installed (scripts/install-deps.sh)")
        npm_ci(E2B_DIR)

    def setUp(self):
        if not hasattr(type(self), "e2b_env"):
            type(self).e2b_env = self.run_key_block()

    def tearDown(self):
        self.assertTrue(self.daemon.alive(), "spaced died:\n%s" % self.daemon.log_tail())

    # -- helpers ------------------------------------------------------------------------------

    def run_key_block(self):
        """The "Get a key" block with bash, as pasted but for the port: the three variables."""
        sh = block("sh", 0, "## Get a key")
        self.assertIn("--e2b", sh)
        sh = sh.replace("127.0.0.1:3000", "127.0.0.1:%d" % self.e2b_port)
        env = dict(self.env(), PATH=BUILD_DIR + os.pathsep + os.environ["PATH"])
        env.pop("SPACE_API", None)
        p = subprocess.run(["bash", "-e", "-c", sh + "\nenv | grep '^E2B_'\n"], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
        self.assertEqual(sorted(got), ["E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL"])
        self.assertRegex(got["E2B_API_KEY"], r"^e2b_[0-9a-f]{76}$")
        return got

    def node_env(self):
        """Only E2B's three variables (and what node itself needs to start)."""
        return dict(self.e2b_env, PATH=os.environ.get("PATH", "/usr/bin:/bin"),
                    HOME=os.environ.get("HOME", "/root"))

    def run_as_pasted(self, code):
        """`code` as main.mjs of an app whose node_modules holds tests/e2b's packages: (stdout
        lines, the app's directory listing with the first bytes of each file)."""
        with tempfile.TemporaryDirectory() as app:
            os.symlink(os.path.join(E2B_DIR, "node_modules"), os.path.join(app, "node_modules"))
            with open(os.path.join(app, "main.mjs"), "w") as f:
                f.write(code)
            p = subprocess.run(["node", "main.mjs"], cwd=app, env=self.node_env(),
                               capture_output=True, text=True, timeout=180)
            self._learn_ids(p.stdout, p.stderr)
            self.assertEqual(p.returncode, 0, "node failed:\n%s\n%s\nspaced:\n%s" % (
                p.stdout[-3000:], p.stderr[-3000:], self.daemon.log_tail()))
            files = {}
            for name in os.listdir(app):
                if name not in ("node_modules", "main.mjs"):
                    with open(os.path.join(app, name), "rb") as f:
                        files[name] = f.read(8)
            return p.stdout.splitlines(), files

    def node(self, body, args=None, timeout=240):
        """A script run in tests/e2b; its last line of stdout as JSON."""
        p = subprocess.run(["node", "--input-type=module", "-e", body, json.dumps(args or {})],
                           cwd=E2B_DIR, env=self.node_env(), capture_output=True, text=True,
                           timeout=timeout)
        self._learn_ids(p.stdout, p.stderr)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        self.assertEqual(p.returncode, 0, "node failed:\n%s\n%s\nspaced:\n%s" % (
            p.stdout[-3000:], p.stderr[-3000:], self.daemon.log_tail()))
        self.assertTrue(lines, p.stdout + p.stderr)
        return json.loads(lines[-1])

    def raw(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=60)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data) if data else None
            except ValueError:
                return r.status, data.decode(errors="replace")
        finally:
            c.close()

    # -- the page's blocks, as pasted ---------------------------------------------------------

    def test_quick_start_as_pasted(self):
        lines, _ = self.run_as_pasted(block("js", 0, "## Quick start"))
        self.assertEqual(len(lines), 5, lines)
        self.assertRegex(lines[0], r"^sb_[0-9a-z]+$")
        self.assertEqual(lines[1:], ["hello from Linux", "kept", "kept", "user"])
        info = self.inspect(lines[0])
        self.assertTrue(info.get("destroyed_at") or info.get("state") == "destroyed", info)

    def test_code_interpreter_as_pasted(self):
        lines, files = self.run_as_pasted(block("js", 1, "## Quick start"))
        self.assertEqual(lines, ["42", "plot.png: png"])
        self.assertEqual(files.get("plot.png"), b"\x89PNG\r\n\x1a\n")

    # -- rows no other suite calls ------------------------------------------------------------

    def test_untested_rows(self):
        r = self.node(r"""
import { Sandbox, Template, Secret } from "e2b";
const out = {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const thrown = async (p) => {
  try { await p; return null; }
  catch (e) { return { name: e.constructor.name, message: String(e.message) }; }
};
const enc = (s) => new TextEncoder().encode(s);
const sbx = await Sandbox.create({ timeoutMs: 600000 });
out.id = sbx.sandboxId;
try {
  out.running = await sbx.isRunning();
  out.full = (await Sandbox.getFullInfo(sbx.sandboxId)).sandboxId;
  out.ident = (await sbx.commands.run("id; whoami; echo $USER; grep '^user:' /etc/passwd || true")).stdout;
  out.nobody = (await sbx.commands.run("whoami; echo $HOME", { user: "nobody", cwd: "/tmp" })).stdout;
  // A background command's handle.
  const h = await sbx.commands.run("cat; echo EOF", { background: true, stdin: true });
  await h.sendStdin("via handle\n");
  await h.closeStdin();
  out.handleStdin = (await h.wait()).stdout;
  const h2 = await sbx.commands.run("sleep 100", { background: true });
  out.handleKill = await h2.kill();
  await sleep(300);
  out.afterKill = (await sbx.commands.list()).some((p) => p.pid === h2.pid);
  // pty.connect: follow a pty again after disconnecting.
  const dec = new TextDecoder();
  let data = "";
  const p = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
  await p.disconnect();
  const p2 = await sbx.pty.connect(p.pid, { onData: (d) => { data += dec.decode(d); } });
  await sbx.pty.sendInput(p.pid, enc("echo pty-$((6*7))\n"));
  for (let i = 0; i < 50 && !data.includes("pty-42"); i++) await sleep(100);
  out.ptyConnect = data.includes("pty-42") && p2.pid === p.pid;
  out.ptyKill = await sbx.pty.kill(p.pid);
  // writeFiles, read as blob and as stream.
  out.writeFiles = (await sbx.files.writeFiles([{ path: "/tmp/wf/a.txt", data: "A" },
                                                { path: "/tmp/wf/b.txt", data: "BB" }]))
    .map((e) => e.path);
  // Files are written as the call's user: the default user may change what it wrote; writing
  // where it may not is refused, and root may.
  await sbx.files.write("/home/user/new/dir/mine.txt", "x");
  out.owner = (await sbx.commands.run("stat -c '%U %a' /home/user/new /home/user/new/dir/mine.txt")).stdout;
  out.denied = await sbx.files.write("/etc/space-e2b-denied", "x").then(() => "written", (e) => e.message);
  await sbx.files.write("/etc/space-e2b-root", "x", { user: "root" });
  out.rootOwner = (await sbx.commands.run("stat -c %U /etc/space-e2b-root")).stdout;
  await sbx.files.write("/home/user/mine.txt", "x");
  out.appendAsUser = (await sbx.commands.run("echo more >> /home/user/mine.txt; echo $?")).stdout;
  out.appendAsRoot = (await sbx.commands.run("echo more >> /home/user/mine.txt; echo $?",
                                             { user: "root" })).stdout;
  out.blob = await (await sbx.files.read("/tmp/wf/a.txt", { format: "blob" })).text();
  out.stream = await new Response(await sbx.files.read("/tmp/wf/b.txt", { format: "stream" })).text();
  // A recursive watchDir sees a file in a subdirectory.
  await sbx.files.makeDir("/tmp/rw/sub");
  const events = [];
  const w = await sbx.files.watchDir("/tmp/rw", (e) => events.push([e.name, e.type]),
                                     { recursive: true });
  await sbx.files.write("/tmp/rw/sub/deep.txt", "x");
  await sleep(1500);
  await w.stop();
  out.recursive = events;
  // Not served: signed URLs, user ports, templates, secrets.
  const down = await sbx.downloadUrl("/tmp/wf/a.txt");
  out.downloadUrl = down;
  out.downloadStatus = (await fetch(down)).status;
  const up = await sbx.uploadUrl("/tmp/up.txt");
  const form = new FormData();
  form.append("file", new Blob(["up"]), "up.txt");
  out.uploadStatus = (await fetch(up, { method: "POST", body: form })).status;
  out.host = sbx.getHost(3000);
  // getHost's port through the door, by headers (fetch cannot set Host).
  await sbx.files.write("/tmp/www/index.html", "from the sandbox\n");
  await sbx.commands.run("cd /tmp/www && python3 -m http.server 8000", { background: true });
  for (let i = 0; i < 50; i++) {
    const res = await fetch(process.env.E2B_SANDBOX_URL + "/index.html", { headers: {
      "E2b-Sandbox-Id": sbx.sandboxId, "E2b-Sandbox-Port": "8000",
      "X-Access-Token": sbx.envdAccessToken } });
    out.proxied = await res.text();
    if (res.status === 200) break;
    await sleep(100);
  }
  out.template = await thrown(Template.exists("base"));
  out.secret = await thrown(Secret.getInfo("x"));
  // betaPause, then connect resumes.
  out.betaPause = await sbx.betaPause();
  out.pausedState = (await sbx.getInfo()).state;
  await Sandbox.connect(sbx.sandboxId);
  out.resumed = (await sbx.getInfo()).state;
  out.echoAfter = (await sbx.commands.run("echo back")).stdout;
} finally {
  await sbx.kill();
}
out.runningAfterKill = await sbx.isRunning();
console.log(JSON.stringify(out));
process.exit(0);
""")
        self.assertTrue(r["running"], r)
        self.assertEqual(r["full"], r["id"])
        self.assertEqual(r["nobody"].splitlines()[0], "nobody", r)
        self.assertTrue(r["ident"].startswith("uid=1000(user)"), r)  # the host image has "user"
        self.assertEqual(r["appendAsUser"], "0\n", r)
        self.assertEqual(r["appendAsRoot"], "0\n", r)
        self.assertEqual(r["owner"], "user 755\nuser 644\n", r)
        self.assertIn("Permission denied", r["denied"], r)
        self.assertEqual(r["rootOwner"], "root\n", r)
        self.assertEqual(r["handleStdin"], "via handle\nEOF\n", r)
        self.assertTrue(r["handleKill"], r)
        self.assertFalse(r["afterKill"], r)
        self.assertTrue(r["ptyConnect"], r)
        self.assertTrue(r["ptyKill"], r)
        self.assertEqual(r["writeFiles"], ["/tmp/wf/a.txt", "/tmp/wf/b.txt"])
        self.assertEqual((r["blob"], r["stream"]), ("A", "BB"))
        self.assertIn(["sub/deep.txt", "create"], r["recursive"], r)
        # The page says "not served" for these: keep it true.
        self.assertIn("signature=", r["downloadUrl"])
        self.assertEqual(r["downloadStatus"], 401, r)
        self.assertEqual(r["uploadStatus"], 401, r)
        self.assertEqual(r["host"], "3000-%s.%s" % (r["id"], DOMAIN), "the door's domain")
        self.assertEqual(r["proxied"], "from the sandbox\n", r)
        self.assertIsNotNone(r["template"], r)
        self.assertIsNotNone(r["secret"], r)
        self.assertIn("501", r["secret"]["message"], r)
        self.assertTrue(r["betaPause"], r)
        self.assertEqual(r["pausedState"], "paused")
        self.assertEqual(r["resumed"], "running")
        self.assertEqual(r["echoAfter"], "back\n")
        self.assertFalse(r["runningAfterKill"], r)

    def test_host_routing(self):
        """With "domain", Host <port>-<id>.<domain> names the sandbox and port."""
        key = self.e2b_env["E2B_API_KEY"]
        st, sb = self.raw("POST", "/v2/sandboxes", json.dumps({"templateID": "base"}),
                          {"X-API-KEY": key, "Content-Type": "application/json"})
        self.assertEqual(st, 201, sb)
        sid, token = sb["sandboxID"], sb["envdAccessToken"]
        self.assertEqual(sb["domain"], DOMAIN)
        self.addCleanup(self.raw, "DELETE", "/sandboxes/" + sid, None, {"X-API-KEY": key})
        envd = "49983-%s.%s" % (sid, DOMAIN)
        st, _ = self.raw("GET", "/health", headers={"Host": envd})
        self.assertIn(st, (200, 204))
        st, body = self.raw("POST", "/filesystem.Filesystem/Stat", json.dumps({"path": "/tmp"}),
                            {"Host": envd, "X-Access-Token": token,
                             "Content-Type": "application/json"})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["entry"]["path"], "/tmp")
        st, body = self.raw("POST", "/filesystem.Filesystem/Stat", json.dumps({"path": "/tmp"}),
                            {"Host": envd, "Content-Type": "application/json"})
        self.assertEqual(st, 401, body)
        # A user port (getHost): nothing listening is a 502; a server is proxied.
        port = "3000-%s.%s" % (sid, DOMAIN)
        st, body = self.raw("GET", "/", headers={"Host": port, "X-Access-Token": token})
        self.assertEqual(st, 502, body)
        rc, _, err = self.space("exec", sid, "--detach", "--", "sh", "-c",
                                "mkdir -p /tmp/www && echo by-host > /tmp/www/i.txt && "
                                "cd /tmp/www && exec python3 -m http.server 3000")
        self.assertEqual(rc, 0, err)
        for _ in range(50):
            st, body = self.raw("GET", "/i.txt", headers={"Host": port, "X-Access-Token": token})
            if st == 200:
                break
            time.sleep(0.1)
        self.assertEqual((st, body), (200, "by-host\n"))
        st, body = self.raw("GET", "/i.txt", headers={"Host": port})
        self.assertEqual(st, 401, body)

    def test_connect_to_a_space_sandbox_with_a_secret(self):
        """What SPACE adds: `space create --secret` makes the sandbox, E2B's SDK drives it; the
        sandbox holds a placeholder, never the secret; connect gives it no lifetime."""
        rc, out, err = self.space("create", "--profile", "test", "--secret", "DOCS_TOKEN")
        self.assertEqual(rc, 0, err)
        sid = out.strip()
        self.known_ids.add(sid)
        try:
            r = self.node(r"""
import { Sandbox } from "e2b";
const id = JSON.parse(process.argv[1]).id;
const sbx = await Sandbox.connect(id);
const r = await sbx.commands.run("echo $DOCS_TOKEN");
console.log(JSON.stringify({ id: sbx.sandboxId, token: r.stdout.trim(),
                             listed: (await Sandbox.list().nextItems()).some((s) => s.sandboxId === id) }));
""", {"id": sid})
            self.assertEqual(r["id"], sid)
            self.assertTrue(r["listed"])
            self.assertTrue(r["token"].startswith("space_ph_DOCS_TOKEN_"), r)
            self.assertNotIn(SECRET_VALUE, r["token"])
            info = self.inspect(sid)
            self.assertIsNone(info.get("expires_at"), "connect left its lifetime alone")
        finally:
            self.space("rm", "--force", sid)

    def test_readme_points_here(self):
        with open(os.path.join(REPO, "README.md")) as f:
            readme = f.read()
        self.assertIn("(docs/e2b.md)", readme[readme.index("## Documentation"):])
        self.assertIn("docs/e2b.md", readme[:readme.index("## Documentation")])
        # The getHost row says "not yet" while no port proxy exists; "served" once it does.
        text = doc_text()
        row = [l for l in text.splitlines() if l.startswith("| `sbx.getHost(port)`")][0]
        if os.path.exists(os.path.join(REPO, "src", "e2b", "port_proxy.cc")):
            self.assertIn("| served", row)
        else:
            self.assertIn("| not yet |", row)


if __name__ == "__main__":
    main()
