// The TypeScript SDK against a real spaced ($SPACE_SOCKET; started by
// tests/integration/test_sdk_typescript.py, which also sets SPACE_TEST_API and
// SPACE_TEST_TOKEN for the TCP listener). Run: node --test test/
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createHash, randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import * as fsp from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import {
  AuthenticationError, Client, CommandExitError, ConflictError, InvalidArgumentError, NotFoundError,
  PermissionDeniedError, Sandbox, SpaceTimeoutError, UnavailableError,
} from "../dist/index.js";

const client = new Client({ socketPath: process.env.SPACE_SOCKET });
let sb;

before(async () => {
  sb = await Sandbox.create({ client, timeoutMs: 600_000 });
});
after(async () => {
  await sb?.destroy();
});

const waitFor = async (cond, what, ms = 10_000) => {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`timed out waiting for ${what}`);
};

test("run returns output and exit code", async () => {
  const r = await sb.commands.run("echo out; echo err >&2; exit 3");
  assert.deepEqual([r.exitCode, r.stdout, r.stderr], [3, "out\n", "err\n"]);
  assert.equal(r.signal, null);
  assert.ok(r.pid > 0);
  assert.equal((await sb.commands.run(["printf", "%s|", "a b", "$HOME"])).stdout, "a b|$HOME|");
  assert.equal((await sb.commands.run("echo $X; pwd", { env: { X: "1" }, cwd: "/tmp" })).stdout, "1\n/tmp\n");
  const bin = Buffer.from([0, 255, 1, 2]);
  assert.deepEqual((await sb.commands.run(["cat"], { stdin: bin })).stdoutBytes, bin);
  assert.equal((await sb.commands.run("id -u", { user: 1000 })).stdout, "1000\n");
  await assert.rejects(sb.commands.run("echo nope >&2; exit 7", { check: true }), (e) => {
    assert.ok(e instanceof CommandExitError);
    assert.equal(e.result.exitCode, 7);
    assert.match(e.message, /nope/);
    return true;
  });
  const missing = await sb.commands.run(["/no/such/program"]);
  assert.equal(missing.exitCode, 127);
  assert.ok(missing.error);
  const t0 = Date.now();
  const slow = await sb.commands.run("sleep 30", { timeoutMs: 500 });
  assert.ok(slow.timedOut);
  assert.ok(Date.now() - t0 < 15_000);
});

test("output handlers see output as it comes", async () => {
  const seen = [];
  let firstAt = 0;
  const t0 = Date.now();
  const r = await sb.commands.run("echo early; sleep 1.5; echo late", {
    onStdout: (s) => { firstAt ||= Date.now(); seen.push(s); },
  });
  assert.equal(seen.join(""), "early\nlate\n");
  assert.equal(r.stdout, "early\nlate\n");
  assert.ok(firstAt - t0 < Date.now() - t0 - 1000, "the first line came only at the end");
});

test("background commands: wait and kill", async () => {
  const h = await sb.commands.run("echo started; sleep 60; echo never", { background: true });
  assert.ok(h.pid > 0);
  assert.ok(h.running);
  await waitFor(() => h.stdout.includes("started"), "first output");
  assert.ok((await sb.commands.list()).some((p) => p.pid === h.pid));
  await assert.rejects(h.wait({ timeoutMs: 200 }), SpaceTimeoutError);
  await h.kill();
  const r = await h.wait({ timeoutMs: 10_000 });
  assert.equal(r.signal, 9);
  assert.equal(r.exitCode, null);
  assert.ok(!r.stdout.includes("never"));
  await waitFor(async () => !(await sb.commands.list()).some((p) => (p.argv ?? []).includes("sleep")),
                "the sleep to be gone");
  const h2 = await sb.commands.run("echo hi; exit 4", { background: true });
  const r2 = await h2.wait();
  assert.deepEqual([r2.exitCode, r2.stdout], [4, "hi\n"]);
  await assert.rejects(h2.wait({ check: true }), CommandExitError);
});

