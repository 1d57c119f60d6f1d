"""Reaches the cloud metadata service (169.254.169.254), loopback, the upstream's own address
and public addresses by IP literal instead of by name, in every spelling a resolver or browser
accepts: decimal (2852039166), hex (0xa9fea9fe), octal (0251.0376.0251.0376), mixed and short
forms (169.254.43518, 169.16689662, 127.1, 0), a trailing dot, IPv4-mapped (::ffff:...) and
v4-compatible (::169.254.169.254) IPv6, NAT64 (64:ff9b::a9fe:a9fe), 6to4 (2002:a9fe:a9fe::),
link-local and unique-local IPv6, zone ids and percent-encoding — each as an absolute-form URL,
a CONNECT target and a Host header on the transparent listener. Then the one literal the
profile does list (127.0.0.1 on the upstream's trap port) in each spelling: the policy lets the
name through, so only the address check stands between it and the host's loopback.
Blocked by: literals are recognized in every form and normalized before matching (no rule lists
them); a listed literal is still classified (loopback) and refused before any dial: the trap
listener on the host's 127.0.0.1 counts no connection.
space-attack: sandbox=fresh timeout=60
"""
import json
import os
import socket
import ssl

NONCE = "literal-" + os.urandom(6).hex()
TRAP = int(os.environ["SPACE_EGRESS_TRAP_PORT"])
UP_HTTP = int(os.environ["SPACE_EGRESS_HTTP_PORT"])
UP_HTTPS = int(os.environ["SPACE_EGRESS_HTTPS_PORT"])
escapes, notes = [], []


def exchange(data, port=3128, timeout=5.0, then=None):
    """Sends `data` to a gateway listener on 127.0.0.1 (and `then` after the first answer);
    reads until it closes or `timeout` passes."""
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


def status(resp):
    line = resp.split(b"\r\n", 1)[0]
    return int(line[9:12]) if line.startswith(b"HTTP/1.1 ") and line[9:12].isdigit() else 0


def gateway_refused(resp):
    return 400 <= status(resp) < 500 and b"SPACE egress gateway:" in resp


def client_hello():
    """A real ClientHello without SNI (clients send none for an IP literal)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def seen():
    r = exchange(b"GET http://plain.example.test/seen?n=%s HTTP/1.1\r\nHost: plain.example.test"
                 b"\r\nConnection: close\r\n\r\n" % NONCE.encode())
    try:
        return json.loads(r[r.index(b"{"):r.rindex(b"}") + 1])
    except ValueError:
        print("ERROR: the upstream's /seen did not answer: %r" % r[:200])
        raise SystemExit(2)


METADATA = ["169.254.169.254", "2852039166", "0xa9fea9fe", "0XA9FEA9FE", "0251.0376.0251.0376",
            "0xa9.0xfe.0xa9.0xfe", "169.254.43518", "169.16689662", "0251.0xfe.43518",
            "0000251.254.169.254", "169.254.169.254.", "[::ffff:169.254.169.254]",
            "[::ffff:a9fe:a9fe]", "[0:0:0:0:0:ffff:a9fe:a9fe]", "[::169.254.169.254]",
            "[::a9fe:a9fe]", "[64:ff9b::a9fe:a9fe]", "[64:ff9b::169.254.169.254]",
            "[2002:a9fe:a9fe::]", "[fe80::a9fe:a9fe]", "[fe80::1%25lo]", "[fd00:ec2::254]",
            "169%2e254.169.254", "\u2460\u2465\u2468.\u2461\u2464\u2463.\u2460\u2465\u2468."
            "\u2461\u2464\u2463", "169.254.169.254%00.api.example.test"]
OTHERS = ["127.0.0.1", "127.1", "0", "0.0.0.0", "[::]", "[::1]", "localhost", "127.0.0.2",
          "0x7f000002", "2130706434", "017700000002", "[::ffff:7f00:2]", "10.0.0.1",
          "192.168.0.1", "100.64.0.1", "172.16.0.1", "224.0.0.1", "255.255.255.255",
          "1.1.1.1", "[2606:4700:4700::1111]", "4294967296", "1.1.1.1.1"]
for host in METADATA + OTHERS:
    h = host.encode("utf-8")
    for port in (80, 443, UP_HTTP, UP_HTTPS):
        a = h + b":%d" % port
        r = exchange(b"GET http://%s/latest/meta-data/?n=%s HTTP/1.1\r\nHost: %s\r\n\r\n"
                     % (a, NONCE.encode(), a))
        if not gateway_refused(r):
            escapes.append("http://%s answered %r" % (a.decode(), r[:80]))
        r = exchange(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (a, a))
        if not gateway_refused(r):
            escapes.append("CONNECT %s answered %r" % (a.decode(), r[:80]))
    r = exchange(b"GET /latest/meta-data/?n=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (NONCE.encode(), h),
                 port=80)
    if not gateway_refused(r):
        escapes.append("Host: %s on the transparent listener answered %r" % (host, r[:80]))
    else:
        notes.append(host)

# The listed literal, 127.0.0.1:TRAP, in every spelling of 127.0.0.1.
before = seen()["trap"]
for host in ["127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "0x7f.1", "127.1",
             "127.0.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "127.0.0.1."]:
    a = b"%s:%d" % (host.encode(), TRAP)
    r = exchange(b"GET http://%s/?n=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (a, NONCE.encode(), a))
    if not (gateway_refused(r) and b"loopback" in r):
        escapes.append("http://%s (a listed literal) answered %r" % (a.decode(), r[:120]))
    # CONNECT passes the host policy (the literal is listed); the address check refuses it
    # before the tunnel (a 403 on the CONNECT), or at the dial after the ClientHello.
    r = exchange(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (a, a), then=client_hello())
    if r and not gateway_refused(r):
        escapes.append("CONNECT %s then a ClientHello answered %r" % (a.decode(), r[:80]))
after = seen()
if after["trap"] != before:
    escapes.append("the gateway dialed the host's loopback: the trap counted %d connection(s)"
                   % (after["trap"] - before))
if after["count"]:
    escapes.append("the upstream received %d requests carrying the nonce" % after["count"])

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: %d literals refused on 3 paths each (%s ...); 127.0.0.1:%d in 10 spellings "
      "refused as loopback before a dial (trap untouched)" %
      (len(notes), ", ".join(notes[:8]), TRAP))
