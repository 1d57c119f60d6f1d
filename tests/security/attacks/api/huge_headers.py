"""Exhausts or confuses the HTTP layer with headers: one 1 MiB header line, 10000 small
headers, a header without a colon, a request line of 100 KiB, NUL and bare CR bytes in
headers, and obsolete line folding. Each must get a 4xx (431/400) or a closed connection;
the daemon must stay healthy.
Blocked by: Beast's parser with a 16 KiB header limit, answered with 431 by the server.
space-attack: sandbox=host
"""
import socket

from hostside import SOCKET, daemon_healthy, escaped, finish, note


def send(req):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(15)
    s.connect(SOCKET)
    try:
        s.sendall(req)
    except OSError:
        pass
    try:
        data = s.recv(4096)
    except OSError as e:
        data = ("<%s>" % e.__class__.__name__).encode()
    s.close()
    return data.split(b"\r\n", 1)[0].decode(errors="replace") or "<closed>"


cases = {
    "1 MiB header": b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n",
    "10000 headers": b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" +
                     b"".join(b"X-%d: y\r\n" % i for i in range(10000)) + b"\r\n",
    "no colon": b"GET /v1/health HTTP/1.1\r\nHost x\r\n\r\n",
    "100 KiB target": b"GET /v1/" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "NUL in header": b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "bare CR": b"GET /v1/health HTTP/1.1\r\nHost: x\rX-A: b\r\n\r\n",
    "line folding": b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
    "HTTP/0.9": b"GET /v1/health\r\n\r\n",
    "bad version": b"GET /v1/health HTTP/9.9\r\nHost: x\r\n\r\n",
    "binary garbage": bytes(range(256)) * 64,
}
# RFC 9112 lets a server unfold obsolete line folding instead of refusing it.
may_succeed = {"line folding"}
for name, req in cases.items():
    line = send(req)
    code = line.split(" ")[1] if line.startswith("HTTP/1.1 ") else ""
    ok = line == "<closed>" or line.startswith("<") or code.startswith("4") or \
        code == "505" or (code == "200" and name in may_succeed)
    note("%s: %s" % (name, line[:40]))
    if not ok:
        escaped("%s answered %r" % (name, line))
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
