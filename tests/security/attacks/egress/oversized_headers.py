"""Exhausts or confuses the gateway's HTTP parser with oversized request heads: one header
line of 17 KiB and of 1 MiB, a request line (URL) of 20 KiB, a CONNECT authority of 20 KiB, and
a header line that never ends (8 MiB without a newline) — on the proxy, the transparent HTTP
listener and inside TLS intercepted for api.example.test (the host API_TOKEN is bound to).
Each carries a nonce the upstream reports on.
Blocked by: a 16 KiB limit on the request head (Beast's header_limit): the gateway answers 400
(or closes) before anything is forwarded, and stops reading a line that passes the limit.
space-attack: sandbox=fresh opts=--secret,API_TOKEN timeout=60 verify=daemon_rss
"""
import json
import os
import socket
import ssl

NONCE = "bighead" + os.urandom(5).hex()
CA = "/etc/space/ca-bundle.crt"
escapes, notes = [], []


def door(name):
    if name == "intercepted":
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
        s.recv(4096)
        t = ssl.create_default_context(cafile=CA).wrap_socket(s, server_hostname="api.example.test")
        issuer = dict(x[0] for x in t.getpeercert()["issuer"])
        if "SPACE sandbox" not in issuer.get("commonName", ""):
            print("ERROR: api.example.test was not intercepted (issuer %s)" % issuer)
            raise SystemExit(2)
        return t
    return socket.create_connection(("127.0.0.1", 3128 if name == "proxy" else 80), timeout=10)


def send(name, data):
    """Sends `data` (stopping when the gateway closes); returns (bytes sent, answer)."""
    s = door(name)
    sent = 0
    try:
        for i in range(0, len(data), 1 << 16):
            s.sendall(data[i:i + (1 << 16)])
            sent += len(data[i:i + (1 << 16)])
    except (OSError, ssl.SSLError):
        pass
    s.settimeout(10)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (OSError, ssl.SSLError):
        pass
    s.close()
    return sent, out


for name in ("proxy", "transparent", "intercepted"):
    if name == "proxy":
        start = b"GET http://plain.example.test/echo?n=%s HTTP/1.1\r\nHost: plain.example.test\r\n"
    else:
        host = b"plain.example.test" if name == "transparent" else b"api.example.test"
        start = b"GET /echo?n=%s HTTP/1.1\r\nHost: " + host + b"\r\n"
    start %= NONCE.encode()
    cases = [("17 KiB header", start + b"X-Big: " + b"a" * (17 << 10) + b"\r\n\r\n"),
             ("1 MiB header", start + b"X-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"),
             ("20 KiB URL", start.replace(b"/echo?", b"/echo?" + b"a" * (20 << 10) + b"&")
              + b"\r\n"),
             ("8 MiB unterminated line", start + b"X-Big: " + b"a" * (8 << 20))]
    if name == "proxy":
        cases.append(("20 KiB CONNECT authority", b"CONNECT " + b"a" * (20 << 10) +
                      b".example.test:443 HTTP/1.1\r\n\r\n"))
    for what, data in cases:
        sent, out = send(name, data)
        status = out.split(b"\r\n", 1)[0]
        if out and not (status[9:12] in (b"400", b"431") and b"SPACE egress gateway" in out):
            escapes.append("%s %s answered %r" % (name, what, out[:80]))
        else:
            notes.append("%s %s: %s after %d KiB" % (name, what, status[9:12].decode() or "closed",
                                                    sent >> 10))

s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"GET http://plain.example.test/seen?n=%s HTTP/1.1\r\nHost: plain.example.test\r\n"
          b"Connection: close\r\n\r\n" % NONCE.encode())
r = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    r += b
count = json.loads(r[r.index(b"{"):r.rindex(b"}") + 1])["count"]
if count:
    escapes.append("%d oversized request(s) reached the upstream" % count)
if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: " + "; ".join(notes))
