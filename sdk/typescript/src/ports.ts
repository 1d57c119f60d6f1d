// A sandbox's ports, reachable from this machine: `sandbox.getHost(port)`,
// `sandbox.getUrl(port)` and `sandbox.waitForPort(port)`.
//
// A PortForward is a listener on 127.0.0.1 (a free port) of the machine this program runs on;
// each connection it accepts is tunneled to 127.0.0.1:PORT inside the sandbox through its own
// request to spaced (POST /v1/sandboxes/{id}/ports/{port}, "Upgrade: tcp"), as `space port`
// does. A connection accepted while nothing listens in the sandbox is reset at once (spaced
// answers "nothing listens on port ..."; `lastError` keeps it). The forwards of a Ports are made
// on first use, one per port, and closed by `sandbox.close()` (also `destroy()` and `kill()`);
// they do not keep Node running, and end with the process.

import * as net from "node:net";
import type { Duplex } from "node:stream";
import { Client } from "./client.js";
import { errorFor, InvalidArgumentError, SpaceError, SpaceTimeoutError, UnavailableError } from "./errors.js";
import { openUpgrade } from "./upgrade.js";

function checkPort(port: number): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new InvalidArgumentError(`port must be a number 1-65535, not ${String(port)}`, "invalid_argument");
  return port;
}

/** 127.0.0.1:`localPort` of this machine, forwarded to `sandboxPort` of the sandbox until
 * close(). */
export class PortForward {
  /** Why the last connection could not be forwarded (e.g. nothing listened yet). */
  lastError: SpaceError | null = null;
  private closed = false;
  private readonly sockets = new Set<Duplex>(); // both ends of every open tunnel

  private constructor(readonly sandboxId: string, readonly sandboxPort: number,
                      private readonly client: Client, private readonly server: net.Server,
                      readonly localPort: number) {}

  /** A listener on a free port of 127.0.0.1, forwarding to `port` of the sandbox. */
  static async open(sandboxId: string, client: Client, port: number): Promise<PortForward> {
    checkPort(port);
    const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => {
        server.off("error", reject);
        resolve();
      });
    });
    server.unref(); // an idle forward does not keep the program running
    server.on("error", () => {}); // a failed accept (out of fds): it listens on
    const f = new PortForward(sandboxId, port, client, server, (server.address() as net.AddressInfo).port);
    server.on("connection", (local: net.Socket) => f.serve(local));
    return f;
  }

  /** "127.0.0.1:PORT": where to connect on this machine. */
  get host(): string {
    return `127.0.0.1:${this.localPort}`;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  private track(s: Duplex): void {
    this.sockets.add(s);
    s.once("close", () => this.sockets.delete(s));
  }

  private serve(local: net.Socket): void {
    this.track(local);
    local.on("error", () => {}); // ends in "close"
    openUpgrade(this.client, `/v1/sandboxes/${this.sandboxId}/ports/${this.sandboxPort}`, "tcp").then(
      ({ socket: up, head }) => {
        if (this.closed || local.destroyed) {
          up.destroy();
          local.destroy();
          return;
        }
        this.track(up);
        // An error on either side cuts both; an orderly end travels on (pipe ends the other's
        // writing side) and each socket closes once both its directions are done.
        up.on("error", () => local.resetAndDestroy());
        local.on("error", () => up.destroy());
        local.on("close", () => { if (!up.writableEnded) up.destroy(); });
        up.on("close", () => { if (!local.writableEnded) local.destroy(); });
        if (head.length) local.write(head);
        up.pipe(local);
        local.pipe(up);
        local.resume();
      },
      (e: SpaceError) => {
        this.lastError = e;
        local.resetAndDestroy();
      },
    );
  }

  /** Stops listening and cuts the connections it forwards (idempotent). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const stopped = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await stopped;
  }
}

/** The port forwards of one sandbox (Sandbox.getHost and friends use it). */
export class Ports {
  private readonly forwards = new Map<number, Promise<PortForward>>();

  constructor(private readonly sandboxId: string, private readonly client: Client) {}

  /** The forward of `port`, started on first use. */
  async forward(port: number): Promise<PortForward> {
    checkPort(port);
    let f = this.forwards.get(port);
    if (f === undefined || (await f.catch(() => null))?.isClosed !== false) {
      f = PortForward.open(this.sandboxId, this.client, port);
      this.forwards.set(port, f);
    }
    return f;
  }

  /** Resolves once something listens on `port` in the sandbox (on 127.0.0.1 or 0.0.0.0);
   * rejects with SpaceTimeoutError if nothing did within `timeoutMs` (default 60 s), and at
   * once with what is not worth waiting for (no such sandbox, paused, a microVM, spaced gone). */
  async waitFor(port: number, opts: { timeoutMs?: number } = {}): Promise<void> {
    checkPort(port);
    const timeoutMs = opts.timeoutMs ?? 60_000;
    const deadline = Date.now() + timeoutMs;
    let delay = 50;
    let last: SpaceError | null = null;
    for (;;) {
      try {
        const left = deadline - Date.now();
        const { socket } = await openUpgrade(this.client, `/v1/sandboxes/${this.sandboxId}/ports/${port}`,
          "tcp", { timeoutMs: Math.max(1000, Math.min(left, this.client.timeoutMs)) });
        socket.destroy();
        return;
      } catch (e) {
        // Nothing listens (yet): spaced answered 503. Not reaching spaced is no reason to wait.
        if ((e instanceof UnavailableError && e.status !== undefined) || e instanceof SpaceTimeoutError) last = e;
        else throw e;
      }
      const left = deadline - Date.now();
      if (left <= 0)
        throw errorFor("timeout", `nothing listens on port ${port} in sandbox ${this.sandboxId} after ` +
          `${timeoutMs} ms (last: ${last?.message ?? "-"})`);
      await new Promise((r) => setTimeout(r, Math.min(delay, left)));
      delay = Math.min(delay * 2, 500);
    }
  }

  async close(): Promise<void> {
    const all = [...this.forwards.values()];
    this.forwards.clear();
    await Promise.all(all.map(async (f) => (await f.catch(() => null))?.close()));
  }
}
