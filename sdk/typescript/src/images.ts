// Images: list, inspect, remove, and build from a Dockerfile (docs/images.md).
//
//   import { Space } from "space-sandbox";
//   const image = await new Space().buildImage("agent-env", { context: "./agent", onEvent: console.log });
//
// A build sends the context directory as a tar made as it goes (what .dockerignore at its root
// leaves out is not sent, by Docker's rules; the Dockerfile and .dockerignore always are), runs
// each RUN step in a sandbox of the build profile and streams the steps' progress back. Builds
// take minutes, so the stream has no time limit.

import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { Client, transportError } from "./client.js";
import { errorFor, InvalidArgumentError, NotFoundError, SpaceError } from "./errors.js";
import { tarDir } from "./tar.js";

/** An image, as GET /v1/images/{name} shows it. */
export interface ImageInfo {
  name: string;
  kind?: string;
  format?: string;
  digest?: string;
  size_bytes?: number;
  files?: number;
  created_at?: string;
  config?: Record<string, unknown>;
  [key: string]: unknown;
}

/** One event of a build's stream: "warning" {message}; "step" {step, of, instruction, cached};
 * "output" {step, stream, data}; "step_done" {step, cached, duration_s}; "done" {image};
 * "error" {error: {code, message}}. */
export interface BuildEvent {
  type: "warning" | "step" | "output" | "step_done" | "done" | "error";
  message?: string;
  step?: number;
  of?: number;
  instruction?: string;
  cached?: boolean;
  stream?: "stdout" | "stderr";
  data?: string;
  duration_s?: number;
  image?: ImageInfo;
  error?: { code: string; message: string };
}

export interface BuildOptions {
  /** The build context directory (default "."). */
  context?: string;
  /** The Dockerfile, relative to `context` or absolute (default "Dockerfile"); one outside the
   * context is sent along with it. */
  dockerfile?: string;
  /** The ARGs' values. */
  buildArgs?: Record<string, string>;
  /** The profile of the RUN steps' sandboxes (default: "build" where spaced has one, else "test"). */
  profile?: string;
  /** Credential names the gateway may inject into the RUN steps' requests. */
  secrets?: string[];
  /** HOST[:PORT] narrowing the profile's egress allowlist for the RUN steps. */
  allow?: string[];
  /** Run every step again, even those the build cache has. */
  noCache?: boolean;
  /** Each RUN step's limit: seconds, or a duration such as "10m". */
  stepTimeout?: number | string;
  /** Called with every event as it comes. */
  onEvent?: (event: BuildEvent) => void;
}

const IMAGE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

function imageSegment(name: unknown): string {
  if (typeof name !== "string" || !IMAGE_NAME.test(name))
    throw new InvalidArgumentError(`bad image name ${String(JSON.stringify(name)).slice(0, 80)}: use letters, ` +
      "digits, '_', '-' and '.', starting with a letter or digit", "invalid_argument");
  return name;
}

type Token =
  | { kind: "char"; c: string }
  | { kind: "star" | "one" | "dirs" | "rest" }
  | { kind: "set"; chars: Set<string>; negated: boolean };

/** A .dockerignore, matched as Docker does: patterns relative to the context root, `*`, `?`,
 * `[a-z]`/`[^a-z]`, `**` (any number of directories), `!` exceptions, `#` comments; a pattern
 * matching a directory matches what is under it; the last matching pattern decides. */
export class DockerIgnore {
  private readonly patterns: Array<{ tokens: Token[]; exception: boolean }> = [];
  readonly hasExceptions: boolean;

  constructor(text = "") {
    text.split("\n").forEach((raw, i) => {
      let line = i === 0 && raw.startsWith("\ufeff") ? raw.slice(1) : raw;
      if (line.startsWith("#")) return;
      line = line.trim();
      if (!line) return;
      const exception = line.startsWith("!");
      if (exception) {
        line = line.slice(1).trim();
        if (!line) throw new InvalidArgumentError(`.dockerignore line ${i + 1}: "!" needs a pattern after it`,
                                                  "invalid_argument");
      }
      let pattern = clean(line);
      if (pattern.length > 1 && pattern.startsWith("/")) pattern = pattern.slice(1);
      this.patterns.push({ tokens: compile(pattern, i + 1), exception });
    });
    this.hasExceptions = this.patterns.some((p) => p.exception);
  }

  /** Whether `rel` (relative to the context, "/"-separated) is left out. */
  excluded(rel: string): boolean {
    let excluded = false;
    const parts = rel.split("/");
    for (const p of this.patterns) {
      if (p.exception !== excluded) continue;
      let match = false;
      for (let i = parts.length; i > 0 && !match; i--) match = matches(p.tokens, parts.slice(0, i).join("/"));
      if (match) excluded = !p.exception;
    }
    return excluded;
  }
}

