// Sandboxes: create, connect, pause, snapshot, roll back, destroy.

import { Client, segment } from "./client.js";
import { CodeContext, CodeInterpreter, Execution, RunCodeOptions } from "./code.js";
import { Commands } from "./commands.js";
import { ConflictError, NotFoundError } from "./errors.js";
import { Files } from "./files.js";
import { Ports } from "./ports.js";
import { Pty } from "./pty.js";

export interface SandboxInfo {
  id: string;
  state: "creating" | "running" | "paused" | "rolling_back" | "destroying" | "destroyed";
  runtime: string;
  image: string;
  profile: string;
  createdAt: string;
  expiresAt: string | null;
  limits: { memory?: number; cpus?: number; pids?: number; disk?: number };
  env: Record<string, string>;
  workdir?: string;
  raw: any;
}

export interface SnapshotInfo {
  id: string;
  sandbox: string;
  profile: string;
  name: string | null;
  kind: string;
  createdAt: string;
  expiresAt: string | null;
  files: number;
  contents: string;
  processes: string;
  raw: any;
}

export interface CreateOptions {
  image?: string;
  profile?: string;
  runtime?: "linux" | "qemu" | "firecracker";
  /** Bytes, or a size such as "512M". */
  memory?: number | string;
  cpus?: number | string;
  pids?: number;
  disk?: number | string;
  /** Lifetime in ms: the sandbox is destroyed when it expires (setTimeout gives a new one). */
  timeoutMs?: number;
  /** Destroyed once no call used it for this long (ms). */
  idleTimeoutMs?: number;
  env?: Record<string, string>;
  /** Credential names the egress gateway may inject for it (it sees placeholders only). */
  secrets?: string[];
  /** HOST[:PORT] entries narrowing the profile's egress allowlist. */
  allow?: string[];
  workdir?: string;
  client?: Client;
}

function sandboxInfo(j: any): SandboxInfo {
  return {
    id: j.id, state: j.state, runtime: j.runtime, image: j.image, profile: j.profile, createdAt: j.created_at,
    expiresAt: j.expires_at ?? null, limits: j.limits ?? {}, env: j.env ?? {}, workdir: j.workdir, raw: j,
  };
}

function snapshotInfo(j: any): SnapshotInfo {
  return {
    id: j.id, sandbox: j.sandbox, profile: j.profile, name: j.name ?? null, kind: j.kind, createdAt: j.created_at,
    expiresAt: j.expires_at ?? null, files: Number(j.files ?? 0), contents: j.contents, processes: j.processes, raw: j,
  };
}

/** One sandbox. `await using sb = await Sandbox.create()` destroys it at the end of the scope. */
export class Sandbox {
  readonly id: string;
  readonly commands: Commands;
  readonly files: Files;
  /** Commands on a terminal: `sandbox.pty.create({ cmd: "bash", onData })`. */
  readonly pty: Pty;
  private readonly code: CodeInterpreter;
  private readonly ports: Ports;

  private constructor(public info: SandboxInfo, private readonly client: Client) {
    this.id = info.id;
    this.commands = new Commands(this.id, client);
    this.files = new Files(this.id, client);
    this.code = new CodeInterpreter(this, client);
    this.pty = new Pty(this.id, client);
    this.ports = new Ports(this.id, client);
  }

  /** "127.0.0.1:PORT" on this machine, forwarded to `port` inside the sandbox (a listener of
   * this Sandbox object, started on first use; each connection to it is tunneled through
   * spaced). A connection made while nothing listens there is reset. */
  async getHost(port: number): Promise<string> {
    return (await this.ports.forward(port)).host;
  }

  /** "http://127.0.0.1:PORT", forwarded to `port` inside the sandbox (see getHost). */
  async getUrl(port: number): Promise<string> {
    return `http://${await this.getHost(port)}`;
  }

  /** Resolves once something listens on `port` inside the sandbox; SpaceTimeoutError if
   * nothing did within `timeoutMs` (default 60 s). */
  waitForPort(port: number, opts: { timeoutMs?: number } = {}): Promise<void> {
    return this.ports.waitFor(port, opts);
  }

  /** Stops this object's port forwards (the sandbox runs on; destroy() closes them too). */
  close(): Promise<void> {
    return this.ports.close();
  }

