// The SDK's transport where spaced misbehaves, against a fake spaced on loopback TCP (no daemon
// needed). Each case runs in a child process, where a promise left pending with nothing to keep
// Node's event loop alive shows as exit code 13 ("unsettled top-level await").
import assert from "node:assert/strict";
import { test } from "node:test";
import { spawnSync } from "node:child_process";

const dist = new URL("../dist/index.js", import.meta.url).href;

test("a connection reset by spaced is an UnavailableError, not a call left pending", () => {
  {
    const script = `
      import net from "node:net";
      import { Client } from ${JSON.stringify(dist)};
      // Reads the request, resets the connection, stops listening: nothing else keeps Node up.
      const srv = net.createServer((c) => c.once("data", () => { c.resetAndDestroy(); srv.close(); }));
      await new Promise((r) => srv.listen(0, "127.0.0.1", r));
      const apiUrl = "http://127.0.0.1:" + srv.address().port;
      try {
        await new Client({ apiUrl, token: "spt_000000000000_" + "0".repeat(64) }).call("GET", "/v1/health");
        console.log("resolved");
      } catch (e) {
        console.log(e.constructor.name);
      }`;
    const p = spawnSync(process.execPath, ["--input-type=module", "-e", script],
                        { encoding: "utf8", timeout: 30_000 });
    assert.equal(p.status, 0, `exit ${p.status}: ${p.stderr}`);
    assert.equal(p.stdout.trim(), "UnavailableError");
  }
});
