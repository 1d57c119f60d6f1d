// Upgraded connections to spaced: a request whose 101 answer turns the connection into a raw
// byte stream ("Upgrade: tcp" for a sandbox's port, "Upgrade: space-terminal" for a terminal).
// openUpgrade() sends the request on a new connection of the Client (its Unix socket, TCP or
// TLS listener) and resolves with the socket, or rejects with the SDK's error for the answer
// (UnavailableError for "nothing listens on port ...", NotFoundError, ...).

import * as http from "node:http";
import * as https from "node:https";
import type { Duplex } from "node:stream";
import { Client } from "./client.js";
import { errorFor, SpaceError, UnavailableError } from "./errors.js";

export interface Upgraded {
  socket: Duplex;
  /** Bytes that came with the 101 answer: the stream's first. */
  head: Buffer;
}

/** POST `path` with "Upgrade: `protocol`"; `timeoutMs` bounds connecting and the answer
 * (default the Client's). */
export function openUpgrade(client: Client, path: string, protocol: string,
                            opts: { json?: unknown; timeoutMs?: number } = {}): Promise<Upgraded> {
  const body = opts.json === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(opts.json));
  const headers: Record<string, string> = {
    Connection: "Upgrade", Upgrade: protocol, "Content-Length": String(body.length),
  };
  if (body.length) headers["Content-Type"] = "application/json";
  if (client.token) headers["Authorization"] = `Bearer ${client.token}`;
  let req: http.ClientRequest;
  if (client.apiUrl !== undefined) {
    const u = new URL(client.apiUrl);
    const options: https.RequestOptions = { host: u.hostname.replace(/^\[(.*)\]$/, "$1"), port: u.port,
      method: "POST", headers, path: u.pathname.replace(/\/$/, "") + path, agent: false };
    if (u.protocol === "https:") {
      if (client.ca !== undefined) options.ca = client.ca;
      req = https.request(options);
    } else {
      req = http.request(options);
    }
  } else {
    req = http.request({ socketPath: client.socketPath, method: "POST", headers, path, agent: false });
  }
  const timeout = opts.timeoutMs ?? client.timeoutMs;
  return new Promise<Upgraded>((resolve, reject) => {
    const timer = timeout > 0 ? setTimeout(() => req.destroy(errorFor("timeout",
      `no answer from spaced at ${client.where()} within ${timeout} ms`)), timeout) : undefined;
    const settle = (f: () => void) => {
      if (timer) clearTimeout(timer);
      f();
    };
    req.on("upgrade", (_res, socket, head) => settle(() => resolve({ socket, head })));
    req.on("response", (res) => {
      const parts: Buffer[] = [];
      res.on("data", (c: Buffer) => parts.push(c));
      res.on("error", (e) => settle(() => reject(transportError(e, client))));
      res.on("end", () => settle(() => reject(answerError(res.statusCode ?? 0, Buffer.concat(parts)))));
    });
    req.on("error", (e) => settle(() => reject(transportError(e, client))));
    req.end(body);
  });
}

function transportError(e: NodeJS.ErrnoException, client: Client): SpaceError {
  if (e instanceof SpaceError) return e;
  const where = client.where();
  if (e.code === "ENOENT")
    return new UnavailableError(`spaced is not running: no socket at ${client.socketPath} ` +
      "(start it with `spaced`, or set $SPACE_SOCKET / $SPACE_API)", "unavailable");
  if (e.code === "ECONNREFUSED")
    return new UnavailableError(`spaced refused the connection at ${where}; is it running?`, "unavailable");
  if (e.code === "EACCES")
    return new UnavailableError(`cannot open ${where}: permission denied (the socket is root's; ` +
      "run as root or use the TCP listener with a token)", "unavailable");
  if (e.code !== undefined && /CERT|SELF_SIGNED|UNABLE_TO/.test(e.code))
    return errorFor("permission_denied", `spaced's TLS certificate at ${where} is not trusted ` +
      `(${e.code}: ${e.message}); pass caFile or set $SPACE_CA`);
  return new UnavailableError(`cannot reach spaced at ${where}: ${e.message}`, "unavailable");
}

/** The SDK's error for an answer other than 101 (its JSON body's code and message). */
function answerError(status: number, body: Buffer): SpaceError {
  if (status < 400)
    return errorFor("protocol_error", `spaced answered ${status} where it switches protocols (101)`, status);
  try {
    const e = JSON.parse(body.toString("utf8")).error;
    if (typeof e?.code === "string" && typeof e?.message === "string") return errorFor(e.code, e.message, status);
  } catch {
    // not JSON: below
  }
  const text = body.toString("utf8").trim().slice(0, 300);
  return errorFor("internal", `HTTP ${status} from spaced: ${text || "(no body)"}`, status);
}
