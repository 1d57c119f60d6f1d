"""Commands in a sandbox: ``sandbox.commands.run(...)``."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Union

from .client import Client, Response, transport_error
from .errors import (CommandExitError, ConflictError, DaemonRestartError, NotFoundError,
                     SpaceError, error_for, sdk_message)

OutputHandler = Callable[[str], None]
Cmd = Union[str, Sequence[str]]

# How long past a command's timeout= the SDK waits for its stream's next bytes.
_STREAM_MARGIN_S = 60


@dataclass
class CommandResult:
    """How a command ended. ``exit_code`` is None when a signal ended it (``signal`` says
    which). ``error`` is set when the program could not start (126: a missing cwd or a program
    not executable, 125: an unknown user, 127: no such program) and says why; such a command
    wrote nothing, so ``stderr`` carries the same reason (a line), where an agent reads it."""

    exit_code: Optional[int]
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    signal: Optional[int] = None
    timed_out: bool = False
    oom_killed: bool = False
    duration_s: float = 0.0
    error: Optional[str] = None
    pid: Optional[int] = None
    snapshot: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def _argv(cmd: Cmd) -> List[str]:
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError("cmd must be a shell string or a non-empty list of strings")
    return argv


class CommandHandle:
    """A command running in the background (``run(..., background=True)``, or
    ``commands.connect(pid)``): its output is collected (and passed to the handlers) while it
    runs; ``wait()`` returns its result.

    A command started in the background without ``stdin`` runs detached: it goes on when this
    program ends or calls :meth:`disconnect`, and ``commands.connect(pid)`` (from here or from
    another program) follows it again (spaced keeps its last 1 MiB of output and its exit). With
    ``stdin`` it stays attached to this program's connection and ends with it."""

    def __init__(self, sandbox_id: str, client: Client, resp: Optional[Response],
                 on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler], *,
                 detached: bool = False, pid: Optional[int] = None,
                 snapshot: Optional[str] = None, ended: Optional[dict] = None) -> None:
        self.sandbox_id = sandbox_id
        self._client = client
        self._resp = resp
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr
        self._out: List[bytes] = []
        self._err: List[bytes] = []
        self._started = threading.Event()
        self._done = threading.Event()
        self._result: Optional[CommandResult] = None
        self._failure: Optional[BaseException] = None
        self._disconnected = False
        self._aborted = False  # this program cut the stream (disconnect, kill)
        self.detached = detached
        self.pid: Optional[int] = pid
        self.snapshot: Optional[str] = snapshot
        #: Output bytes spaced no longer kept when this handle connected (detached commands).
        self.dropped = 0
        lines = resp.iter_lines() if resp is not None else iter(
            [json.dumps(dict(ended or {}, type="exit")).encode()])
        self._thread = threading.Thread(target=self._pump, args=(lines,), name="space-exec",
                                        daemon=True)
        self._thread.start()

    def _reconnect_hint(self) -> str:
        return ("reconnect with Sandbox.connect(%r) once spaced is back, then check "
                "commands.list() or run the command again; commands started detached "
                "(background=True) survive a restart" % self.sandbox_id)

    def _pump(self, lines) -> None:
        ended: List[dict] = []  # the "exit" event, once read
        try:
            self._read_events(self._lines(lines), ended)
            if not ended:
                if self._disconnected:
                    raise error_for("unavailable", "disconnected from the command (pid %s); "
                                    "commands.connect(pid) follows it again" % self.pid)
                if self._aborted:
                    raise error_for("unavailable", "the stream of the command (pid %s) in "
                                    "sandbox %s was cut by kill() before its exit event"
                                    % (self.pid, self.sandbox_id))
                # spaced always ends a stream with "exit" or "error": the connection was lost.
                raise DaemonRestartError(
                    "the connection to spaced closed before the command (pid %s) in sandbox %s "
                    "ended: spaced may have restarted or crashed; %s"
                    % (self.pid, self.sandbox_id, self._reconnect_hint()),
                    reason="connection_lost", sandbox_id=self.sandbox_id, pid=self.pid,
                    code="unavailable")
            exit_event = ended[0]
            out, err = b"".join(self._out), b"".join(self._err)
            e = exit_event.get("error")
            if isinstance(e, str) and e and not err:  # it could not start: say why in stderr
                err = e.encode() + b"\n"
            self._result = CommandResult(
                exit_code=exit_event.get("exit_code"), stdout=out.decode("utf-8", "replace"),
                stderr=err.decode("utf-8", "replace"), stdout_bytes=out, stderr_bytes=err,
                signal=exit_event.get("signal"), timed_out=bool(exit_event.get("timed_out")),
                oom_killed=bool(exit_event.get("oom_killed")),
                duration_s=float(exit_event.get("duration_s") or 0.0),
                error=e if isinstance(e, str) else None, pid=self.pid, snapshot=self.snapshot)
        except BaseException as e:  # handed to wait()
            self._failure = e
        finally:
            if self._resp is not None:
                self._resp.close()
            self._started.set()
            self._done.set()

    def _lines(self, lines) -> Iterator[bytes]:
        """The stream's lines. Ends early where the connection broke or this program cut it
        (``_pump`` says which if no "exit" came); raises ``SpaceTimeoutError`` past a timeout=
        (the command's own plus a margin) and the SDK's error for any other failure to read."""
        it = iter(lines)
        while True:
            try:
                line = next(it)
            except StopIteration:
                return
            except (http.client.HTTPException, ConnectionError):
                return  # the connection broke mid-stream
            except (OSError, ValueError) as e:  # ValueError: reading a stream abort() closed
                if self._aborted:
                    return
                if isinstance(e, socket.timeout):
                    raise error_for("timeout", "spaced sent nothing on the command (pid %s) in "
                                    "sandbox %s for %s s past the command's own timeout; "
                                    "commands.list() shows whether it still runs"
                                    % (self.pid, self.sandbox_id, _STREAM_MARGIN_S)) from e
                raise transport_error(e, self._client.where(), "reading a command's output") from e
            yield line

    def _read_events(self, lines, ended: List[dict]) -> None:
        """Reads the stream's events until its end: output to the handlers, the "exit" event
        into ``ended``; an "error" event is raised (``DaemonRestartError`` for spaced's
        shutdown)."""
        for line in lines:
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                raise error_for("protocol_error", "spaced sent a line that is not JSON on the "
                                "stream of the command (pid %s): %r" % (self.pid, line[:200]))
            kind = ev.get("type")
            if kind == "started":
                self.pid = ev.get("pid")
                self.snapshot = ev.get("snapshot", self.snapshot)
                self.dropped += int(ev.get("dropped") or 0)
                self._started.set()
            elif kind in ("stdout", "stderr"):
                data = base64.b64decode(ev.get("data", ""))
                (self._out if kind == "stdout" else self._err).append(data)
                handler = self._on_stdout if kind == "stdout" else self._on_stderr
                if handler is not None:
                    handler(data.decode("utf-8", "replace"))
            elif kind == "dropped":
                self.dropped += int(ev.get("bytes") or 0)
            elif kind == "exit":
                ended.append(ev)
            elif kind == "error":
                err = ev.get("error") or {}
                code = str(err.get("code", "internal"))
                message = str(err.get("message", "the exec failed"))
                if err.get("reason") == "shutdown":  # the stable field, not the message
                    raise DaemonRestartError("%s; %s" % (sdk_message(message),
                                                         self._reconnect_hint()),
                                             reason="shutdown", sandbox_id=self.sandbox_id,
                                             pid=self.pid, code=code, server_message=message)
                raise error_for(code, message)

    def wait_started(self, timeout: Optional[float] = None) -> Optional[int]:
        """Waits until the process runs; its pid (inside the sandbox)."""
        if self.pid is None:
            self._started.wait(timeout)
        if self.pid is None and self._failure is not None:
            raise self._failure
        return self.pid

    def wait(self, timeout: Optional[float] = None, *, check: bool = False) -> CommandResult:
        """Waits for the command to end. Raises ``SpaceTimeoutError`` if it is still running after
        ``timeout`` seconds (it keeps running), ``CommandExitError`` with ``check`` if it failed."""
        if not self._done.wait(timeout):
            raise error_for("timeout", "the command (pid %s) is still running after %ss"
                            % (self.pid, timeout))
        if self._failure is not None:
            raise self._failure
        assert self._result is not None
        if check and self._result.exit_code != 0:
            raise CommandExitError(self._result)
        return self._result

    def disconnect(self) -> None:
        """Stops following the command; a detached one runs on (``commands.connect(pid)``)."""
        if self._resp is not None and not self._done.is_set():
            self._disconnected = True
            self._aborted = True
            self._resp.abort()
            self._done.wait(5)

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    @property
    def stdout(self) -> str:
        """The output so far."""
        return b"".join(self._out).decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return b"".join(self._err).decode("utf-8", "replace")

    def _signal_tree(self, pid: int, signal: int) -> None:
        try:
            procs = self._client.call("GET", "/v1/sandboxes/%s/processes" % self.sandbox_id)
            children: Dict[int, List[int]] = {}
            for p in procs["processes"]:
                children.setdefault(p.get("ppid", 0), []).append(p["pid"])
            tree, todo = [], [pid]
            while todo:
                p = todo.pop()
                tree.append(p)
                todo.extend(children.get(p, []))
        except (NotFoundError, ConflictError):
            tree = [pid]
        for p in tree:  # parents first: they cannot start new children once stopped
            try:
                self._client.call("DELETE", "/v1/sandboxes/%s/processes/%d"
                                  % (self.sandbox_id, p), query={"signal": signal})
            except (NotFoundError, ConflictError):
                pass  # already gone

    def kill(self, signal: int = 9, *, grace: float = 2.0) -> None:
        """Sends ``signal`` to the command's process and every process it started (found through
        their parent pids); if the command has not ended ``grace`` seconds later, kills what is
        left of its tree (SIGKILL; an attached command: by cutting its stream)."""
        pid = self.wait_started(grace)
        if pid is not None and not self._done.is_set():
            self._signal_tree(pid, signal)
        if not self._done.wait(grace):
            if self.detached and pid is not None:
                self._signal_tree(pid, 9)
            elif self._resp is not None:
                self._aborted = True
                self._resp.abort()
            self._done.wait(grace)


