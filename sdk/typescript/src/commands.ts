// Commands in a sandbox: `sandbox.commands.run(...)`.

import { Client, Response } from "./client.js";
import { CommandExitError, ConflictError, errorFor, NotFoundError } from "./errors.js";

export type Cmd = string | string[];

/** How a command ended. `exitCode` is null when a signal ended it (`signal` says which). */
export interface CommandResult {
  exitCode: number | null;
  stdout: string;
  stderr: string;
  stdoutBytes: Buffer;
  stderrBytes: Buffer;
  signal: number | null;
  timedOut: boolean;
  oomKilled: boolean;
  durationS: number;
  /** Why the program could not start (exit code 126 or 127). */
  error: string | null;
  pid: number | null;
  /** The snapshot taken before the command (`snapshot: true`). */
  snapshot: string | null;
}

export interface RunOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** Kill the command's process tree after this many milliseconds. */
  timeoutMs?: number;
  stdin?: string | Uint8Array;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  /** Throw CommandExitError if the command fails. */
  check?: boolean;
  /** Snapshot the sandbox before the command starts. */
  snapshot?: boolean;
  /** Run as this user: a name of the sandbox, a uid or "uid:gid" (default root). */
  user?: string | number;
}

function argv(cmd: Cmd): string[] {
  if (typeof cmd === "string") return ["sh", "-c", cmd];
  if (!Array.isArray(cmd) || cmd.length === 0 || !cmd.every((a) => typeof a === "string"))
    throw new TypeError("cmd must be a shell string or a non-empty array of strings");
  return [...cmd];
}

/** A command running in the background (`run(cmd, {background: true})`). */
export class CommandHandle {
  pid: number | null = null;
  snapshot: string | null = null;
  private out: Buffer[] = [];
  private err: Buffer[] = [];
  private done = false;
  private readonly started: Promise<void>;
  private readonly finished: Promise<CommandResult>;

  constructor(
    readonly sandboxId: string,
    private readonly client: Client,
    private readonly resp: Response,
    private readonly opts: RunOptions,
  ) {
    let markStarted!: () => void;
    this.started = new Promise((r) => (markStarted = r));
    this.finished = this.pump(markStarted).finally(() => {
      this.done = true;
      markStarted();
    });
    this.finished.catch(() => {}); // surfaced by wait()
  }

  private async pump(markStarted: () => void): Promise<CommandResult> {
    let ended: any = null;
    for await (const line of this.resp.lines()) {
      if (!line.trim()) continue;
      const ev = JSON.parse(line);
      if (ev.type === "started") {
        this.pid = ev.pid ?? null;
        this.snapshot = ev.snapshot ?? null;
        markStarted();
      } else if (ev.type === "stdout" || ev.type === "stderr") {
        const data = Buffer.from(ev.data ?? "", "base64");
        (ev.type === "stdout" ? this.out : this.err).push(data);
        const handler = ev.type === "stdout" ? this.opts.onStdout : this.opts.onStderr;
        handler?.(data.toString("utf8"));
      } else if (ev.type === "exit") {
        ended = ev;
      } else if (ev.type === "error") {
        throw errorFor(String(ev.error?.code ?? "internal"), String(ev.error?.message ?? "the exec failed"));
      }
    }
    if (!ended)
      throw errorFor("unavailable", `the exec stream of sandbox ${this.sandboxId} ended without an exit ` +
        "event (the sandbox was destroyed, or spaced stopped)");
    const out = Buffer.concat(this.out), err = Buffer.concat(this.err);
    return {
      exitCode: ended.exit_code ?? null, stdout: out.toString("utf8"), stderr: err.toString("utf8"),
      stdoutBytes: out, stderrBytes: err, signal: ended.signal ?? null, timedOut: !!ended.timed_out,
      oomKilled: !!ended.oom_killed, durationS: Number(ended.duration_s ?? 0),
      error: typeof ended.error === "string" ? ended.error : null, pid: this.pid, snapshot: this.snapshot,
    };
  }

  /** Waits until the process runs; its pid inside the sandbox. */
  async waitStarted(): Promise<number | null> {
    await this.started;
    if (this.pid === null) await this.finished; // throws why it never started
    return this.pid;
  }

