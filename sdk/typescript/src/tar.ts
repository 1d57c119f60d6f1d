// Tar archives for Files.uploadDir/downloadDir: a streaming writer of a local directory tree
// (ustar, with PAX extended headers for long names, long link targets and sizes of 8 GiB and
// more) and a streaming reader that extracts into a local directory, refusing whatever would land
// outside it.

import * as fs from "node:fs";
import * as path from "node:path";

const BLOCK = 512;
const MAX_OCTAL_SIZE = 0o77777777777; // what 11 octal digits hold: 8 GiB - 1
const BATCH = 64 * 1024;

// -- writing ----------------------------------------------------------------------------------

/** One PAX record, "LEN key=value\n", LEN counting the whole record, its own digits included. */
export function paxRecord(key: string, value: string): Buffer {
  const base = Buffer.byteLength(` ${key}=${value}\n`);
  let len = base + String(base).length;
  while (len !== base + String(len).length) len = base + String(len).length;
  return Buffer.from(`${len} ${key}=${value}\n`);
}

function header(name: string, type: string, f: { mode?: number; size?: number; mtime?: number; linkname?: string }): Buffer {
  const h = Buffer.alloc(BLOCK);
  const str = (s: string, off: number, len: number) => {
    const b = Buffer.from(s);
    b.copy(h, off, 0, Math.min(b.length, len));
  };
  const oct = (n: number, off: number, len: number) => str(n.toString(8).padStart(len - 1, "0") + "\0", off, len);
  str(name, 0, 100);
  oct((f.mode ?? 0) & 0o7777, 100, 8);
  oct(0, 108, 8); // uid: spaced does not keep ownership
  oct(0, 116, 8); // gid
  oct(Math.min(f.size ?? 0, MAX_OCTAL_SIZE), 124, 12);
  oct(Math.max(0, Math.min(Math.floor(f.mtime ?? 0), MAX_OCTAL_SIZE)), 136, 12);
  h.fill(0x20, 148, 156); // the checksum counts its own field as spaces
  str(type, 156, 1);
  str(f.linkname ?? "", 157, 100);
  str("ustar\0", 257, 6);
  str("00", 263, 2);
  let sum = 0;
  for (const b of h) sum += b;
  str(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
  return h;
}

const padding = (size: number) => Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);

/** A name for a ustar field: the name itself when it fits (100 bytes, ASCII), else its tail
 * (the PAX header before it holds the whole name). */
function shortName(name: string): string {
  if (Buffer.byteLength(name) <= 100 && /^[\x20-\x7e]*$/.test(name)) return name;
  const ascii = name.replace(/[^\x20-\x7e]/g, "_");
  return ascii.length <= 100 ? ascii : ascii.slice(ascii.length - 100);
}

/** The header block(s) of one member: a PAX 'x' header first where the name, the link target
 * or the size does not fit ustar's fields. */
export function entryHeader(name: string, type: "0" | "2" | "5",
                            f: { mode?: number; size?: number; mtime?: number; linkname?: string } = {}): Buffer {
  const records: Buffer[] = [];
  if (shortName(name) !== name) records.push(paxRecord("path", name));
  if (f.linkname !== undefined && shortName(f.linkname) !== f.linkname) records.push(paxRecord("linkpath", f.linkname));
  if ((f.size ?? 0) > MAX_OCTAL_SIZE) records.push(paxRecord("size", String(f.size)));
  const main = header(shortName(name), type, { ...f, linkname: f.linkname === undefined ? undefined : shortName(f.linkname) });
  if (!records.length) return main;
  const data = Buffer.concat(records);
  const base = path.posix.basename(name.replace(/\/+$/, "")) || "x";
  return Buffer.concat([header(shortName("./PaxHeaders/" + base), "x", { mode: 0o644, size: data.length, mtime: f.mtime }),
                        data, padding(data.length), main]);
}

/** What tarDir does with one entry (its path relative to the directory, "/"-separated):
 * "include" it, "skip" it (a directory: with everything under it), or "look" inside a directory
 * left out, which is written after all (before the first entry under it that is) if anything
 * under it is included. */
export type TarFilter = (rel: string, isDir: boolean) => "include" | "skip" | "look";

export interface TarDirOptions {
  /** "dot" (the default): members "./", "./sub/", "./sub/file", as Python's
   * `tar.add(local_dir, arcname=".")`; "bare": "sub/", "sub/file", no member for the root (a
   * build context, as `space image build` sends it). */
  names?: "dot" | "bare";
  filter?: TarFilter;
  /** Local files appended after the tree, as [name in the archive, local path]. */
  extra?: Array<[string, string]>;
}

