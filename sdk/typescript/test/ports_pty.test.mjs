// Ports (getHost, getUrl, waitForPort) and terminals (pty.create) against a real spaced
// ($SPACE_SOCKET; started by tests/integration/test_sdk_typescript.py, which also sets
// SPACE_TEST_API and SPACE_TEST_TOKEN for the TCP listener). Run: node --test test/
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import {
  Client, ConflictError, InvalidArgumentError, NotFoundError, Sandbox, SpaceTimeoutError,
} from "../dist/index.js";

const client = new Client({ socketPath: process.env.SPACE_SOCKET });
let sb;

before(async () => {
  sb = await Sandbox.create({ client, timeoutMs: 600_000 });
});
after(async () => {
  await sb?.destroy();
});

const waitFor = async (cond, what, ms = 20_000) => {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`timed out waiting for ${what}`);
};

test("ports: a server inside, reached through getUrl once waitForPort says it listens", async () => {
  const url = await sb.getUrl(8000);
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(await sb.getHost(8000), url.slice("http://".length)); // one forward per port
  // Nothing listens yet: fetch fails at once instead of hanging.
  let t0 = Date.now();
  await assert.rejects(fetch(`${url}/`));
  assert.ok(Date.now() - t0 < 5000, "a fetch to a closed port hung");
  t0 = Date.now();
  await assert.rejects(sb.waitForPort(8000, { timeoutMs: 1000 }), (e) => {
    assert.ok(e instanceof SpaceTimeoutError, String(e));
    assert.match(e.message, /nothing listens on port 8000/);
    return true;
  });
  assert.ok(Date.now() - t0 < 10_000);

  const page = `served from ${sb.id}\n`;
  const big = randomBytes(1 << 20);
  await sb.files.write("/root/site/index.html", page);
  await sb.files.write("/root/site/big", big);
  const server = await sb.commands.run("cd /root/site && exec python3 -m http.server 8000 --bind 127.0.0.1",
                                       { background: true });
  try {
    await sb.waitForPort(8000, { timeoutMs: 30_000 });
    assert.equal(await (await fetch(`${url}/index.html`)).text(), page);
    assert.deepEqual(Buffer.from(await (await fetch(`${url}/big`)).arrayBuffer()), big);
    // Several at once.
    const many = await Promise.all(Array.from({ length: 8 }, () => fetch(`${url}/index.html`).then((r) => r.text())));
    assert.deepEqual(many, Array(8).fill(page));
    if (process.env.SPACE_TEST_API) { // over the TCP listener with a token
      const remote = await Sandbox.connect(sb.id, { client: new Client({ apiUrl: process.env.SPACE_TEST_API,
                                                                         token: process.env.SPACE_TEST_TOKEN }) });
      await remote.waitForPort(8000, { timeoutMs: 10_000 });
      assert.equal(await (await fetch(`${await remote.getUrl(8000)}/index.html`)).text(), page);
      await remote.close();
    }
    // close() stops the forwards; the next getUrl starts a new one.
    await sb.close();
    await assert.rejects(fetch(`${url}/index.html`));
    assert.equal(await (await fetch(`${await sb.getUrl(8000)}/index.html`)).text(), page);
  } finally {
    await server.kill();
    await sb.close();
  }
  for (const bad of [0, 65536, 1.5]) await assert.rejects(sb.getHost(bad), InvalidArgumentError);
  // A destroyed sandbox: waiting fails at once, with the API's error.
  const gone = await Sandbox.create({ client });
  await gone.destroy();
  t0 = Date.now();
  await assert.rejects(gone.waitForPort(8000, { timeoutMs: 30_000 }),
                       (e) => e instanceof NotFoundError || e instanceof ConflictError);
  assert.ok(Date.now() - t0 < 10_000);
  await assert.rejects(gone.pty.create(), (e) => e instanceof NotFoundError || e instanceof ConflictError);
});

test("pty: bash on a terminal, resized, its exit code", async () => {
  const seen = [];
  const term = await sb.pty.create({ cmd: "bash", rows: 24, cols: 80, onData: (d) => seen.push(Buffer.from(d)) });
  assert.ok(term.pid > 0);
  assert.ok(term.running);
  const has = (s) => term.output.includes(s);
  await term.sendInput("echo hi $((1+2))\n");
  await waitFor(() => has("hi 3"), "hi 3 from bash");
  await term.sendInput("stty size; tty\n");
  await waitFor(() => has("24 80"), "stty size 24 80");
  await term.resize(40, 100);
  await term.sendInput(Buffer.from("stty size\n"));
  await waitFor(() => has("40 100"), "stty size after resize");
  assert.ok(has("/dev/pts/"));
  await assert.rejects(term.resize(0, 80), InvalidArgumentError); // refused here: the session goes on
  await term.sendInput("exit 3\n");
  assert.equal(await term.wait({ timeoutMs: 20_000 }), 3);
  assert.deepEqual([term.exitCode, term.signal, term.running], [3, null, false]);
  assert.deepEqual(Buffer.concat(seen), term.output);
  const iterated = [];
  for await (const chunk of term) iterated.push(chunk);
  assert.deepEqual(Buffer.concat(iterated), term.output);
  await assert.rejects(term.sendInput("true\n"), ConflictError);
  await term.close(); // after the end: nothing to do

  const t = await sb.pty.create({ cmd: "echo $X $TERM; pwd", cwd: "/tmp", env: { X: "x1" } });
  assert.equal(await t.wait({ timeoutMs: 20_000 }), 0);
  assert.ok(t.output.includes("x1 xterm-256color\r\n/tmp\r\n"), t.output.toString());
  assert.equal(await (await sb.pty.create({ cmd: ["/no/such/program"] })).wait({ timeoutMs: 20_000 }), 127);
});

test("pty: kill and close end the command", async () => {
  let term = await sb.pty.create({ cmd: "sleep 100" });
  const t0 = Date.now();
  await term.kill();
  assert.equal(await term.wait({ timeoutMs: 20_000 }), 128 + 9);
  assert.deepEqual([term.exitCode, term.signal], [null, 9]);
  assert.ok(Date.now() - t0 < 10_000);
  term = await sb.pty.create({ cmd: "sleep 100" });
  await assert.rejects(term.wait({ timeoutMs: 200 }), SpaceTimeoutError); // it runs on
  await term.kill(15);
  assert.equal(await term.wait({ timeoutMs: 20_000 }), 128 + 15);
  term = await sb.pty.create({ cmd: "sleep 101" });
  await term.close(); // hanging up kills its tree
  assert.ok(!term.running);
  await waitFor(async () => !(await sb.commands.list()).some((p) => (p.argv ?? []).join(" ").includes("sleep 101")),
                "the hung-up terminal's sleep to be gone");
});