test("background commands run detached: disconnect, connect again, kept output", async () => {
  await sb.commands.run("mkfifo /tmp/go-ts", { check: true });
  const h = await sb.commands.run("echo one; read x < /tmp/go-ts; echo two $x; exit 6", { background: true });
  assert.equal(h.detached, true);
  await waitFor(() => h.stdout === "one\n", "the first output");
  await h.disconnect();
  assert.equal(h.running, false);
  assert.ok((await sb.commands.list()).some((p) => p.pid === h.pid), "it runs on");
  const seen = [];
  const again = await sb.commands.connect(h.pid, { onStdout: (t) => seen.push(t) });
  await waitFor(() => again.stdout === "one\n", "the kept output");
  await sb.commands.run("echo now > /tmp/go-ts", { check: true });
  const r = await again.wait({ timeoutMs: 30_000 });
  assert.deepEqual([r.exitCode, r.stdout, r.pid], [6, "one\ntwo now\n", h.pid]);
  assert.equal(seen.join(""), "one\ntwo now\n");
  const failed = await sb.commands.run("/no/such/program", { background: true });
  assert.equal((await failed.wait()).exitCode, 127);
  await assert.rejects(sb.commands.connect(1), NotFoundError);
});

test("code interpreter: state, results, errors, figures, timeouts", async () => {
  let ex = await sb.runCode("x = 41\nprint('side effect')\nx + 1");
  assert.equal(ex.error, null);
  assert.equal(ex.text, "42");
  assert.equal(ex.stdout.join(""), "side effect\n");
  assert.equal((await sb.runCode("x")).text, "41");
  ex = await sb.runCode("def f():\n    return 1 / 0\nf()");
  assert.equal(ex.error.name, "ZeroDivisionError");
  assert.match(ex.error.traceback, /<cell>/);
  ex = await sb.runCode("class T:\n    def _repr_html_(self):\n        return '<i>t</i>'\nT()");
  assert.equal(ex.results[0].html, "<i>t</i>");
  ex = await sb.runCode("import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])");
  assert.equal(ex.error, null, ex.error?.traceback);
  const png = ex.results.find((r) => r.png)?.png;
  assert.ok(png && png.subarray(0, 4).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47])), "a PNG figure");
  const seen = [];
  await sb.runCode("for i in range(3): print(i)", { onStdout: (s) => seen.push(s) });
  assert.equal(seen.join(""), "0\n1\n2\n");
  const other = await sb.createCodeContext();
  assert.equal((await sb.runCode("x", { context: other })).error.name, "NameError");
  ex = await sb.runCode("import time\nwhile True:\n    time.sleep(0.05)", { timeoutMs: 1000 });
  assert.equal(ex.error.name, "KeyboardInterrupt");
  assert.equal((await sb.runCode("x")).text, "41");
});

test("files: write, read, list, stat, remove", async () => {
  const f = sb.files;
  await f.write("/tmp/ts/a.txt", "héllo\n");
  await f.write("/tmp/ts/b.bin", new Uint8Array([0, 1, 2]), { mode: 0o600 });
  const big = randomBytes(3 * 1024 * 1024 + 17);
  await f.write("/tmp/ts/big", (async function* () {
    for (let i = 0; i < big.length; i += 65536) yield big.subarray(i, i + 65536);
  })());
  assert.equal(await f.read("/tmp/ts/a.txt"), "héllo\n");
  assert.deepEqual(await f.read("/tmp/ts/b.bin", { format: "bytes" }), Buffer.from([0, 1, 2]));
  const parts = [];
  for await (const c of await f.read("/tmp/ts/big", { format: "stream" })) parts.push(c);
  assert.ok(Buffer.concat(parts).equals(big));
  await sb.commands.run("mkdir -p /tmp/ts/sub/deeper && touch /tmp/ts/sub/inner && ln -s a.txt /tmp/ts/link",
                        { check: true });
  const entries = Object.fromEntries((await f.list("/tmp/ts")).map((e) => [e.name, e]));
  assert.deepEqual(Object.keys(entries), ["a.txt", "b.bin", "big", "link", "sub"]);
  assert.equal(entries["a.txt"].path, "/tmp/ts/a.txt");
  assert.deepEqual([entries["a.txt"].type, entries["a.txt"].size], ["file", 7]);
  assert.equal(entries["b.bin"].mode, 0o600);
  assert.equal(entries.big.size, big.length);
  assert.deepEqual([entries.link.type, entries.link.target], ["symlink", "a.txt"]);
  assert.deepEqual((await f.list("/tmp/ts/sub")).map((e) => [e.name, e.type]), [["deeper", "dir"], ["inner", "file"]]);
  const st = await f.stat("/tmp/ts/b.bin");
  assert.deepEqual([st.type, st.size, st.mode], ["file", 3, 0o600]);
  assert.equal(await f.exists("/tmp/ts/a.txt"), true);
  assert.equal(await f.exists("/tmp/ts/missing"), false);
  await assert.rejects(f.read("/tmp/ts/missing"), NotFoundError);
  await assert.rejects(f.list("/tmp/ts/a.txt"), InvalidArgumentError);
  await assert.rejects(f.read("/tmp/ts"), TypeError);
  await f.makeDir("/tmp/ts/made/deep");
  assert.equal((await f.stat("/tmp/ts/made/deep")).type, "dir");
  await f.makeDir("/tmp/ts/made/deep");
  await f.remove("/tmp/ts/a.txt");
  assert.equal(await f.exists("/tmp/ts/a.txt"), false);
  await f.remove("/tmp/ts", { recursive: true });
  assert.equal(await f.exists("/tmp/ts"), false);
});

