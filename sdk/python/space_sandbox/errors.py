"""Exceptions raised by the SDK, one class per error code of the SPACE API.

Every API error is a JSON body {"error": {"code", "message"}}; the SDK raises the class of its
code (``NotFoundError`` for ``not_found``, ...), all subclasses of :class:`SpaceError`, with the
server's message, which says what to do next. spaced phrases those hints for its CLI ("`space ls`
lists sandboxes"); the SDK rewrites them to name its own methods ("`Sandbox.list()` lists
sandboxes"), and keeps spaced's own text in ``server_message``.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple, Type

# spaced's hints name its CLI; an SDK user has methods. Each `space ...` command in a message (the
# text between the backticks) becomes the SDK call that does the same; None: there is none (host
# set-up: images, tokens, doctor), so it stays, marked as the CLI on spaced's host, for whoever
# runs it. As `space mcp` does for its tools (src/cli/mcp_scope.cc). test_sdk_python.py checks
# that every hint in spaced's sources (src/) has an entry here.
CLI_HINTS: List[Tuple[str, Optional[str]]] = [
    (r"space ls", "Sandbox.list()"),
    (r"space create", "Sandbox.create()"),
    (r"space resume \S+", "sandbox.resume()"),
    (r"space rm(?: --force \S+)?", "sandbox.destroy()"),
    (r"space restore (\S+)", r'Sandbox.restore("\1")'),
    (r"space snapshots(?: \S+)?", "sandbox.snapshots()"),
    (r"space exec --detach", "sandbox.commands.run(cmd, background=True)"),
    (r"space exec \S+ -- .*", "sandbox.commands.run(cmd)"),
    (r"space ps(?: \S+)?", "sandbox.commands.list()"),
    (r"space kill", "sandbox.commands.kill(pid)"),
    (r"space audit \S+", "sandbox.audit()"),
    (r"space cp", "sandbox.files.read()"),
    (r"space snapshot rm \S+", None),
    (r"space run .*", "sandbox.commands.run(cmd)"),
    (r"space image (?:ls|rm|import|build|build-vm)\b.*", None),
    (r"space token (?:create|ls)\b.*", None),
    (r"space doctor", None),
]

# The CLI's flags in spaced's messages, outside backticks: the arguments of Sandbox.create() and
# sandbox.snapshot().
_FLAGS: List[Tuple[str, str]] = [
    (r"pick another --name\b", "pick another name"),
    (r"--secret (\S+): ", r'`secrets=["\1"]`: '),
    (r"--allow (\S+): ", r'`allow=["\1"]`: '),
    (r"--(image|profile|memory|disk)\b", r"the `\1=` argument"),
]

_ON_HOST = "`%s` on spaced's host"
_HINT = re.compile(r"`(space [a-z][^`]*)`|" + "|".join("(%s)" % f for f, _ in _FLAGS))


def cli_hint(command: str) -> Optional[str]:
    """How this SDK phrases the CLI command ``command`` ("space ls", as between the backticks
    of spaced's message), or None if no entry of CLI_HINTS covers it."""
    for pattern, call in CLI_HINTS:
        m = re.fullmatch(pattern, command)
        if m and call is None:
            return _ON_HOST % command
        if m:
            return "`%s`" % m.expand(call)
    return None


def sdk_message(message: str) -> str:
    """spaced's ``message`` with its CLI hints named as this SDK's calls."""
    def rewrite(m: "re.Match[str]") -> str:
        if m.group(1) is not None:
            return cli_hint(m.group(1)) or _ON_HOST % m.group(1)  # one newer than this SDK
        for pattern, to in _FLAGS:
            f = re.fullmatch(pattern, m.group(0))
            if f:
                return f.expand(to)
        return m.group(0)
    return _HINT.sub(rewrite, message)


class SpaceError(Exception):
    """An error answered by spaced (or a failure to reach it: code ``unavailable``).
    ``message`` names this SDK's calls where spaced's hints name its CLI; ``server_message`` is
    the text as spaced sent it (the same as ``message`` for an error the SDK made itself)."""

    code: str = "internal"

    def __init__(self, message: str, *, code: Optional[str] = None, status: Optional[int] = None,
                 server_message: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.server_message = message if server_message is None else server_message
        if code is not None:
            self.code = code
        self.status = status

    def __str__(self) -> str:
        return "%s (%s)" % (self.message, self.code)


class InvalidArgumentError(SpaceError):
    code = "invalid_argument"


class NotFoundError(SpaceError):
    code = "not_found"


class AlreadyExistsError(SpaceError):
    code = "already_exists"


class ConflictError(SpaceError):
    """The sandbox is in the wrong state for the call (paused, destroyed, ...)."""

    code = "conflict"


class AuthenticationError(SpaceError):
    """No valid API token (missing, malformed, unknown, expired or revoked)."""

    code = "unauthenticated"


class PermissionDeniedError(SpaceError):
    code = "permission_denied"


class PayloadTooLargeError(SpaceError):
    code = "payload_too_large"


class ResourceExhaustedError(SpaceError):
    """A limit or quota is full (sandboxes, snapshots, disk)."""

    code = "resource_exhausted"


class UnimplementedError(SpaceError):
    code = "unimplemented"


class ProtocolError(SpaceError):
    code = "protocol_error"


class UnavailableError(SpaceError):
    """spaced cannot be reached, or is shutting down or overloaded; retry later."""

    code = "unavailable"


class DaemonRestartError(UnavailableError):
    """spaced went away while a command's stream was attached: it is shutting down (SIGTERM: a
    restart or an upgrade; ``reason`` ``"shutdown"``: it stopped the command), or the connection
    closed before the command's end (``reason`` ``"connection_lost"``: spaced was killed or
    crashed, and the command's end is unknown). The sandbox itself keeps running: reconnect with
    ``Sandbox.connect(sandbox_id)`` once spaced is back, look with ``commands.list()`` or run the
    command again. Commands started detached (``background=True``) survive a restart."""

    #: "shutdown" (spaced said so: the error event's "reason") or "connection_lost".
    reason: str = "connection_lost"

    def __init__(self, message: str, *, reason: str = "connection_lost",
                 sandbox_id: Optional[str] = None, pid: Optional[int] = None,
                 code: Optional[str] = None, status: Optional[int] = None,
                 server_message: Optional[str] = None) -> None:
        super().__init__(message, code=code, status=status, server_message=server_message)
        self.reason = reason
        self.sandbox_id = sandbox_id
        self.pid = pid


class SpaceTimeoutError(SpaceError, TimeoutError):
    code = "timeout"


class InternalError(SpaceError):
    code = "internal"


class CommandExitError(SpaceError):
    """A command run with ``check=True`` ended with a non-zero exit code or a signal."""

    code = "command_failed"

    def __init__(self, result: "object") -> None:
        self.result = result
        exit_code = getattr(result, "exit_code", None)
        sig = getattr(result, "signal", None)
        how = "signal %s" % sig if sig else "exit code %s" % exit_code
        stderr = (getattr(result, "stderr", "") or "").strip()
        error = (getattr(result, "error", None) or "").strip()  # why it could not start
        msg = "the command failed with %s" % how
        if error and error not in stderr:
            msg += ": " + error
        if stderr:
            msg += ": " + stderr[-500:]
        super().__init__(msg)


_BY_CODE: Dict[str, Type[SpaceError]] = {
    c.code: c
    for c in (InvalidArgumentError, NotFoundError, AlreadyExistsError, ConflictError,
              AuthenticationError, PermissionDeniedError, PayloadTooLargeError,
              ResourceExhaustedError, UnimplementedError, ProtocolError, UnavailableError,
              SpaceTimeoutError, InternalError)
}


def error_for(code: str, message: str, status: Optional[int] = None) -> SpaceError:
    """The exception for an API error code (``SpaceError`` itself for an unknown code), its
    message phrased for the SDK (``sdk_message``), spaced's own in ``server_message``."""
    cls = _BY_CODE.get(code, SpaceError)
    return cls(sdk_message(message), code=code, status=status, server_message=message)
