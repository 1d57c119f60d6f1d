"""Exhausts the daemon's memory through request bodies: a 3 MiB JSON create body, a
Content-Length of 100 GiB with a small body, a 64 MiB chunked JSON body, and an exec body
whose JSON never ends. The daemon must answer 413/400 early and keep its memory flat.
Blocked by: JSON bodies are capped at 1 MiB (checked against Content-Length before reading,
and while reading chunks); body reads time out.
space-attack: sandbox=host verify=daemon_rss timeout=60
"""
import socket

from hostside import SANDBOX, SOCKET, api, daemon_healthy, escaped, finish, note


def raw(request, send_more=b"", more_times=0, timeout=10):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(SOCKET)
    s.sendall(request)
    try:
        for _ in range(more_times):
            s.sendall(send_more)
    except OSError:
        pass
    try:
        data = s.recv(4096)
    except OSError:
        data = b""
    s.close()
    return data


r = api("POST", "/v1/sandboxes", b'{"env":{"A":"' + b"x" * (3 << 20) + b'"}}',
        {"Content-Type": "application/json"})
note("3 MiB create body: %d" % r.status)
if r.status != 413:
    escaped("3 MiB body answered %d, not 413" % r.status)
head = raw(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: 107374182400\r\n\r\n{}")
note("Content-Length 100 GiB: %s" % head.split(b"\r\n", 1)[0].decode(errors="replace"))
if b" 413 " not in head.split(b"\r\n", 1)[0] and b" 400 " not in head.split(b"\r\n", 1)[0]:
    escaped("100 GiB Content-Length not refused: %r" % head[:80])
chunk = b"100000\r\n" + b"[" * 0 + b" " * 0x100000 + b"\r\n"
head = raw(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n", chunk, 64)
note("64 MiB chunked body: %s" % head.split(b"\r\n", 1)[0].decode(errors="replace"))
if b" 413 " not in head.split(b"\r\n", 1)[0]:
    escaped("64 MiB chunked body not refused with 413: %r" % head[:80])
head = raw(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n" % SANDBOX.encode(),
           b"100000\r\n" + b'"' + b"a" * 0xFFFFE + b'"\r\n', 24)
note("endless exec JSON: %s" % (head.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"))
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
