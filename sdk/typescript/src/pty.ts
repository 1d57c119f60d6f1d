// Terminals in a sandbox: `sandbox.pty.create(...)`.
//
// A command on a pseudo-terminal inside the sandbox (bash for a person or an agent to type
// into), over one upgraded connection to spaced (POST /v1/sandboxes/{id}/exec with "Upgrade:
// space-terminal") that carries JSON lines both ways: keys, the window size and signals go up;
// the terminal's output and the command's exit come down. Hanging up (close()) kills the
// command's process tree.

import { StringDecoder } from "node:string_decoder";
import type { Duplex } from "node:stream";
import { Client } from "./client.js";
import type { Cmd } from "./commands.js";
import { DaemonRestartError, errorFor, InvalidArgumentError, sdkMessage } from "./errors.js";
import { openUpgrade } from "./upgrade.js";

export interface PtyCreateOptions {
  /** A shell string (run by `sh -c`) or an argv array; default an interactive bash. */
  cmd?: Cmd;
  rows?: number;
  cols?: number;
  /** The terminal's output (bytes, as it writes them: echo, colours, "\r\n") as it comes. */
  onData?: (data: Uint8Array) => void;
  cwd?: string;
  /** Added to the sandbox's environment; TERM is xterm-256color unless given. */
  env?: Record<string, string>;
  /** Run as this user: a name of the sandbox, a uid or "uid:gid" (default root). */
  user?: string | number;
  /** Kill the command's process tree after this many milliseconds. */
  timeoutMs?: number;
}

function argv(cmd: Cmd): string[] {
  if (typeof cmd === "string") return ["sh", "-c", cmd];
  if (!Array.isArray(cmd) || cmd.length === 0 || !cmd.every((a) => typeof a === "string"))
    throw new TypeError("cmd must be a shell string or a non-empty array of strings");
  return [...cmd];
}

function checkSize(rows: number, cols: number): void {
  for (const [name, v] of [["rows", rows], ["cols", cols]] as const) {
    if (!Number.isInteger(v) || v < 1 || v > 4096)
      throw new InvalidArgumentError(`${name} must be a number 1-4096, not ${String(v)}`, "invalid_argument");
  }
}

/** A command running on a terminal in the sandbox. Its output goes to `onData` as it comes, is
 * kept in `output`, and can be iterated (`for await (const chunk of handle)`); `wait()` resolves
 * with its exit code. */
export class PtyHandle {
  /** The command's pid inside the sandbox. */
  pid: number | null = null;
  /** How it ended: its exit code, or null with `signal` the signal that ended it. */
  exitCode: number | null = null;
  signal: number | null = null;
  private readonly chunks: Buffer[] = [];
  private wakeReaders: (() => void)[] = [];
  private done = false;
  private hungUp = false;
  private readonly started: Promise<void>;
  private readonly finished: Promise<number>;

  /** @internal Use `sandbox.pty.create()`. */
  constructor(readonly sandboxId: string, private readonly socket: Duplex, head: Buffer,
              private readonly onData?: (data: Uint8Array) => void) {
    let markStarted!: () => void;
    this.started = new Promise((r) => (markStarted = r));
    this.finished = new Promise<number>((resolve, reject) => {
      const decoder = new StringDecoder("utf8");
      let pending = "";
      let ended = false;
      const feed = (data: Buffer) => {
        pending += decoder.write(data);
        let nl: number;
        while (!ended && (nl = pending.indexOf("\n")) >= 0) {
          const line = pending.slice(0, nl);
          pending = pending.slice(nl + 1);
          if (!line.trim()) continue;
          try {
            if (this.event(JSON.parse(line), markStarted)) {
              ended = true;
              resolve(this.exitCode ?? 128 + (this.signal ?? 0));
              socket.destroy();
            }
          } catch (e) {
            ended = true;
            reject(e);
            socket.destroy();
          }
        }
      };
      socket.on("data", feed);
      socket.on("error", () => {}); // ends in "close"
      socket.on("close", () => {
        if (!ended) {
          reject(this.hungUp
            ? errorFor("unavailable", `the terminal (pid ${this.pid}) in sandbox ${this.sandboxId} was closed ` +
                "before its command ended")
            : new DaemonRestartError(`the connection to spaced closed before the terminal's command ` +
                `(pid ${this.pid}) in sandbox ${this.sandboxId} ended: spaced may have restarted or crashed; ` +
                `reconnect with Sandbox.connect(${JSON.stringify(this.sandboxId)}) once it is back`,
                { reason: "connection_lost", sandboxId: this.sandboxId, pid: this.pid }));
        }
      });
      if (head.length) feed(head);
    }).finally(() => {
      this.done = true;
      markStarted();
      for (const w of this.wakeReaders.splice(0)) w();
    });
    this.finished.catch(() => {}); // surfaced by wait()
  }

