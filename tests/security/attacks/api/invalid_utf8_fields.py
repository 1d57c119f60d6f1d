"""Sends text that is not valid UTF-8 in every kind of request field the API reads: query
parameters (percent-encoded and raw bytes: a lone 0xFF, a truncated sequence, an overlong '/',
an encoded UTF-16 surrogate, a code point past U+10FFFF), path segments, JSON strings (raw
bytes and lone \\u surrogates, as values and as keys), and headers the server reads. Text that
reaches the daemon's JSON unchecked makes nlohmann's dump() throw (type_error 316): the request
fails with a 500 halfway through, after the daemon may already have acted on it, and any
response carrying the bytes is not valid JSON for strict clients.
Blocked by: the API validates every field it reads as UTF-8 up front (src/api/request.cc
parse_target, parse_json; 400 naming the field), and every response is dumped with invalid
bytes replaced, so no 500 comes from encoding. Each case must be a 400 (401 for the
Authorization header), with a JSON error body that is itself valid UTF-8, and the daemon
must stay healthy.
space-attack: sandbox=host timeout=60
"""
import json
import socket

from hostside import SANDBOX, SOCKET, daemon_healthy, escaped, finish, note

SB = SANDBOX.encode()
BAD = [b"\xff", b"\xc3\x28", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a\xe2\x82"]


def pct(raw):
    return b"".join(b"%%%02X" % c for c in raw)


def request(method, target, body=None, headers=()):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(SOCKET)
    req = method + b" " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    for k, v in headers:
        req += k + b": " + v + b"\r\n"
    if body is not None:
        req += b"Content-Length: %d\r\n" % len(body)
    req += b"\r\n" + (body or b"")
    data = b""
    try:
        s.sendall(req)
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ")[1])
    except (IndexError, ValueError):
        status = 0
    return status, rest


cases = []  # (what, method, target, body, headers, expected statuses)
for i, bad in enumerate(BAD):
    enc = pct(bad)
    files = b"/v1/sandboxes/" + SB + b"/files?path=/tmp/"
    cases += [
        ("query path (GET files) %r" % bad, b"GET", files + enc, None, (), (400,)),
        ("query path (PUT files) %r" % bad, b"PUT", files + b"sec" + enc, b"x",
         ((b"Content-Type", b"application/octet-stream"),), (400,)),
        ("query path (DELETE files) %r" % bad, b"DELETE", files + enc, None, (), (400,)),
        ("query path raw bytes %r" % bad, b"GET", files + bad, None, (), (400,)),
        ("sandbox id segment %r" % bad, b"GET", b"/v1/sandboxes/" + enc, None, (), (400,)),
        ("snapshot segment %r" % bad, b"GET", b"/v1/snapshots/" + enc, None, (), (400,)),
        ("image segment %r" % bad, b"DELETE", b"/v1/images/" + enc, None, (), (400,)),
        ("token segment %r" % bad, b"DELETE", b"/v1/tokens/" + enc, None, (), (400,)),
        ("pid segment %r" % bad, b"DELETE", b"/v1/sandboxes/" + SB + b"/processes/" + enc,
         None, (), (400,)),
        ("unrouted segment %r" % bad, b"GET", b"/v1/" + enc + b"/x", None, (), (400,)),
        ("raw segment %r" % bad, b"GET", b"/v1/sandboxes/" + bad, None, (), (400,)),
        ("JSON env value %r" % bad, b"POST", b"/v1/sandboxes",
         b'{"env": {"A": "' + bad + b'"}}', (), (400,)),
        ("JSON env key %r" % bad, b"POST", b"/v1/sandboxes",
         b'{"env": {"' + bad + b'": "x"}}', (), (400,)),
        ("JSON exec cmd %r" % bad, b"POST", b"/v1/sandboxes/" + SB + b"/exec",
         b'{"cmd": ["echo", "' + bad + b'"]}', (), (400,)),
        ("JSON exec cwd %r" % bad, b"POST", b"/v1/sandboxes/" + SB + b"/exec",
         b'{"cmd": ["true"], "cwd": "/' + bad + b'"}', (), (400,)),
        ("JSON token name %r" % bad, b"POST", b"/v1/tokens",
         b'{"name": "' + bad + b'", "profiles": ["*"], "ops": ["read"], "ttl": "1m"}', (),
         (400,)),
        ("JSON snapshot name %r" % bad, b"POST", b"/v1/sandboxes/" + SB + b"/snapshots",
         b'{"name": "' + bad + b'"}', (), (400,)),
        ("Content-Type header %r" % bad, b"PUT", files + b"sec-ct", b"x",
         ((b"Content-Type", b"application/" + bad),), (400,)),
        ("Authorization header %r" % bad, b"GET", b"/v1/health", None,
         ((b"Authorization", b"Bearer spt_" + bad),), (400, 401)),
    ]
for what, params in [("query key", b"%FF=1"), ("query stat", b"path=/tmp&stat=%FF"),
                     ("query mode", b"path=/tmp/sec-m&mode=%FF"),
                     ("query since", b"since=%FF"), ("query format", b"format=%FF"),
                     ("query after", b"after=%C3%28")]:
    route = {"query since": b"/diff", "query format": b"/audit", "query after": b"/audit",
             "query key": b""}.get(what, b"/files")
    method = b"PUT" if what == "query mode" else b"GET"
    cases.append((what, method, b"/v1/sandboxes/" + SB + route + b"?" + params,
                  b"x" if method == b"PUT" else None, (), (400,)))
for what, body in [("JSON lone high surrogate", b'{"env": {"A": "\\ud800"}}'),
                   ("JSON lone low surrogate", b'{"image": "\\udc00x"}'),
                   ("JSON workdir", b'{"workdir": "/\xff"}'),
                   ("JSON allow", b'{"allow": ["\xfe.example"]}')]:
    cases.append((what, b"POST", b"/v1/sandboxes", body, (), (400,)))

bad_status, checked = [], 0
for what, method, target, body, headers, expected in cases:
    status, rest = request(method, target, body, headers)
    checked += 1
    try:
        text = rest.decode("utf-8")  # strict: a response must be valid UTF-8
        err = json.loads(text).get("error", {})
        ok_body = isinstance(err, dict) and isinstance(err.get("message"), str)
    except (UnicodeDecodeError, ValueError, AttributeError):
        ok_body = False
    if status >= 500 or status == 0:
        escaped("%s: %s" % (what, status or "no answer"))
    elif status not in expected:
        bad_status.append("%s: %d" % (what, status))
    elif not ok_body:
        escaped("%s: %d with a body that is not a UTF-8 JSON error: %r" % (what, status,
                                                                          rest[:120]))
if bad_status:
    escaped("not refused with 400: " + "; ".join(bad_status[:6]) +
            (" (and %d more)" % (len(bad_status) - 6) if len(bad_status) > 6 else ""))
note("%d requests with invalid UTF-8 sent" % checked)
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
