"""Request smuggling and framing confusion on the API socket: Content-Length together with
Transfer-Encoding, two different Content-Lengths, a negative or hex length, chunk sizes that
overflow 64 bits, an unknown transfer coding, and a huge chunk extension — each followed by a
second request that a proxy in front of the daemon would see as body bytes. RFC 9112 (6.1,
6.3) requires a 400 and a closed connection for all of these, so that the hidden request is
never run; running it (it creates a sandbox) or a 5xx is a failure. Without a proxy this is
not an escape by itself, but API clients are untrusted and the API will sit behind proxies
once it serves remote clients.
Blocked by: Beast's HTTP/1.1 parser; the server answers 400 and closes on framing errors.
space-attack: sandbox=host
"""
import re
import socket

from hostside import SOCKET, api, daemon_healthy, escaped, finish, note



def live_ids():
    r = api("GET", "/v1/sandboxes").json
    items = r if isinstance(r, list) else (r or {}).get("sandboxes", [])
    return {sb["id"] for sb in items if sb.get("state") != "destroyed"}


before = live_ids()
hidden = b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
# Every visible request goes to a route that cannot create anything (an unknown sandbox's exec),
# so a new sandbox can only come from the hidden request.
visible = b"POST /v1/sandboxes/sb_000000000000/exec HTTP/1.1\r\nHost: x\r\n"
cases = {
    "CL+TE": visible + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
             hidden,
    "two CL": visible + b"Content-Length: 0\r\nContent-Length: " + str(len(hidden)).encode() +
              b"\r\n\r\n" + hidden,
    "negative CL": visible + b"Content-Length: -1\r\n\r\n" + hidden,
    "hex CL": visible + b"Content-Length: 0x0\r\n\r\n" + hidden,
    "chunk overflow": visible + b"Transfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n{}\r\n"
                      b"0\r\n\r\n" + hidden,
    "unknown coding": visible + b"Transfer-Encoding: xchunked\r\nContent-Length: 0\r\n\r\n" +
                      hidden,
    "chunked then gzip": visible + b"Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n" +
                         hidden,
    "chunk extension": visible + b"Transfer-Encoding: chunked\r\n\r\n2;" + b"e" * 100000 +
                       b"\r\n{}\r\n0\r\n\r\n" + hidden,
}
for name, req in cases.items():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(SOCKET)
    try:
        s.sendall(req)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    data = b""
    try:
        while len(data) < 65536:
            d = s.recv(4096)
            if not d:
                break
            data += d
    except OSError:
        pass
    s.close()
    statuses = [m.decode() for m in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]
    note("%s: %s" % (name, ",".join(statuses) or "closed"))
    if "500" in statuses:
        escaped("%s caused a 500" % name)
    if "201" in statuses:
        escaped("%s: the hidden request ran (%s)" % (name, ",".join(statuses)))
    elif len(statuses) > 1:
        note("%s: a second request was read after the first" % name)
created = sorted(live_ids() - before)
for sid in created:  # only sandboxes this attempt's hidden requests made
    api("DELETE", "/v1/sandboxes/%s?force=true" % sid)
if created:
    escaped("hidden requests created sandboxes %s" % created)
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
