"""Smuggles a request past the gateway's per-request check by making it and the upstream
disagree on where a request ends: Content-Length with Transfer-Encoding (both orders), two
Content-Lengths (equal and different), a signed, hex or 2^64-overflowing length, obfuscated
Transfer-Encoding ("chunked " with a trailing space, "xchunked", "chunked, identity", "identity,
chunked", "gzip, chunked", two fields, a space before the colon, a vertical tab, a tab, obs-fold
line folding, upper case), bad chunk sizes (non-hex, negative, "0x5", past 64 bits, a bare LF),
a second request hidden after a Content-Length: 0 body, and a pipelined second request. Through
all three HTTP doors: the proxy (absolute form), the transparent HTTP listener and intercepted
TLS to api.example.test. The hidden request always names a denied host carrying a nonce; the
upstream reports whether any request with that nonce arrived (/seen).
Blocked by: ambiguous framing (both lengths, two lengths, any transfer coding but chunked, a
malformed length) is answered 400 and the connection closed; the body is re-framed by the
gateway's own serializer; every request on a connection is authorized on its own (403/421 for
the hidden one), so the upstream never receives a request the gateway did not check.
space-attack: sandbox=fresh opts=--secret,API_TOKEN timeout=60
"""
import json
import os
import socket
import ssl

NONCE = "smuggle" + os.urandom(5).hex()
OTHER = ("%s.other.example.test" % NONCE).encode()
CA = "/etc/space/ca-bundle.crt"
escapes, notes = [], []


def read_all(s, timeout=4.0):
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


def door(name):
    """A fresh connection through one of the gateway's HTTP doors."""
    if name == "intercepted":
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
        return t
    return socket.create_connection(("127.0.0.1", 3128 if name == "proxy" else 80), timeout=5)


def request(name, method, extra):
    """Start of a request to the door's allowed host, and a hidden request for OTHER."""
    if name == "proxy":
        start = b"%s http://plain.example.test/echo HTTP/1.1\r\nHost: plain.example.test\r\n"
        hidden = b"GET http://%s/echo?n=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (OTHER, NONCE.encode(),
                                                                           OTHER)
    else:
        host = b"plain.example.test" if name == "transparent" else b"api.example.test"
        start = b"%s /echo HTTP/1.1\r\nHost: " + host + b"\r\n"
        hidden = b"GET /echo?n=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (NONCE.encode(), OTHER)
    return (start % method) + extra, hidden


def statuses(resp):
    return [l[:3].decode("latin-1") for l in resp.split(b"HTTP/1.1 ")[1:]]


def seen():
    s = door("proxy")
    s.sendall(b"GET http://plain.example.test/seen?n=%s HTTP/1.1\r\nHost: plain.example.test\r\n"
              b"Connection: close\r\n\r\n" % NONCE.encode())
    r = read_all(s)
    s.close()
    try:
        return json.loads(r[r.index(b"{"):r.rindex(b"}") + 1])["count"]
    except ValueError:
        print("ERROR: the upstream's /seen did not answer: %r" % r[:200])
        raise SystemExit(2)


# (name, header lines + body that precede the hidden request, must the gateway answer 400?)
def cases(h):
    n = len(h)
    return [
        ("CL+TE", b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
         % (5 + n), 1),
        ("TE+CL", b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", 1),
        ("two CL", b"Content-Length: 0\r\nContent-Length: %d\r\n\r\n" % n, 1),
        ("two equal CL", b"Content-Length: 0\r\nContent-Length: 0\r\n\r\n", 1),
        ("CL list", b"Content-Length: 0, %d\r\n\r\n" % n, 1),
        ("CL +0", b"Content-Length: +0\r\n\r\n", 1),
        ("CL -1", b"Content-Length: -1\r\n\r\n", 1),
        ("CL 0x0", b"Content-Length: 0x0\r\n\r\n", 1),
        ("CL 2^64", b"Content-Length: 18446744073709551616\r\n\r\n", 1),
        ("TE xchunked", b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 1),
        ("TE chunked, identity", b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 1),
        ("TE identity, chunked", b"Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n", 1),
        ("TE gzip, chunked", b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 1),
        ("two TE", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n"
                   b"0\r\n\r\n", 1),
        ("TE space before colon", b"Transfer-Encoding : chunked\r\nContent-Length: %d\r\n\r\n"
                                  b"0\r\n\r\n" % (5 + n), 1),
        ("TE vertical tab", b"Transfer-Encoding:\x0bchunked\r\nContent-Length: %d\r\n\r\n"
                            b"0\r\n\r\n" % (5 + n), 1),
        ("CL + TE folded", b"Content-Length: %d\r\nX-A: b\r\n Transfer-Encoding: chunked\r\n"
                           b"Connection: close\r\n\r\n0\r\n\r\n" % (5 + n), 0),
        ("TE 'chunked '", b"Transfer-Encoding: chunked \r\n\r\n0\r\n\r\n", 0),
        ("TE tab", b"Transfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n", 0),
        ("TE CHUNKED", b"Transfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n", 0),
        ("TE obs-fold", b"Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 0),
        ("chunk size zz", b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", 0),
        ("chunk size -1", b"Transfer-Encoding: chunked\r\n\r\n-1\r\n", 0),
        ("chunk size 0x5", b"Transfer-Encoding: chunked\r\n\r\n0x5\r\n", 0),
        ("chunk size 2^64+3", b"Transfer-Encoding: chunked\r\n\r\n10000000000000003\r\nabc\r\n", 0),
        ("chunk bare LF", b"Transfer-Encoding: chunked\r\n\r\n0\n\n", 0),
        ("hidden after CL 0", b"Content-Length: 0\r\n\r\n", 0),
    ]


for name in ("proxy", "transparent", "intercepted"):
    _, hidden = request(name, b"POST", b"")
    for what, extra, strict in cases(hidden):
        head, hidden = request(name, b"POST", extra)
        s = door(name)
        try:
            s.sendall(head + hidden)
        except OSError:
            pass
        got = statuses(read_all(s))
        s.close()
        if strict and got[:1] != ["400"]:
            escapes.append("%s %s: answered %s, not 400" % (name, what, got or "nothing"))
        elif "200" in got[1:]:
            escapes.append("%s %s: the hidden request was answered %s" % (name, what, got))
        else:
            notes.append("%s %s: %s" % (name, what, "/".join(got) or "closed"))
    # Pipelined: an allowed request, then one for OTHER.
    head, hidden = request(name, b"GET", b"\r\n")
    s = door(name)
    s.sendall(head + hidden)
    got = statuses(read_all(s))
    s.close()
    if got != ["200", "403" if name != "intercepted" else "421"]:
        escapes.append("%s pipelined: %s" % (name, got))
count = seen()
if count:
    escapes.append("the upstream received %d request(s) for %s" % (count, OTHER.decode()))
if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: %d framings on 3 doors, none reached the upstream (%s ...)" %
      (len(notes), "; ".join(notes[:8])))
