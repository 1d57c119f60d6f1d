// Commands in a sandbox: `sandbox.commands.run(...)`.

import { Client, Response } from "./client.js";
import {
  CommandExitError, ConflictError, DaemonRestartError, errorFor, NotFoundError, sdkMessage,
  SpaceError,
} from "./errors.js";

export type Cmd = string | string[];

// How long past a command's timeoutMs the SDK waits for its stream's next bytes.
const STREAM_MARGIN_MS = 60_000;

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
  /** Why the program could not start: 126 (a missing cwd, a program not executable), 125 (an
   * unknown user), 127 (no such program). Such a command wrote nothing, so `stderr` carries the
   * same reason (a line), where an agent reads it. */
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

/** Where a handle's events come from: a live exec stream, a detached command's followed logs,
 * or (a detached command that could not start) its exit event alone. */
export interface HandleSource {
  resp?: Response;
  detached?: boolean;
  pid?: number | null;
  snapshot?: string | null;
  ended?: Record<string, unknown>;
}

/** A command running in the background (`run(cmd, {background: true})`, or
 * `commands.connect(pid)`). Without `stdin` it runs detached: it goes on when this program ends
 * or calls `disconnect()`, and `commands.connect(pid)` follows it again (spaced keeps its last
 * 1 MiB of output and its exit). With `stdin` it stays attached to this connection. */
export class CommandHandle {
  pid: number | null = null;
  snapshot: string | null = null;
  /** Output bytes spaced no longer kept when this handle connected (detached commands). */
  dropped = 0;
  readonly detached: boolean;
  private readonly resp: Response | undefined;
  private out: Buffer[] = [];
  private err: Buffer[] = [];
  private done = false;
  private disconnected = false;
  private aborted = false; // this program cut the stream (disconnect, kill)
  private readonly started: Promise<void>;
  private readonly finished: Promise<CommandResult>;

  constructor(
    readonly sandboxId: string,
    private readonly client: Client,
    source: HandleSource,
    private readonly opts: RunOptions,
  ) {
    this.resp = source.resp;
    this.detached = !!source.detached;
    this.pid = source.pid ?? null;
    this.snapshot = source.snapshot ?? null;
    let markStarted!: () => void;
    this.started = new Promise((r) => (markStarted = r));
    const lines: AsyncIterable<string> = source.resp
      ? source.resp.lines()
      : (async function* () { yield JSON.stringify({ ...(source.ended ?? {}), type: "exit" }); })();
    this.finished = this.pump(lines, markStarted).finally(() => {
      this.done = true;
      markStarted();
    });
    this.finished.catch(() => {}); // surfaced by wait()
  }

  private reconnectHint(): string {
    return `reconnect with Sandbox.connect(${JSON.stringify(this.sandboxId)}) once spaced is back, ` +
      "then check commands.list() or run the command again; commands started detached " +
      "(background: true) survive a restart";
  }

  private async pump(lines: AsyncIterable<string>, markStarted: () => void): Promise<CommandResult> {
    let ended: any = null;
    try {
      for await (const line of lines) {
        if (!line.trim()) continue;
        const ev = JSON.parse(line);
        if (ev.type === "started") {
          this.pid = ev.pid ?? null;
          this.snapshot = ev.snapshot ?? this.snapshot;
          this.dropped += Number(ev.dropped ?? 0);
          markStarted();
        } else if (ev.type === "dropped") {
          this.dropped += Number(ev.bytes ?? 0);
        } else if (ev.type === "stdout" || ev.type === "stderr") {
          const data = Buffer.from(ev.data ?? "", "base64");
          (ev.type === "stdout" ? this.out : this.err).push(data);
          const handler = ev.type === "stdout" ? this.opts.onStdout : this.opts.onStderr;
          handler?.(data.toString("utf8"));
        } else if (ev.type === "exit") {
          ended = ev;
        } else if (ev.type === "error") {
          const code = String(ev.error?.code ?? "internal");
          const message = String(ev.error?.message ?? "the exec failed");
          if (ev.error?.reason === "shutdown") // the stable field, not the message
            throw new DaemonRestartError(`${sdkMessage(message)}; ${this.reconnectHint()}`,
              { reason: "shutdown", sandboxId: this.sandboxId, pid: this.pid, code, serverMessage: message });
          throw errorFor(code, message);
        }
      }
    } catch (e) {
      // The connection broke mid-stream ("aborted", ECONNRESET): told below if no "exit" came
      // first. Errors of the stream's own ("error" events) and bad JSON are thrown on.
      if (e instanceof SpaceError || e instanceof SyntaxError) throw e;
    }
    if (!ended) {
      if (this.disconnected)
        throw errorFor("unavailable", `disconnected from the command (pid ${this.pid}); ` +
          "commands.connect(pid) follows it again");
      if (this.aborted)
        throw errorFor("unavailable", `the stream of the command (pid ${this.pid}) in sandbox ` +
          `${this.sandboxId} was cut by kill() before its exit event`);
      // spaced always ends a stream with "exit" or "error": the connection was lost.
      throw new DaemonRestartError(`the connection to spaced closed before the command (pid ${this.pid}) ` +
        `in sandbox ${this.sandboxId} ended: spaced may have restarted or crashed; ${this.reconnectHint()}`,
        { reason: "connection_lost", sandboxId: this.sandboxId, pid: this.pid });
    }
    const out = Buffer.concat(this.out);
    let err = Buffer.concat(this.err);
    if (typeof ended.error === "string" && ended.error && !err.length) // it could not start: say why
      err = Buffer.from(ended.error + "\n");
    return {
      exitCode: ended.exit_code ?? null, stdout: out.toString("utf8"), stderr: err.toString("utf8"),
      stdoutBytes: out, stderrBytes: err, signal: ended.signal ?? null, timedOut: !!ended.timed_out,
      oomKilled: !!ended.oom_killed, durationS: Number(ended.duration_s ?? 0),
      error: typeof ended.error === "string" ? ended.error : null, pid: this.pid, snapshot: this.snapshot,
    };
  }

