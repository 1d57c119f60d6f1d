"""Exceptions raised by the SDK, one class per error code of the SPACE API.

Every API error is a JSON body {"error": {"code", "message"}}; the SDK raises the class of its
code (``NotFoundError`` for ``not_found``, ...), all subclasses of :class:`SpaceError`, with the
server's message, which says what to do next.
"""

from __future__ import annotations

from typing import Dict, Optional, Type


class SpaceError(Exception):
    """An error answered by spaced (or a failure to reach it: code ``unavailable``)."""

    code: str = "internal"

    def __init__(self, message: str, *, code: Optional[str] = None, status: Optional[int] = None):
        super().__init__(message)
        self.message = message
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
                 code: Optional[str] = None, status: Optional[int] = None) -> None:
        super().__init__(message, code=code, status=status)
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
    """The exception for an API error code (``SpaceError`` itself for an unknown code)."""
    cls = _BY_CODE.get(code, SpaceError)
    return cls(message, code=code, status=status)