// Each entry under `dir`: "path type mode content-or-target", sorted.
async function tree(dir, rel = "") {
  const out = [];
  for (const n of (await fsp.readdir(path.join(dir, rel))).sort()) {
    const r = rel ? rel + "/" + n : n;
    const st = await fsp.lstat(path.join(dir, r));
    const mode = (st.mode & 0o7777).toString(8);
    if (st.isDirectory()) out.push(`${r} dir ${mode}`, ...(await tree(dir, r)));
    else if (st.isSymbolicLink()) out.push(`${r} -> ${await fsp.readlink(path.join(dir, r))}`);
    else if (st.isFile()) out.push(`${r} file ${mode} ${(await fsp.readFile(path.join(dir, r))).toString("base64")}`);
    else out.push(`${r} other`);
  }
  return out;
}

test("files: uploadDir and downloadDir, a round trip", async () => {
  const f = sb.files;
  const local = await fsp.mkdtemp(path.join(os.tmpdir(), "space-ts-dirs-"));
  try {
    const src = path.join(local, "src");
    const long = "deep/" + "n".repeat(145); // 150 characters: a PAX path
    const big = randomBytes(200_000);
    await fsp.mkdir(path.join(src, "nested/a/b"), { recursive: true });
    await fsp.mkdir(path.join(src, "deep"));
    await fsp.mkdir(path.join(src, "empty"));
    await fsp.chmod(path.join(src, "empty"), 0o750);
    await fsp.writeFile(path.join(src, "hello.txt"), "hello\n");
    await fsp.writeFile(path.join(src, "nested/a/b/c.txt"), "c\n");
    await fsp.writeFile(path.join(src, long), "long\n");
    await fsp.writeFile(path.join(src, "big.bin"), big);
    await fsp.writeFile(path.join(src, "run.sh"), "#!/bin/sh\necho ran\n");
    await fsp.chmod(path.join(src, "run.sh"), 0o755);
    await fsp.writeFile(path.join(src, "private.txt"), "secret\n");
    await fsp.chmod(path.join(src, "private.txt"), 0o600);
    await fsp.symlink("nested/a/b/c.txt", path.join(src, "link"));
    execFileSync("mkfifo", [path.join(src, "fifo")]); // skipped
    await f.uploadDir(src, "/tmp/tsdir/up");

    const run = async (cmd) => (await sb.commands.run(cmd, { cwd: "/tmp/tsdir/up", check: true })).stdout;
    assert.deepEqual((await run("find . | LC_ALL=C sort")).split("\n").filter(Boolean), [
      ".", "./big.bin", "./deep", "./" + long, "./empty", "./hello.txt", "./link", "./nested", "./nested/a",
      "./nested/a/b", "./nested/a/b/c.txt", "./private.txt", "./run.sh"]);
    assert.equal(await run("stat -c %a run.sh private.txt hello.txt empty nested/a"), "755\n600\n644\n750\n755\n");
    assert.equal(await run("readlink link; cat link; ./run.sh; cat " + long), "nested/a/b/c.txt\nc\nran\nlong\n");
    assert.equal(await run("sha256sum < big.bin | cut -c1-64"),
                 createHash("sha256").update(big).digest("hex") + "\n");

    await run("echo made > out.txt && mkdir made && chmod 700 made");
    const dst = path.join(local, "dst", "sub"); // created, parents too
    await f.downloadDir("/tmp/tsdir/up", dst);
    await fsp.rm(path.join(src, "fifo"));
    await fsp.writeFile(path.join(src, "out.txt"), "made\n");
    await fsp.mkdir(path.join(src, "made"));
    await fsp.chmod(path.join(src, "made"), 0o700);
    assert.deepEqual(await tree(dst), await tree(src));
    assert.equal(await fsp.readFile(path.join(dst, "link"), "utf8"), "c\n");

    await assert.rejects(f.uploadDir(path.join(src, "hello.txt"), "/tmp/tsdir/x"),
                         (e) => e instanceof TypeError && e.message.includes("hello.txt"));
    await assert.rejects(f.uploadDir(path.join(local, "missing"), "/tmp/tsdir/x"), TypeError);
    await assert.rejects(f.downloadDir("/tmp/tsdir/up/hello.txt", path.join(local, "nope")),
                         (e) => e instanceof TypeError &&
                                e.message === `/tmp/tsdir/up/hello.txt is not a directory in sandbox ${sb.id}`);
    await assert.rejects(f.downloadDir("/tmp/tsdir/missing", path.join(local, "nope")), NotFoundError);
    assert.deepEqual((await fsp.readdir(local)).sort(), ["dst", "src"]);
    await f.remove("/tmp/tsdir", { recursive: true });
  } finally {
    await fsp.rm(local, { recursive: true, force: true });
  }
});

