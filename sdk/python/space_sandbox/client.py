"""The connection to spaced: HTTP/1.1 over its Unix socket (the default) or its TCP listener.

Where to connect, in order: the arguments of :class:`Client`, then ``$SPACE_API``
(``http://127.0.0.1:7070``: the TCP listener, which needs a token; ``https://host:7443`` when
spaced serves TLS there), then ``$SPACE_SOCKET``, then ``/run/space/space.sock``. The token
comes from ``token=`` or ``$SPACE_TOKEN``. For https the daemon's certificate is verified
against ``ca_file=`` or ``$SPACE_CA`` (a PEM file: spaced's own CA is
``<state_dir>/tls/ca.pem`` on its host), else the system's trust store; ``ssl_context=``
replaces all of that.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Union

from .errors import SpaceError, UnavailableError, error_for

DEFAULT_SOCKET = "/run/space/space.sock"

Body = Union[None, bytes, Iterable[bytes]]


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self._unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._unix_path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Response:
    """An answer whose body is read on demand (streams: exec events, downloads)."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}

    def read(self) -> bytes:
        try:
            return self._resp.read()
        finally:
            self.close()

    def json(self) -> Any:
        data = self.read()
        return json.loads(data) if data else None

    def iter_chunks(self, size: int = 1 << 16) -> Iterator[bytes]:
        try:
            while True:
                chunk = self._resp.read1(size) if hasattr(self._resp, "read1") else self._resp.read(size)
                if not chunk:
                    return
                yield chunk
        finally:
            self.close()

    def iter_lines(self) -> Iterator[bytes]:
        try:
            while True:
                line = self._resp.readline()
                if not line:
                    return
                yield line
        finally:
            self.close()

    def abort(self) -> None:
        """Cuts the connection at once (for an exec: spaced kills the command's process tree)."""
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.close()

    def close(self) -> None:
        self._resp.close()
        self._conn.close()


class Client:
    """A handle on one spaced. Cheap: every call opens its own connection, so one Client may be
    shared by threads."""

    def __init__(self, *, socket_path: Optional[str] = None, api_url: Optional[str] = None,
                 token: Optional[str] = None, timeout: float = 60.0,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 ca_file: Optional[str] = None) -> None:
        if socket_path is None and api_url is None:
            api_url = os.environ.get("SPACE_API") or None
            if api_url is None:
                socket_path = os.environ.get("SPACE_SOCKET") or DEFAULT_SOCKET
        self.socket_path = socket_path
        self.api_url = api_url
        self.token = token if token is not None else (os.environ.get("SPACE_TOKEN") or None)
        self.timeout = timeout
        self.ca_file = ca_file if ca_file is not None else (os.environ.get("SPACE_CA") or None)
        self._ssl = ssl_context
        if api_url is not None:
            u = urllib.parse.urlsplit(api_url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError("api_url must look like http://127.0.0.1:7070 or "
                                 "https://host:7443, not %r" % api_url)
            self._scheme, self._host, self._port = u.scheme, u.hostname, u.port
            self._prefix = u.path.rstrip("/")
            if self._scheme == "https" and self._ssl is None:
                # Only ca_file when given (spaced's own CA), else the system's trust store;
                # the host name is checked either way.
                self._ssl = ssl.create_default_context(cafile=self.ca_file)
                self._ssl.set_alpn_protocols(["http/1.1"])
        else:
            self._prefix = ""

    def where(self) -> str:
        return self.api_url if self.api_url is not None else "unix:" + str(self.socket_path)

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.api_url is None:
            assert self.socket_path is not None
            return _UnixHTTPConnection(self.socket_path, timeout)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def request(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                json_body: Any = None, body: Body = None, content_type: Optional[str] = None,
                timeout: Optional[float] = None, stream: bool = False) -> Response:
        """Sends one request. Raises the :mod:`errors` class of an error answer; with
        ``stream=True`` a successful answer's body is left to the caller."""
        headers: Dict[str, str] = {}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        chunked = False
        if json_body is not None:
            body = json.dumps(json_body).encode()
            content_type = content_type or "application/json"
        elif body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
            chunked = True
            headers["Transfer-Encoding"] = "chunked"
        if content_type:
            headers["Content-Type"] = content_type
        target = self._prefix + path
        if query:
            q = {k: _query_value(v) for k, v in query.items() if v is not None}
            if q:
                target += "?" + urllib.parse.urlencode(q)
        conn = self._connection(self.timeout if timeout is None else timeout)
        try:
            try:
                conn.request(method, target, body=body, headers=headers, encode_chunked=chunked)
            except (BrokenPipeError, ConnectionResetError):
                pass  # spaced may answer early (an error) and close; the answer is read below
            resp = conn.getresponse()
        except FileNotFoundError as e:
            conn.close()
            raise UnavailableError("spaced is not running: no socket at %s (start it with "
                                   "`spaced`, or set $SPACE_SOCKET / $SPACE_API)" % self.socket_path,
                                   code="unavailable") from e
        except ConnectionRefusedError as e:
            conn.close()
            raise UnavailableError("spaced refused the connection at %s; is it running?"
                                   % self.where(), code="unavailable") from e
        except PermissionError as e:
            conn.close()
            raise UnavailableError("cannot open %s: %s (the socket is root's; run as root or "
                                   "use the TCP listener with a token)" % (self.where(), e),
                                   code="unavailable") from e
        except socket.timeout as e:
            conn.close()
            raise error_for("timeout", "no answer from spaced at %s within %ss"
                            % (self.where(), conn.timeout)) from e
        except ssl.SSLCertVerificationError as e:
            conn.close()
            if self.ca_file:
                hint = ("ca_file/$SPACE_CA %s does not hold the CA that signed it, or the "
                        "certificate does not name %s" % (self.ca_file, self._host))
            else:
                hint = ("when spaced makes its own CA (api_tls \"auto\"), pass ca_file= or set "
                        "$SPACE_CA to a copy of <state_dir>/tls/ca.pem (default "
                        "/var/lib/space/tls/ca.pem) from the daemon's host")
            raise error_for("permission_denied", "spaced's TLS certificate at %s is not trusted "
                            "(%s); %s" % (self.where(), e.verify_message or e, hint)) from e
        except OSError as e:
            conn.close()
            raise UnavailableError("cannot reach spaced at %s: %s" % (self.where(), e),
                                   code="unavailable") from e
        r = Response(conn, resp)
        if r.status >= 400:
            raise _error_from(r)
        if not stream:
            r._body = r.read()  # type: ignore[attr-defined]
        return r

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """A request whose answer is JSON (or empty): the parsed body."""
        r = self.request(method, path, **kw)
        data = getattr(r, "_body", b"")
        return json.loads(data) if data else None


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _error_from(r: Response) -> SpaceError:
    data = r.read()
    try:
        err = json.loads(data)["error"]
        return error_for(str(err["code"]), str(err["message"]), r.status)
    except (ValueError, KeyError, TypeError):
        text = data.decode("utf-8", "replace").strip()[:300]
        return error_for("internal", "HTTP %d from spaced: %s" % (r.status, text or "(no body)"),
                         r.status)