  /** Waits for the command to end. */
  async wait(opts: { timeoutMs?: number; check?: boolean } = {}): Promise<CommandResult> {
    let result: CommandResult;
    if (opts.timeoutMs !== undefined) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(errorFor("timeout",
          `the command (pid ${this.pid}) is still running after ${opts.timeoutMs} ms`)), opts.timeoutMs);
      });
      try {
        result = await Promise.race([this.finished, timeout]);
      } finally {
        clearTimeout(timer);
      }
    } else {
      result = await this.finished;
    }
    if ((opts.check ?? this.opts.check) && result.exitCode !== 0) throw new CommandExitError(result);
    return result;
  }

  get running(): boolean {
    return !this.done;
  }

  /** The output so far. */
  get stdout(): string {
    return Buffer.concat(this.out).toString("utf8");
  }

  get stderr(): string {
    return Buffer.concat(this.err).toString("utf8");
  }

  /** Sends `signal` to the command's process and every process it started; if it has not
   * ended `graceMs` later, cuts its stream, which makes spaced kill its whole process tree. */
  async kill(signal = 9, graceMs = 2000): Promise<void> {
    const pid = await this.waitStarted();
    if (pid !== null && !this.done) {
      let tree = [pid];
      try {
        const { processes } = await this.client.call(
          "GET", `/v1/sandboxes/${this.sandboxId}/processes`);
        const children = new Map<number, number[]>();
        for (const p of processes) {
          const list = children.get(p.ppid ?? 0) ?? [];
          list.push(p.pid);
          children.set(p.ppid ?? 0, list);
        }
        tree = [];
        const todo = [pid];
        while (todo.length) {
          const p = todo.pop()!;
          tree.push(p);
          todo.push(...(children.get(p) ?? []));
        }
      } catch (e) {
        if (!(e instanceof NotFoundError || e instanceof ConflictError)) throw e;
      }
      for (const p of tree) {
        try {
          await this.client.call("DELETE", `/v1/sandboxes/${this.sandboxId}/processes/${p}`,
                                 { query: { signal } });
        } catch (e) {
          if (!(e instanceof NotFoundError || e instanceof ConflictError)) throw e;
        }
      }
    }
    const settled = this.finished.then(() => true, () => true);
    const inTime = await Promise.race([settled, new Promise<boolean>((r) => setTimeout(() => r(false), graceMs))]);
    if (!inTime) this.resp.abort();
  }
}

/** `sandbox.commands`: run commands in one sandbox. */
export class Commands {
  constructor(private readonly sandboxId: string, private readonly client: Client) {}

  /** Runs `cmd` (a shell string, run by `sh -c`, or an argv array) and waits for it. */
  run(cmd: Cmd, opts: RunOptions & { background: true }): Promise<CommandHandle>;
  run(cmd: Cmd, opts?: RunOptions & { background?: false }): Promise<CommandResult>;
  async run(cmd: Cmd, opts: RunOptions & { background?: boolean } = {}): Promise<CommandResult | CommandHandle> {
    const req: Record<string, unknown> = { cmd: argv(cmd) };
    if (opts.env) req.env = opts.env;
    if (opts.cwd !== undefined) req.cwd = opts.cwd;
    if (opts.timeoutMs !== undefined) req.timeout = opts.timeoutMs / 1000;
    if (opts.snapshot) req.snapshot = true;
    if (opts.user !== undefined) req.user = opts.user;
    const path = `/v1/sandboxes/${this.sandboxId}/exec`;
    let resp: Response;
    if (opts.stdin !== undefined) {
      req.stdin = true;
      const data = typeof opts.stdin === "string" ? Buffer.from(opts.stdin) : Buffer.from(opts.stdin);
      const head = Buffer.from(JSON.stringify(req) + "\n");
      resp = await this.client.request("POST", path, {
        body: (function* () { yield head; yield data; })(),
        contentType: "application/octet-stream", timeoutMs: 0,
      });
    } else {
      resp = await this.client.request("POST", path, { json: req, timeoutMs: 0 });
    }
    const handle = new CommandHandle(this.sandboxId, this.client, resp, opts);
    if (opts.background) {
      await handle.waitStarted();
      return handle;
    }
    return handle.wait({ check: opts.check });
  }

  /** Sends `signal` to process `pid` of the sandbox. */
  async kill(pid: number, signal = 15): Promise<void> {
    await this.client.call("DELETE", `/v1/sandboxes/${this.sandboxId}/processes/${pid}`, { query: { signal } });
  }

  /** The processes running in the sandbox. */
  async list(): Promise<Array<{ pid: number; ppid: number; uid: number; state: string; argv: string[] }>> {
    return (await this.client.call("GET", `/v1/sandboxes/${this.sandboxId}/processes`)).processes;
  }
}
