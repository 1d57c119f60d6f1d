"""Reaches internal addresses through names the profile allows: rebind.example.test resolves to
the host's loopback (127.0.0.1, where the upstream keeps a trap listener) and
private.example.test to a private address (10.0.0.1), as a DNS rebinding or a split-horizon
record would make them. Each name is tried through every door (an absolute-form URL, CONNECT
followed by a ClientHello, the transparent TLS listener by SNI after resolving the name through
the DNS stub, the transparent HTTP listener by Host header); then the sandbox's audit log is
read from the host.
Blocked by: the gateway resolves each name itself, classifies every address and refuses
loopback and private ones (allow_networks lists only 127.0.0.2/32) before dialing: the trap
counts no connection, each HTTP refusal is a 403 naming the address class, and every attempt
is an egress.denied event whose reason says "loopback" or "private" — none is an
egress.error (a failed dial), egress.tunnel or egress.request.
space-attack: sandbox=host-fresh timeout=90
"""
import json

from hostside import SANDBOX, broken, escaped, finish, note, space

INSIDE = r'''
import json, os, socket, ssl

def exchange(data, port=3128, then=None, timeout=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = b""
    try:
        s.sendall(data)
        if then is not None:
            out = s.recv(4096)
            if not out.startswith(b"HTTP/1.1 200"):
                return out
            s.sendall(then)
            out = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    finally:
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

def trap():
    r = exchange(b"GET http://plain.example.test/seen?n=none HTTP/1.1\r\n"
                 b"Host: plain.example.test\r\nConnection: close\r\n\r\n")
    return json.loads(r[r.index(b"{"):r.rindex(b"}") + 1])["trap"]

res = {"trap_before": trap()}
for name in ("rebind.example.test", "private.example.test"):
    h = name.encode()
    r = {}
    r["proxy"] = exchange(b"GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (h, h))
    r["connect"] = exchange(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (h, h),
                            then=hello(name), timeout=15)
    addr = socket.gethostbyname(name)  # the DNS stub: allowed names -> 127.0.0.1
    r["dns"] = addr.encode()
    r["transparent-tls"] = (exchange(hello(name), port=443, timeout=15)
                            if addr == "127.0.0.1" else b"?")
    r["transparent-http"] = exchange(b"GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % h, port=80)
    res[name] = {k: v.decode("latin-1")[:300] for k, v in r.items()}
res["trap_after"] = trap()
print(json.dumps(res))
'''

rc, out, err = space("exec", SANDBOX, "--", "python3", "-c", INSIDE, timeout=80)
if rc != 0:
    broken("the inside half failed (rc %d): %s %s" % (rc, out[-300:], err[-500:]))
res = json.loads(out.decode().strip().splitlines()[-1])
if res["trap_after"] != res["trap_before"]:
    escaped("the gateway dialed the host's loopback: the trap counted %d connection(s)"
            % (res["trap_after"] - res["trap_before"]))
CLASS = {"rebind.example.test": "loopback", "private.example.test": "private"}
for name, cls in CLASS.items():
    r = res[name]
    if r["dns"] != "127.0.0.1":
        escaped("the DNS stub answered %s with %s, not the gateway's 127.0.0.1" % (name, r["dns"]))
    for via in ("proxy", "transparent-http"):
        if not (r[via].startswith("HTTP/1.1 403") and "is " + cls in r[via]):
            escaped("%s via %s answered %r (wanted a 403 naming %s)" % (name, via, r[via][:160],
                                                                        cls))
    # A CONNECT to be tunneled is refused before its 200 (a 403 naming the class); the
    # transparent TLS listener closes after the ClientHello. Anything else reached something.
    if r["connect"] and not (r["connect"].startswith("HTTP/1.1 403") and "is " + cls in r["connect"]):
        escaped("%s via connect answered %r (wanted a 403 naming %s, or nothing)"
                % (name, r["connect"][:160], cls))
    if r["transparent-tls"]:
        escaped("%s via transparent-tls answered %r after the ClientHello"
                % (name, r["transparent-tls"][:80]))

rc, out, err = space("audit", SANDBOX, "--json")
if rc != 0:
    broken("space audit failed (rc %d): %s" % (rc, err[-300:]))
events = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
for name, cls in CLASS.items():
    mine = [e for e in events if e.get("data", {}).get("host") == name]
    denied = {e["data"].get("via") for e in mine if e["kind"] == "egress.denied"
              and cls in e["data"].get("reason", "")}
    for via in ("proxy", "connect", "transparent-tls", "transparent-http"):
        if via not in denied:
            escaped("no egress.denied (%s) for %s via %s in the audit log; its events: %s" %
                    (cls, name, via, json.dumps([(e["kind"], e["data"]) for e in mine])[:400]))
    others = [e["kind"] for e in mine if e["kind"] != "egress.denied"]
    if others:
        escaped("%s also produced %s: a dial was made or tried" % (name, others))
    note("%s: refused as %s via %s" % (name, cls, ", ".join(sorted(denied))))
finish()
