"""Reaches hosts the profile does not list, through every door of the gateway: absolute-form
http:// requests and CONNECT to the proxy (127.0.0.1:3128), the transparent HTTP listener (:80)
with a forged Host header, the transparent TLS listener (:443) with a forged SNI, and the DNS
stub (127.0.0.53); with names built to fool a matcher: an allowed name with a suffix appended
(api.example.test.evil.test), a prefix (xapi.example.test), the parent and a child of an
allowed name, userinfo (api.example.test@other.example.test), a backslash, percent-encoding,
trailing dots, upper case, IDN homographs (a Cyrillic "а" and its xn-- form), and ports the rule
does not list. An absolute-form request with a Host header naming another host must reach the
URL's host only. Every request carries a nonce the upstream reports on (/seen), so a request
that slipped through is caught even where its answer was lost.
Blocked by: names are normalized (IDNA to A-labels, case, one trailing dot) and matched exactly;
userinfo, percent-encoding and malformed authorities are refused; each refusal is a 4xx the
gateway writes itself (on the transparent TLS listener after a handshake the gateway completes
with a leaf from the sandbox's own CA, so no upstream answers it) or a closed connection; the DNS
stub answers every name with the gateway's own address (127.0.0.1) and nothing else.
space-attack: sandbox=fresh timeout=60
"""
import json
import os
import socket
import ssl
import struct

NONCE = "offlist-" + os.urandom(6).hex()
escapes, notes = [], []


