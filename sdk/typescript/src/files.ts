// Files in a sandbox: `sandbox.files.read/write/list/remove/...`.

import * as fs from "node:fs";
import { Body, Client } from "./client.js";
import { NotFoundError } from "./errors.js";
import { extractTar, tarDir } from "./tar.js";

/** A file, directory or symlink inside the sandbox. */
export interface EntryInfo {
  path: string;
  name: string;
  type: "file" | "dir" | "symlink" | "other";
  mode: number;
  size: number;
  mtime?: number;
  /** Symlinks only. */
  target?: string;
}

function entry(j: any, parent?: string): EntryInfo {
  const path = parent !== undefined ? parent.replace(/\/+$/, "") + "/" + j.name : j.path;
  const name = path.replace(/\/+$/, "").split("/").pop() || "/";
  const e: EntryInfo = { path, name, type: j.type, mode: Number(j.mode ?? 0), size: Number(j.size ?? 0) };
  if (j.mtime !== undefined) e.mtime = j.mtime;
  if (j.target !== undefined) e.target = j.target;
  return e;
}

export class Files {
  private readonly path: string;

  constructor(private readonly sandboxId: string, private readonly client: Client) {
    this.path = `/v1/sandboxes/${sandboxId}/files`;
  }

  /** A file's content as text (UTF-8). */
  read(path: string, opts?: { format?: "text" }): Promise<string>;
  /** A file's content as bytes. */
  read(path: string, opts: { format: "bytes" }): Promise<Buffer>;
  /** A file's content as a stream of chunks (large files). */
  read(path: string, opts: { format: "stream" }): Promise<AsyncIterable<Buffer>>;
  async read(path: string, opts: { format?: "text" | "bytes" | "stream" } = {}): Promise<string | Buffer | AsyncIterable<Buffer>> {
    const r = await this.client.request("GET", this.path, { query: { path }, timeoutMs: 0 });
    if (r.headers["x-space-file-type"] === "dir") {
      r.abort();
      throw new TypeError(`${path} is a directory in sandbox ${this.sandboxId}: use list()`);
    }
    if (opts.format === "stream") return r.chunks();
    const b = await r.bytes();
    return opts.format === "bytes" ? b : b.toString("utf8");
  }

  /** Writes a file (its parent directories are created): a string (UTF-8), bytes, or an
   * (async) iterable of byte chunks, streamed. */
  async write(path: string, data: Body, opts: { mode?: number } = {}): Promise<void> {
    const mode = ((opts.mode ?? 0o644) & 0o7777).toString(8);
    await (await this.client.request("PUT", this.path, {
      query: { path, mode, parents: true }, body: data, contentType: "application/octet-stream", timeoutMs: 0,
    })).bytes();
  }

  /** The entries of directory `path` (not recursive), sorted by name. */
  async list(path: string): Promise<EntryInfo[]> {
    const j = await this.client.call("GET", this.path, { query: { path, list: true } });
    return (j.entries as any[]).map((e) => entry(e, path)).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async stat(path: string): Promise<EntryInfo> {
    return entry(await this.client.call("GET", this.path, { query: { path, stat: true } }));
  }

  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Removes a file, or a directory tree with `recursive: true`. */
  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await (await this.client.request("DELETE", this.path, { query: { path, recursive: !!opts.recursive } })).bytes();
  }

  /** Creates directory `path` and its parents (no error if it exists): a tar of one entry. */
  async makeDir(path: string, opts: { mode?: number } = {}): Promise<void> {
    await (await this.client.request("PUT", this.path, {
      query: { path }, body: tarOfDot((opts.mode ?? 0o755) & 0o7777), contentType: "application/x-tar",
    })).bytes();
  }

  /** Copies local directory `localDir`'s contents into `path` (created with its parents), as one
   * tar stream read from disk as it is sent: files (mode, mtime), directories, symlinks (their
   * target as is). Sockets, FIFOs and devices are skipped; a hard link arrives as a copy. A
   * `localDir` that is not a directory throws TypeError. */
  async uploadDir(localDir: string, path: string): Promise<void> {
    const st = await fs.promises.stat(localDir).catch(() => undefined);
    if (!st?.isDirectory()) throw new TypeError(`${localDir} is not a local directory`);
    let localError: unknown;
    const body = (async function* () {
      try {
        yield* tarDir(localDir);
      } catch (e) {
        localError = e; // a file that cannot be read: say so, not what the broken upload says
        throw e;
      }
    })();
    try {
      await (await this.client.request("PUT", this.path, {
        query: { path }, body, contentType: "application/x-tar", timeoutMs: 0,
      })).bytes();
    } catch (e) {
      throw localError ?? e;
    }
  }

  /** Copies directory `path` of the sandbox into `localDir` (created if missing), streamed:
   * files (mode without setuid/setgid, mtime), directories, symlinks. Refuses with TarError,
   * before writing it, any member that would land outside `localDir` (absolute, "..", through a
   * symlink), a symlink or hard link leading outside it, and devices and FIFOs; what came before
   * stays. `path` not a directory throws TypeError. */
  async downloadDir(path: string, localDir: string): Promise<void> {
    const r = await this.client.request("GET", this.path, { query: { path }, timeoutMs: 0 });
    if (r.headers["x-space-file-type"] !== "dir") {
      r.abort();
      throw new TypeError(`${path} is not a directory in sandbox ${this.sandboxId}`);
    }
    try {
      await fs.promises.mkdir(localDir, { recursive: true });
      await extractTar(r.chunks(), localDir);
    } catch (e) {
      r.abort();
      throw e;
    }
  }
}

// A ustar archive holding the directory "." only (extracted into `path`, it creates `path`).
function tarOfDot(mode: number): Buffer {
  const h = Buffer.alloc(512);
  const put = (s: string, off: number, len: number) => h.write(s, off, len, "ascii");
  const oct = (n: number, len: number) => n.toString(8).padStart(len - 1, "0") + "\0";
  put("./", 0, 100);
  put(oct(mode, 8), 100, 8);
  put(oct(0, 8), 108, 8);
  put(oct(0, 8), 116, 8);
  put(oct(0, 12), 124, 12);
  put(oct(Math.floor(Date.now() / 1000), 12), 136, 12);
  put("        ", 148, 8);
  put("5", 156, 1);
  put("ustar\0", 257, 6);
  put("00", 263, 2);
  let sum = 0;
  for (const b of h) sum += b;
  put(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
  return Buffer.concat([h, Buffer.alloc(1024)]);
}
