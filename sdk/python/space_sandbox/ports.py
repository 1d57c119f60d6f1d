"""A sandbox's ports, reachable from this machine: ``sandbox.get_host(port)``,
``sandbox.get_url(port)`` and ``sandbox.wait_for_port(port)``.

A :class:`PortForward` is a listener on 127.0.0.1 (a free port) of the machine this program
runs on; each connection it accepts is tunneled to 127.0.0.1:PORT inside the sandbox through its
own request to spaced (``POST /v1/sandboxes/{id}/ports/{port}``, ``Upgrade: tcp``), as
``space port`` does. A connection accepted while nothing listens in the sandbox is reset at once
(spaced answers "nothing listens on port ..."; ``last_error`` keeps it). The forwards of a
:class:`Ports` are made on first use, one per port, and closed by ``sandbox.close()`` (also
``destroy()`` and ``kill()``) or when the program exits.
"""

from __future__ import annotations

import atexit
import socket
import struct
import threading
import time
import weakref
from typing import Dict, Optional

from ._upgrade import UpgradedStream, open_upgrade
from .client import Client
from .errors import InvalidArgumentError, SpaceError, SpaceTimeoutError, UnavailableError, error_for

_live: "weakref.WeakSet[PortForward]" = weakref.WeakSet()


def _check_port(port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidArgumentError("port must be a number 1-65535, not %r" % (port,),
                                   code="invalid_argument")
    return port


def _reset(sock: socket.socket) -> None:
    """Closes ``sock`` with a reset (RST), so its client fails at once instead of reading an
    empty answer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class PortForward:
    """127.0.0.1:``local_port`` of this machine, forwarded to ``sandbox_port`` of the sandbox
    until :meth:`close`."""

    def __init__(self, sandbox_id: str, client: Client, port: int) -> None:
        self.sandbox_id = sandbox_id
        self.sandbox_port = _check_port(port)
        self._client = client
        self._path = "/v1/sandboxes/%s/ports/%d" % (sandbox_id, port)
        self._what = "port %d of sandbox %s" % (port, sandbox_id)
        self._lock = threading.Lock()
        self._tunnels: Dict[socket.socket, UpgradedStream] = {}
        self._closed = False
        #: Why the last connection could not be forwarded (e.g. nothing listened yet).
        self.last_error: Optional[SpaceError] = None
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._listener.bind(("127.0.0.1", 0))
            self._listener.listen(128)
        except OSError:
            self._listener.close()
            raise
        self.local_port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="space-port-%d" % port, daemon=True).start()
        _live.add(self)

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``: where to connect on this machine."""
        return "127.0.0.1:%d" % self.local_port

    @property
    def closed(self) -> bool:
        return self._closed

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.1)  # out of fds, say: the listener stays
                continue
            threading.Thread(target=self._serve, args=(conn,), name="space-tunnel",
                             daemon=True).start()

    def _serve(self, local: socket.socket) -> None:
        try:
            up = open_upgrade(self._client, self._path, "tcp", what=self._what)
        except SpaceError as e:
            self.last_error = e
            _reset(local)
            return
        with self._lock:
            if self._closed:
                up.abort()
            self._tunnels[local] = up
        sender = threading.Thread(target=self._send_up, args=(local, up), name="space-tunnel-up",
                                  daemon=True)
        sender.start()
        try:
            while True:  # sandbox -> here
                data = up.recv()
                if not data:
                    break
                local.sendall(data)
            local.shutdown(socket.SHUT_WR)
        except OSError:
            up.abort()
            _shutdown(local)
        sender.join()
        with self._lock:
            self._tunnels.pop(local, None)
        up.close()
        local.close()

    @staticmethod
    def _send_up(local: socket.socket, up: UpgradedStream) -> None:
        try:
            while True:  # here -> sandbox
                data = local.recv(1 << 16)
                if not data:
                    up.shutdown_write()
                    return
                up.sendall(data)
        except OSError:
            up.abort()
            _shutdown(local)

    def close(self) -> None:
        """Stops listening and cuts the connections it forwards (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            tunnels = list(self._tunnels.items())
        _shutdown(self._listener)  # wakes accept()
        self._listener.close()
        for local, up in tunnels:
            up.abort()
            _shutdown(local)
        _live.discard(self)

    def __repr__(self) -> str:
        return "PortForward(%s -> %s)" % (self.host, self._what)


class Ports:
    """The port forwards of one sandbox (``Sandbox.get_host`` and friends use it)."""

    def __init__(self, sandbox_id: str, client: Client) -> None:
        self._id = sandbox_id
        self._client = client
        self._lock = threading.Lock()
        self._forwards: Dict[int, PortForward] = {}

    def forward(self, port: int) -> PortForward:
        """The forward of ``port``, started on first use."""
        port = _check_port(port)
        with self._lock:
            f = self._forwards.get(port)
            if f is None or f.closed:
                f = self._forwards[port] = PortForward(self._id, self._client, port)
            return f

    def wait_for(self, port: int, timeout: float = 60.0) -> None:
        """Returns once something listens on ``port`` in the sandbox (on 127.0.0.1 or 0.0.0.0);
        raises ``SpaceTimeoutError`` if nothing did within ``timeout`` seconds, and at once
        what is not worth waiting for (no such sandbox, paused, a microVM, spaced gone)."""
        port = _check_port(port)
        path = "/v1/sandboxes/%s/ports/%d" % (self._id, port)
        what = "port %d of sandbox %s" % (port, self._id)
        deadline = time.monotonic() + timeout
        delay = 0.05
        last: Optional[SpaceError] = None
        while True:
            left = deadline - time.monotonic()
            try:
                probe = open_upgrade(self._client, path, "tcp", what=what,
                                     timeout=max(1.0, min(left, self._client.timeout)))
                probe.abort()
                probe.close()
                return
            except UnavailableError as e:
                if e.status is None:
                    raise  # spaced itself cannot be reached
                last = e  # nothing listens (yet)
            except SpaceTimeoutError as e:
                last = e
            left = deadline - time.monotonic()
            if left <= 0:
                raise error_for("timeout", "nothing listens on port %d in sandbox %s after %gs "
                                "(last: %s)" % (port, self._id, timeout,
                                                last.message if last else "-"))
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.5)

    def close(self) -> None:
        with self._lock:
            forwards = list(self._forwards.values())
            self._forwards.clear()
        for f in forwards:
            f.close()


@atexit.register
def _close_all() -> None:
    for f in list(_live):
        f.close()