/** A tar stream of directory `localDir`'s contents (named as `opts.names` says), sorted by
 * name: regular files (mode, mtime, size, their content read as the stream goes), directories
 * and symlinks (their target as is), as `opts.filter` chooses, then `opts.extra`. Sockets, FIFOs
 * and devices are skipped; a hard link is stored as a copy of its file. */
export async function* tarDir(localDir: string, opts: TarDirOptions = {}): AsyncGenerator<Buffer> {
  let pending: Buffer[] = [];
  let pendingSize = 0;
  const take = () => {
    const b = Buffer.concat(pending, pendingSize);
    pending = [];
    pendingSize = 0;
    return b;
  };
  const put = (b: Buffer) => {
    pending.push(b);
    pendingSize += b.length;
    return pendingSize >= BATCH;
  };
  const prefix = opts.names === "bare" ? "" : "./";

  async function* file(name: string, full: string, st: fs.Stats): AsyncGenerator<Buffer> {
    const meta = { mode: st.mode, mtime: st.mtimeMs / 1000 };
    const fh = await fs.promises.open(full, "r");
    try {
      put(entryHeader(name, "0", { ...meta, size: st.size }));
      // The header's size wins: a file that grew is cut there, one that shrank is padded.
      let left = st.size;
      while (left > 0) {
        const buf = Buffer.allocUnsafe(Math.min(BATCH, left));
        const { bytesRead } = await fh.read(buf, 0, buf.length, null);
        if (bytesRead === 0) {
          buf.fill(0);
          put(buf);
          left -= buf.length;
        } else {
          put(buf.subarray(0, bytesRead));
          left -= bytesRead;
        }
        if (pendingSize >= BATCH) yield take();
      }
      put(padding(st.size));
    } finally {
      await fh.close();
    }
  }

  if (prefix) {
    const root = await fs.promises.stat(localDir);
    if (put(entryHeader("./", "5", { mode: root.mode, mtime: root.mtimeMs / 1000 }))) yield take();
  }
  const written = new Set<string>(); // directories left out but written for what is under them
  // Depth first, each directory's entries sorted by name, as tar does.
  async function* walk(rel: string, skipped: Array<[string, fs.Stats]>): AsyncGenerator<Buffer> {
    const names = (await fs.promises.readdir(path.join(localDir, rel))).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const n of names) {
      const r = rel ? rel + "/" + n : n;
      const full = path.join(localDir, r);
      const st = await fs.promises.lstat(full);
      const meta = { mode: st.mode, mtime: st.mtimeMs / 1000 };
      const what = opts.filter ? opts.filter(r, st.isDirectory()) : "include";
      if (what !== "include") {
        if (what === "look" && st.isDirectory()) yield* walk(r, [...skipped, [r, st]]);
        continue;
      }
      for (const [d, dst] of skipped) {
        if (written.has(d)) continue;
        written.add(d);
        if (put(entryHeader(prefix + d + "/", "5", { mode: dst.mode, mtime: dst.mtimeMs / 1000 }))) yield take();
      }
      if (st.isDirectory()) {
        if (put(entryHeader(prefix + r + "/", "5", meta))) yield take();
        yield* walk(r, []);
      } else if (st.isSymbolicLink()) {
        if (put(entryHeader(prefix + r, "2", { ...meta, linkname: await fs.promises.readlink(full) }))) yield take();
      } else if (st.isFile()) {
        yield* file(prefix + r, full, st);
      }
      // sockets, FIFOs, character and block devices: skipped
    }
  }
  yield* walk("", []);
  for (const [name, local] of opts.extra ?? []) yield* file(name, local, await fs.promises.stat(local));
  put(Buffer.alloc(2 * BLOCK));
  yield take();
}

// -- reading ----------------------------------------------------------------------------------

/** Exact reads from a stream of chunks. */
class Reader {
  private buf: Buffer[] = [];
  private have = 0;
  private done = false;
  constructor(private readonly it: AsyncIterator<Uint8Array>) {}

  private async fill(n: number): Promise<boolean> {
    while (this.have < n && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else if (r.value.length) {
        const b = Buffer.isBuffer(r.value) ? r.value : Buffer.from(r.value.buffer, r.value.byteOffset, r.value.length);
        this.buf.push(b);
        this.have += b.length;
      }
    }
    return this.have >= n;
  }

