"""Upgraded connections to spaced: a request whose 101 answer turns the connection into a raw
byte stream (``Upgrade: tcp`` for a sandbox's port, ``Upgrade: space-terminal`` for a terminal).

:func:`open_upgrade` sends the request on a fresh connection of the :class:`Client` (its Unix
socket, TCP or TLS listener) and returns an :class:`UpgradedStream`, or raises the SDK's error
for the answer (``UnavailableError`` for "nothing listens on port ...", ``NotFoundError``, ...).

An :class:`UpgradedStream` is read by one thread and written by others. A TLS socket must not
be read and written at the same time, so the socket is non-blocking and each ``recv``/``send``
holds a lock only for the call itself; waiting happens outside it, in ``poll``. The reading
thread owns the socket: :meth:`UpgradedStream.abort` (any thread) wakes it, and it closes the
socket with :meth:`UpgradedStream.close` when done.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
from typing import Dict, Optional, Tuple

from .client import Client
from .errors import SpaceError, UnavailableError, error_for

_MAX_HEAD = 64 * 1024
_MAX_ERROR_BODY = 1 << 20


class UpgradedStream:
    """A connection spaced switched to another protocol; ``early`` holds the bytes that came with
    its 101 answer (they are returned first by :meth:`recv`)."""

    def __init__(self, sock: socket.socket, early: bytes, what: str) -> None:
        self.what = what  # for messages: "port 8000 of sandbox sb_..."
        self._sock = sock
        self._early = early
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._lock = threading.Lock()
        self._aborted = False
        self._closed = False
        sock.setblocking(False)
        self._poll_in = select.poll()
        self._poll_in.register(sock.fileno(), select.POLLIN)
        self._poll_out = select.poll()
        self._poll_out.register(sock.fileno(), select.POLLOUT)

    @property
    def aborted(self) -> bool:
        return self._aborted

    def recv(self, n: int = 1 << 16) -> bytes:
        """The next bytes (at most ``n``), waiting for them; b"" at the end of the stream.
        Raises ``OSError`` when the connection broke or was aborted."""
        if self._early:
            data, self._early = self._early[:n], self._early[n:]
            return data
        while True:
            with self._lock:
                if self._closed or self._aborted:
                    raise OSError("the connection was closed")
                try:
                    return self._sock.recv(n)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass  # TLS: a partial record, or a key update to send first
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    return b""
            self._poll_in.poll(1000)

    def sendall(self, data: bytes) -> None:
        """Sends all of ``data``, waiting while the socket's buffer is full. Raises ``OSError``
        when the connection broke or was aborted."""
        view = memoryview(data)
        while view:
            with self._lock:
                if self._closed or self._aborted:
                    raise OSError("the connection was closed")
                try:
                    sent = self._sock.send(view)
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    sent = 0
            if sent:
                view = view[sent:]
            else:
                self._poll_out.poll(1000)

    def shutdown_write(self) -> None:
        """Tells the other side there is no more to send (TCP half-close). Not over TLS, whose
        stream cannot be half-closed: there the other side's end closes both ways."""
        if self._tls:
            return
        with self._lock:
            if not self._closed:
                try:
                    self._sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    def abort(self) -> None:
        """Cuts the connection at once, from any thread: the reader's ``recv`` returns or raises
        (spaced then ends the tunnel, or kills the terminal's command)."""
        self._aborted = True
        with self._lock:
            if not self._closed:
                try:
                    # socket.socket's own shutdown: ssl.SSLSocket's would drop its TLS state
                    # under a reader that may still be in recv().
                    socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """Closes the socket (the reading thread, once it is done)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._sock.close()


def open_upgrade(client: Client, path: str, protocol: str, *, what: str,
                 json_body: object = None, timeout: Optional[float] = None) -> UpgradedStream:
    """``POST path`` with ``Upgrade: protocol`` on a new connection; the stream once spaced
    answered 101. ``timeout``: seconds for connecting and for the answer (default the
    Client's)."""
    limit = client.timeout if timeout is None else timeout
    conn = client._connection(limit)  # noqa: SLF001 - the same package's transport
    body = json.dumps(json_body).encode() if json_body is not None else b""
    host = "localhost"
    if client.api_url is not None:
        host = client._host if ":" not in client._host else "[%s]" % client._host  # noqa: SLF001
        if client._port:  # noqa: SLF001
            host += ":%d" % client._port  # noqa: SLF001
    head = ["POST %s%s HTTP/1.1" % (client._prefix, path), "Host: %s" % host,  # noqa: SLF001
            "Connection: Upgrade", "Upgrade: %s" % protocol, "Content-Length: %d" % len(body)]
    if body:
        head.append("Content-Type: application/json")
    if client.token:
        head.append("Authorization: Bearer " + client.token)
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    try:
        conn.connect()
        sock = conn.sock
        conn.sock = None  # the stream owns it from here
    except FileNotFoundError as e:
        conn.close()
        raise UnavailableError("spaced is not running: no socket at %s (start it with `spaced`, "
                               "or set $SPACE_SOCKET / $SPACE_API)" % client.socket_path,
                               code="unavailable") from e
    except ssl.SSLCertVerificationError as e:
        conn.close()
        raise error_for("permission_denied", "spaced's TLS certificate at %s is not trusted (%s);"
                        " pass ca_file= or set $SPACE_CA" % (client.where(), e.verify_message or e)
                        ) from e
    except OSError as e:
        conn.close()
        raise _transport_error(e, client, limit) from e
    assert sock is not None
    try:
        try:
            sock.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # spaced may answer early (an error) and close: read below
        status, headers, rest = _read_head(sock, client)
        if status == 101:
            return UpgradedStream(sock, rest, what)
        raise _error_answer(sock, status, headers, rest, client)
    except OSError as e:
        sock.close()
        raise _transport_error(e, client, limit) from e
    except BaseException:
        sock.close()
        raise


def _transport_error(e: OSError, client: Client, limit: Optional[float]) -> SpaceError:
    if isinstance(e, socket.timeout):
        return error_for("timeout", "no answer from spaced at %s within %ss"
                         % (client.where(), limit))
    if isinstance(e, ConnectionRefusedError):
        return UnavailableError("spaced refused the connection at %s; is it running?"
                                % client.where(), code="unavailable")
    if isinstance(e, PermissionError):
        return UnavailableError("cannot open %s: %s (the socket is root's; run as root or use the "
                                "TCP listener with a token)" % (client.where(), e),
                                code="unavailable")
    return UnavailableError("cannot reach spaced at %s: %s" % (client.where(), e),
                            code="unavailable")


def _read_head(sock: socket.socket, client: Client) -> Tuple[int, Dict[str, str], bytes]:
    """The answer's status and headers (lower-case names), and the bytes read past them."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > _MAX_HEAD:
            raise error_for("protocol_error", "spaced at %s sent an answer head over 64 KiB"
                            % client.where())
        chunk = sock.recv(65536)
        if not chunk:
            raise UnavailableError("spaced at %s closed the connection without an answer"
                                   % client.where(), code="unavailable")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise error_for("protocol_error", "spaced at %s answered %r, not HTTP"
                        % (client.where(), lines[0][:80]))
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers, rest


def _error_answer(sock: socket.socket, status: int, headers: Dict[str, str], rest: bytes,
                  client: Client) -> SpaceError:
    """The SDK's error for an answer other than 101 (its JSON body's code and message)."""
    body = rest
    length = headers.get("content-length")
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    want = int(length) if length and length.isdigit() else None
    while len(body) < _MAX_ERROR_BODY and (want is None or len(body) < want):
        if chunked and body.endswith(b"0\r\n\r\n"):
            break
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    if chunked:
        body = _dechunk(body)
    elif want is not None:
        body = body[:want]
    if status < 400:
        return error_for("protocol_error", "spaced at %s answered %d where it switches "
                         "protocols (101)" % (client.where(), status), status)
    try:
        err = json.loads(body)["error"]
        return error_for(str(err["code"]), str(err["message"]), status)
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:300]
        return error_for("internal", "HTTP %d from spaced: %s" % (status, text or "(no body)"),
                         status)


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            break
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2:]
    return out
