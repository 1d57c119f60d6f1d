"""Hides the real TLS destination from the gateway inside the ClientHello: an
encrypted_client_hello extension (ECH, 0xfe0d) next to an allowed outer SNI, through CONNECT and
the transparent TLS listener; then the codepoints the same idea used before it was final: ESNI
(encrypted_server_name, 0xffce, drafts -01 to -05, deployed by Cloudflare and Firefox 2018-2020)
and the ECH drafts -08 to -10 (0xfe08, 0xfe09, 0xfe0a). A front end that understands any of them
routes by the hidden name, so the gateway's SNI check would see only the cover name. The tunnel's
allowed host is git.example.test (tunneled, not intercepted), so any TLS record coming back
comes from the upstream.
Blocked when: every ClientHello carrying an ECH or ESNI extension (final or draft codepoint) on a
connection that would be tunneled is refused and the connection closed before any byte reaches
the upstream. (On intercepted hosts ECH is accepted: the gateway terminates TLS itself for the
outer SNI it checked, so nothing is hidden from it; tests/integration/test_egress.py covers it.)
space-attack: sandbox=fresh timeout=30
"""
import socket
import ssl
import struct

escapes, notes = [], []


def client_hello(sni):
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


def hello_parts(record):
    body = record[9:]
    i = 2 + 32
    i += 1 + body[i]
    i += 2 + struct.unpack(">H", body[i:i + 2])[0]
    i += 1 + body[i]
    n = struct.unpack(">H", body[i:i + 2])[0]
    exts, ext, k = [], body[i + 2:i + 2 + n], 0
    while k < len(ext):
        t, l = struct.unpack(">HH", ext[k:k + 4])
        exts.append([t, ext[k + 4:k + 4 + l]])
        k += 4 + l
    return body[:i], exts


def build_hello(head, exts):
    e = b"".join(struct.pack(">HH", t, len(d)) + d for t, d in exts)
    body = head + struct.pack(">H", len(e)) + e
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs


def answered(hello, via):
    if via == "connect":
        s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
        s.sendall(b"CONNECT git.example.test:443 HTTP/1.1\r\nHost: git.example.test:443\r\n\r\n")
        if not s.recv(4096).startswith(b"HTTP/1.1 200"):
            print("ERROR: CONNECT git.example.test was refused")
            raise SystemExit(2)
    else:
        s = socket.create_connection(("127.0.0.1", 443), timeout=5)
    s.settimeout(8)
    out = b""
    try:
        s.sendall(hello)
        out = s.recv(64)
    except OSError:
        pass
    s.close()
    return out


head, exts = hello_parts(client_hello("git.example.test"))
control = build_hello(head, exts)
if not answered(control, "connect").startswith(b"\x16"):
    print("ERROR: the unmodified ClientHello got no ServerHello through the tunnel")
    raise SystemExit(2)
# An ECHClientHello (outer): type 0, cipher suite, config id, enc, payload.
ech = b"\x00\x00\x01\x00\x01\x42" + b"\x00\x20" + b"\x11" * 32 + b"\x00\x40" + b"\x22" * 64
# An ESNI extension: cipher suite, key share, record digest, encrypted sni.
esni = (b"\x13\x01" + b"\x00\x1d\x00\x20" + b"\x33" * 32 + b"\x00\x20" + b"\x44" * 32 +
        b"\x01\x04" + b"\x55" * 260)
for code, name, data in [(0xfe0d, "ECH (final)", ech), (0xffce, "ESNI", esni),
                         (0xfe08, "ECH draft-08", ech), (0xfe09, "ECH draft-09", ech),
                         (0xfe0a, "ECH draft-10", ech)]:
    hello = build_hello(head, exts + [[code, data]])
    for via in ("connect", "transparent"):
        got = answered(hello, via)
        if got[:1] in (b"\x16", b"\x15"):
            kind = "handshake" if got[:1] == b"\x16" else "alert"
            escapes.append("%s (0x%04x) via %s reached the upstream (it answered with a TLS "
                           "%s)" % (name, code, via, kind))
        else:
            notes.append("%s via %s" % (name, via))
if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: refused and closed: " + ", ".join(notes))