  /** Up to `max` bytes at once (fewer only at the end); an empty buffer at the end. */
  async some(max: number): Promise<Buffer> {
    if (!(await this.fill(1))) return Buffer.alloc(0);
    const first = this.buf[0];
    const n = Math.min(max, first.length);
    if (n === first.length) this.buf.shift();
    else this.buf[0] = first.subarray(n);
    this.have -= n;
    return first.subarray(0, n);
  }

  /** Exactly `n` bytes; null at the very end; throws when the stream ends part way. */
  async exactly(n: number, what: string): Promise<Buffer | null> {
    if (!(await this.fill(n))) {
      if (this.have === 0 && n > 0) return null;
      throw new TarError(`the tar stream ended inside ${what}`);
    }
    const parts: Buffer[] = [];
    let left = n;
    while (left > 0) {
      const b = await this.some(left);
      parts.push(b);
      left -= b.length;
    }
    return Buffer.concat(parts, n);
  }

  async skip(n: number, what: string): Promise<void> {
    while (n > 0) {
      const b = await this.some(Math.min(n, BATCH));
      if (!b.length) throw new TarError(`the tar stream ended inside ${what}`);
      n -= b.length;
    }
  }
}

/** A tar stream that is malformed or holds a member that downloadDir refuses. */
export class TarError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TarError";
  }
}

/** One member of a tar stream, its PAX/GNU long names applied. */
export interface TarMember {
  name: string;
  /** '0' file, '1' hard link, '2' symlink, '3' char device, '4' block device, '5' dir, '6' FIFO, ... */
  type: string;
  mode: number;
  size: number;
  mtime: number;
  linkname: string;
}

function cstr(b: Buffer, off: number, len: number): string {
  const s = b.subarray(off, off + len);
  const z = s.indexOf(0);
  return (z >= 0 ? s.subarray(0, z) : s).toString("utf8");
}

function num(b: Buffer, off: number, len: number, what: string): number {
  const f = b.subarray(off, off + len);
  if (f[0] & 0x80) { // GNU base-256
    let n = f[0] & 0x3f;
    if (f[0] & 0x40) throw new TarError(`negative ${what} in a tar header`);
    for (let i = 1; i < f.length; i++) n = n * 256 + f[i];
    return n;
  }
  const s = f.toString("latin1").replace(/[\0 ]+$/, "").replace(/^[ \0]+/, "");
  if (s === "") return 0;
  if (!/^[0-7]+$/.test(s)) throw new TarError(`bad ${what} ${JSON.stringify(s)} in a tar header: not a tar archive?`);
  return parseInt(s, 8);
}

function parsePax(data: Buffer): Map<string, string> {
  const m = new Map<string, string>();
  let i = 0;
  while (i < data.length) {
    const sp = data.indexOf(0x20, i);
    const len = sp > i ? Number(data.toString("latin1", i, sp)) : NaN;
    if (!Number.isInteger(len) || len <= sp - i || i + len > data.length || data[i + len - 1] !== 0x0a)
      throw new TarError("a malformed PAX extended header");
    const rec = data.toString("utf8", sp + 1, i + len - 1);
    const eq = rec.indexOf("=");
    if (eq <= 0) throw new TarError("a malformed PAX record");
    m.set(rec.slice(0, eq), rec.slice(eq + 1));
    i += len;
  }
  return m;
}

/** The members of a tar stream, each with a reader of its `size` bytes of content, which must be
 * consumed (or skipped: the next member skips what was left). */
