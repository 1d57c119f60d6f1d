"""Terminals in a sandbox: ``sandbox.pty.create(...)``.

A command on a pseudo-terminal inside the sandbox (bash for a person or an agent to type into),
over one upgraded connection to spaced (``POST /v1/sandboxes/{id}/exec`` with ``Upgrade:
space-terminal``) that carries JSON lines both ways: keys, the window size and signals go up;
the terminal's output and the command's exit come down. Hanging up (``close()``) kills the
command's process tree.
"""

from __future__ import annotations

import base64
import json
import threading
from typing import Callable, Dict, Iterator, List, Optional, Union

from ._upgrade import UpgradedStream, open_upgrade
from .client import Client
from .commands import Cmd, _argv
from .errors import DaemonRestartError, InvalidArgumentError, SpaceError, error_for, sdk_message

DataHandler = Callable[[bytes], None]

_MAX_LINE = 64 << 20


def _check_size(rows: object, cols: object) -> None:
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096:
            raise InvalidArgumentError("%s must be a number 1-4096, not %r" % (name, v),
                                       code="invalid_argument")


class PtyHandle:
    """A command running on a terminal in the sandbox. Its output (bytes, as the terminal
    writes it: echoed input, colours, ``\\r\\n``) goes to ``on_data`` as it comes, is kept in
    :attr:`output`, and can be iterated (``for chunk in handle``); :meth:`wait` returns its exit
    code. Usable as a context manager (:meth:`close` on exit)."""

    def __init__(self, sandbox_id: str, stream: UpgradedStream,
                 on_data: Optional[DataHandler]) -> None:
        self.sandbox_id = sandbox_id
        #: The command's pid inside the sandbox (once it started).
        self.pid: Optional[int] = None
        #: How it ended: its exit code, or None with ``signal`` the signal that ended it.
        self.exit_code: Optional[int] = None
        self.signal: Optional[int] = None
        self._stream = stream
        self._on_data = on_data
        self._chunks: List[bytes] = []
        self._cond = threading.Condition()
        self._started = threading.Event()
        self._done = threading.Event()
        self._failure: Optional[BaseException] = None
        self._closed = False
        self._send_lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="space-pty", daemon=True)
        self._thread.start()

    # ---- events from spaced ---------------------------------------------------------------

    def _read(self) -> None:
        ended = False
        try:
            pending = b""
            while not ended:
                try:
                    chunk = self._stream.recv()
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                pending += chunk
                if len(pending) > _MAX_LINE and b"\n" not in pending:
                    raise error_for("protocol_error", "spaced sent a terminal event over 64 MiB")
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip() and self._event(json.loads(line)):
                        ended = True
                        break
            if not ended and not self._closed:
                # spaced ends a terminal with "exit" or "error": the connection was lost.
                raise DaemonRestartError(
                    "the connection to spaced closed before the terminal's command (pid %s) in "
                    "sandbox %s ended: spaced may have restarted or crashed; reconnect with "
                    "Sandbox.connect(%r) once it is back" % (self.pid, self.sandbox_id,
                                                            self.sandbox_id),
                    reason="connection_lost", sandbox_id=self.sandbox_id, pid=self.pid,
                    code="unavailable")
            if not ended:
                raise error_for("unavailable", "the terminal (pid %s) in sandbox %s was closed "
                                "before its command ended" % (self.pid, self.sandbox_id))
        except BaseException as e:  # handed to wait()
            self._failure = e
        finally:
            self._stream.close()
            self._started.set()
            with self._cond:
                self._done.set()
                self._cond.notify_all()

    def _event(self, ev: Dict[str, object]) -> bool:
        """Handles one event; True for the last one ("exit")."""
        kind = ev.get("type")
        if kind == "started":
            pid = ev.get("pid")
            self.pid = pid if isinstance(pid, int) else None
            self._started.set()
        elif kind in ("stdout", "stderr"):
            data = base64.b64decode(str(ev.get("data", "")))
            with self._cond:
                self._chunks.append(data)
                self._cond.notify_all()
            if self._on_data is not None and data:
                self._on_data(data)
        elif kind == "exit":
            code, sig = ev.get("exit_code"), ev.get("signal")
            self.exit_code = code if isinstance(code, int) else None
            self.signal = sig if isinstance(sig, int) else None
            return True
        elif kind == "error":
            err = ev.get("error")
            err = err if isinstance(err, dict) else {}
            code = str(err.get("code", "internal"))
            message = str(err.get("message", "the terminal failed"))
            if err.get("reason") == "shutdown":
                raise DaemonRestartError("%s; reconnect with Sandbox.connect(%r) once spaced is "
                                         "back" % (sdk_message(message), self.sandbox_id),
                                         reason="shutdown", sandbox_id=self.sandbox_id,
                                         pid=self.pid, code=code, server_message=message)
            raise error_for(code, message)
        return False

    # ---- input ----------------------------------------------------------------------------

    def _send(self, event: Dict[str, object]) -> None:
        if self._done.is_set():
            raise error_for("conflict", "the terminal's command (pid %s) has ended" % self.pid)
        try:
            with self._send_lock:
                self._stream.sendall(json.dumps(event).encode() + b"\n")
        except OSError as e:
            raise error_for("unavailable", "the terminal's connection to spaced is closed (%s)"
                            % e) from e

    def send_input(self, data: Union[bytes, str]) -> None:
        """Types ``data`` (a str is sent as UTF-8): "ls\\n", "\\x03" for Ctrl-C."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        for i in range(0, len(raw), 1 << 16):
            self._send({"type": "stdin", "data": base64.b64encode(raw[i:i + (1 << 16)]).decode()})

    def resize(self, rows: int, cols: int) -> None:
        """A new window size (the command gets SIGWINCH)."""
        _check_size(rows, cols)
        self._send({"type": "resize", "rows": rows, "cols": cols})

    def kill(self, signal: int = 9) -> None:
        """Sends ``signal`` (default SIGKILL) to the command; nothing if it has ended."""
        if isinstance(signal, bool) or not isinstance(signal, int) or not 1 <= signal <= 64:
            raise InvalidArgumentError("signal must be a number 1-64, not %r" % (signal,),
                                       code="invalid_argument")
        if not self._done.is_set():
            try:
                self._send({"type": "signal", "signal": signal})
            except SpaceError:
                if not self._done.is_set():
                    raise

    def send_eof(self) -> None:
        """End of input (the terminal's EOF character, Ctrl-D)."""
        self._send({"type": "eof"})

    # ---- output and end -------------------------------------------------------------------

    @property
    def output(self) -> bytes:
        """Everything the terminal wrote so far."""
        with self._cond:
            return b"".join(self._chunks)

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def __iter__(self) -> Iterator[bytes]:
        """The output, chunk by chunk (from the start), until the command ends."""
        i = 0
        while True:
            with self._cond:
                while i >= len(self._chunks) and not self._done.is_set():
                    self._cond.wait()
                if i >= len(self._chunks):
                    return
                chunk = self._chunks[i]
            i += 1
            yield chunk

    def wait_started(self, timeout: Optional[float] = None) -> Optional[int]:
        """Waits until the command runs; its pid."""
        self._started.wait(timeout)
        if self.pid is None and self._failure is not None:
            raise self._failure
        return self.pid

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for the command to end; its exit code (128 + N when signal N ended it, as a
        shell says). Raises ``SpaceTimeoutError`` if it still runs after ``timeout`` seconds
        (it runs on)."""
        if not self._done.wait(timeout):
            raise error_for("timeout", "the terminal's command (pid %s) is still running after "
                            "%ss" % (self.pid, timeout))
        if self._failure is not None:
            raise self._failure
        if self.exit_code is not None:
            return self.exit_code
        return 128 + (self.signal or 0)

    def close(self) -> None:
        """Hangs up: spaced kills the command's process tree if it still runs (idempotent)."""
        if not self._done.is_set():
            self._closed = True
            self._stream.abort()
            self._done.wait(10)

    def __enter__(self) -> "PtyHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "PtyHandle(sandbox=%r, pid=%r, running=%r)" % (self.sandbox_id, self.pid,
                                                             self.running)