class Commands:
    """``sandbox.commands``: run commands in one sandbox."""

    def __init__(self, sandbox_id: str, client: Client) -> None:
        self._id = sandbox_id
        self._client = client

    def run(self, cmd: Cmd, *, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
            timeout: Optional[float] = None, stdin: Union[None, bytes, str] = None,
            on_stdout: Optional[OutputHandler] = None, on_stderr: Optional[OutputHandler] = None,
            background: bool = False, check: bool = False,
            snapshot: bool = False, user: Union[None, str, int] = None
            ) -> Union[CommandResult, CommandHandle]:
        """Runs ``cmd`` (a shell string, run by ``sh -c``, or an argv list).

        ``timeout``: seconds after which the command's process tree is killed (the result says
        ``timed_out``). ``on_stdout``/``on_stderr`` get the output as it comes. With
        ``background=True`` returns a :class:`CommandHandle` at once (without ``stdin`` the
        command runs detached and outlives this program); otherwise waits and returns
        a :class:`CommandResult` (with ``check=True`` raising ``CommandExitError`` on failure).
        ``snapshot=True`` snapshots the sandbox before the command starts (result.snapshot).
        ``user``: run as this user (a name of the sandbox, a uid or "uid:gid"); default root.
        """
        req: Dict[str, object] = {"cmd": _argv(cmd)}
        if env:
            req["env"] = dict(env)
        if cwd is not None:
            req["cwd"] = cwd
        if timeout is not None:
            req["timeout"] = timeout
        if snapshot:
            req["snapshot"] = True
        if user is not None:
            req["user"] = user
        path = "/v1/sandboxes/%s/exec" % self._id
        if background and stdin is None:
            req["detach"] = True
            started = self._client.call("POST", path, json_body=req)
            if started.get("pid") is None:  # it ended before it ran (could not start)
                return CommandHandle(self._id, self._client, None, on_stdout, on_stderr,
                                     detached=True, snapshot=started.get("snapshot"),
                                     ended=started.get("exit") or {})
            return self.connect(int(started["pid"]), on_stdout=on_stdout, on_stderr=on_stderr,
                                _snapshot=started.get("snapshot"))
        # No read timeout on the stream unless the command has one: spaced ends it by then.
        http_timeout = None if timeout is None else timeout + _STREAM_MARGIN_S
        if stdin is not None:
            req["stdin"] = True
            data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
            head = json.dumps(req).encode() + b"\n"

            def body():
                yield head
                for i in range(0, len(data), 1 << 16):
                    yield data[i:i + (1 << 16)]

            resp = self._client.request("POST", path, body=body(),
                                        content_type="application/octet-stream",
                                        timeout=http_timeout, stream=True)
        else:
            resp = self._client.request("POST", path, json_body=req, timeout=http_timeout,
                                        stream=True)
        handle = CommandHandle(self._id, self._client, resp, on_stdout, on_stderr)
        if background:
            handle.wait_started()
            return handle
        return handle.wait(check=check)

    def connect(self, pid: int, *, on_stdout: Optional[OutputHandler] = None,
                on_stderr: Optional[OutputHandler] = None,
                _snapshot: Optional[str] = None) -> CommandHandle:
        """Follows the detached command ``pid`` (started with ``background=True``, here or by
        another program): the output spaced kept of it (its last 1 MiB) and then new output, and
        its end (``wait()``). Raises ``NotFoundError`` for a pid that was not started detached."""
        resp = self._client.request("GET", "/v1/sandboxes/%s/processes/%d/logs" % (self._id, pid),
                                    query={"follow": "true"}, timeout=None, stream=True)
        handle = CommandHandle(self._id, self._client, resp, on_stdout, on_stderr,
                               detached=True, pid=pid, snapshot=_snapshot)
        return handle

    def kill(self, pid: int, signal: int = 15) -> None:
        """Sends ``signal`` to process ``pid`` of the sandbox."""
        self._client.call("DELETE", "/v1/sandboxes/%s/processes/%d" % (self._id, pid),
                          query={"signal": signal})

    def list(self) -> List[dict]:
        """The processes running in the sandbox (pid, ppid, uid, state, argv, stream)."""
        return list(self._client.call("GET", "/v1/sandboxes/%s/processes" % self._id)["processes"])