export async function* tarMembers(chunks: AsyncIterable<Uint8Array>):
    AsyncGenerator<{ member: TarMember; content: () => AsyncGenerator<Buffer> }> {
  const rd = new Reader(chunks[Symbol.asyncIterator]());
  let pax = new Map<string, string>();
  let gnuName: string | undefined;
  let gnuLink: string | undefined;
  for (;;) {
    const h = await rd.exactly(BLOCK, "a header");
    if (h === null) return; // no end-of-archive blocks: take the end of the stream as the end
    if (h.every((b) => b === 0)) return;
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i];
    if (num(h, 148, 8, "checksum") !== sum) throw new TarError("a tar header's checksum is wrong: not a tar archive?");
    const type = String.fromCharCode(h[156] || 0x30);
    let size = num(h, 124, 12, "size");
    const padded = (n: number) => n + ((BLOCK - (n % BLOCK)) % BLOCK);
    if (type === "x" || type === "g" || type === "L" || type === "K") {
      if (size > 16 << 20) throw new TarError(`a tar extension header of ${size} bytes`);
      const data = (await rd.exactly(padded(size), "an extension header"))?.subarray(0, size);
      if (!data) throw new TarError("the tar stream ended after an extension header");
      if (type === "x") pax = new Map([...pax, ...parsePax(data)]);
      else if (type === "L") gnuName = cstr(data, 0, data.length);
      else if (type === "K") gnuLink = cstr(data, 0, data.length);
      continue; // 'g': global headers set nothing that is used here
    }
    let name = cstr(h, 0, 100);
    const magic = h.toString("latin1", 257, 262);
    if (magic === "ustar") {
      const prefix = cstr(h, 345, 155);
      if (prefix) name = prefix + "/" + name;
    }
    name = pax.get("path") ?? gnuName ?? name;
    const linkname = pax.get("linkpath") ?? gnuLink ?? cstr(h, 157, 100);
    if (pax.has("size")) size = Number(pax.get("size"));
    const mtime = pax.has("mtime") ? Number(pax.get("mtime")) : num(h, 136, 12, "mtime");
    pax = new Map();
    gnuName = gnuLink = undefined;
    const member: TarMember = { name, type, mode: num(h, 100, 8, "mode"), size, mtime, linkname };
    // Links, directories and devices carry no content whatever their size field says.
    const dataSize = type === "1" || type === "2" || type === "3" || type === "4" || type === "5" || type === "6" ? 0 : size;
    let left = dataSize;
    async function* content(): AsyncGenerator<Buffer> {
      while (left > 0) {
        const b = await rd.some(Math.min(left, BATCH));
        if (!b.length) throw new TarError(`the tar stream ended inside ${name}`);
        left -= b.length;
        yield b;
      }
    }
    yield { member, content };
    await rd.skip(left, name);
    await rd.skip(padded(dataSize) - dataSize, name);
  }
}

/** `name` of a member as a relative path of components (no "", "." or ".."); [] for the root.
 * Throws for absolute names and names with "..". */
function components(name: string, what: string): string[] {
  if (name.startsWith("/")) throw new TarError(`refusing tar member ${JSON.stringify(what)}: an absolute path`);
  if (name.includes("\0")) throw new TarError(`refusing tar member ${JSON.stringify(what)}: a NUL in its name`);
  const parts = name.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw new TarError(`refusing tar member ${JSON.stringify(what)}: it contains ".."`);
  return parts;
}

const inside = (root: string, p: string) => p === root || p.startsWith(root.endsWith(path.sep) ? root : root + path.sep);

/** Where symlink target `target` leads from real directory `dir`, as the kernel would follow it
 * now: each existing component by its real path, ".." to the parent of what came before, and
 * components that do not exist (yet) as written. */
async function follow(dir: string, target: string): Promise<string> {
  let cur = dir;
  for (const c of target.split("/")) {
    if (c === "" || c === ".") continue;
    if (c === "..") {
      cur = path.dirname(cur);
      continue;
    }
    const next = path.join(cur, c);
    try {
      cur = await fs.promises.realpath(next);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "ENOENT" && code !== "ENOTDIR") throw e;
      cur = next;
    }
  }
  return cur;
}

/** Extracts a tar stream into `localDir` (which must exist), member by member as it arrives:
 * files (mode without setuid/setgid, mtime), directories, symlinks and hard links. Refused,
 * with a TarError thrown before anything of that member is written: absolute names, names with
 * "..", members whose directory resolves outside `localDir` (through a symlink), symlinks and
 * hard links whose target resolves outside it, devices and FIFOs. What came before a refused
 * member stays. Directory modes are set last (a read-only one is still written into). */
