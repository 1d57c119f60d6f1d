// The code interpreter: stateful Python contexts in a sandbox (`sandbox.runCode`).
//
// A context is a Python process inside the sandbox (interpreter.py serve, started as a detached
// exec) that keeps its variables between runs; each run is an exec of `interpreter.py run` that
// sends the code to it and streams its events back. interpreter.py is the Python SDK's file,
// copied into dist/ by `npm run build`.

import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { Client } from "./client.js";
import type { Commands } from "./commands.js";
import { errorFor } from "./errors.js";
import type { Files } from "./files.js";

/** What the interpreter needs of a sandbox (its id, files and commands). */
export interface SandboxParts {
  readonly id: string;
  readonly files: Files;
  readonly commands: Commands;
}

const SCRIPT_PATH = "/tmp/.space/interpreter.py";

/** A value the code produced: the last expression's (`isMain`) or a display (a figure). */
export class Result {
  constructor(readonly data: Record<string, string>, readonly isMain: boolean) {}
  get text(): string | undefined { return this.data["text/plain"]; }
  get html(): string | undefined { return this.data["text/html"]; }
  /** A PNG (a matplotlib figure, or an object's _repr_png_), decoded. */
  get png(): Buffer | undefined {
    const v = this.data["image/png"];
    return v === undefined ? undefined : Buffer.from(v, "base64");
  }
  get formats(): string[] { return Object.keys(this.data).sort(); }
}

export interface ExecutionError { name: string; value: string; traceback: string }

export class Execution {
  results: Result[] = [];
  stdout: string[] = [];
  stderr: string[] = [];
  error: ExecutionError | null = null;
  /** The last expression's value as text (undefined if the code ended with a statement). */
  get text(): string | undefined { return this.results.find((r) => r.isMain)?.text; }
}

export interface CodeContext { id: string; language: "python" }

export interface RunCodeOptions {
  context?: CodeContext;
  /** Interrupt the run (KeyboardInterrupt) after this long; the context lives on. */
  timeoutMs?: number;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onResult?: (result: Result) => void;
}

const socketOf = (ctx: CodeContext) => `/tmp/.space/ctx-${ctx.id}.sock`;

export class CodeInterpreter {
  private installed = false;
  private defaultContext: Promise<CodeContext> | null = null;

  constructor(private readonly sb: SandboxParts, private readonly client: Client) {}

  private async install(): Promise<void> {
    if (this.installed) return;
    const script = readFileSync(new URL("./interpreter.py", import.meta.url));
    await this.sb.files.write(SCRIPT_PATH, script);
    this.installed = true;
  }

  async createContext(language: "python" = "python"): Promise<CodeContext> {
    if (language !== "python") throw new TypeError("only python contexts exist (run other languages with commands.run)");
    await this.install();
    const ctx: CodeContext = { id: randomBytes(6).toString("hex"), language };
    const r = await this.client.call("POST", `/v1/sandboxes/${this.sb.id}/exec`, {
      json: { cmd: ["python3", SCRIPT_PATH, "serve", socketOf(ctx)], detach: true },
    });
    if (r?.exit) throw errorFor("unavailable", `the code context could not start: ${JSON.stringify(r.exit)}`);
    return ctx;
  }

  async run(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    let ctx = opts.context;
    if (!ctx) {
      this.defaultContext ??= this.createContext();
      ctx = await this.defaultContext;
    }
    await this.install();
    const argv = ["python3", SCRIPT_PATH, "run", socketOf(ctx)];
    if (opts.timeoutMs !== undefined) argv.push(String(opts.timeoutMs / 1000));
    const ex = new Execution();
    const handle = (line: string) => {
      if (!line.trim()) return;
      const ev = JSON.parse(line);
      if (ev.type === "stdout") { ex.stdout.push(ev.text); opts.onStdout?.(ev.text); }
      else if (ev.type === "stderr") { ex.stderr.push(ev.text); opts.onStderr?.(ev.text); }
      else if (ev.type === "result") {
        const r = new Result(ev.data ?? {}, !!ev.is_main);
        ex.results.push(r);
        opts.onResult?.(r);
      } else if (ev.type === "error") {
        ex.error = { name: ev.name ?? "", value: ev.value ?? "", traceback: ev.traceback ?? "" };
      }
    };
    let pending = "";
    const r = await this.sb.commands.run(argv, {
      stdin: code,
      onStdout: (chunk) => {
        pending += chunk;
        const nl = pending.lastIndexOf("\n");
        if (nl >= 0) {
          pending.slice(0, nl).split("\n").forEach(handle);
          pending = pending.slice(nl + 1);
        }
      },
    });
    if (pending) handle(pending);
    if (r.exitCode !== 0 && !ex.error) {
      ex.error = { name: "InterpreterError", traceback: "",
                   value: `the interpreter exited with ${r.exitCode ?? "signal " + r.signal}: ${r.stderr.trim().slice(-500)}` };
    }
    return ex;
  }
}