function clean(p: string): string {
  const rooted = p.startsWith("/");
  const out: string[] = [];
  for (const part of p.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (out.length && out[out.length - 1] !== "..") out.pop();
      else if (!rooted) out.push(part);
      continue;
    }
    out.push(part);
  }
  return (rooted ? "/" : "") + out.join("/") || ".";
}

function compile(text: string, line: number): Token[] {
  const bad = (why: string) =>
    new InvalidArgumentError(`.dockerignore line ${line}: ${why} in ${JSON.stringify(text.slice(0, 200))}`,
                             "invalid_argument");
  const chars = Array.from(text); // by code point, as Docker's matcher goes by rune
  const tokens: Token[] = [];
  let i = 0;
  while (i < chars.length) {
    const ch = chars[i++];
    if (ch === "*") {
      if (chars[i] === "*") {
        i++;
        if (chars[i] === "/") i++;
        tokens.push({ kind: i === chars.length ? "rest" : "dirs" });
      } else {
        tokens.push({ kind: "star" });
      }
    } else if (ch === "?") {
      tokens.push({ kind: "one" });
    } else if (ch === "\\") {
      if (i === chars.length) throw bad("a '\\' at the end escapes nothing");
      tokens.push({ kind: "char", c: chars[i++] });
    } else if (ch === "[") {
      const negated = chars[i] === "^";
      if (negated) i++;
      const set = new Set<string>();
      let closed = false;
      while (i < chars.length) {
        let lo = chars[i++];
        if (lo === "]") {
          closed = true;
          break;
        }
        if (lo === "\\") {
          if (i === chars.length) break;
          lo = chars[i++];
        }
        let hi = lo;
        if (i + 1 < chars.length && chars[i] === "-" && chars[i + 1] !== "]") {
          hi = chars[i + 1];
          i += 2;
          if (hi === "\\") {
            if (i === chars.length) break;
            hi = chars[i++];
          }
          if (hi.codePointAt(0)! < lo.codePointAt(0)!) throw bad("a range that runs backwards");
        }
        for (let c = lo.codePointAt(0)!; c <= hi.codePointAt(0)!; c++) set.add(String.fromCodePoint(c));
      }
      if (!closed) throw bad("a '[' without its ']'");
      if (!set.size) throw bad('an empty set "[]"');
      tokens.push({ kind: "set", chars: set, negated });
    } else {
      tokens.push({ kind: "char", c: ch });
    }
  }
  return tokens;
}

/** Whether `tokens` match all of `rel`: a table filled from the end (no backtracking, so no
 * pattern makes a match slow). */
function matches(tokens: Token[], rel: string): boolean {
  const s = Array.from(rel);
  const n = s.length;
  let next: boolean[] = new Array(n + 1).fill(false);
  next[n] = true;
  for (let t = tokens.length - 1; t >= 0; t--) {
    const tok = tokens[t];
    const row: boolean[] = new Array(n + 1).fill(false);
    switch (tok.kind) {
      case "rest":
        row.fill(true);
        break;
      case "char":
        for (let j = 0; j < n; j++) row[j] = s[j] === tok.c && next[j + 1];
        break;
      case "one":
        for (let j = 0; j < n; j++) row[j] = s[j] !== "/" && next[j + 1];
        break;
      case "set":
        for (let j = 0; j < n; j++) row[j] = s[j] !== "/" && tok.chars.has(s[j]) !== tok.negated && next[j + 1];
        break;
      case "star":
        row[n] = next[n];
        for (let j = n - 1; j >= 0; j--) row[j] = next[j] || (s[j] !== "/" && row[j + 1]);
        break;
      case "dirs": {
        let afterSlash = false;
        row[n] = next[n];
        for (let j = n - 1; j >= 0; j--) {
          afterSlash = afterSlash || (s[j] === "/" && next[j + 1]);
          row[j] = next[j] || afterSlash;
        }
        break;
      }
    }
    next = row;
  }
  return next[0];
}

/** Where a build's Dockerfile goes in its context tar: [its name there, its local path when it
 * lies outside the context (appended to the tar), the context's .dockerignore]. */
