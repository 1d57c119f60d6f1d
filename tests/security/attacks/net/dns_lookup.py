"""Resolves public names (the first step of any exfiltration or download): through libc
(/etc/resolv.conf), and by asking well-known resolvers directly over UDP and TCP.
Blocked by: no route out of the sandbox's network namespace; the only resolver that answers is
the gateway's stub, with 127.0.0.1 (the gateway's own listeners) for every name, forwarding
nothing.
space-attack: sandbox=shared
"""
import socket

escapes, notes = [], []
for name in ("example.com", "pypi.org", "metadata.google.internal"):
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(name, 443)}
        public = [a for a in addrs if not a.startswith(("127.", "::1"))]
        if public:
            escapes.append("%s resolved to %s" % (name, public))
        else:
            notes.append("%s -> loopback only" % name)
    except OSError as e:
        notes.append("%s: %s" % (name, e.__class__.__name__))
query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"
for server in ("8.8.8.8", "1.1.1.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    try:
        s.sendto(query, (server, 53))
        data, _ = s.recvfrom(512)
        escapes.append("%s answered a DNS query" % server)
    except OSError as e:
        notes.append("udp %s: %s" % (server, e.strerror or e.__class__.__name__))
    t = socket.socket()
    t.settimeout(1)
    try:
        t.connect((server, 53))
        escapes.append("tcp %s:53 connected" % server)
    except OSError as e:
        notes.append("tcp %s: %s" % (server, e.strerror or e.__class__.__name__))
if escapes:
    print("ESCAPED: " + "; ".join(escapes))
    raise SystemExit(1)
print("BLOCKED: " + "; ".join(notes))