test("life cycle, snapshots and audit", async () => {
  const s = await Sandbox.create({ client, env: { GREETING: "hi" }, memory: "256M" });
  const box = s;
  const id = box.id;
  try {
    assert.equal(box.info.state, "running");
    assert.equal(box.info.limits.memory, 256 * 1024 * 1024);
    assert.equal((await box.commands.run("echo $GREETING")).stdout, "hi\n");
    assert.ok((await Sandbox.list({ client })).some((x) => x.id === id));
    const again = await Sandbox.connect(id, { client });
    assert.equal((await again.commands.run("hostname")).exitCode, 0);
    assert.equal(box.info.expiresAt, null);
    assert.ok((await box.setTimeout(3_600_000)).expiresAt);
    assert.equal((await box.pause()).state, "paused");
    await assert.rejects(box.commands.run("true"), ConflictError);
    assert.equal((await box.resume()).state, "running");
    await box.files.write("/root/state.txt", "v1");
    const snap = await box.snapshot(`ts-v1-${id}`);
    assert.equal(snap.kind, "manual");
    assert.ok((await box.snapshots()).some((x) => x.id === snap.id));
    await box.files.write("/root/state.txt", "v2");
    assert.ok((await box.diff()).added.includes("/root/state.txt"));
    const rb = await box.rollback(snap);
    assert.equal(rb.snapshot, snap.id);
    assert.equal(await box.files.read("/root/state.txt"), "v1");
    const restored = await Sandbox.restore(snap, { client });
    try {
      assert.notEqual(restored.id, id);
      assert.equal(await restored.files.read("/root/state.txt"), "v1");
    } finally {
      await restored.destroy();
    }
    assert.equal(await restored.isRunning(), false);
    const kinds = (await box.audit()).map((e) => e.kind);
    for (const k of ["sandbox.create", "exec.start", "exec.end", "file.write", "sandbox.pause"])
      assert.ok(kinds.includes(k), k);
    assert.equal((await box.verifyAudit()).ok, true);
  } finally {
    await box[Symbol.asyncDispose]();  // what `await using` calls: a destroy in the background
  }
  await waitFor(async () => (await s.audit()).some((e) => e.kind === "sandbox.destroy"), "sandbox.destroy");
  await assert.rejects(s.commands.run("true"), (e) => e instanceof NotFoundError || e instanceof ConflictError);
  await s.destroy(); // idempotent
});

test("errors are typed and say what to do", async () => {
  await assert.rejects(Sandbox.connect("sb_nonexistent", { client }), (e) => {
    assert.ok(e instanceof NotFoundError);
    assert.equal(e.status, 404);
    assert.equal(e.code, "not_found");
    return true;
  });
  await assert.rejects(Sandbox.create({ client, memory: "1X" }), (e) => e instanceof InvalidArgumentError &&
                       /memory/.test(e.message));
  await assert.rejects(Sandbox.list({ client: new Client({ socketPath: "/nonexistent/space.sock" }) }), (e) =>
    e instanceof UnavailableError && /spaced is not running/.test(e.message));
});

test("the TCP listener with tokens", { skip: !process.env.SPACE_TEST_API }, async () => {
  const apiUrl = process.env.SPACE_TEST_API;
  const remote = new Client({ apiUrl, token: process.env.SPACE_TEST_TOKEN });
  const box = await Sandbox.create({ client: remote });
  try {
    assert.equal((await box.commands.run("echo over tcp")).stdout, "over tcp\n");
    await box.files.write("/root/t", "x");
    assert.equal(await box.files.read("/root/t"), "x");
  } finally {
    await box.destroy();
  }
  await assert.rejects(Sandbox.list({ client: new Client({ apiUrl }) }), AuthenticationError);
  await assert.rejects(Sandbox.create({ client: new Client({ apiUrl, token: process.env.SPACE_TEST_RO_TOKEN }) }),
                       PermissionDeniedError);
});
