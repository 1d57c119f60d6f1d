"""Goes around the gateway instead of through it: TCP connections straight to the upstream
(127.0.0.2 on its HTTPS and HTTP ports, also as ::ffff:127.0.0.2), to the host's own addresses,
to the metadata service and to public addresses over IPv4 and IPv6; UDP to the same (DNS to
public resolvers among them); then takes over the gateway's own listeners so that the sandbox's
clients talk to something else: binds 127.0.0.1:3128 (plain, with SO_REUSEADDR and with
SO_REUSEPORT), the wildcard and v4-mapped forms of it, 127.0.0.1:80 and :443, and the DNS stub's
127.0.0.53:53/udp, and lowers net.ipv4.ip_unprivileged_port_start.
Blocked by: the sandbox's network namespace holds only its own `lo` (127.0.0.2 there is the
sandbox's own loopback, where nothing listens; everything else is ENETUNREACH); the gateway's
sockets are bound first and without SO_REUSEPORT (EADDRINUSE), ports below 1024 need
CAP_NET_BIND_SERVICE over the network namespace, which is the host's (EACCES), and /proc/sys is
read-only.
space-attack: sandbox=fresh timeout=60
"""
import errno
import os
import socket

escapes, notes = [], []
UP = [int(os.environ["SPACE_EGRESS_HTTPS_PORT"]), int(os.environ["SPACE_EGRESS_HTTP_PORT"])]
# The host's own addresses (loopback ones are the sandbox's own here: the gateway listens there).
HOST_IPS = [a for a in os.environ.get("SPACE_HOST_IPS", "").split(",")
            if a and not a.startswith("127.") and a != "::1"]


def err(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else e.__class__.__name__


targets = [("127.0.0.2", p) for p in UP] + [("::ffff:127.0.0.2", p) for p in UP]
targets += [(a, p) for a in HOST_IPS for p in UP + [22, 80]]
targets += [("169.254.169.254", 80), ("1.1.1.1", 443), ("8.8.8.8", 53), ("10.0.0.1", 80),
            ("2606:4700:4700::1111", 443), ("fd00:ec2::254", 80), ("64:ff9b::a9fe:a9fe", 80)]
for addr, port in targets:
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((addr, port))
        escapes.append("TCP connect to %s:%d succeeded" % (addr, port))
    except OSError as e:
        notes.append("tcp %s:%d %s" % (addr, port, err(e)))
    finally:
        s.close()
    u = socket.socket(fam, socket.SOCK_DGRAM)
    u.settimeout(0.5)
    try:
        u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03api\x07example\x04test"
                 b"\x00\x00\x01\x00\x01", (addr, port))
        data = u.recv(512)
        escapes.append("UDP %s:%d answered %r" % (addr, port, data[:40]))
    except OSError as e:
        notes.append("udp %s:%d %s" % (addr, port, err(e)))
    finally:
        u.close()


def try_bind(fam, typ, addr, reuse=()):
    s = socket.socket(fam, typ)
    if "addr" in reuse:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if "port" in reuse:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    what = "bind %s %s:%d%s" % ("udp" if typ == socket.SOCK_DGRAM else "tcp", addr[0], addr[1],
                                " (reuse %s)" % "+".join(reuse) if reuse else "")
    try:
        s.bind(addr)
        if typ == socket.SOCK_STREAM:
            s.listen(1)
        escapes.append(what + " succeeded")
    except OSError as e:
        notes.append("%s %s" % (what, err(e)))
    finally:
        s.close()


T, U, V4, V6 = socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.AF_INET, socket.AF_INET6
for reuse in [(), ("addr",), ("port",), ("addr", "port")]:
    try_bind(V4, T, ("127.0.0.1", 3128), reuse)
    try_bind(V4, T, ("0.0.0.0", 3128), reuse)
    try_bind(V4, U, ("127.0.0.53", 53), reuse)
    try_bind(V4, U, ("0.0.0.0", 53), reuse)
    for port in (80, 443):
        try_bind(V4, T, ("127.0.0.1", port), reuse)
        try_bind(V4, T, ("0.0.0.0", port), reuse)
try_bind(V6, T, ("::", 3128))
try_bind(V6, T, ("::ffff:127.0.0.1", 3128))
try_bind(V6, T, ("::ffff:127.0.0.1", 443))
try_bind(V6, U, ("::ffff:127.0.0.53", 53))
try_bind(V4, T, ("127.0.0.53", 53))
try:
    with open("/proc/sys/net/ipv4/ip_unprivileged_port_start", "w") as f:
        f.write("0")
    escapes.append("lowered ip_unprivileged_port_start")
except OSError as e:
    notes.append("ip_unprivileged_port_start: %s" % err(e))

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: %d direct connections and binds failed (%s ...)" % (len(notes),
                                                                   "; ".join(notes[:6])))
