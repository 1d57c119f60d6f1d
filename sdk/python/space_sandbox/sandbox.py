"""Sandboxes: create, connect, pause, snapshot, roll back, destroy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Union

from .client import Client, segment
from .code import CodeContext, CodeInterpreter, Execution, Result
from .commands import Commands
from .errors import ConflictError, NotFoundError
from .files import Files
from .ports import Ports
from .pty import Pty

Size = Union[int, str]


@dataclass
class SandboxInfo:
    id: str
    state: str
    runtime: str
    image: str
    profile: str
    created_at: str
    expires_at: Optional[str]
    limits: Dict[str, Any]
    env: Dict[str, str] = field(default_factory=dict)
    workdir: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_api(cls, j: Dict[str, Any]) -> "SandboxInfo":
        return cls(id=j["id"], state=j["state"], runtime=j["runtime"], image=j["image"],
                   profile=j["profile"], created_at=j["created_at"],
                   expires_at=j.get("expires_at"), limits=dict(j.get("limits") or {}),
                   env=dict(j.get("env") or {}), workdir=j.get("workdir"), raw=j)


@dataclass
class SnapshotInfo:
    id: str
    sandbox: str
    profile: str
    name: Optional[str]
    kind: str
    created_at: str
    expires_at: Optional[str]
    files: int
    contents: str
    processes: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_api(cls, j: Dict[str, Any]) -> "SnapshotInfo":
        return cls(id=j["id"], sandbox=j["sandbox"], profile=j["profile"], name=j.get("name"),
                   kind=j["kind"], created_at=j["created_at"], expires_at=j.get("expires_at"),
                   files=int(j.get("files", 0)), contents=j.get("contents", ""),
                   processes=j.get("processes", ""), raw=j)


class Sandbox:
    """One sandbox. Create one with :meth:`create` (or :meth:`connect` to an existing id); as a
    context manager it is destroyed on exit::

        with Sandbox.create() as sb:
            print(sb.commands.run("echo hi").stdout)
    """

    def __init__(self, info: SandboxInfo, client: Client) -> None:
        self._client = client
        self.info = info
        self.id = info.id
        self.commands = Commands(self.id, client)
        self.files = Files(self.id, client)
        self._code = CodeInterpreter(self, client)
        #: Commands on a terminal: ``sandbox.pty.create("bash", on_data=...)``.
        self.pty = Pty(self.id, client)
        self._ports = Ports(self.id, client)

    # ---- life cycle ------------------------------------------------------------------------

    @classmethod
    def create(cls, *, image: Optional[str] = None, profile: Optional[str] = None,
               runtime: Optional[str] = None, memory: Optional[Size] = None,
               cpus: Union[None, float, str] = None, pids: Optional[int] = None,
               disk: Optional[Size] = None, timeout: Union[None, float, str] = None,
               env: Optional[Dict[str, str]] = None, secrets: Optional[Iterable[str]] = None,
               allow: Optional[Iterable[str]] = None, workdir: Optional[str] = None,
               snapshot_every: Union[None, float, str] = None,
               idle_timeout: Union[None, float, str] = None,
               client: Optional[Client] = None) -> "Sandbox":
        """A new sandbox. Unset fields take the daemon's defaults (image "host", profile "test",
        runtime "linux"). ``timeout`` is its lifetime (seconds or "10m"): it is destroyed when
        it expires (``set_timeout`` gives a new one). ``idle_timeout``: destroyed once no call
        used it for that long (a sandbox whose program died does not linger). ``secrets`` are credential names the egress gateway may inject for it (the
        sandbox sees placeholders only); ``allow`` narrows the profile's egress allowlist."""
        client = client or Client()
        body: Dict[str, Any] = {}
        for k, v in (("image", image), ("profile", profile), ("runtime", runtime),
                     ("memory", memory), ("cpus", cpus), ("pids", pids), ("disk", disk),
                     ("timeout", timeout), ("workdir", workdir),
                     ("snapshot_every", snapshot_every), ("idle_timeout", idle_timeout)):
            if v is not None:
                body[k] = v
        if env:
            body["env"] = dict(env)
        if secrets is not None:
            body["secrets"] = list(secrets)
        if allow is not None:
            body["allow"] = list(allow)
        j = client.call("POST", "/v1/sandboxes", json_body=body, timeout=max(client.timeout, 300))
        return cls(SandboxInfo.from_api(j), client)

    @classmethod
    def connect(cls, sandbox_id: str, *, client: Optional[Client] = None) -> "Sandbox":
        """The existing sandbox ``sandbox_id`` (``NotFoundError`` if there is none,
        ``InvalidArgumentError`` for a string that is no sandbox id: they look like
        ``sb_0123abcd``)."""
        client = client or Client()
        j = client.call("GET", "/v1/sandboxes/%s" % segment(sandbox_id))
        return cls(SandboxInfo.from_api(j), client)

    @classmethod
    def list(cls, *, client: Optional[Client] = None) -> List[SandboxInfo]:
        """Every sandbox the caller may see."""
        client = client or Client()
        return [SandboxInfo.from_api(j) for j in client.call("GET", "/v1/sandboxes")["sandboxes"]]

    @classmethod
    def restore(cls, snapshot: Union[str, SnapshotInfo], *,
                client: Optional[Client] = None) -> "Sandbox":
        """A new sandbox holding the files of ``snapshot`` (an id, a name or a SnapshotInfo)."""
        client = client or Client()
        ref = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        j = client.call("POST", "/v1/snapshots/%s/restore" % segment(ref, "snapshot"),
                        json_body={}, timeout=max(client.timeout, 300))
        return cls(SandboxInfo.from_api(j), client)

    def get_info(self) -> SandboxInfo:
        """The sandbox as spaced sees it now (state, limits, usage in ``raw["usage"]``)."""
        self.info = SandboxInfo.from_api(self._client.call("GET", "/v1/sandboxes/%s" % self.id))
        return self.info

    def is_running(self) -> bool:
        try:
            return self.get_info().state == "running"
        except NotFoundError:
            return False

    def destroy(self, *, wait: bool = True) -> None:
        """Destroys the sandbox (idempotent). With ``wait=False`` spaced answers as soon as the
        sandbox is unreachable and finishes the teardown in the background."""
        self.close()
        try:
            self._client.request("DELETE", "/v1/sandboxes/%s" % self.id,
                                 query={"force": True, "wait": wait})
        except (NotFoundError, ConflictError):
            pass  # gone already (a destroyed sandbox's record answers 409)

    kill = destroy

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.destroy(wait=False)

    def set_timeout(self, timeout: Union[float, str]) -> SandboxInfo:
        """A new lifetime: the sandbox is destroyed ``timeout`` (seconds or "30m") from now."""
        self.info = SandboxInfo.from_api(self._client.call(
            "POST", "/v1/sandboxes/%s/timeout" % self.id, json_body={"timeout": timeout}))
        return self.info

    def pause(self) -> SandboxInfo:
        """Freezes every process of the sandbox."""
        self.info = SandboxInfo.from_api(self._client.call("POST", "/v1/sandboxes/%s/pause" % self.id))
        return self.info

    def resume(self) -> SandboxInfo:
        self.info = SandboxInfo.from_api(self._client.call("POST", "/v1/sandboxes/%s/resume" % self.id))
        return self.info

    # ---- ports -------------------------------------------------------------------------------

    def get_host(self, port: int) -> str:
        """``127.0.0.1:PORT`` on this machine, forwarded to ``port`` inside the sandbox (a
        listener of this Sandbox object, started on first use; each connection to it is
        tunneled through spaced). A connection made while nothing listens there is reset."""
        return self._ports.forward(port).host

    def get_url(self, port: int) -> str:
        """``http://127.0.0.1:PORT``, forwarded to ``port`` inside the sandbox (see
        :meth:`get_host`)."""
        return "http://" + self.get_host(port)

    def wait_for_port(self, port: int, timeout: float = 60.0) -> None:
        """Waits until something listens on ``port`` inside the sandbox; ``SpaceTimeoutError``
        if nothing did within ``timeout`` seconds."""
        self._ports.wait_for(port, timeout)

    def close(self) -> None:
        """Stops this object's port forwards (the sandbox runs on; ``destroy`` closes them
        too)."""
        self._ports.close()

    # ---- code interpreter --------------------------------------------------------------------

    def run_code(self, code: str, *, context: Optional[CodeContext] = None,
                 timeout: Optional[float] = None, on_stdout: Optional[Any] = None,
                 on_stderr: Optional[Any] = None, on_result: Optional[Any] = None) -> Execution:
        """Runs Python ``code`` in a stateful context (the sandbox's default one unless
        ``context``): variables survive between runs. Returns an :class:`Execution`: stdout,
        stderr, results (the last expression's value, matplotlib figures as PNG, objects' HTML)
        and the error with its traceback. ``timeout`` interrupts the run (KeyboardInterrupt);
        the context lives on."""
        return self._code.run(code, context=context, timeout=timeout, on_stdout=on_stdout,
                              on_stderr=on_stderr, on_result=on_result)

    def create_code_context(self, language: str = "python") -> CodeContext:
        """A new, separate Python context (its own variables)."""
        return self._code.create_context(language)

    # ---- snapshots -------------------------------------------------------------------------

    def snapshot(self, name: Optional[str] = None) -> SnapshotInfo:
        """Snapshots the sandbox's files (its processes are frozen meanwhile)."""
        body = {"name": name} if name is not None else {}
        return SnapshotInfo.from_api(self._client.call(
            "POST", "/v1/sandboxes/%s/snapshots" % self.id, json_body=body,
            timeout=max(self._client.timeout, 600)))

    def snapshots(self) -> List[SnapshotInfo]:
        """The sandbox's snapshots, newest first."""
        j = self._client.call("GET", "/v1/sandboxes/%s/snapshots" % self.id)
        return [SnapshotInfo.from_api(s) for s in j["snapshots"]]

    def rollback(self, snapshot: Union[str, SnapshotInfo]) -> Dict[str, Any]:
        """Puts the sandbox's files back to ``snapshot``, in place (its processes restart). The
        answer's ``rollback.saved_as`` is a snapshot of the state just before."""
        ref = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        j = self._client.call("POST", "/v1/sandboxes/%s/rollback" % self.id,
                              json_body={"snapshot": ref}, timeout=max(self._client.timeout, 600))
        self.info = SandboxInfo.from_api(j)
        return j["rollback"]

    def diff(self, since: Optional[str] = None) -> Dict[str, List[str]]:
        """Paths added, changed and deleted since creation (or since snapshot ``since``)."""
        return self._client.call("GET", "/v1/sandboxes/%s/diff" % self.id, query={"since": since})

    # ---- audit -----------------------------------------------------------------------------

    def audit(self, *, after: int = 0, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """The sandbox's audit events (commands, processes, file operations, life cycle), in
        order; also readable after the sandbox is destroyed."""
        j = self._client.call("GET", "/v1/sandboxes/%s/audit" % self.id,
                              query={"after": after or None, "limit": limit})
        return list(j["events"])

    def verify_audit(self) -> Dict[str, Any]:
        """Checks the audit log's hash chain: {"ok", "events", "first_bad_seq", "problem"}."""
        return self._client.call("GET", "/v1/sandboxes/%s/audit" % self.id, query={"verify": True})

    def __repr__(self) -> str:
        return "Sandbox(id=%r, state=%r, runtime=%r)" % (self.id, self.info.state, self.info.runtime)