class Pty:
    """``sandbox.pty``: commands on a terminal."""

    def __init__(self, sandbox_id: str, client: Client) -> None:
        self._id = sandbox_id
        self._client = client

    def create(self, cmd: Cmd = "bash", *, rows: int = 24, cols: int = 80,
               on_data: Optional[DataHandler] = None, cwd: Optional[str] = None,
               env: Optional[Dict[str, str]] = None, user: Union[None, str, int] = None,
               timeout: Optional[float] = None) -> PtyHandle:
        """Starts ``cmd`` (a shell string, run by ``sh -c``, or an argv list; default an
        interactive bash) on a ``rows`` x ``cols`` terminal; returns once it runs.
        ``on_data`` gets its output (bytes) as it comes. ``env`` adds to the sandbox's
        environment (``TERM`` is ``xterm-256color`` unless given); ``timeout``: seconds after
        which its process tree is killed; ``user`` as in ``commands.run``."""
        _check_size(rows, cols)
        req: Dict[str, object] = {"cmd": _argv(cmd), "rows": rows, "cols": cols,
                                  "env": dict({"TERM": "xterm-256color"}, **(env or {}))}
        if cwd is not None:
            req["cwd"] = cwd
        if timeout is not None:
            req["timeout"] = timeout
        if user is not None:
            req["user"] = user
        stream = open_upgrade(self._client, "/v1/sandboxes/%s/exec" % self._id,
                              "space-terminal", what="a terminal in sandbox %s" % self._id,
                              json_body=req)
        handle = PtyHandle(self._id, stream, on_data)
        handle.wait_started()
        return handle
