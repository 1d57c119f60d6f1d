// Exceptions of the SDK, one class per error code of the SPACE API. Every API error is a JSON
// body {"error": {"code", "message"}}; the SDK throws the class of its code, with the server's
// message (which says what to do next), `code` and `status`.

export class SpaceError extends Error {
  readonly code: string;
  readonly status?: number;
  constructor(message: string, code = "internal", status?: number) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
  }
}

export class InvalidArgumentError extends SpaceError {}
export class NotFoundError extends SpaceError {}
export class AlreadyExistsError extends SpaceError {}
/** The sandbox is in the wrong state for the call (paused, destroyed, ...). */
export class ConflictError extends SpaceError {}
/** No valid API token (missing, malformed, unknown, expired or revoked). */
export class AuthenticationError extends SpaceError {}
export class PermissionDeniedError extends SpaceError {}
export class PayloadTooLargeError extends SpaceError {}
/** A limit or quota is full (sandboxes, snapshots, disk). */
export class ResourceExhaustedError extends SpaceError {}
export class UnimplementedError extends SpaceError {}
export class ProtocolError extends SpaceError {}
/** spaced cannot be reached, or is shutting down or overloaded; retry later. */
export class UnavailableError extends SpaceError {}
/** spaced went away while a command's stream was attached: it is shutting down (SIGTERM: a
 * restart or an upgrade; `reason` "shutdown": it stopped the command), or the connection closed
 * before the command's end (`reason` "connection_lost": spaced was killed or crashed, and the
 * command's end is unknown). The sandbox keeps running: reconnect with
 * `Sandbox.connect(sandboxId)` once spaced is back, look with `commands.list()` or run the
 * command again. Commands started detached (`background: true` without `stdin`) survive a
 * restart. */
export class DaemonRestartError extends UnavailableError {
  readonly reason: "shutdown" | "connection_lost";
  readonly sandboxId?: string;
  readonly pid: number | null;
  constructor(message: string, opts: { reason?: "shutdown" | "connection_lost"; sandboxId?: string;
                                       pid?: number | null; code?: string } = {}) {
    super(message, opts.code ?? "unavailable");
    this.reason = opts.reason ?? "connection_lost";
    this.sandboxId = opts.sandboxId;
    this.pid = opts.pid ?? null;
  }
}
export class SpaceTimeoutError extends SpaceError {}
export class InternalError extends SpaceError {}

const BY_CODE: Record<string, new (m: string, c?: string, s?: number) => SpaceError> = {
  invalid_argument: InvalidArgumentError,
  not_found: NotFoundError,
  already_exists: AlreadyExistsError,
  conflict: ConflictError,
  unauthenticated: AuthenticationError,
  permission_denied: PermissionDeniedError,
  payload_too_large: PayloadTooLargeError,
  resource_exhausted: ResourceExhaustedError,
  unimplemented: UnimplementedError,
  protocol_error: ProtocolError,
  unavailable: UnavailableError,
  timeout: SpaceTimeoutError,
  internal: InternalError,
};

/** The error for an API error code (SpaceError itself for a code this SDK does not know). */
export function errorFor(code: string, message: string, status?: number): SpaceError {
  const Cls = BY_CODE[code] ?? SpaceError;
  return new Cls(message, code, status);
}

/** A command run with `check: true` ended with a non-zero exit code or a signal. */
export class CommandExitError extends SpaceError {
  readonly result: { exitCode: number | null; signal: number | null; stderr: string; error?: string | null };
  constructor(result: { exitCode: number | null; signal: number | null; stderr: string; error?: string | null }) {
    const how = result.signal ? `signal ${result.signal}` : `exit code ${result.exitCode}`;
    const err = result.stderr.trim();
    const why = (result.error ?? "").trim(); // why it could not start
    super(`the command failed with ${how}${why && !err.includes(why) ? ": " + why : ""}` +
      `${err ? ": " + err.slice(-500) : ""}`, "command_failed");
    this.result = result;
  }
}