def exchange(data, port=3128, timeout=5.0):
    """Sends `data` to a gateway listener on 127.0.0.1 and reads until it closes or `timeout`."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = b""
    try:
        s.sendall(data)
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:  # a reset after a refusal, or the timeout: what came so far is the answer
        pass
    finally:
        s.close()
    return out


def status(resp):
    line = resp.split(b"\r\n", 1)[0]
    return int(line[9:12]) if line.startswith(b"HTTP/1.1 ") and line[9:12].isdigit() else 0


def gateway_refused(resp):
    """A 4xx the gateway wrote itself (its body names it)."""
    return 400 <= status(resp) < 500 and b"SPACE egress gateway:" in resp


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


def check_http(what, req, port=3128):
    resp = exchange(req, port)
    if gateway_refused(resp):
        notes.append("%s: %d" % (what, status(resp)))
    else:
        escapes.append("%s answered %r" % (what, resp[:80]))


def check_sni(name):
    """A denied SNI on the transparent TLS listener: only the gateway itself may answer (a leaf
    from this sandbox's own CA, which no upstream holds), and only with its refusal."""
    try:
        client_hello(name)
    except (ValueError, UnicodeError) as e:
        notes.append("sni %s: the client refuses it (%s)" % (name, e.__class__.__name__))
        return
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations("/etc/space/ca.crt")  # the sandbox CA alone
    ctx.check_hostname = False
    s = socket.create_connection(("127.0.0.1", 443), timeout=5)
    try:
        t = ctx.wrap_socket(s, server_hostname=name)
    except ssl.SSLCertVerificationError as e:
        escapes.append("transparent TLS with SNI %s was answered by a certificate not from the "
                       "sandbox CA: %s" % (name, e))
        s.close()
        return
    except OSError:
        notes.append("sni %s: closed" % name)
        s.close()
        return
    h = name.encode("utf-8")
    out = b""
    try:
        t.sendall(b"GET /echo?n=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (NONCE.encode(), h))
        while True:
            b = t.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    t.close()
    if gateway_refused(out) and status(out) == 403:
        notes.append("sni %s: 403 inside the gateway's TLS" % name)
    else:
        escapes.append("transparent TLS with SNI %s answered %r" % (name, out[:80]))


def dns_a(name):
    """The stub's answer to an A query: 'rcode R, [addresses]'."""
    labels = [l.encode("idna") if any(ord(c) > 127 for c in l) else l.encode()
              for l in name.split(".") if l]
    qname = b"".join(bytes([len(l)]) + l for l in labels) + b"\0"
    q = b"\x51\x51\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + qname + b"\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    try:
        s.sendto(q, ("127.0.0.53", 53))
        d = s.recv(2048)
    except OSError as e:
        return "no answer (%s)" % e.__class__.__name__
    finally:
        s.close()
    rcode, an = d[3] & 15, struct.unpack(">H", d[6:8])[0]
    # Answers follow the echoed question; each is a name pointer (2 bytes), type, class, TTL,
    # length and the data.
    i = 12 + len(qname) + 4
    addrs = []
    for _ in range(an):
        t, _, _, l = struct.unpack(">HHIH", d[i + 2:i + 12])
        addrs.append("%d:%s" % (t, ".".join(str(x) for x in d[i + 12:i + 12 + l])))
        i += 12 + l
    return "rcode %d, %s" % (rcode, addrs)


# Names the profile does not allow (it lists api, git, plain:80, paths, rebind and private
# .example.test, and one loopback address).
NAMES = ["other.example.test", "OTHER.EXAMPLE.TEST", "other.example.test.", "Other.Example.Test.",
         "api.example.test.evil.test", "api.example.test.evil.test.", "xapi.example.test",
         "example.test", "sub.api.example.test", "api-example.test", "api.example.tes",
         "xn--pi-7kc.example.test", "\u0430pi.example.test", "api.ex\u0430mple.test",
         "evil.test"]
MALFORMED = ["api.example.test@other.example.test", "other.example.test@api.example.test",
             "api.example.test%2eevil.test", "other.example.test%00.api.example.test",
             "other.example.test\\.api.example.test", "api.example.test..",
             "api.example.test:80@other.example.test", ".api.example.test", "api..example.test"]

for name in NAMES + MALFORMED:
    h = name.encode("utf-8")
    check_http("proxy %s" % name,
               b"GET http://%s/echo?n=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (h, NONCE.encode(), h))
    check_http("connect %s" % name, b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (h, h))
    check_http("transparent-http %s" % name,
               b"GET /echo?n=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (NONCE.encode(), h), port=80)

for name in NAMES:
    check_sni(name)
    # The stub answers every well-formed name with the gateway's own address, whose listeners
    # then refuse it (above); any other answer would lead somewhere else.
    answer = dns_a(name)
    if answer not in ("rcode 0, ['1:127.0.0.1']", "rcode 3, []"):
        escapes.append("DNS stub answered %s with %s (not the gateway's 127.0.0.1)" %
                       (name, answer))

# Allowed hosts on ports their rules do not list; a userinfo in front of an allowed host.
for auth in ["plain.example.test:443", "git.example.test:22", "git.example.test:8443",
             "api.example.test:3128", "paths.example.test:8080"]:
    a = auth.encode()
    check_http("connect %s" % auth, b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (a, a))
    check_http("proxy %s" % auth,
               b"GET http://%s/echo?n=%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (a, NONCE.encode(), a))
check_http("proxy https:// URL", b"GET https://other.example.test/ HTTP/1.1\r\n"
                                 b"Host: other.example.test\r\n\r\n")

# The URL names an allowed host, the Host header another: only the URL's host may be seen.
resp = exchange(b"GET http://plain.example.test/echo?n=%s HTTP/1.1\r\nHost: other.example.test"
                b"\r\nConnection: close\r\n\r\n" % NONCE.encode())
body = resp.split(b"\r\n\r\n", 1)[-1]
try:
    rec = json.loads(body)
    if rec["host"] != "plain.example.test" or rec["headers"].get("host") != "plain.example.test":
        escapes.append("absolute-form URL with Host other.example.test reached the upstream as "
                       "%s / %s" % (rec["host"], rec["headers"].get("host")))
    else:
        notes.append("the URL's host wins over a Host header")
except (ValueError, KeyError):
    escapes.append("plain.example.test with a foreign Host header answered %r" % resp[:100])

# Did any refused request reach the upstream anyway? (Requests above for the URL-wins check
# carry the nonce with Host plain.example.test; count only foreign hosts.)
seen = exchange(b"GET http://plain.example.test/seen?n=%s HTTP/1.1\r\nHost: plain.example.test"
                b"\r\nConnection: close\r\n\r\n" % NONCE.encode())
try:
    count = json.loads(seen[seen.index(b"{"):seen.rindex(b"}") + 1])["count"]
except ValueError:
    count = None
if count is None:
    print("ERROR: the upstream's /seen did not answer: %r" % seen[:200])
    raise SystemExit(2)
if count != 1:  # exactly the URL-wins request
    escapes.append("the upstream received %d requests carrying the nonce (expected 1)" % count)

if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: %d refusals (%s ...); the upstream saw none of them" %
      (len(notes), "; ".join(notes[:6])))
