// The connection to spaced: HTTP/1.1 over its Unix socket (the default) or its TCP listener.
//
// Where to connect, in order: the options of `new Client(...)`, then $SPACE_API
// (http://127.0.0.1:7070: the TCP listener, which needs a token; https://host:7443 when spaced
// serves TLS there), then $SPACE_SOCKET, then /run/space/space.sock. The token comes from
// `token` or $SPACE_TOKEN. For https the daemon's certificate is verified against `ca`,
// `caFile` or $SPACE_CA (PEM; spaced's own CA is <state_dir>/tls/ca.pem on its host), else
// Node's trusted roots; the host name is checked either way.

import * as fs from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import { errorFor, InvalidArgumentError, SpaceError, UnavailableError } from "./errors.js";

export const DEFAULT_SOCKET = "/run/space/space.sock";

export interface ClientOptions {
  /** The Unix socket of spaced (default $SPACE_SOCKET, then /run/space/space.sock). */
  socketPath?: string;
  /** The TCP listener, e.g. http://127.0.0.1:7070 or https://host:7443 (default $SPACE_API). */
  apiUrl?: string;
  /** https: the CA certificate(s) to trust, PEM (instead of Node's trusted roots). */
  ca?: string | Buffer;
  /** https: a PEM file of the CA to trust (default $SPACE_CA), e.g. a copy of spaced's
   * <state_dir>/tls/ca.pem. */
  caFile?: string;
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
    private readonly where = "spaced",
  ) {}

  async bytes(): Promise<Buffer> {
    const parts: Buffer[] = [];
    try {
      for await (const c of this.res) parts.push(c as Buffer);
    } catch (e) {
      throw transportError(e, this.where);
    }
    return Buffer.concat(parts);
  }

  async json<T = any>(): Promise<T> {
    const b = await this.bytes();
    try {
      return (b.length ? JSON.parse(b.toString("utf8")) : null) as T;
    } catch {
      throw errorFor("protocol_error", `what answers at ${this.where} is not spaced: an answer that is not ` +
        `JSON: ${JSON.stringify(b.subarray(0, 200).toString("utf8"))}`);
    }
  }

  async *chunks(): AsyncGenerator<Buffer> {
    try {
      for await (const c of this.res) yield c as Buffer;
    } catch (e) {
      throw transportError(e, this.where);
    }
  }

  /** The body's lines; a broken connection throws Node's error (the caller knows what it means
   * for its stream: see commands.ts). */
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

  /** Fails the body's reads with SpaceTimeoutError(`message`) once nothing came for `ms`. */
  failWhenIdle(ms: number, message: string): void {
    this.res.setTimeout(ms, () => this.res.destroy(errorFor("timeout", message)));
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
  readonly caFile?: string;
  /** https: the CA(s) trusted instead of Node's roots (upgraded connections use it too). */
  readonly ca?: string | Buffer;

  constructor(opts: ClientOptions = {}) {
    let { socketPath, apiUrl } = opts;
    if (socketPath === undefined && apiUrl === undefined) {
      apiUrl = process.env.SPACE_API || undefined;
      if (apiUrl === undefined) socketPath = process.env.SPACE_SOCKET || DEFAULT_SOCKET;
    }
    if (apiUrl !== undefined) {
      const u = new URL(apiUrl);
      if (u.protocol !== "http:" && u.protocol !== "https:")
        throw new TypeError(`apiUrl must look like http://127.0.0.1:7070 or https://host:7443, not ${apiUrl}`);
      if (u.protocol === "https:") {
        this.caFile = opts.ca === undefined ? (opts.caFile ?? (process.env.SPACE_CA || undefined)) : undefined;
        this.ca = opts.ca ?? (this.caFile !== undefined ? fs.readFileSync(this.caFile) : undefined);
      }
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
    try {
      req = this.newRequest(method, target, headers);
    } catch (e) { // not sendable (a control character in the path, a bad header): a caller's value
      return Promise.reject(new InvalidArgumentError(
        `cannot send ${method} ${target.slice(0, 200)} to spaced: ${(e as Error).message}`, "invalid_argument"));
    }
    return this.send(req, body, timeout);
  }

  private newRequest(method: string, target: string, headers: Record<string, string>): http.ClientRequest {
    let req: http.ClientRequest;
    if (this.apiUrl !== undefined) {
      const u = new URL(this.apiUrl);
      const options: https.RequestOptions = { host: u.hostname.replace(/^\[(.*)\]$/, "$1"),
        port: u.port, method, headers, path: u.pathname.replace(/\/$/, "") + target };
      if (u.protocol === "https:") {
        if (this.ca !== undefined) options.ca = this.ca;
        req = https.request(options);
      } else {
        req = http.request(options);
      }
    } else {
      req = http.request({ socketPath: this.socketPath, method, headers, path: target });
    }
    return req;
  }

  private send(req: http.ClientRequest, body: Body | undefined, timeout: number): Promise<Response> {
    return new Promise<Response>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      let early: NodeJS.Timeout | undefined; // after EPIPE/ECONNRESET: a moment for an answer
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
        if (e.code !== undefined && TLS_TRUST_ERRORS.has(e.code)) {
          const hint = this.caFile !== undefined
            ? `$SPACE_CA/caFile ${this.caFile} does not hold the CA that signed it, or the certificate does not name this host`
            : "when spaced makes its own CA (api_tls \"auto\"), pass caFile or set $SPACE_CA to a copy of " +
              "<state_dir>/tls/ca.pem (default /var/lib/space/tls/ca.pem) from the daemon's host";
          return reject(errorFor("permission_denied",
            `spaced's TLS certificate at ${this.where()} is not trusted (${e.code}: ${e.message}); ${hint}`));
        }
        if (e.code === "EPIPE" || e.code === "ECONNRESET") {
          // spaced may have answered early (an error) and closed: give that answer a moment.
          // Not unref'd: while the caller awaits this promise the timer is what keeps Node's
          // event loop alive (unref'd, a program whose only pending work was this call exited
          // with the promise unsettled, and node:test cancelled a file's tests).
          early = setTimeout(() => reject(new UnavailableError(`spaced at ${this.where()} closed the connection: ${e.message}`,
                                                               "unavailable")), 5000);
          return;
        }
        reject(transportError(e, this.where()));
      });
      req.on("response", (res) => {
        if (timer) clearTimeout(timer);
        if (early) clearTimeout(early);
        const r = new Response(res.statusCode ?? 0, res.headers, res, req, this.where());
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

// Node's codes for a certificate it does not trust or that names another host.
const TLS_TRUST_ERRORS = new Set([
  "SELF_SIGNED_CERT_IN_CHAIN", "DEPTH_ZERO_SELF_SIGNED_CERT", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE", "UNABLE_TO_GET_ISSUER_CERT", "CERT_UNTRUSTED",
  "CERT_HAS_EXPIRED", "CERT_NOT_YET_VALID", "ERR_TLS_CERT_ALTNAME_INVALID",
]);

// What spaced accepts as a sandbox id or a snapshot's id or name (src/api/request.cc, is_name).
const ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** `value`, a sandbox id or a snapshot's id or name, as one path segment of a URL. Throws
 * InvalidArgumentError, saying what one looks like, for anything else. */
export function segment(value: unknown, what = "sandbox id"): string {
  if (typeof value !== "string" || !ID.test(value)) {
    const looks = what === "sandbox id"
      ? "sandbox ids look like sb_0123abcd (letters, digits, '_', '-', '.'); Sandbox.list() lists them"
      : "give a snapshot id (snap_...) or name (letters, digits, '_', '-', '.'); sandbox.snapshots() lists them";
    throw new InvalidArgumentError(`bad ${what} ${String(JSON.stringify(value)).slice(0, 80)}: ${looks}`,
                                   "invalid_argument");
  }
  return encodeURIComponent(value);
}

/** The SDK's error for a failure of the connection itself (reset, closed early, ...). */
export function transportError(e: unknown, where: string): SpaceError {
  if (e instanceof SpaceError) return e;
  const err = e as NodeJS.ErrnoException;
  if (err?.code === "ECONNREFUSED")
    return new UnavailableError(`spaced refused the connection at ${where}; is it running?`, "unavailable");
  if (err?.code === "ECONNRESET" || err?.code === "EPIPE" || err?.code === "ERR_STREAM_PREMATURE_CLOSE" ||
      err?.message === "aborted")
    return new UnavailableError(`the connection to spaced at ${where} broke: ${err.message}; spaced may have ` +
      "restarted", "unavailable");
  if (typeof err?.code === "string" && err.code.startsWith("HPE_")) // Node's HTTP parser
    return errorFor("protocol_error", `what answers at ${where} is not spaced: no HTTP answer: ${err.message}`);
  return new UnavailableError(`cannot reach spaced at ${where}: ${err?.message ?? String(e)}`, "unavailable");
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
