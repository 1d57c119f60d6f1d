"""Reads the real value of API_TOKEN back from the host it is bound to: the upstream's echo
endpoint returns what it received, so after the gateway swaps the placeholder in, the secret
is in the response — in the body (Content-Length), in a response header, and from /split-echo in a chunked body cut
into 1-7 byte chunks so that every occurrence straddles chunk boundaries, in two headers and in
a chunked trailer. Through the proxy (CONNECT, as `requests` does it) and the transparent TLS
listener (the name resolved by the DNS stub), on one kept-alive connection each.
Blocked by: the gateway redacts every secret value it injected from the response's header
fields and its body with a streaming matcher that holds back a possible prefix across chunk
boundaries; trailers are not forwarded. The placeholder put in the query is not replaced (the
value goes only into Authorization, the default place). Each occurrence becomes a same-length run of '*': the
attempt checks that run is there (the secret was injected and masked) and that no byte sequence
with the secret's prefix is.
space-attack: sandbox=fresh opts=--secret,API_TOKEN timeout=60
"""
import os
import socket
import ssl

import requests

PH = os.environ.get("API_TOKEN", "")
PREFIX = os.environ["SPACE_EGRESS_SECRET_PREFIX"]
MASK = "*" * int(os.environ["SPACE_EGRESS_SECRET_LEN"])
CA = "/etc/space/ca-bundle.crt"
escapes, notes = [], []


def check(what, raw, masks=1):
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    if PREFIX in text:
        i = text.index(PREFIX)
        escapes.append("%s: the secret is in the response: ...%s..." %
                       (what, text[max(0, i - 30):i + 40]))
    elif text.count(MASK) < masks:
        print("ERROR: %s: expected %d masked value(s), found %d; was the secret injected? %r"
              % (what, masks, text.count(MASK), text[:300]))
        raise SystemExit(2)
    else:
        notes.append("%s: %d masked" % (what, text.count(MASK)))


def raw_response(r):
    """Status line, every header line (repeated ones too) and the body as the client got them."""
    head = "".join("%s: %s\n" % (k, v) for k, v in r.raw.headers.items())
    return "%d %s\n%s\n%s" % (r.status_code, r.reason, head, r.text)


s = requests.Session()
auth = {"Authorization": "Bearer " + PH}
for _ in range(2):  # the second request reuses the kept-alive tunnel
    r = s.get("https://api.example.test/echo?q=" + PH, headers=auth, timeout=15)
    check("CONNECT /echo (body, X-Echo-Authorization)", raw_response(r), masks=2)
    if r.json()["path"] != "/echo?q=" + PH:
        escapes.append("the placeholder in the query was replaced: %r" % r.json()["path"][:60])
    r = s.get("https://api.example.test/split-echo", headers=auth, timeout=15)
    check("CONNECT /split-echo (1-7 byte chunks, 2 headers)", raw_response(r), masks=6)


# The transparent TLS listener, by hand, to see the bytes exactly as they came (trailer too).
def transparent(req):
    addr = socket.gethostbyname("api.example.test")
    sock = socket.create_connection((addr, 443), timeout=10)
    t = ssl.create_default_context(cafile=CA).wrap_socket(sock, server_hostname="api.example.test")
    t.sendall(req)
    t.settimeout(10)
    out = b""
    try:
        while True:
            b = t.recv(65536)
            if not b:
                break
            out += b
    except (OSError, ssl.SSLError):
        pass
    t.close()
    return out


for path in (b"/split-echo", b"/echo?q=" + PH.encode()):
    req = (b"GET %s HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer %s\r\n\r\n" %
           (path, PH.encode()))
    resp = transparent(req + req[:-2] + b"Connection: close\r\n\r\n")
    if resp.count(b"HTTP/1.1 200") != 2:
        print("ERROR: transparent %s: %r" % (path[:11], resp[:200]))
        raise SystemExit(2)
    check("transparent %s x2" % path[:11].decode(), resp, masks=12 if b"split" in path else 4)
    if path == b"/split-echo" and b"X-Trailer-Echo" in resp.split(b"\r\n\r\n", 1)[1]:
        notes.append("the trailer was forwarded (masked)")

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: " + "; ".join(notes))
