// The tar writer and reader of Files.uploadDir/downloadDir (src/tar.ts), on their own: no spaced
// needed. Run: node --test test/tar.test.mjs
import assert from "node:assert/strict";
import { test } from "node:test";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { TarError } from "../dist/index.js";
import { entryHeader, extractTar, paxRecord, tarDir, tarMembers } from "../dist/tar.js";

const tmp = async () => fs.mkdtemp(path.join(os.tmpdir(), "space-tar-"));

// A tar archive of members { name, type ("0" file, "2" symlink, "3" device, "5" dir), data, linkname }.
function tarOf(members) {
  const parts = [];
  for (const m of members) {
    const data = Buffer.from(m.data ?? "");
    parts.push(entryHeader(m.name, m.type ?? "0", { mode: m.mode ?? 0o644, size: data.length, mtime: 1e9,
                                                    linkname: m.linkname }));
    parts.push(data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}
const stream = async function* (buf, size = 700) { // odd chunk sizes: headers split across chunks
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size);
};
const exists = (p) => fs.lstat(p).then(() => true, () => false);

test("PAX records count their own length", () => {
  for (let n = 0; n < 2100; n++) {
    const r = paxRecord("path", "x".repeat(n));
    assert.equal(Number(r.toString().split(" ")[0]), r.length, `value of ${n} bytes`);
    assert.ok(r.toString().endsWith("x\n") || n === 0);
  }
  assert.equal(paxRecord("path", "é").toString(), "11 path=é\n"); // bytes, not characters
});

test("a local tree through tarDir and extractTar, long names and links included", async () => {
  const d = await tmp();
  try {
    const src = path.join(d, "src");
    const long = "n".repeat(145);
    await fs.mkdir(path.join(src, "deep"), { recursive: true });
    await fs.mkdir(path.join(src, "empty"), { mode: 0o750 });
    await fs.chmod(path.join(src, "empty"), 0o750);
    await fs.writeFile(path.join(src, "deep", long), "long\n");
    await fs.writeFile(path.join(src, "run.sh"), "#!/bin/sh\n", { mode: 0o755 });
    await fs.chmod(path.join(src, "run.sh"), 0o755);
    const big = Buffer.alloc(300_000, 7);
    await fs.writeFile(path.join(src, "big"), big);
    await fs.symlink("deep/" + long, path.join(src, "link"));
    await fs.symlink("t/".repeat(70), path.join(src, "longlink"));
    const chunks = [];
    for await (const c of tarDir(src)) chunks.push(c);
    const tar = Buffer.concat(chunks);
    assert.equal(tar.length % 512, 0);
    const names = [];
    for await (const { member } of tarMembers(stream(tar))) names.push(member.name);
    assert.deepEqual(names, ["./", "./big", "./deep/", "./deep/" + long, "./empty/", "./link", "./longlink", "./run.sh"]);
    const dst = path.join(d, "dst");
    await fs.mkdir(dst);
    await extractTar(stream(tar, 333), dst);
    assert.equal(await fs.readFile(path.join(dst, "deep", long), "utf8"), "long\n");
    assert.ok((await fs.readFile(path.join(dst, "big"))).equals(big));
    assert.equal((await fs.stat(path.join(dst, "run.sh"))).mode & 0o7777, 0o755);
    assert.equal((await fs.stat(path.join(dst, "empty"))).mode & 0o7777, 0o750);
    assert.equal(await fs.readlink(path.join(dst, "link")), "deep/" + long);
    assert.equal(await fs.readlink(path.join(dst, "longlink")), "t/".repeat(70));
  } finally {
    await fs.rm(d, { recursive: true, force: true });
  }
});

test("extractTar refuses members outside its directory, writing nothing there", async () => {
  const d = await tmp();
  try {
    const dst = path.join(d, "dst");
    const refused = async (members, re) => {
      await fs.rm(dst, { recursive: true, force: true });
      await fs.mkdir(dst);
      await assert.rejects(extractTar(stream(tarOf(members)), dst), (e) => {
        assert.ok(e instanceof TarError, String(e));
        assert.match(e.message, re);
        return true;
      });
      assert.deepEqual((await fs.readdir(d)).sort(), ["dst"], "something was written outside");
    };
    await refused([{ name: "./ok", data: "fine" }, { name: "../evil", data: "x" }], /refusing tar member "\.\.\/evil"/);
    assert.equal(await fs.readFile(path.join(dst, "ok"), "utf8"), "fine"); // what came before stays
    await refused([{ name: "./a/../../evil", data: "x" }], /"\.\."/);
    await refused([{ name: path.join(d, "evil"), data: "x" }], /an absolute path/);

    // A symlink to /etc, then a file through it: the link is refused; /etc is untouched.
    const name = `space-tar-test-${process.pid}`;
    await refused([{ name: "./etc", type: "2", linkname: "/etc" }, { name: `./etc/${name}`, data: "x" }],
                  /refusing symlink "\.\/etc" -> "\/etc"/);
    assert.equal(await exists(path.join("/etc", name)), false);
    assert.equal(await exists(path.join(dst, "etc")), false);
    await refused([{ name: "./up", type: "2", linkname: "../" }, { name: "./up/evil", data: "x" }], /refusing symlink/);
    await refused([{ name: "./a/b", type: "2", linkname: "../../evil" }], /refusing symlink/);
    // Inside when made, outside once a later member exists: x -> y/.., then y -> .
    await refused([{ name: "./x", type: "2", linkname: "y/.." }, { name: "./y", type: "2", linkname: "." }],
                  /refusing symlink "\.\/x"/);
    assert.equal(await exists(path.join(dst, "x")), false);
    // ... and a file through such a link is refused before it is written.
    await refused([{ name: "./x", type: "2", linkname: "y/.." }, { name: "./y", type: "2", linkname: "." },
                   { name: "./x/evil", data: "x" }], /refusing tar member "\.\/x\/evil"/);
    await refused([{ name: "./dev", type: "3" }], /refusing device/);
    await refused([{ name: "./fifo", type: "6" }], /refusing FIFO/);
    await refused([{ name: "./hard", type: "1", linkname: "../outside" }], /"\.\."/);
  } finally {
    await fs.rm(d, { recursive: true, force: true });
  }
});

test("extractTar: links inside, a file replacing a symlink, modes without setuid", async () => {
  const d = await tmp();
  try {
    await fs.writeFile(path.join(d, "outside"), "keep");
    const dst = path.join(d, "dst");
    await fs.mkdir(dst);
    await extractTar(stream(tarOf([
      { name: "./sub/", type: "5", mode: 0o2755 },
      { name: "./sub/f", data: "f", mode: 0o4755 },
      { name: "./rel", type: "2", linkname: "sub/../sub/f" },
      { name: "./hard", type: "1", linkname: "sub/f" },
      { name: "./swap", type: "2", linkname: "sub/f" },
      { name: "./swap", data: "new" }, // replaces the symlink; sub/f is not written through it
    ])), dst);
    assert.equal(await fs.readFile(path.join(dst, "rel"), "utf8"), "f");
    assert.equal(await fs.readFile(path.join(dst, "hard"), "utf8"), "f");
    assert.equal(await fs.readFile(path.join(dst, "sub", "f"), "utf8"), "f");
    assert.equal(await fs.readFile(path.join(dst, "swap"), "utf8"), "new");
    assert.equal((await fs.stat(path.join(dst, "sub", "f"))).mode & 0o7777, 0o755);
    assert.equal((await fs.stat(path.join(dst, "sub"))).mode & 0o7777, 0o755);
    await assert.rejects(extractTar(stream(Buffer.alloc(512, 1)), dst), /checksum/);
    await assert.rejects(extractTar(stream(tarOf([{ name: "./t", data: "abc" }]).subarray(0, 514)), dst), /ended inside/);
    assert.equal(await fs.readFile(path.join(d, "outside"), "utf8"), "keep");
  } finally {
    await fs.rm(d, { recursive: true, force: true });
  }
});