export async function extractTar(chunks: AsyncIterable<Uint8Array>, localDir: string): Promise<void> {
  const root = await fs.promises.realpath(localDir);
  const dirs: { dest: string; mode: number; mtime: number }[] = [];
  const links: { dest: string; name: string; target: string }[] = [];

  const checkLink = async (dest: string, name: string, target: string) => {
    if (path.isAbsolute(target) || !inside(root, await follow(path.dirname(dest), target)))
      throw new TarError(`refusing symlink ${JSON.stringify(name)} -> ${JSON.stringify(target)}: it leads outside ${localDir}`);
  };
  // The real directory for `parts` (made where missing, each step checked to stay inside root).
  const makeParents = async (parts: string[], name: string): Promise<string> => {
    let dir = root;
    for (const p of parts) {
      const next = path.join(dir, p);
      let st: fs.Stats | undefined;
      try {
        st = await fs.promises.lstat(next);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      }
      if (!st) {
        await fs.promises.mkdir(next, { mode: 0o755 });
        dir = next;
        continue;
      }
      const real = await fs.promises.realpath(next);
      if (!inside(root, real)) throw new TarError(`refusing tar member ${JSON.stringify(name)}: it leads outside ${localDir}`);
      if (!(await fs.promises.stat(real)).isDirectory())
        throw new TarError(`cannot extract ${JSON.stringify(name)}: ${path.join(...parts)} is not a directory`);
      dir = real;
    }
    return dir;
  };
  // Makes room for a non-directory at `dest`: a file or symlink there is replaced (a symlink
  // is never written through).
  const clear = async (dest: string, name: string) => {
    let st: fs.Stats;
    try {
      st = await fs.promises.lstat(dest);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
      throw e;
    }
    if (st.isDirectory()) throw new TarError(`cannot extract ${JSON.stringify(name)}: a directory is in the way`);
    await fs.promises.unlink(dest);
  };

  for await (const { member: m, content } of tarMembers(chunks)) {
    const parts = components(m.name, m.name);
    if (m.type === "0" && m.name.endsWith("/")) m.type = "5"; // old tars: a directory
    if (m.type === "3" || m.type === "4" || m.type === "6")
      throw new TarError(`refusing ${m.type === "6" ? "FIFO" : "device"} ${JSON.stringify(m.name)}`);
    if (!["0", "7", "1", "2", "5"].includes(m.type))
      throw new TarError(`refusing tar member ${JSON.stringify(m.name)} of type ${JSON.stringify(m.type)}`);
    const mode = m.mode & (m.type === "5" ? 0o1777 : 0o777); // no setuid, setgid (nor sticky on files)
    if (parts.length === 0) {
      if (m.type !== "5") throw new TarError(`refusing tar member ${JSON.stringify(m.name)}: not a directory`);
      continue; // the root: localDir keeps its own mode
    }
    const dir = await makeParents(m.type === "5" ? parts : parts.slice(0, -1), m.name);
    if (m.type === "5") {
      dirs.push({ dest: dir, mode, mtime: m.mtime });
      continue;
    }
    const dest = path.join(dir, parts[parts.length - 1]);
    if (m.type === "2") {
      await checkLink(dest, m.name, m.linkname);
      await clear(dest, m.name);
      await fs.promises.symlink(m.linkname, dest);
      links.push({ dest, name: m.name, target: m.linkname });
    } else if (m.type === "1") {
      const t = components(m.linkname, m.name + " -> " + m.linkname);
      if (!t.length) throw new TarError(`refusing hard link ${JSON.stringify(m.name)} to the root`);
      const src = await fs.promises.realpath(path.join(root, ...t)).catch(() => undefined);
      if (src !== undefined && !inside(root, src))
        throw new TarError(`refusing hard link ${JSON.stringify(m.name)} -> ${JSON.stringify(m.linkname)}: it leads outside ${localDir}`);
      if (src === undefined || !(await fs.promises.stat(src)).isFile())
        throw new TarError(`cannot extract hard link ${JSON.stringify(m.name)}: ${m.linkname} is not a file extracted before it`);
      await clear(dest, m.name);
      await fs.promises.link(src, dest);
    } else {
      await clear(dest, m.name);
      const fh = await fs.promises.open(dest, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL |
                                        fs.constants.O_NOFOLLOW, 0o600);
      try {
        for await (const b of content()) await fh.write(b);
        await fh.chmod(mode);
      } finally {
        await fh.close();
      }
      if (Number.isFinite(m.mtime)) await fs.promises.utimes(dest, m.mtime, m.mtime);
    }
  }
  // A symlink that was checked may lead elsewhere once later members exist (a -> b/.., then
  // b -> .): check them all again now.
  for (const l of links) {
    const now = await fs.promises.readlink(l.dest).catch(() => undefined);
    if (now !== l.target) continue; // replaced by a later member
    try {
      await checkLink(l.dest, l.name, l.target);
    } catch (e) {
      await fs.promises.unlink(l.dest).catch(() => undefined);
      throw e;
    }
  }
  for (const d of dirs.reverse()) {
    await fs.promises.chmod(d.dest, d.mode);
    if (Number.isFinite(d.mtime)) await fs.promises.utimes(d.dest, d.mtime, d.mtime).catch(() => undefined);
  }
}