export async function prepareContext(context: string, dockerfile: string):
    Promise<[string, string | undefined, DockerIgnore]> {
  const st = await fs.promises.stat(context).catch(() => undefined);
  if (!st?.isDirectory())
    throw new InvalidArgumentError(`the build context ${context} is not a directory`, "invalid_argument");
  const root = await fs.promises.realpath(context);
  const local = path.isAbsolute(dockerfile) ? dockerfile : path.join(context, dockerfile);
  const fst = await fs.promises.lstat(local).catch(() => undefined);
  const real = await fs.promises.realpath(local).catch(() => undefined);
  if (!fst || real === undefined || !(await fs.promises.stat(real)).isFile())
    throw new NotFoundError(`no Dockerfile at ${local}`, "not_found");
  const rel = path.relative(root, real);
  let name: string;
  let outside: string | undefined;
  if (rel === ".." || rel.startsWith(".." + path.sep) || path.isAbsolute(rel) || fst.isSymbolicLink() ||
      dockerfile.split("/").includes("..")) {
    name = ".dockerfile." + randomBytes(8).toString("hex");
    outside = real;
  } else {
    name = rel.split(path.sep).join("/");
  }
  let ignore = new DockerIgnore();
  const text = await fs.promises.readFile(path.join(root, ".dockerignore"), "utf8").catch(() => undefined);
  if (text !== undefined) ignore = new DockerIgnore(text);
  return [name, outside, ignore];
}

/** The daemon's own resources (images), as opposed to one sandbox's. */
export class Space {
  readonly client: Client;

  constructor(client?: Client) {
    this.client = client ?? new Client();
  }

  /** Every image, the built-in `host` included. */
  async listImages(): Promise<ImageInfo[]> {
    return (await this.client.call<{ images: ImageInfo[] }>("GET", "/v1/images")).images;
  }

  /** One image: its format, digest, size and config (NotFoundError if none). */
  async getImage(name: string): Promise<ImageInfo> {
    return this.client.call<ImageInfo>("GET", "/v1/images/" + imageSegment(name));
  }

  /** Removes an image (ConflictError while a sandbox uses it). */
  async removeImage(name: string): Promise<void> {
    await this.client.call("DELETE", "/v1/images/" + imageSegment(name));
  }

  /** Builds image `name` from a Dockerfile and a build context directory, and returns the
   * image. Each RUN runs in a sandbox of the build profile; `onEvent` gets every event as it
   * comes. A failed build throws the error class of its code, with spaced's message (it names
   * the failing step and its exit code). */
  async buildImage(name: string, opts: BuildOptions = {}): Promise<ImageInfo> {
    imageSegment(name);
    const context = opts.context ?? ".";
    const [dockerfile, outside, ignore] = await prepareContext(context, opts.dockerfile ?? "Dockerfile");
    const query: Record<string, string | undefined> = { dockerfile, profile: opts.profile };
    if (opts.noCache) query.no_cache = "true";
    if (opts.stepTimeout !== undefined) query.step_timeout = String(opts.stepTimeout);
    if (opts.buildArgs !== undefined && Object.keys(opts.buildArgs).length) {
      for (const [k, v] of Object.entries(opts.buildArgs))
        if (typeof v !== "string")
          throw new InvalidArgumentError(`buildArgs must map names to strings; ${k} is ${typeof v}`, "invalid_argument");
      query.build_args = JSON.stringify(opts.buildArgs);
    }
    for (const [key, items] of [["secrets", opts.secrets], ["allow", opts.allow]] as const) {
      if (items === undefined || !items.length) continue;
      for (const item of items)
        if (typeof item !== "string" || !item || item.includes(","))
          throw new InvalidArgumentError(`bad ${key} entry ${JSON.stringify(item)}: one name each, without commas`,
                                         "invalid_argument");
      query[key] = items.join(",");
    }
    const body = tarDir(context, {
      names: "bare",
      filter: (rel, isDir) => {
        if (rel === ".dockerignore" || (outside === undefined && rel === dockerfile)) return "include";
        if (!ignore.excluded(rel)) return "include";
        const holdsDockerfile = outside === undefined && dockerfile.startsWith(rel + "/");
        return isDir && (ignore.hasExceptions || holdsDockerfile) ? "look" : "skip";
      },
      extra: outside === undefined ? [] : [[dockerfile, outside]],
    });
    // No time limit: a build's steps may run for many minutes without a line.
    const resp = await this.client.request("POST", `/v1/images/${name}/build`, {
      query, body, contentType: "application/x-tar", timeoutMs: 0,
    });
    try {
      for await (const line of resp.lines()) {
        if (!line.trim()) continue;
        let ev: BuildEvent;
        try {
          ev = JSON.parse(line) as BuildEvent;
        } catch {
          throw errorFor("protocol_error", `spaced sent a build event that is not JSON: ${JSON.stringify(line.slice(0, 200))}`);
        }
        opts.onEvent?.(ev);
        if (ev.type === "done") return ev.image ?? { name };
        if (ev.type === "error") throw errorFor(ev.error?.code ?? "internal", ev.error?.message ?? "the build failed");
      }
    } catch (e) {
      resp.abort();
      throw e instanceof SpaceError ? e : transportError(e, this.client.where());
    }
    throw errorFor("protocol_error", `spaced ended the build of ${name} without a result; see its log`);
  }
}
