"""Gets PATH_TOKEN (bound to api.example.test's /bound/ paths) injected into requests that leave
/bound/ once the upstream resolves them: "/bound/..;/echo", "/bound/%2e%2e;x/echo",
"/bound/..%3b/echo", "/bound/.;/../echo" and kin — path parameters (";...", encoded or not)
that Tomcat-style servers strip before resolving dot segments, so the request really lands on
/echo. A control request to /bound/echo must get the value (masked in the echo).
Blocked when: a secret's path binding reads a path exactly like the profile's path check — a dot
segment with ";" parameters, "%3B" or encoded dots refuses the match — so those requests go out
with the placeholder as it was sent.
space-attack: sandbox=fresh opts=--secret,PATH_TOKEN timeout=45
"""
import json
import os
import socket
import ssl

PH = os.environ.get("PATH_TOKEN", "")
PREFIX = os.environ["SPACE_EGRESS_SECRET_PREFIX"]
CA = "/etc/space/ca-bundle.crt"
escapes, notes = [], []


def echo(path):
    """The request as written (no client normalizes it), through CONNECT: what the upstream
    saw in Authorization, as its echo says."""
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
    s.recv(4096)
    t = ssl.create_default_context(cafile=CA).wrap_socket(s, server_hostname="api.example.test")
    t.sendall(b"GET %s HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer %s\r\n"
              b"Connection: close\r\n\r\n" % (path.encode(), PH.encode()))
    raw = b""
    while True:
        b = t.recv(65536)
        if not b:
            break
        raw += b
    t.close()
    text = raw.decode("latin-1")
    if PREFIX in text:
        escapes.append("%s: the value came back unmasked" % path)
        return None
    try:
        return json.loads(text.split("\r\n\r\n", 1)[1])["headers"].get("authorization", "")
    except (ValueError, IndexError):
        print("ERROR: %s answered %r" % (path, text[:200]))
        raise SystemExit(2)


got = echo("/bound/echo")
if got is not None and not got.startswith("Bearer ***"):
    print("ERROR: the control request to /bound/echo got no credential: %r" % got)
    raise SystemExit(2)
for path in ("/bound/..;/echo", "/bound/%2e%2e;x/echo", "/bound/..%3b/echo", "/bound/..%3B/echo",
             "/bound/.;/../echo", "/bound/...;/echo", "/bound/%2e%2e/echo", "/bound/.%2E/echo"):
    got = echo(path)
    if got is None:
        continue
    if got != "Bearer " + PH:
        escapes.append("%s: the credential was injected (upstream saw %r)" % (path, got[:30]))
    else:
        notes.append(path)

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: placeholder left as sent for " + ", ".join(notes))
