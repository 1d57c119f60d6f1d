"""The code interpreter: stateful Python contexts in a sandbox (``sandbox.run_code``).

A context is a Python process inside the sandbox (``interpreter.py serve``, started as a
detached exec) that keeps its variables between runs; each run is an exec of
``interpreter.py run`` that sends the code to it and streams its events back.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from .client import Client
from .errors import error_for

_SCRIPT_PATH = "/tmp/.space/interpreter.py"


def _script() -> bytes:
    with open(os.path.join(os.path.dirname(__file__), "interpreter.py"), "rb") as f:
        return f.read()


@dataclass
class Result:
    """A value the code produced: the last expression's (``is_main``) or a display (a
    matplotlib figure). ``data`` maps MIME types to values; ``png`` is the decoded image."""

    data: Dict[str, str]
    is_main: bool = False

    @property
    def text(self) -> Optional[str]:
        return self.data.get("text/plain")

    @property
    def html(self) -> Optional[str]:
        return self.data.get("text/html")

    @property
    def png(self) -> Optional[bytes]:
        v = self.data.get("image/png")
        return base64.b64decode(v) if v is not None else None

    @property
    def formats(self) -> List[str]:
        return sorted(self.data)


@dataclass
class ExecutionError:
    name: str
    value: str
    traceback: str


@dataclass
class Execution:
    results: List[Result] = field(default_factory=list)
    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)
    error: Optional[ExecutionError] = None

    @property
    def text(self) -> Optional[str]:
        """The last expression's value as text (None if the code ended with a statement)."""
        for r in self.results:
            if r.is_main:
                return r.text
        return None


@dataclass
class CodeContext:
    id: str
    language: str = "python"

    @property
    def socket(self) -> str:
        return "/tmp/.space/ctx-%s.sock" % self.id


class CodeInterpreter:
    def __init__(self, sandbox: Any, client: Client) -> None:
        self._sb = sandbox
        self._client = client
        self._installed = False
        self._default: Optional[CodeContext] = None

    def _install(self) -> None:
        if not self._installed:
            self._sb.files.write(_SCRIPT_PATH, _script(), mode=0o644)
            self._installed = True

    def create_context(self, language: str = "python") -> CodeContext:
        if language != "python":
            raise ValueError("only python contexts exist (run other languages with commands.run)")
        self._install()
        ctx = CodeContext(secrets.token_hex(6), language)
        r = self._client.call("POST", "/v1/sandboxes/%s/exec" % self._sb.id, json_body={
            "cmd": ["python3", _SCRIPT_PATH, "serve", ctx.socket], "detach": True})
        if r and r.get("exit"):
            raise error_for("unavailable", "the code context could not start: %s" % r["exit"])
        return ctx

    def run(self, code: str, *, context: Optional[CodeContext] = None,
            timeout: Optional[float] = None,
            on_stdout: Optional[Callable[[str], None]] = None,
            on_stderr: Optional[Callable[[str], None]] = None,
            on_result: Optional[Callable[[Result], None]] = None) -> Execution:
        if context is None:
            if self._default is None:
                self._default = self.create_context()
            context = self._default
        self._install()
        argv = ["python3", _SCRIPT_PATH, "run", context.socket]
        if timeout is not None:
            argv.append(str(float(timeout)))
        execution = Execution()

        def out(text: str) -> None:
            for line in text.splitlines():
                if not line.strip():
                    continue
                ev = json.loads(line)
                kind = ev.get("type")
                if kind == "stdout":
                    execution.stdout.append(ev["text"])
                    if on_stdout:
                        on_stdout(ev["text"])
                elif kind == "stderr":
                    execution.stderr.append(ev["text"])
                    if on_stderr:
                        on_stderr(ev["text"])
                elif kind == "result":
                    res = Result(dict(ev.get("data") or {}), bool(ev.get("is_main")))
                    execution.results.append(res)
                    if on_result:
                        on_result(res)
                elif kind == "error":
                    execution.error = ExecutionError(ev.get("name", ""), ev.get("value", ""),
                                                     ev.get("traceback", ""))

        pending = [""]

        def feed(chunk: str) -> None:
            pending[0] += chunk
            if "\n" in pending[0]:
                complete, pending[0] = pending[0].rsplit("\n", 1)
                out(complete)

        r = self._sb.commands.run(argv, stdin=code, on_stdout=feed)
        if pending[0]:
            out(pending[0])
        if r.exit_code != 0 and execution.error is None:
            execution.error = ExecutionError("InterpreterError", "the interpreter exited with %s: %s"
                                             % (r.exit_code if r.exit_code is not None else
                                                "signal %s" % r.signal, r.stderr.strip()[-500:]), "")
        return execution
