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
import { errorFor, SpaceError, UnavailableError } from "./errors.js";

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

// Node's codes for a certificate it does not trust or that names another host.
const TLS_TRUST_ERRORS = new Set([
  "SELF_SIGNED_CERT_IN_CHAIN", "DEPTH_ZERO_SELF_SIGNED_CERT", "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE", "UNABLE_TO_GET_ISSUER_CERT", "CERT_UNTRUSTED",
  "CERT_HAS_EXPIRED", "CERT_NOT_YET_VALID", "ERR_TLS_CERT_ALTNAME_INVALID",
]);

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
