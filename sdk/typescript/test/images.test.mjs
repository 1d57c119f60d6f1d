// The client side of Space.buildImage (src/images.ts) on its own, no spaced needed: the
// .dockerignore matcher against Docker's rules, and the build context tar (what is left out,
// the excluded directories written for what is under them, a Dockerfile from outside appended).
// Run: node --test test/images.test.mjs
import assert from "node:assert/strict";
import { test } from "node:test";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { DockerIgnore, InvalidArgumentError, NotFoundError } from "../dist/index.js";
import { prepareContext } from "../dist/images.js";
import { tarDir, tarMembers } from "../dist/tar.js";

test("dockerignore patterns match as Docker's do", () => {
  const d = new DockerIgnore("# c\n  node_modules \n**/*.pyc\ndocs\n!docs/public\ncache/**\nw[^a-c]\ndata/?.csv\n/build/\n");
  const cases = [
    ["node_modules/x/y.js", true], ["src/node_modules", false], ["a/b.pyc", true], ["b.pyc", true],
    ["docs/internal/a", true], ["docs/public/b", false], ["cache", false], ["cache/a/b", true],
    ["wd", true], ["wb", false], ["data/\u00e9.csv", true], ["data/12.csv", false], ["build/x", true],
    ["# c", false],
  ];
  for (const [p, want] of cases) assert.equal(d.excluded(p), want, p);
  assert.equal(new DockerIgnore("!keep\n*\n").excluded("keep"), true, "the last match decides");
  assert.equal(d.hasExceptions, true);
  for (const bad of ["ok\n[abc\n", "ok\n[]\n", "ok\n!\n", "ok\nx\\\n", "ok\n[z-a]\n"])
    assert.throws(() => new DockerIgnore(bad), (e) => e instanceof InvalidArgumentError && /line 2/.test(e.message), bad);
  // No backtracking: this takes exponential time in a regular expression engine that does.
  assert.equal(new DockerIgnore("*a".repeat(30) + "b").excluded("a".repeat(4000)), false);
});

test("the build context tar honours .dockerignore and carries a Dockerfile from outside", async () => {
  const root = await fs.mkdtemp(path.join(os.tmpdir(), "space-build-ctx-"));
  try {
    const ctx = path.join(root, "ctx");
    for (const d of ["src", "node_modules/pkg", "docs/internal", "docs/public", "docs/more"])
      await fs.mkdir(path.join(ctx, d), { recursive: true });
    for (const f of ["Dockerfile", "src/app.py", "src/app.pyc", "node_modules/pkg/i.js", "docs/internal/a",
                     "docs/public/b", "docs/more/README"]) await fs.writeFile(path.join(ctx, f), f);
    await fs.writeFile(path.join(ctx, ".dockerignore"),
                       "node_modules\n**/*.pyc\ndocs\n!docs/public\n!docs/more/README\nDockerfile\n.dockerignore\n");
    await fs.writeFile(path.join(root, "out.Dockerfile"), "FROM base\n");
    const members = async (dockerfile) => {
      const [name, outside, ignore] = await prepareContext(ctx, dockerfile);
      const chunks = tarDir(ctx, {
        names: "bare", extra: outside ? [[name, outside]] : [],
        filter: (rel, isDir) => {
          if (rel === ".dockerignore" || (outside === undefined && rel === name)) return "include";
          if (!ignore.excluded(rel)) return "include";
          return isDir && ignore.hasExceptions ? "look" : "skip";
        },
      });
      const got = {};
      for await (const m of tarMembers(chunks)) {
        let body = "";
        for await (const c of m.content()) body += c.toString();
        got[m.member.name] = body;
      }
      return [name, got];
    };
    const [inside, a] = await members("Dockerfile");
    assert.equal(inside, "Dockerfile");
    assert.deepEqual(Object.keys(a).sort(), [".dockerignore", "Dockerfile", "docs/", "docs/more/", "docs/more/README",
                                             "docs/public/", "docs/public/b", "src/", "src/app.py"]);
    const [hidden, b] = await members("../out.Dockerfile");
    assert.match(hidden, /^\.dockerfile\.[0-9a-f]{16}$/);
    assert.equal(b[hidden], "FROM base\n");
    assert.equal(b.Dockerfile, undefined, "the context's own Dockerfile is excluded, as .dockerignore says");
    await assert.rejects(prepareContext(ctx, "nothing"), NotFoundError);
    await assert.rejects(prepareContext(path.join(root, "none"), "Dockerfile"), InvalidArgumentError);
  } finally {
    await fs.rm(root, { recursive: true, force: true });
  }
});