  /** One event; true for the last one ("exit"). */
  private event(ev: any, markStarted: () => void): boolean {
    if (ev.type === "started") {
      this.pid = typeof ev.pid === "number" ? ev.pid : null;
      markStarted();
    } else if (ev.type === "stdout" || ev.type === "stderr") {
      const data = Buffer.from(ev.data ?? "", "base64");
      this.chunks.push(data);
      for (const w of this.wakeReaders.splice(0)) w();
      if (data.length) this.onData?.(data);
    } else if (ev.type === "exit") {
      this.exitCode = typeof ev.exit_code === "number" ? ev.exit_code : null;
      this.signal = typeof ev.signal === "number" ? ev.signal : null;
      return true;
    } else if (ev.type === "error") {
      const code = String(ev.error?.code ?? "internal");
      const message = String(ev.error?.message ?? "the terminal failed");
      if (ev.error?.reason === "shutdown")
        throw new DaemonRestartError(`${sdkMessage(message)}; reconnect with Sandbox.connect(${JSON.stringify(this.sandboxId)}) ` +
          "once spaced is back", { reason: "shutdown", sandboxId: this.sandboxId, pid: this.pid, code,
                                   serverMessage: message });
      throw errorFor(code, message);
    }
    return false;
  }

  private send(event: Record<string, unknown>): Promise<void> {
    if (this.done || this.socket.destroyed)
      return Promise.reject(errorFor("conflict", `the terminal's command (pid ${this.pid}) has ended`));
    return new Promise((resolve, reject) => {
      this.socket.write(JSON.stringify(event) + "\n", (e) => e
        ? reject(errorFor("unavailable", `the terminal's connection to spaced is closed (${e.message})`))
        : resolve());
    });
  }

  /** Types `data` (a string is sent as UTF-8): "ls\n", "\x03" for Ctrl-C. */
  async sendInput(data: string | Uint8Array): Promise<void> {
    const raw = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    for (let i = 0; i < raw.length; i += 1 << 16)
      await this.send({ type: "stdin", data: raw.subarray(i, i + (1 << 16)).toString("base64") });
  }

  /** A new window size (the command gets SIGWINCH). */
  async resize(rows: number, cols: number): Promise<void> {
    checkSize(rows, cols);
    await this.send({ type: "resize", rows, cols });
  }

  /** Sends `signal` (default SIGKILL) to the command; nothing if it has ended. */
  async kill(signal = 9): Promise<void> {
    if (!Number.isInteger(signal) || signal < 1 || signal > 64)
      throw new InvalidArgumentError(`signal must be a number 1-64, not ${String(signal)}`, "invalid_argument");
    if (this.done) return;
    try {
      await this.send({ type: "signal", signal });
    } catch (e) {
      if (!this.done) throw e;
    }
  }

  /** End of input (the terminal's EOF character, Ctrl-D). */
  sendEof(): Promise<void> {
    return this.send({ type: "eof" });
  }

  /** Everything the terminal wrote so far. */
  get output(): Buffer {
    return Buffer.concat(this.chunks);
  }

  get running(): boolean {
    return !this.done;
  }

  /** The output, chunk by chunk (from the start), until the command ends. */
  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    let i = 0;
    for (;;) {
      while (i >= this.chunks.length && !this.done) await new Promise<void>((r) => this.wakeReaders.push(r));
      if (i >= this.chunks.length) return;
      yield this.chunks[i++];
    }
  }

  /** Waits until the command runs; its pid. */
  async waitStarted(): Promise<number | null> {
    await this.started;
    if (this.pid === null) await this.finished; // throws why it never started
    return this.pid;
  }

  /** Waits for the command to end: its exit code (128 + N when signal N ended it, as a shell
   * says). Rejects with SpaceTimeoutError if it still runs after `timeoutMs` (it runs on). */
  async wait(opts: { timeoutMs?: number } = {}): Promise<number> {
    if (opts.timeoutMs === undefined) return this.finished;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(errorFor("timeout",
        `the terminal's command (pid ${this.pid}) is still running after ${opts.timeoutMs} ms`)), opts.timeoutMs);
    });
    try {
      return await Promise.race([this.finished, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Hangs up: spaced kills the command's process tree if it still runs (idempotent). */
  async close(): Promise<void> {
    if (this.done) return;
    this.hungUp = true;
    this.socket.destroy();
    await this.finished.catch(() => {});
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** `sandbox.pty`: commands on a terminal. */
export class Pty {
  constructor(private readonly sandboxId: string, private readonly client: Client) {}

  /** Starts `cmd` (default an interactive bash) on a `rows` x `cols` terminal (24 x 80);
   * resolves once it runs. */
  async create(opts: PtyCreateOptions = {}): Promise<PtyHandle> {
    const rows = opts.rows ?? 24, cols = opts.cols ?? 80;
    checkSize(rows, cols);
    const req: Record<string, unknown> = {
      cmd: argv(opts.cmd ?? "bash"), rows, cols, env: { TERM: "xterm-256color", ...(opts.env ?? {}) },
    };
    if (opts.cwd !== undefined) req.cwd = opts.cwd;
    if (opts.user !== undefined) req.user = opts.user;
    if (opts.timeoutMs !== undefined) req.timeout = opts.timeoutMs / 1000;
    const { socket, head } = await openUpgrade(this.client, `/v1/sandboxes/${this.sandboxId}/exec`,
      "space-terminal", { json: req });
    const handle = new PtyHandle(this.sandboxId, socket, head, opts.onData);
    await handle.waitStarted();
    return handle;
  }
}
