"""The connection to spaced: HTTP/1.1 over its Unix socket (the default) or its TCP listener.

Where to connect, in order: the arguments of :class:`Client`, then ``$SPACE_API``
(``http://127.0.0.1:7070``: the TCP listener, which needs a token; ``https://host:7443`` when
spaced serves TLS there), then ``$SPACE_SOCKET``, then ``/run/space/space.sock``. The token
comes from ``token=`` or ``$SPACE_TOKEN``. For https the daemon's certificate is verified
against ``ca_file=`` or ``$SPACE_CA`` (a PEM file: spaced's own CA is
``<state_dir>/tls/ca.pem`` on its host), else the system's trust store; ``ssl_context=``
replaces all of that.

Timeouts: a request/response call (create, list, stat, ...) waits at most ``timeout=`` of the
Client (60 s) for spaced to connect and for each read of its answer. Streams and waits (a
command's output and end, file transfers) have no limit unless the call is given one: a command
may be silent for an hour.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Union

from .errors import InvalidArgumentError, SpaceError, UnavailableError, error_for

DEFAULT_SOCKET = "/run/space/space.sock"

# request(timeout=...) left out: the Client's timeout (None, given, means no limit).
_CLIENT_TIMEOUT: Any = object()

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

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse,
                 where: str = "spaced", read_timeout: Optional[float] = None) -> None:
        self._conn = conn
        self._resp = resp
        self._where = where
        self._read_timeout = read_timeout
        self.status = resp.status
        self.headers = {k.lower(): v for k, v in resp.getheaders()}

    def read(self) -> bytes:
        try:
            return self._resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise transport_error(e, self._where, "reading its answer", self._read_timeout) from e
        finally:
            self.close()

    def json(self) -> Any:
        data = self.read()
        return json.loads(data) if data else None

    def iter_chunks(self, size: int = 1 << 16) -> Iterator[bytes]:
        try:
            while True:
                try:
                    chunk = (self._resp.read1(size) if hasattr(self._resp, "read1")
                             else self._resp.read(size))
                except (OSError, http.client.HTTPException) as e:
                    raise transport_error(e, self._where, "reading its answer",
                                          self._read_timeout) from e
                if not chunk:
                    return
                yield chunk
        finally:
            self.close()

    def iter_lines(self) -> Iterator[bytes]:
        """The body's lines; a broken connection raises the stdlib's error (the caller knows what
        it means for its stream: see commands.CommandHandle)."""
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
    shared by threads. ``timeout``: seconds a call waits to connect and, for a request/response
    call, for each read of the answer; streams (commands, file transfers) wait for as long as
    they run unless the call is given a timeout."""

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
                timeout: Optional[float] = _CLIENT_TIMEOUT, stream: bool = False) -> Response:
        """Sends one request. Raises the :mod:`errors` class of an error answer, and a
        :class:`SpaceError` subclass for every failure to reach spaced; with ``stream=True`` a
        successful answer's body is left to the caller. ``timeout``: seconds each read of the
        answer may wait (default the Client's; None: no limit, for streams and waits)."""
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
        # Connecting waits the Client's timeout; the answer, `timeout` (None: as long as it takes).
        read_timeout = self.timeout if timeout is _CLIENT_TIMEOUT else timeout
        conn = self._connection(self.timeout)
        connected = False
        try:
            conn.connect()
            assert conn.sock is not None
            conn.sock.settimeout(read_timeout)
            connected = True
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
        except PermissionError as e:
            conn.close()
            raise UnavailableError("cannot open %s: %s (the socket is root's; run as root or "
                                   "use the TCP listener with a token)" % (self.where(), e),
                                   code="unavailable") from e
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
        except (http.client.InvalidURL, ValueError) as e:  # not sendable: a caller's value
            conn.close()
            raise error_for("invalid_argument", "cannot send %s %s to spaced: %s"
                            % (method, target[:200], e)) from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise transport_error(e, self.where(),
                                  "waiting for its answer" if connected else "connecting",
                                  read_timeout if connected else self.timeout) from e
        r = Response(conn, resp, self.where(), read_timeout)
        if r.status >= 400:
            raise _error_from(r)
        if not stream:
            r._body = r.read()  # type: ignore[attr-defined]
        return r

    def build_image(self, name: str, context: str = ".", **kw: Any) -> Dict[str, Any]:
        """Builds an image from a Dockerfile: ``Space(client).build_image(...)`` (see
        :meth:`space_sandbox.images.Space.build_image` for the arguments)."""
        from .images import Space
        return Space(self).build_image(name, context, **kw)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        """A request whose answer is JSON (or empty): the parsed body."""
        r = self.request(method, path, **kw)
        data = getattr(r, "_body", b"")
        try:
            return json.loads(data) if data else None
        except ValueError:
            raise error_for("protocol_error", "what answers at %s is not spaced: %s %s got an "
                            "answer that is not JSON: %r" % (self.where(), method, path,
                                                            data[:200])) from None


# What spaced accepts as a sandbox id or a snapshot's id or name (src/api/request.cc, is_name).
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def segment(value: Any, what: str = "sandbox id") -> str:
    """``value``, a sandbox id or a snapshot's id or name, as one path segment of a URL. Raises
    ``InvalidArgumentError``, saying what one looks like, for anything else."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        looks = ("sandbox ids look like sb_0123abcd (letters, digits, '_', '-', '.'); "
                 "Sandbox.list() lists them" if what == "sandbox id" else
                 "give a snapshot id (snap_...) or name (letters, digits, '_', '-', '.'); "
                 "sandbox.snapshots() lists them")
        shown = json.dumps(value, default=repr)[:80]
        raise InvalidArgumentError("bad %s %s: %s" % (what, shown, looks), code="invalid_argument")
    return urllib.parse.quote(value, safe="")


def transport_error(e: BaseException, where: str, during: str = "a call",
                    timeout: Optional[float] = None) -> SpaceError:
    """The SDK's error for a failure of the connection itself (refused, reset, timed out, not
    HTTP): ``where`` is the daemon's address, ``during`` what the SDK was doing."""
    if isinstance(e, SpaceError):
        return e
    if isinstance(e, socket.timeout):
        return error_for("timeout", "spaced at %s sent nothing for %ss (%s); pass a longer "
                         "timeout= or Client(timeout=...)" % (where, timeout, during))
    if isinstance(e, ConnectionRefusedError):
        return UnavailableError("spaced refused the connection at %s; is it running?" % where,
                                code="unavailable")
    what = str(e) or type(e).__name__
    if isinstance(e, (ConnectionError, http.client.IncompleteRead)):
        return UnavailableError("the connection to spaced at %s broke (%s): %s; spaced may have "
                                "restarted" % (where, during, what), code="unavailable")
    if isinstance(e, http.client.HTTPException):
        return error_for("protocol_error", "what answers at %s is not spaced: no HTTP answer "
                         "(%s): %r" % (where, during, what[:200]))
    return UnavailableError("cannot reach spaced at %s (%s): %s" % (where, during, what),
                            code="unavailable")


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