  /** Waits until the process runs; its pid inside the sandbox. */
  async waitStarted(): Promise<number | null> {
    if (this.pid !== null) return this.pid;
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

  /** Stops following the command; a detached one runs on (`commands.connect(pid)`). */
  async disconnect(): Promise<void> {
    if (!this.resp || this.done) return;
    this.disconnected = true;
    this.aborted = true;
    this.resp.abort();
    await this.finished.then(() => {}, () => {});
  }

  private async signalTree(pid: number, signal: number): Promise<void> {
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
    for (const p of tree) { // parents first: they cannot start new children once stopped
      try {
        await this.client.call("DELETE", `/v1/sandboxes/${this.sandboxId}/processes/${p}`,
                               { query: { signal } });
      } catch (e) {
        if (!(e instanceof NotFoundError || e instanceof ConflictError)) throw e;
      }
    }
  }

  /** Sends `signal` to the command's process and every process it started; if it has not
   * ended `graceMs` later, kills what is left of its tree (SIGKILL; an attached command: by
   * cutting its stream). */
  async kill(signal = 9, graceMs = 2000): Promise<void> {
    const pid = await this.waitStarted();
    if (pid !== null && !this.done) await this.signalTree(pid, signal);
    const settled = () => this.finished.then(() => true, () => true);
    const within = (ms: number) =>
      Promise.race([settled(), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);
    if (await within(graceMs)) return;
    if (this.detached && pid !== null) await this.signalTree(pid, 9);
    else if (this.resp) {
      this.aborted = true;
      this.resp.abort();
    }
    await within(graceMs);
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
    if (opts.background && opts.stdin === undefined) {
      req.detach = true;
      const started = await this.client.call("POST", path, { json: req });
      if (started.pid === null || started.pid === undefined) // it ended before it ran
        return new CommandHandle(this.sandboxId, this.client,
          { detached: true, snapshot: started.snapshot ?? null, ended: started.exit ?? {} }, opts);
      return this.followLogs(Number(started.pid), opts, started.snapshot ?? null);
    }
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
    // No read timeout on the stream unless the command has one: spaced ends it by then.
    if (opts.timeoutMs !== undefined)
      resp.failWhenIdle(opts.timeoutMs + STREAM_MARGIN_MS, "spaced sent nothing on the command in sandbox " +
        `${this.sandboxId} for ${STREAM_MARGIN_MS / 1000} s past its own timeout; commands.list() shows ` +
        "whether it still runs");
    const handle = new CommandHandle(this.sandboxId, this.client, { resp }, opts);
    if (opts.background) {
      await handle.waitStarted();
      return handle;
    }
    return handle.wait({ check: opts.check });
  }

  /** Follows the detached command `pid` (started with `background: true`, here or by another
   * program): the output spaced kept of it (its last 1 MiB), then new output, and its end
   * (`wait()`). Throws NotFoundError for a pid that was not started detached. */
  async connect(pid: number, opts: Pick<RunOptions, "onStdout" | "onStderr"> = {}): Promise<CommandHandle> {
    return this.followLogs(pid, opts, null);
  }

  private async followLogs(pid: number, opts: RunOptions, snapshot: string | null): Promise<CommandHandle> {
    const resp = await this.client.request("GET", `/v1/sandboxes/${this.sandboxId}/processes/${pid}/logs`,
      { query: { follow: "true" }, timeoutMs: 0 });
    return new CommandHandle(this.sandboxId, this.client, { resp, detached: true, pid, snapshot }, opts);
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