  /** Runs Python `code` in a stateful context (the default one unless `context`): variables
   * survive between runs. Stdout, stderr, results (the last expression, figures as PNG, HTML)
   * and the error with its traceback. */
  runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    return this.code.run(code, opts);
  }

  /** A new, separate Python context (its own variables). */
  createCodeContext(language: "python" = "python"): Promise<CodeContext> {
    return this.code.createContext(language);
  }

  /** A new sandbox; unset options take the daemon's defaults (image "host", profile "test"). */
  static async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const client = opts.client ?? new Client();
    const body: Record<string, unknown> = {};
    for (const k of ["image", "profile", "runtime", "memory", "cpus", "pids", "disk", "env", "secrets", "allow",
                     "workdir"] as const) {
      if (opts[k] !== undefined) body[k] = opts[k];
    }
    if (opts.timeoutMs !== undefined) body.timeout = opts.timeoutMs / 1000;
    if (opts.idleTimeoutMs !== undefined) body.idle_timeout = opts.idleTimeoutMs / 1000;
    const j = await client.call("POST", "/v1/sandboxes", { json: body, timeoutMs: Math.max(client.timeoutMs, 300_000) });
    return new Sandbox(sandboxInfo(j), client);
  }

  /** The existing sandbox `id` (NotFoundError if there is none, InvalidArgumentError for a
   * string that is no sandbox id: they look like sb_0123abcd). */
  static async connect(id: string, opts: { client?: Client } = {}): Promise<Sandbox> {
    const client = opts.client ?? new Client();
    return new Sandbox(sandboxInfo(await client.call("GET", `/v1/sandboxes/${segment(id)}`)), client);
  }

  /** Every sandbox the caller may see. */
  static async list(opts: { client?: Client } = {}): Promise<SandboxInfo[]> {
    const client = opts.client ?? new Client();
    return (await client.call("GET", "/v1/sandboxes")).sandboxes.map(sandboxInfo);
  }

  /** A new sandbox holding the files of `snapshot` (an id, a name or a SnapshotInfo). */
  static async restore(snapshot: string | SnapshotInfo, opts: { client?: Client } = {}): Promise<Sandbox> {
    const client = opts.client ?? new Client();
    const ref = typeof snapshot === "string" ? snapshot : snapshot.id;
    const j = await client.call("POST", `/v1/snapshots/${segment(ref, "snapshot")}/restore`,
      { json: {}, timeoutMs: Math.max(client.timeoutMs, 300_000) });
    return new Sandbox(sandboxInfo(j), client);
  }

  async getInfo(): Promise<SandboxInfo> {
    this.info = sandboxInfo(await this.client.call("GET", `/v1/sandboxes/${this.id}`));
    return this.info;
  }

  async isRunning(): Promise<boolean> {
    try {
      return (await this.getInfo()).state === "running";
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Destroys the sandbox (idempotent). `wait: false` answers once it is unreachable. */
  async destroy(opts: { wait?: boolean } = {}): Promise<void> {
    await this.close();
    try {
      await (await this.client.request("DELETE", `/v1/sandboxes/${this.id}`,
        { query: { force: true, wait: opts.wait !== false } })).bytes();
    } catch (e) {
      if (!(e instanceof NotFoundError || e instanceof ConflictError)) throw e;
    }
  }

  /** Same as destroy(). */
  kill(): Promise<void> {
    return this.destroy();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy({ wait: false });
  }

  /** A new lifetime: the sandbox is destroyed `timeoutMs` from now. */
  async setTimeout(timeoutMs: number): Promise<SandboxInfo> {
    return (this.info = sandboxInfo(await this.client.call("POST", `/v1/sandboxes/${this.id}/timeout`,
      { json: { timeout: timeoutMs / 1000 } })));
  }

  async pause(): Promise<SandboxInfo> {
    return (this.info = sandboxInfo(await this.client.call("POST", `/v1/sandboxes/${this.id}/pause`)));
  }

  async resume(): Promise<SandboxInfo> {
    return (this.info = sandboxInfo(await this.client.call("POST", `/v1/sandboxes/${this.id}/resume`)));
  }

  /** Snapshots the sandbox's files (its processes are frozen meanwhile). */
  async snapshot(name?: string): Promise<SnapshotInfo> {
    return snapshotInfo(await this.client.call("POST", `/v1/sandboxes/${this.id}/snapshots`,
      { json: name === undefined ? {} : { name }, timeoutMs: Math.max(this.client.timeoutMs, 600_000) }));
  }

  async snapshots(): Promise<SnapshotInfo[]> {
    return (await this.client.call("GET", `/v1/sandboxes/${this.id}/snapshots`)).snapshots.map(snapshotInfo);
  }

  /** Puts the files back to `snapshot`, in place (processes restart). */
  async rollback(snapshot: string | SnapshotInfo): Promise<{ snapshot: string; saved_as: string | null; processes: string }> {
    const ref = typeof snapshot === "string" ? snapshot : snapshot.id;
    const j = await this.client.call("POST", `/v1/sandboxes/${this.id}/rollback`,
      { json: { snapshot: ref }, timeoutMs: Math.max(this.client.timeoutMs, 600_000) });
    this.info = sandboxInfo(j);
    return j.rollback;
  }

  async diff(since?: string): Promise<{ added: string[]; changed: string[]; deleted: string[] }> {
    return this.client.call("GET", `/v1/sandboxes/${this.id}/diff`, { query: { since } });
  }

  /** The audit events (commands, processes, file operations, life cycle), in order. */
  async audit(opts: { after?: number; limit?: number } = {}): Promise<any[]> {
    return (await this.client.call("GET", `/v1/sandboxes/${this.id}/audit`,
      { query: { after: opts.after || undefined, limit: opts.limit } })).events;
  }

  /** Checks the audit log's hash chain. */
  async verifyAudit(): Promise<{ ok: boolean; events: number; first_bad_seq?: number | null; problem?: string }> {
    return this.client.call("GET", `/v1/sandboxes/${this.id}/audit`, { query: { verify: true } });
  }
}
