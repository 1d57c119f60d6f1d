// An agent developer's first day with SPACE, end to end (examples/first_day.py in TypeScript's
// SDK): upload a project, see its test fail, patch it, rerun, snapshot, lose everything to an
// `rm -rf`, roll back, plot with the code interpreter, serve a port, extend the lifetime.
// Run (spaced running; `npm install ./sdk/typescript` first): node examples/first_day.mjs [OUT_DIR]
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Sandbox } from "space-sandbox";

const out = process.argv[2] ?? ".";
const project = mkdtempSync(path.join(tmpdir(), "project-"));  // a function with a bug, its test
writeFileSync(path.join(project, "calc.py"), "def add(a, b):\n    return a - b\n");
writeFileSync(path.join(project, "test_calc.py"), "import unittest\nfrom calc import add\n\n" +
  "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n");

const sb = await Sandbox.create({ timeoutMs: 600_000 });
try {
  await sb.files.uploadDir(project, "/root/project");
  // -B: no .pyc, which would hide a patch made within the second of the first run
  const test = async () => (await sb.commands.run("python3 -B -m unittest -q", { cwd: "/root/project" })).exitCode;
  console.log("tests:", await test());                                       // 1: the bug
  await sb.files.write("/root/project/calc.py", "def add(a, b):\n    return a + b\n");
  console.log("tests after the patch:", await test());                       // 0
  await sb.snapshot("before-cleanup");
  await sb.commands.run("rm -rf /root/project");
  console.log("after rm -rf:", await sb.files.exists("/root/project"));      // false
  await sb.rollback("before-cleanup");
  console.log("after rollback:", await test());                              // 0

  const ex = await sb.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 4, 9, 16])");
  writeFileSync(path.join(out, "plot.png"), ex.results[0].png);
  console.log("plot:", path.join(out, "plot.png"));

  await sb.commands.run("cd /root/project && python3 -m http.server 8000", { background: true });
  await sb.waitForPort(8000, { timeoutMs: 30_000 });
  const served = await (await fetch((await sb.getUrl(8000)) + "/calc.py")).text();
  console.log("served:", served.split("\n")[1].trim());                      // return a + b
  await sb.setTimeout(30 * 60_000);                                          // more time, from now
} finally {
  await sb.destroy();
}
