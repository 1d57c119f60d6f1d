"""Request smuggling and framing confusion on the API socket: Content-Length together with
Transfer-Encoding, two different Content-Lengths, a negative or hex length, chunk sizes that
overflow 64 bits, a pipelined second request hidden in a body, and a huge chunk extension.
Anything that makes the daemon run the hidden request (creating a sandbox named in it) or
crash is a failure.
Blocked by: Beast's strict HTTP/1.1 parser; the server answers 400 and closes on framing
errors.
space-attack: sandbox=host
"""
import socket

from hostside import SOCKET, api, daemon_healthy, escaped, finish, note

before = len((api("GET", "/v1/sandboxes").json or {}).get("sandboxes", []))
hidden = b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
cases = {
    "CL+TE": b"POST /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hidden,
    "two CL": b"POST /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: "
              + str(len(hidden)).encode() + b"\r\n\r\n" + hidden,
    "negative CL": b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
    "hex CL": b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 0x2\r\n\r\n{}",
    "chunk overflow": b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                      b"\r\n1ffffffffffffffff\r\n{}\r\n0\r\n\r\n",
    "TE obfuscated": b"POST /v1/health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n"
                     b"Content-Length: 0\r\n\r\n" + hidden,
    "chunk extension": b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                       b"\r\n2;" + b"e" * 100000 + b"\r\n{}\r\n0\r\n\r\n",
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
    statuses = [l.split(b" ")[1].decode() for l in data.split(b"\r\n") if l.startswith(b"HTTP/1.1 ")]
    note("%s: %s" % (name, ",".join(statuses) or "closed"))
    if "500" in statuses:
        escaped("%s caused a 500" % name)
after = (api("GET", "/v1/sandboxes").json or {}).get("sandboxes", [])
if len(after) > before:
    created = [sb["id"] for sb in after][before:]
    for sid in created:
        api("DELETE", "/v1/sandboxes/%s?force=true" % sid)
    escaped("a smuggled request created sandboxes %s" % created)
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
