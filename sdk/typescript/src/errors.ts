// Exceptions of the SDK, one class per error code of the SPACE API. Every API error is a JSON
// body {"error": {"code", "message"}}; the SDK throws the class of its code, with the server's
// message (which says what to do next), `code` and `status`. spaced phrases those hints for its
// CLI ("`space ls` lists sandboxes"); the SDK rewrites them to name its own methods
// ("`Sandbox.list()` lists sandboxes"), and keeps spaced's own text in `serverMessage`.

// spaced's hints name its CLI; an SDK user has methods. Each `space ...` command in a message (the
// text between the backticks) becomes the SDK call that does the same; null: there is none (host
// set-up: images, tokens, doctor), so it stays, marked as the CLI on spaced's host, for whoever
// runs it. As `space mcp` does for its tools (src/cli/mcp_scope.cc). test_sdk_typescript.py checks
// that every hint in spaced's sources (src/) has an entry here.
export const CLI_HINTS: ReadonlyArray<readonly [RegExp, string | null]> = [
  [/^space ls$/, "Sandbox.list()"],
  [/^space create$/, "Sandbox.create()"],
  [/^space resume \S+$/, "sandbox.resume()"],
  [/^space rm(?: --force \S+)?$/, "sandbox.destroy()"],
  [/^space restore (\S+)$/, 'Sandbox.restore("$1")'],
  [/^space snapshots(?: \S+)?$/, "sandbox.snapshots()"],
  [/^space exec --detach$/, "sandbox.commands.run(cmd, { background: true })"],
  [/^space exec \S+ -- .*$/, "sandbox.commands.run(cmd)"],
  [/^space ps(?: \S+)?$/, "sandbox.commands.list()"],
  [/^space kill$/, "sandbox.commands.kill(pid)"],
  [/^space audit \S+$/, "sandbox.audit()"],
  [/^space cp$/, "sandbox.files.read()"],
  [/^space snapshot rm \S+$/, null],
  [/^space run .*$/, "sandbox.commands.run(cmd)"],
  [/^space image (?:ls|rm|import|build|build-vm)\b.*$/, null],
  [/^space token (?:create|ls)\b.*$/, null],
  [/^space doctor$/, null],
];

// The CLI's flags in spaced's messages, outside backticks: the options of Sandbox.create() and
// sandbox.snapshot().
const FLAGS: ReadonlyArray<readonly [RegExp, string]> = [
  [/pick another --name\b/, "pick another name"],
  [/--secret (\S+): /, '`secrets: ["$1"]`: '],
  [/--allow (\S+): /, '`allow: ["$1"]`: '],
  [/--(image|profile|memory|disk)\b/, "the `$1` option"],
];

const onHost = (command: string) => `\`${command}\` on spaced's host`;
const HINT = new RegExp(["`(space [a-z][^`]*)`", ...FLAGS.map(([f]) => f.source)].join("|"), "g");
const whole = (pattern: RegExp) => new RegExp(`^(?:${pattern.source})$`);

/** How this SDK phrases the CLI command `command` ("space ls", as between the backticks of
 * spaced's message), or null if no entry of CLI_HINTS covers it. */
export function cliHint(command: string): string | null {
  for (const [pattern, call] of CLI_HINTS) {
    if (!pattern.test(command)) continue;
    return call === null ? onHost(command) : "`" + command.replace(pattern, call) + "`";
  }
  return null;
}

/** spaced's `message` with its CLI hints named as this SDK's calls. */
export function sdkMessage(message: string): string {
  return message.replace(HINT, (match: string, command?: string) => {
    if (command !== undefined) return cliHint(command) ?? onHost(command); // one newer than this SDK
    for (const [pattern, to] of FLAGS) if (whole(pattern).test(match)) return match.replace(pattern, to);
    return match;
  });
}

export class SpaceError extends Error {
  readonly code: string;
  readonly status?: number;
  /** The message as spaced sent it; `message` names this SDK's calls where spaced's hints name
   * its CLI (the same as `message` for an error the SDK made itself). */
  readonly serverMessage: string;
  constructor(message: string, code = "internal", status?: number, serverMessage?: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.serverMessage = serverMessage ?? message;
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
                                       pid?: number | null; code?: string;
                                       serverMessage?: string } = {}) {
    super(message, opts.code ?? "unavailable", undefined, opts.serverMessage);
    this.reason = opts.reason ?? "connection_lost";
    this.sandboxId = opts.sandboxId;
    this.pid = opts.pid ?? null;
  }
}
export class SpaceTimeoutError extends SpaceError {}
export class InternalError extends SpaceError {}

const BY_CODE: Record<string, new (m: string, c?: string, s?: number, sm?: string) => SpaceError> = {
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

/** The error for an API error code (SpaceError itself for a code this SDK does not know), its
 * message phrased for the SDK (sdkMessage), spaced's own in `serverMessage`. */
export function errorFor(code: string, message: string, status?: number): SpaceError {
  const Cls = BY_CODE[code] ?? SpaceError;
  return new Cls(sdkMessage(message), code, status, message);
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
