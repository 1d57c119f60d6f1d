// The connection to spaced: HTTP/1.1 over its Unix socket (the default) or its TCP listener.
//
// Where to connect, in order: the options of `new Client(...)`, then $SPACE_API
// (http://127.0.0.1:7070: the TCP listener, which needs a token), then $SPACE_SOCKET, then
// /run/space/space.sock. The token comes from `token` or $SPACE_TOKEN.

import * as http from "node:http";
import * as https from "node:https";
import { errorFor, SpaceError, UnavailableError } from "./errors.js";

export const DEFAULT_SOCKET = "/run/space/space.sock";

export interface ClientOptions {
  /** The Unix socket of spaced (default $SPACE_SOCKET, then /run/space/space.sock). */
  socketPath?: string;
  /** The TCP listener, e.g. http://127.0.0.1:7070 (default $SPACE_API). */
  apiUrl?: string;
  /** An API token (default $SPACE_TOKEN). */
  token?: string;
  /** How long a call may wait for spaced's answer, in ms (default 60000; streams: none). */
  timeoutMs?: number;
}

export type Body = Uint8Array | string | AsyncIterable<Uint8Array> | Iterable<Uint8Array>;

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined | null>;
  json?: unknown;
  body?: Body;
  contentType?: string;
  /** 0 = no limit (streams). */
  timeoutMs?: number;
}

/** An answer whose body is read on demand. */
export class Response {
  constructor(
    readonly status: number,
    readonly headers: http.IncomingHttpHeaders,
    private readonly res: http.IncomingMessage,
    private readonly req: http.ClientRequest,
  ) {}

  async bytes(): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const c of this.res) parts.push(c as Buffer);
    return Buffer.concat(parts);
  }

  async json<T = any>(): Promise<T> {
    const b = await this.bytes();
    return (b.length ? JSON.parse(b.toString("utf8")) : null) as T;
  }

  chunks(): AsyncIterable<Buffer> {
    return this.res as AsyncIterable<Buffer>;
  }

  async *lines(): AsyncGenerator<string> {
    let pending = "";
    for await (const c of this.res) {
      pending += (c as Buffer).toString("utf8");
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        yield pending.slice(0, nl);
        pending = pending.slice(nl + 1);
      }
    }
    if (pending) yield pending;
  }

  /** Cuts the connection at once (for an exec: spaced kills the command's process tree). */
  abort(): void {
    this.req.destroy();
    this.res.destroy();
  }
}

export class Client {
  readonly socketPath?: string;
  readonly apiUrl?: string;
  readonly token?: string;
  readonly timeoutMs: number;

  constructor(opts: ClientOptions = {}) {
    let { socketPath, apiUrl } = opts;
    if (socketPath === undefined && apiUrl === undefined) {
      apiUrl = process.env.SPACE_API || undefined;
      if (apiUrl === undefined) socketPath = process.env.SPACE_SOCKET || DEFAULT_SOCKET;
    }
    if (apiUrl !== undefined) {
      const u = new URL(apiUrl);
      if (u.protocol !== "http:" && u.protocol !== "https:")
        throw new TypeError(`apiUrl must look like http://127.0.0.1:7070, not ${apiUrl}`);
    }
    this.socketPath = socketPath;
    this.apiUrl = apiUrl;
    this.token = opts.token ?? (process.env.SPACE_TOKEN || undefined);
    this.timeoutMs = opts.timeoutMs ?? 60_000;
  }

  where(): string {
    return this.apiUrl ?? `unix:${this.socketPath}`;
  }

  /** Sends one request; throws the class of an error answer. */
  request(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.token) headers["Authorization"] = `Bearer ${this.token}`;
    let body: Body | undefined = opts.body;
    let contentType = opts.contentType;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      contentType ??= "application/json";
    }
    if (contentType) headers["Content-Type"] = contentType;
    if (typeof body === "string") body = Buffer.from(body);
    if (body instanceof Uint8Array) headers["Content-Length"] = String(body.length);
    let target = path;
    if (opts.query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(opts.query)) if (v !== undefined && v !== null) q.set(k, String(v));
      const s = q.toString();
      if (s) target += "?" + s;
    }
    const timeout = opts.timeoutMs ?? this.timeoutMs;
    let req: http.ClientRequest;
    if (this.apiUrl !== undefined) {
      const u = new URL(this.apiUrl);
      const mod = u.protocol === "https:" ? https : http;
      req = mod.request({ host: u.hostname, port: u.port, method, headers,
                          path: u.pathname.replace(/\/$/, "") + target });
    } else {
      req = http.request({ socketPath: this.socketPath, method, headers, path: target });
    }
    return new Promise<Response>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      if (timeout > 0) {
        timer = setTimeout(() => {
          req.destroy(errorFor("timeout", `no answer from spaced at ${this.where()} within ${timeout} ms`));
        }, timeout);
      }
      req.on("error", (e: NodeJS.ErrnoException) => {
        if (timer) clearTimeout(timer);
        if (e instanceof SpaceError) return reject(e);
        if (e.code === "ENOENT")
          return reject(new UnavailableError(`spaced is not running: no socket at ${this.socketPath} ` +
            "(start it with `spaced`, or set $SPACE_SOCKET / $SPACE_API)", "unavailable"));
        if (e.code === "ECONNREFUSED")
          return reject(new UnavailableError(`spaced refused the connection at ${this.where()}; is it running?`, "unavailable"));
        if (e.code === "EACCES")
          return reject(new UnavailableError(`cannot open ${this.where()}: permission denied (the socket is root's; ` +
            "run as root or use the TCP listener with a token)", "unavailable"));
        if (e.code === "EPIPE" || e.code === "ECONNRESET") {
          // spaced may have answered early (an error) and closed: give that answer a moment.
          setTimeout(() => reject(new UnavailableError(`spaced at ${this.where()} closed the connection: ${e.message}`,
                                                       "unavailable")), 5000).unref();
          return;
        }
        reject(new UnavailableError(`cannot reach spaced at ${this.where()}: ${e.message}`, "unavailable"));
      });
      req.on("response", (res) => {
        if (timer) clearTimeout(timer);
        const r = new Response(res.statusCode ?? 0, res.headers, res, req);
        if (r.status >= 400) {
          r.bytes().then((b) => reject(errorFromBody(r.status, b)), reject);
          return;
        }
        resolve(r);
      });
      if (body === undefined || body instanceof Uint8Array) {
        req.end(body);
      } else {
        (async () => {
          for await (const chunk of body as AsyncIterable<Uint8Array>) {
            if (!req.write(chunk)) await new Promise((r) => req.once("drain", r));
          }
          req.end();
        })().catch((e) => req.destroy(e));
      }
    });
  }

  /** A request whose answer is JSON (or empty): the parsed body. */
  async call<T = any>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    return (await this.request(method, path, opts)).json<T>();
  }
}

function errorFromBody(status: number, body: Buffer): SpaceError {
  try {
    const e = JSON.parse(body.toString("utf8")).error;
    if (typeof e?.code === "string" && typeof e?.message === "string") return errorFor(e.code, e.message, status);
  } catch {
    // not JSON: below
  }
  const text = body.toString("utf8").trim().slice(0, 300);
  return errorFor("internal", `HTTP ${status} from spaced: ${text || "(no body)"}`, status);
}
