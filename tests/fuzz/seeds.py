#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/seed-*), a dozen
small, hand-made inputs each that reach the interesting paths. Inputs the fuzzers found that
crashed something are kept next to them as crash-* files and never regenerated here.
Usage: python3 tests/fuzz/seeds.py   (idempotent)
"""

import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Frame types (src/proto/frame.h).
HELLO, REQUEST, RESPONSE, EXEC, STARTED, STDIN, STDOUT, STDERR, EXIT, SIGNAL, CREDIT, DATA, \
    PING, PONG, CONNECT, RESET, DNS, PROC_EXEC = range(1, 19)
AGENT_STREAM = 0x80000000  # egress connections and DNS queries the agent opens


def frame(ftype, stream, payload, flags=0, reserved=0, length=None):
    if isinstance(payload, (dict, list)):
        payload = json.dumps(payload).encode()
    n = len(payload) if length is None else length
    return struct.pack("<IBBHI", n, ftype, flags, reserved, stream) + payload


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def frame_decoder():
    hello = frame(HELLO, 0, {"version": 1, "pid": 1})
    seeds = {
        "hello": b"\xff" + hello,
        "hello-bytewise": b"\x00" + hello,
        "request-stat": b"\x07" + frame(REQUEST, 5, {"op": "stat", "path": "/etc"}),
        "exec": b"\x20" + frame(EXEC, 9, {"argv": ["sh", "-c", "echo hi"], "env": ["A=b"]}),
        "stdout-then-exit": b"\x03" + frame(STDOUT, 9, b"hello\n") +
                            frame(EXIT, 9, {"exit_code": 0}),
        "empty-payloads": b"\x01" + frame(STDIN, 3, b"") + frame(DATA, 3, b"") + frame(PING, 0, b""),
        "many-small": b"\x10" + b"".join(frame(PONG, i, bytes([i])) for i in range(20)),
        "truncated-header": b"\x05" + hello[:7],
        "truncated-payload": b"\x05" + hello[:-3],
        "too-long": b"\xff" + frame(DATA, 1, b"x", length=(1 << 20) + 1),
        "bad-type": b"\xff" + frame(99, 1, b"x"),
        "reserved-bits": b"\xff" + frame(PING, 1, b"x", flags=1) + frame(PING, 1, b"x", reserved=7),
        "max-length-claim": b"\xff" + frame(DATA, 1, b"abc", length=1 << 20),
    }
    for name, data in seeds.items():
        write("frame_decoder", name, data)


def api_request():
    # First byte % 6: 0 target, 1 create body, 2 exec body, 3 scanner, 4 size, 5 duration.
    seeds = {
        "target-files": b"\x00/v1/sandboxes/sb_0123abcd/files?path=%2Fetc%2Fpasswd&stat=true",
        "target-kill": b"\x00/v1/sandboxes/sb_1/processes/42?signal=9&force=1&mode=0644",
        "target-dotdot": b"\x00/v1/sandboxes/..%2F..%2Fetc/exec?path=/a+b&&=x&y",
        "target-bad-escape": b"\x00/v1/images/%zz?path=%",
        "create-full": b"\x01" + json.dumps({
            "runtime": "linux", "image": "host", "profile": "test", "memory": "512M",
            "cpus": 1.5, "pids": 256, "disk": "2G", "timeout": "30m", "env": {"A": "b"},
            "secrets": ["gh"], "allow": ["pypi.org:443", "*.github.com"],
            "workdir": "/workspace"}).encode(),
        "create-types": b"\x01" + b'{"memory": 1e400, "pids": 1.5, "cpus": "NaN", "env": []}',
        "create-deep": b"\x01" + b"[" * 70 + b"]" * 70,
        "exec-full": b"\x02" + json.dumps({"cmd": ["ls", "-l"], "env": {"K": "V"},
                                           "cwd": "/tmp", "timeout": 30, "detach": False,
                                           "stdin": True}).encode(),
        "exec-bad": b"\x02" + b'{"cmd": [], "detach": true, "stdin": true}',
        "scanner-stdin": b"\x03" + b'{"cmd": ["cat"], "stdin": true, "x": "}{\\"]"}\nSTDIN BYTES',
        "scanner-chunked": b"\x1b" + b' \n{"a": [{"b": "\\\\"}], "c": "\\u0041"}  trailing',
        "size": b"\x04" + b"1.5G",
        "size-overflow": b"\x04" + b"99999999999999999999P",
        "duration": b"\x05" + b"1h30m",
        "duration-odd": b"\x05" + b"-0.0s",
    }
    for name, data in seeds.items():
        write("api_request", name, data)


def agent_request():
    # First byte % 3: 0 exec spec, 1 request fields, 2 path resolution (flags in byte >> 2).
    seeds = {
        "exec-spec": b"\x00" + json.dumps({"argv": ["python3", "-c", "print(1)"],
                                           "env": ["PATH=/usr/bin:", "HOME=/root"],
                                           "cwd": "/tmp", "uid": 1000, "gid": 1000,
                                           "stdin": True, "stdin_credit": True}).encode(),
        "exec-spec-bad": b"\x00" + b'{"argv": ["a\\u0000b"], "env": ["=x"], "uid": -1}',
        "exec-spec-path": b"\x00" + b'{"argv": ["prog"], "env": ["PATH=::/bin:"]}',
        "request-write": b"\x01" + json.dumps({"op": "write", "path": "/a/b/c", "mode": 420,
                                               "parents": True}).encode(),
        "request-symlink": b"\x01" + b'{"op": "symlink", "path": "/x/", "target": "../../.."}',
        "request-kill": b"\x01" + b'{"op": "kill", "pid": 1, "signal": 65}',
        "resolve-up": b"\x02" + b"/a/b/up/out/secret",
        "resolve-chain": b"\x06" + b"/chain/secret",
        "resolve-hostabs": b"\x02" + b"/hostabs",
        "resolve-magic": b"\x0a" + b"/magic/etc",
        "resolve-fds": b"\x02" + b"/fds/3",
        "resolve-loop": b"\x02" + b"/loop/x",
        "resolve-back": b"\x0e" + b"/back",
        "resolve-dots": b"\x02" + b"/a/./b/../../../../out/../a/f/",
    }
    for name, data in seeds.items():
        write("agent_request", name, data)


def agent_conn():
    # First byte & 1: 0 raw channel bytes after a valid hello; 1 answers to one request, as
    # [type u8][len u16 LE][payload].
    def reply(ftype, payload):
        if isinstance(payload, (dict, list)):
            payload = json.dumps(payload).encode()
        return struct.pack("<BH", ftype, len(payload)) + payload

    seeds = {
        "raw-pong": b"\x00" + frame(PONG, 0, b"x"),
        "raw-unknown-stream": b"\x00" + frame(STDOUT, 77, b"out") + frame(EXIT, 77, {"signal": 9}),
        "raw-credit": b"\x00" + frame(CREDIT, 3, {"bytes": 10}) + frame(CREDIT, 3, {"bytes": -1}),
        "raw-daemon-only-type": b"\x00" + frame(REQUEST, 1, {"op": "ps"}),
        "raw-second-hello": b"\x00" + frame(HELLO, 0, {"version": 2}),
        "raw-bad-header": b"\x00" + frame(DATA, 1, b"", flags=3),
        "raw-egress": b"\x00" + frame(CONNECT, AGENT_STREAM | 1, {"port": 3128}) +
                      frame(CREDIT, AGENT_STREAM | 1, {"bytes": 5}) +
                      frame(RESET, AGENT_STREAM | 1, b"") +
                      frame(CONNECT, AGENT_STREAM | 2, {"port": 3128}) +
                      frame(DATA, AGENT_STREAM | 2, b"before the ok"),
        "raw-egress-bad-connect": b"\x00" + frame(CONNECT, AGENT_STREAM | 1, {"port": 70000}) +
                                  frame(CONNECT, 4, {"port": 1}) + frame(RESET, 4, b""),
        "raw-dns": b"\x00" + frame(DNS, AGENT_STREAM | 9, b"\x12\x34\x01\x00\x00\x01" +
                                   b"\x00" * 6 + b"\x07allowed\x04test\x00\x00\x01\x00\x01") +
                   frame(DNS, AGENT_STREAM | 10, b"\xff" * 4096),
        "raw-dns-bad": b"\x00" + frame(DNS, AGENT_STREAM | 1, b"short") +
                       frame(DNS, 3, b"\x00" * 12),
        "raw-proc-exec": b"\x00" + frame(PROC_EXEC, 0, {"events": [{"syscall": "execve",
                                                                  "argv": ["ls"]}],
                                                      "dropped": 2}) +
                         frame(PROC_EXEC, 5, {"events": []}) + frame(PROC_EXEC, 0, b"{"),
        "reply-ok": b"\x01" + reply(RESPONSE, {"ok": True, "stat": {"type": "dir", "mode": 493}}),
        "reply-error": b"\x01" + reply(RESPONSE, {"ok": False, "error": {
            "code": "not_found", "message": "no such file", "errno": 2}}),
        "reply-error-types": b"\x01" + reply(RESPONSE, {"ok": False, "error": {
            "code": 5, "message": ["x"], "errno": "2"}}),
        "reply-data-first": b"\x01" + reply(DATA, b"abc") + reply(DATA, b"") +
                            reply(RESPONSE, {"ok": True}),
        "reply-not-object": b"\x01" + reply(RESPONSE, b"[1,2,3]"),
        "reply-garbage": b"\x01" + reply(RESPONSE, b"\xff\xfe{"),
    }
    for name, data in seeds.items():
        write("agent_conn", name, data)


def upper_listing():
    head = b"space-upper 1\n"
    seeds = {
        "listing": head + b"e d 0 4096 1700000000123456789 etc\n"
                          b"e o 0 12 1700000000000000000 etc/passwd\n"
                          b"e w 0 0 0 etc/group\n"
                          b"e d 1 4096 -5 root/opaque\n"
                          b"end 4\n",
        "escaped-names": head + b"e o 0 1 0 a%20b%0Ac%25\ne o 0 1 0 %FF%00x\nend 2\n",
        "dot-parts": head + b"e o 0 1 0 a/../b\ne o 0 1 0 ./x\ne o 0 1 0 a//b\nend 3\n",
        "limit": head + b"e o 0 1 0 a\nlimit 1\n",
        "error": head + b"error the writable disk is not a readable ext4 file system\n",
        "count-mismatch": head + b"e o 0 1 0 a\nend 2\n",
        "no-end": head + b"e o 0 1 0 a\n",
        "trailing": head + b"end 0\nend 0\n",
        "big-numbers": head + b"e o 0 99999999999999999999 -9223372036854775808 x\nend 1\n",
        "bad-escape": head + b"e o 0 1 0 %G1\ne o 0 1 0 %4\nend 2\n",
        "empty": b"",
    }
    for name, data in seeds.items():
        for limit in (0, 3, 255):
            write("upper_listing", "%s-%d" % (name, limit), bytes([limit]) + data)


def exec_report():
    # A `proc_exec` payload as the daemon decodes it (src/proto/exec_report.cc).
    rec = {"syscall": "execve", "pid": 87, "ppid": 85, "uid": 0, "cwd": "/root",
           "path": "/bin/ls", "resolved": "/bin/ls", "argv": ["/bin/ls", "/"], "stream": 7}
    seeds = {
        "one": {"events": [rec], "dropped": 0},
        "drops-only": {"events": [], "dropped": 12},
        "all-fields": {"events": [dict(rec, syscall="execveat", abi="i386", fd=-100, path="",
                                       at_empty_path=True, fileless=True, caller_gone=True,
                                       argv_truncated=True, argv_unreadable=True,
                                       path_truncated=True, stream=None)]},
        "bad-records": {"events": [1, {}, {"syscall": "open"}, dict(rec, pid="x"),
                                   dict(rec, argv=["a", 3]), dict(rec, stream=0x80000001),
                                   dict(rec, guest_reported=False, host_pid=1)]},
        "long": {"events": [dict(rec, cwd="c" * 5000, argv=["y" * 4200] * 20)]},
        "utf8-cut": {"events": [dict(rec, argv=["x" + "\u00e9" * 2100])]},
        "bad-dropped": {"events": [], "dropped": -1},
    }
    for name, payload in seeds.items():
        write("exec_report", name, json.dumps(payload, ensure_ascii=False).encode())
    write("exec_report", "deep", b'{"events":[' + b"[" * 20 + b"]" * 20 + b"]}")
    write("exec_report", "not-json", b'{"events":[{"syscall":"execve"')


# ---- TLS ClientHello (src/egress/tls_hello.cc) ----

def vec(width, data):
    return len(data).to_bytes(width, "big") + data


def tls_ext(etype, data):
    return struct.pack(">H", etype) + vec(2, data)


def sni_ext(*names):
    return tls_ext(0, vec(2, b"".join(b"\x00" + vec(2, n) for n in names)))


ALPN = tls_ext(16, vec(2, vec(1, b"h2") + vec(1, b"http/1.1")))
KEY_SHARE = tls_ext(51, vec(2, struct.pack(">H", 0x001d) + vec(2, b"\x11" * 32)))
VERSIONS = tls_ext(43, vec(1, b"\x03\x04\x03\x03"))


def client_hello_msg(exts, sid=b"\x22" * 32, suites=b"\x13\x01\x13\x02\xc0\x2f", comp=b"\x00",
                     version=0x0303, with_exts=True):
    body = struct.pack(">H", version) + b"\x5a" * 32 + vec(1, sid) + vec(2, suites) + vec(1, comp)
    if with_exts:
        body += vec(2, b"".join(exts))
    return b"\x01" + vec(3, body)


def records(msg, size=1 << 14, version=b"\x03\x01"):
    out = b""
    for i in range(0, len(msg), size):
        part = msg[i:i + size]
        out += b"\x16" + version + vec(2, part)
    return out


def tls_hello():
    plain = client_hello_msg([sni_ext(b"example.com"), ALPN, VERSIONS, KEY_SHARE])
    big_share = tls_ext(51, vec(2, struct.pack(">H", 0x11ec) + vec(2, b"\x33" * 1216)))
    seeds = {
        "sni-alpn": records(plain),
        "sni-only": records(client_hello_msg([sni_ext(b"api.github.com")])),
        "no-sni": records(client_hello_msg([ALPN, VERSIONS])),
        "no-extensions": records(client_hello_msg([], with_exts=False)),
        "ech": records(client_hello_msg([sni_ext(b"public.example"),
                                         tls_ext(0xfe0d, b"\x00\x00\x01\x00\x01" + b"\x42" * 40)])),
        "esni": records(client_hello_msg([sni_ext(b"a.example"), tls_ext(0xffce, b"\x01" * 8)])),
        "ech-draft": records(client_hello_msg([tls_ext(0xfe0a, b"")])),
        "two-names": records(client_hello_msg([sni_ext(b"allowed.example", b"evil.example")])),
        "dup-extension": records(client_hello_msg([sni_ext(b"a.example"), sni_ext(b"b.example")])),
        "sni-256": records(client_hello_msg([sni_ext(b"a" * 256)])),
        "sni-nul": records(client_hello_msg([sni_ext(b"allowed.example\x00.evil")])),
        "sni-other-type": records(client_hello_msg([tls_ext(0, vec(2, b"\x01" + vec(2, b"x")))])),
        "fragmented": records(plain, size=40),
        "big-key-share": records(client_hello_msg([sni_ext(b"pq.example"), big_share]), size=512),
        "truncated": records(plain)[:60],
        "trailing-bytes": records(plain) + b"\x17\x03\x03\x00\x10" + b"\x00" * 16,
        "not-tls": b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
        "bad-record-version": b"\x16\x02\x00" + records(plain)[3:],
        "zero-length-record": b"\x16\x03\x01\x00\x00" + records(plain),
        "record-too-long": b"\x16\x03\x01\x40\x01" + plain,
        "not-client-hello": b"\x16\x03\x01\x00\x08\x02\x00\x00\x04\x03\x03\x00\x00",
        "hello-length-huge": b"\x16\x03\x01\x00\x08\x01\xff\xff\xff\x03\x03\x00\x00",
        "odd-suites": records(client_hello_msg([sni_ext(b"x.example")], suites=b"\x13")),
        "ssl2-version": records(client_hello_msg([sni_ext(b"x.example")], version=0x0200)),
    }
    for name, data in seeds.items():
        write("tls_hello", name, data)


# ---- DNS queries (src/egress/dns.cc) ----

def dns_name(name):
    if isinstance(name, bytes):
        return name
    out = b""
    for label in name.split(".") if name else []:
        out += vec(1, label.encode())
    return out + b"\x00"


def dns_query(name, qtype=1, qclass=1, qid=0x1234, flags=0x0100, qd=1, an=0, ns=0, ar=0,
              extra=b""):
    return struct.pack(">HHHHHH", qid, flags, qd, an, ns, ar) + dns_name(name) + \
        struct.pack(">HH", qtype, qclass) + extra


OPT = b"\x00" + struct.pack(">HHIH", 41, 1232, 0, 0)


def dns():
    seeds = {
        "a": dns_query("example.com"),
        "aaaa": dns_query("pypi.org", qtype=28),
        "case-0x20": dns_query("ExAmPlE.CoM", qid=0xbeef),
        "https": dns_query("www.github.com", qtype=65, flags=0),
        "root": dns_query(""),
        "edns": dns_query("example.com", ar=1, extra=OPT),
        "edns-cookie": dns_query("example.com", ar=1, extra=b"\x00" + struct.pack(
            ">HHIH", 41, 4096, 0, 12) + struct.pack(">HH", 10, 8) + b"\x01" * 8),
        "sandbox-name": dns_query("sb_0123abcd", qtype=1),
        "max-name": dns_query(".".join(["a" * 63] * 3 + ["b" * 61])),
        "name-too-long": dns_query(".".join(["a" * 63] * 4)),
        "label-64": dns_query(b"\x40" + b"a" * 64 + b"\x00"),
        "pointer": dns_query(b"\x03www\xc0\x0c"),
        "dot-in-label": dns_query(b"\x07evil.co\x00"),
        "trailing": dns_query("example.com", extra=b"\x00\x00"),
        "response": dns_query("example.com", flags=0x8180),
        "opcode-status": dns_query("example.com", flags=0x1000),
        "two-questions": dns_query("a.example", qd=2),
        "answers": dns_query("a.example", an=1),
        "two-additional": dns_query("a.example", ar=2, extra=OPT + OPT),
        "not-opt": dns_query("a.example", ar=1, extra=dns_name("x") + struct.pack(">HHIH", 1, 1, 0, 4)
                             + b"\x7f\x00\x00\x01"),
        "truncated-question": dns_query("example.com")[:-3],
        "header-only": struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0),
        "short": b"\x12\x34\x01",
        "any": dns_query("example.com", qtype=255, qclass=255),
    }
    for name, data in seeds.items():
        write("dns", name, data)


# ---- host names (src/egress/host.cc) ----

def host():
    texts = [
        "Example.COM.", "example.com..", "xn--bcher-kva.example", "bücher.example",
        "ＥＸＡＭＰＬＥ.com", "ｆｕｌｌ／ｗｉｄｔｈ.example", "faß.de", "xn--a.com", "xn--zz",
        "r3---sn-x.example", "a" * 63 + ".com", "a" * 64 + ".com",
        ".".join(["a" * 63] * 3 + ["b" * 61]), "-a.com", "a-.com", "a..b", ".", "",
        "0x7f.1", "2130706433", "0177.0.0.1", "127.1", "1.2.3.4.5", "1.2.3.256", "0x100000000",
        "4294967296", "example.0x1g", "127.0.0.1.", "[::1]", "::1", "::ffff:127.0.0.1",
        "[::ffff:7f00:1]", "[fe80::1%25eth0]", "[::1", "[::1]x", "2001:db8::1", "64:ff9b::a00:1",
        "user@host", "ho st", "ho%73t", "host/path", "a\x00b", "*.example.com", "*", "a.*.com",
        "*.10.0.0.1", "*.example.com:443", "example.com:0", "example.com:65535", "example.com:65536",
        "example.com:08", "[::1]:8080", "[2001:db8::1]:443", "a:b:c", "10.0.0.0/8", "fd00::/8",
        "10.0.0.1/8", "::ffff:10.0.0.0/104", "0.0.0.0/0", "192.0.2.7", "10.0.0.0/08",
        "*.example.com\x00a.b.example.com", "*.example.com\x00example.com",
        "example.com\x00EXAMPLE.com.", "10.0.0.1\x000xa.0.0.1", "*.xn--bcher-kva.example\x00a.bücher.example",
    ]
    for i, t in enumerate(texts):
        write("host", "%02d" % i, t.encode())


# ---- HTTP proxy requests (src/egress/http_rules.cc, inject.cc) ----

PLACEHOLDER = "SPACE_PLACEHOLDER_0123456789abcdef"


def http_request():
    import base64
    basic = base64.b64encode(("x-access-token:" + PLACEHOLDER).encode()).decode()
    heads = {
        "absolute": "GET http://example.com/path?q=1 HTTP/1.1\r\nHost: example.com\r\n"
                    "User-Agent: curl/8\r\nAccept: */*\r\nProxy-Connection: Keep-Alive\r\n\r\n",
        "absolute-port-query": "GET HTTP://Example.COM:8080?x=1 HTTP/1.1\r\n\r\n",
        "absolute-no-path": "HEAD http://[::1]:8000 HTTP/1.0\r\n\r\n",
        "absolute-userinfo": "GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n",
        "absolute-backslash": "GET http://example.com\\@evil.com/ HTTP/1.1\r\n\r\n",
        "https-target": "GET https://example.com/ HTTP/1.1\r\n\r\n",
        "origin-form": "GET /index.html HTTP/1.1\r\nHost: example.com:80\r\n\r\n",
        "connect": "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
        "connection-list": "GET http://a.example/ HTTP/1.1\r\nConnection: keep-alive, X-Foo ,,"
                           "\tx-bar\r\nX-Foo: 1\r\nx-bar: 2\r\nX-Keep: 3\r\nKeep-Alive: 5\r\n"
                           "TE: trailers\r\nTrailer: X\r\nUpgrade: h2c\r\n\r\n",
        "connection-names-framing": "POST http://a.example/ HTTP/1.1\r\nConnection: Content-Length,"
                                    " Host\r\nContent-Length: 3\r\nHost: a.example\r\n\r\n",
        "websocket": "GET /chat HTTP/1.1\r\nHost: ws.example\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
        "websocket-post": "POST /chat HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        "cl-and-te": "POST http://a.example/ HTTP/1.1\r\nContent-Length: 5\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n",
        "two-cl": "POST http://a.example/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        "te-gzip": "POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "te-chunked-case": "POST http://a.example/ HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n",
        "two-hosts": "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
        "basic": "GET https://api.github.com/repos HTTP/1.1\r\nHost: api.github.com\r\n"
                 "Authorization: Basic " + basic + "\r\n\r\n",
        "basic-tab": "GET / HTTP/1.1\r\nAuthorization: basic\t" + basic + "  \r\n\r\n",
        "basic-not-base64": "GET / HTTP/1.1\r\nAuthorization: Basic " + PLACEHOLDER + "\r\n\r\n",
        "bearer": "GET / HTTP/1.1\r\nAuthorization: Bearer " + PLACEHOLDER + "\r\n"
                  "X-Api-Key: k=" + PLACEHOLDER + PLACEHOLDER + "\r\n\r\n",
        "query": "GET /v1?key=" + PLACEHOLDER + "&token=" + PLACEHOLDER + "&other=" + PLACEHOLDER +
                 "&token=x HTTP/1.1\r\n\r\n",
        "query-empty-params": "GET /v1?&&token=" + PLACEHOLDER + "& HTTP/1.1\r\n\r\n",
        "obs-fold": "GET / HTTP/1.1\r\nX-A: one\r\n two\r\n\r\n",
        "http10": "GET http://a.example/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        "no-colon-space": "GET / HTTP/1.1\r\nHost:a.example\r\nX:\r\n\r\n",
        "bad-version": "GET / HTTP/2.0\r\n\r\n",
        "long-field": "GET / HTTP/1.1\r\nX-Long: " + "a" * 3000 + "\r\n\r\n",
    }
    for name, data in heads.items():
        write("http_request", name, data.encode())


# ---- QMP (src/runtime/qemu/qmp.cc) ----

def qmp():
    greeting = {"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7},
                                    "package": "Debian 1:7.2+dfsg-7"}, "capabilities": ["oob"]}}
    ok = {"return": {}}
    status = {"return": {"status": "running", "singlestep": False, "running": True}}
    event = {"timestamp": {"seconds": 1700000000, "microseconds": 1}, "event": "STOP"}
    err = {"error": {"class": "GenericError", "desc": "No file descriptor supplied via SCM_RIGHTS"}}

    def lines(*msgs):
        return b"".join((m if isinstance(m, bytes) else json.dumps(m).encode()) + b"\n"
                        for m in msgs)

    seeds = {
        "greeting-only": b"\x00" + lines(greeting, ok),
        "status": b"\x01" + lines(greeting, ok, status),
        "events": b"\x03" + lines(greeting, event, ok, event, event, status, ok, event, status),
        "error": b"\x02" + lines(greeting, ok, err, err),
        "error-bare": b"\x01" + lines(greeting, ok, {"error": {}}),
        "error-not-object": b"\x01" + lines(greeting, ok, {"error": "no"}),
        "neither": b"\x01" + lines(greeting, ok, {"id": 1}),
        "return-types": b"\x03" + lines(greeting, ok, {"return": [1, "x"]}, {"return": None},
                                        {"return": 1.5e300}),
        "no-greeting": b"\x01" + lines(ok, status),
        "greeting-refused": b"\x00" + lines(greeting, err),
        "not-json": b"\x01" + lines(greeting, ok, b"{\"return\": ", status),
        "array-line": b"\x01" + lines(greeting, ok, b"[1,2]", status),
        "blank-crlf": b"\x01" + b"\r\n \t\n" + lines(greeting).replace(b"\n", b"\r\n") +
                      b"\n\n" + lines(ok, status),
        "no-newline": b"\x01" + lines(greeting, ok) + json.dumps(status).encode(),
        "migration": b"\x01" + lines(greeting, ok, {"return": {
            "status": "completed", "total-time": 1234, "ram": {"transferred": 1 << 30,
                                                               "remaining": 0}}}),
        "utf8": b"\x01" + lines(greeting, ok, b'{"return": "\\u00e9\xc3\xa9\\ud800"}'),
    }
    for name, data in seeds.items():
        write("qmp", name, data)


# ---- Firecracker API answers (src/runtime/firecracker/api.cc) ----

def http_response(status, body=b"", reason="", headers=None, close=False):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    h = "HTTP/1.1 %d %s\r\nServer: Firecracker API\r\nConnection: %s\r\n" % (
        status, reason, "close" if close else "keep-alive")
    if headers is None:
        headers = {}
        if body:
            headers["Content-Type"] = "application/json"
            headers["Content-Length"] = str(len(body))
    for k, v in headers.items():
        h += "%s: %s\r\n" % (k, v)
    return h.encode() + b"\r\n" + body


def firecracker_api():
    # First byte: the three calls (api.cc): 0 describe, 1 version, 2 balloon statistics,
    # 3 machine-config, 4 GET /vm/config, 5 pause, 6 drive, 7 snapshot/create.
    def calls(a, b, c):
        return bytes([a | b << 3 | ((c - a) & 3) << 6])

    info = {"id": "sb_0123", "state": "Running", "vmm_version": "1.16.0", "app_name": "Firecracker"}
    stats = {"target_pages": 0, "actual_pages": 0, "target_mib": 0, "actual_mib": 0,
             "swap_in": 0, "free_memory": 123456789, "total_memory": 268435456}
    no_content = http_response(204)
    fault = {"fault_message": "The requested operation is not supported after starting the "
                              "microVM."}
    seeds = {
        "describe-version": calls(0, 1, 0) + http_response(200, info) +
                            http_response(200, {"firecracker_version": "1.16.0"}) +
                            http_response(200, info),
        "puts": calls(3, 5, 3) + no_content + no_content + no_content,
        "balloon": calls(2, 4, 2) + http_response(200, stats) + http_response(200, {
            "machine-config": {"vcpu_count": 2, "mem_size_mib": 256, "smt": False}}) +
                   http_response(200, [1]),
        "refused-400": calls(6, 6, 6) + http_response(400, fault, "Bad Request") +
                       http_response(400, {"fault_message": "line\r\nInjected: \x1b[31mred\t"
                                                            "\u00e9" + "x" * 400}) +
                       http_response(500, b"not json \x00\xff"),
        "refused-close": calls(5, 5, 5) + http_response(400, fault, close=True) + no_content,
        "describe-missing": calls(0, 0, 0) + http_response(200, {"id": 1, "state": "Running"}) +
                            http_response(200, []) + http_response(200, info),
        "not-json": calls(4, 4, 4) + http_response(200, b"{\"a\":") + no_content,
        "chunked": calls(1, 1, 1) + b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5\r\n{\"fir\r\n1c\r\necracker_version\":\"1.16.0\"}\r\n0\r\n\r\n" +
                   no_content,
        "body-too-large": calls(4, 4, 4) + b"HTTP/1.1 200 OK\r\nContent-Length: 1048577\r\n\r\n{}",
        "truncated-body": calls(4, 3, 4) + b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}",
        "bad-status-line": calls(3, 3, 3) + b"HTTP/1.1 2000 OK\r\n\r\n" + no_content,
        "interim-100": calls(3, 3, 3) + b"HTTP/1.1 100 Continue\r\n\r\n" + no_content + no_content,
        "http10-close": calls(1, 1, 1) + b"HTTP/1.0 200 OK\r\n\r\n{\"firecracker_version\":\"x\"}",
        "empty": calls(7, 0, 7),
        "long-header": calls(0, 0, 0) + b"HTTP/1.1 200 OK\r\nX: " + b"a" * 17000 + b"\r\n\r\n",
    }
    for name, data in seeds.items():
        write("firecracker_api", name, data)


# ---- snapshot manifests (src/snapshot/manifest.cc) ----

def snapshot_manifest():
    import hashlib
    import hmac
    chunk = "ab" * 32
    root = {"path": "", "type": "dir", "mode": 0o755, "uid": 0, "gid": 0, "mtime_ns": 1}

    def entry(path, etype, **kw):
        e = {"path": path, "type": etype, "mode": kw.pop("mode", 0o644), "uid": 1000,
             "gid": 1000, "mtime_ns": 1700000000000000000}
        if etype == "file":
            e.update({"size": 5, "chunks": [chunk], "ctime_ns": 5, "ino": 12, "dev": 2049})
        e.update(kw)
        return e

    def manifest(entries, **kw):
        m = {"format": 1, "id": "snap_fuzz", "parent": "", "labels": {"sandbox": "sb_1"},
             "created_at": 1700000000.25, "logical_bytes": 5, "new_bytes": 3,
             "reused_files": 0, "skipped": [], "entries": entries}
        m.update(kw)
        return json.dumps(m, sort_keys=True, separators=(",", ":")).encode()

    full = manifest([root, entry("etc", "dir", mode=0o755), entry("etc/a", "file"),
                     entry("etc/b", "file", size=5, chunks=[], link="etc/a"),
                     entry("etc/fifo", "other", mode=0o10600),
                     entry("etc/l", "symlink", target="../x"),
                     entry("etc/w", "whiteout", mode=0),
                     entry("etc/x", "dir", mode=0o755,
                           xattrs=[["trusted.overlay.opaque", "79"], ["user.k", ""]]),
                     entry({"hex": "ff61"}, "file", size=0, chunks=[])],
                    parent="snap_parent", skipped=["dev/sda: device node", {"hex": "c328"}])
    bodies = {
        "full": full,
        "minimal": manifest([root]),
        "no-root": manifest([entry("a", "file")]),
        "out-of-order": manifest([root, entry("b", "file"), entry("a", "file")]),
        "orphan": manifest([root, entry("a/b", "file")]),
        "dotdot": manifest([root, entry("..", "dir"), entry("../x", "file")]),
        "hardlink-forward": manifest([root, entry("a", "file", chunks=[], link="b"),
                                      entry("b", "file")]),
        "file-bits": manifest([root, entry("a", "file", mode=0o100644)]),
        "size-overflow": manifest([root, entry("a", "file", size=(1 << 64) - 1)]),
        "bad-chunk": manifest([root, entry("a", "file", chunks=["AB" * 32])]),
        "xattr-namespace": manifest([root, entry("a", "dir", xattrs=[["security.selinux", "00"]])]),
        "types": manifest([root, entry("a", "file", mode=-1, uid="0", mtime_ns=1.5)]),
        "wrong-id": manifest([root], id="snap_other"),
        "format-2": manifest([root], format=2),
        "labels": manifest([root], labels={"a": 1}),
        "created-odd": manifest([root], created_at=-0.0),
        "deep": b'{"entries":[' + b"[" * 40 + b"]" * 40 + b"]}",
    }
    key = b"k" * 32
    for name, body in bodies.items():
        write("snapshot_manifest", "unsealed-" + name, b"\x00" + body)
        write("snapshot_manifest", "json-" + name, b"\x02" + body)
    mac = hmac.new(key, full, hashlib.sha256).hexdigest().encode()
    sealed = b'{"mac":"' + mac + b'","manifest":' + full + b"}"
    write("snapshot_manifest", "sealed", b"\x01" + sealed)
    write("snapshot_manifest", "sealed-bad-mac", b"\x01" + sealed.replace(mac[:4], b"0000", 1))
    write("snapshot_manifest", "sealed-truncated", b"\x01" + sealed[:-1])


def e2b_wire():
    def env(flags, payload):
        return struct.pack(">BI", flags, len(payload)) + payload
    start = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "ls"]}}).encode()
    write("e2b_wire", "envelope", b"\x00" + env(0, start))
    write("e2b_wire", "envelope-stream", b"\x00" + env(0, b'{"event":{"start":{"pid":7}}}') +
          env(0, b'{"event":{"data":{"stdout":"aGkK"}}}') + env(2, b"{}"))
    write("e2b_wire", "envelope-compressed", b"\x00" + env(1, b"x"))
    write("e2b_wire", "envelope-huge", b"\x00" + struct.pack(">BI", 0, 0x7fffffff) + b"{}")
    write("e2b_wire", "envelope-short", b"\x00" + env(0, start)[:-3])
    for i, host in enumerate(["49983-sb_0123abcdef01.sandbox.example.test",
                              "49999-sb_0123abcdef01.sandbox.example.test:8080",
                              "0-sb_x.sandbox.example.test", "70000-sb_x.sandbox.example.test",
                              "8080-.sandbox.example.test", "sandbox.example.test",
                              "1-a-b.sandbox.example.testx", "[::1]:49983"]):
        write("e2b_wire", "host-%02d" % i, b"\x01" + host.encode())
    write("e2b_wire", "key", b"\x02e2b_" + b"0123456789ab" + b"cd" * 32)
    write("e2b_wire", "key-upper", b"\x02e2b_" + b"0123456789AB" + b"cd" * 32)
    write("e2b_wire", "key-short", b"\x02e2b_0123")
    form = (b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a%22b.txt\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\nhello\r\n"
            b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/c\"\r\n"
            b"\r\n\r\n--XyZ--\r\n")
    write("e2b_wire", "multipart", b"\x03XyZ\n" + form)
    write("e2b_wire", "multipart-unclosed", b"\x03XyZ\n" + form[:60])
    write("e2b_wire", "multipart-no-headers-end", b"\x03XyZ\n--XyZ\r\nContent-Disposition: x")
    write("e2b_wire", "multipart-empty-boundary", b"\x03\n--\r\n\r\n")


def egress_wire():
    # The first byte is the number of fds with the message; the rest is the packet
    # (src/egress/wire.h), as spaced and space-egress write them.
    def msg(name, body, fds=0):
        write("egress_wire", name, bytes([fds]) + json.dumps(body, separators=(",", ":")).encode())
    policy = {"profile": "default", "max_connections": 64,
              "egress": {"allow": [{"host": "api.example.test", "ports": [443],
                                    "methods": ["GET"], "paths": ["/v1/"]},
                                   {"host": "*.example.test"}],
                         "allow_networks": ["127.0.0.2/32"], "max_connections": 64,
                         "bandwidth": 65536},
              "narrow": ["git.example.test:443"]}
    secret_def = {"hosts": ["api.example.test"], "profiles": [], "env_var": "API_TOKEN",
                  "placeholder_in": ["authorization", "query:token"], "header": "Authorization",
                  "format": "Bearer {}"}
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    key = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
    msg("init", {"op": "init", "options": {"resolve": {"api.example.test": "127.0.0.2:8443"},
                                           "upstream_ca_pems": [pem],
                                           "connect_timeout_ms": 10000,
                                           "idle_timeout_ms": 300000},
                 "secrets": {"API_TOKEN": secret_def}})
    attach = {"op": "attach", "seq": 1, "id": "sb_0123abcdef01", "policy": policy,
              "grants": [{"name": "API_TOKEN", "placeholder": "space-placeholder-API_TOKEN-1f2e"}],
              "ca_key": key, "ca_cert": pem, "kinds": [0, 1, 2, 3],
              "known": {"API_TOKEN": ["tok-1"]}}
    msg("attach", attach, 4)
    msg("attach-restart", dict(attach, seq=0), 4)
    msg("attach-fds-differ", attach, 3)
    msg("attach-bad-kind", dict(attach, kinds=[0, 1, 2, 9]), 4)
    msg("detach", {"op": "detach", "seq": 2, "id": "sb_0123abcdef01"})
    msg("stats", {"op": "stats", "seq": 3})
    msg("secret-value", {"op": "secret", "seq": 4, "value": "s3cret"})
    msg("secret-error", {"op": "secret", "seq": 5,
                         "error": {"code": 4, "message": "secret X is not granted to sb_1"}})
    msg("ready", {"op": "ready", "pid": 4242})
    msg("ready-error", {"op": "ready", "error": {"code": 12, "message": "no CA"}})
    msg("reply", {"op": "reply", "seq": 1, "ok": True})
    msg("reply-stats", {"op": "reply", "seq": 3, "ok": True, "connections": 5, "requests": 4,
                        "denied": 1, "bytes_up": 100, "bytes_down": 2000, "credential_uses": 1,
                        "dns_queries": 7, "active_connections": 2, "sandboxes": 1})
    msg("reply-error", {"op": "reply", "seq": 1, "error": {"code": 0, "message": "attach: bad"}})
    msg("audit", {"op": "audit", "id": "sb_0123abcdef01", "kind": "egress.denied",
                  "data": {"host": "evil.test", "port": 443, "reason": "not allowed"}})
    msg("secret-request", {"op": "secret", "seq": 1, "id": "sb_0123abcdef01",
                           "name": "API_TOKEN"})
    # What a compromised process sends (tests/integration/test_egress_process.py).
    msg("op-number", {"op": 1})
    msg("audit-mistyped", {"op": "audit", "id": 5, "kind": ["egress.denied"],
                           "data": {"forged": 4}})
    msg("audit-forged-kind", {"op": "audit", "id": "sb_1", "kind": "sandbox.destroy",
                              "data": {"forged": 1}})
    msg("reply-seq-string", {"op": "reply", "seq": "x", "error": "y"})
    msg("reply-seq-huge", {"op": "reply", "seq": 2 ** 64 - 1, "ok": True})
    msg("reply-with-fd", {"op": "reply", "seq": 1, "ok": True}, 1)


def tar_bytes(entries, fmt=tarfile.PAX_FORMAT):
    """A tar stream of (name, kind, data_or_link, mode) entries, kind one of f d l h c b p;
    names are written as given (hostile ones too)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for name, kind, arg, mode in entries:
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.mtime = 1700000000
            info.type = {"f": tarfile.REGTYPE, "d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE,
                         "h": tarfile.LNKTYPE, "c": tarfile.CHRTYPE, "b": tarfile.BLKTYPE,
                         "p": tarfile.FIFOTYPE}[kind]
            data = None
            if kind == "f":
                data = arg.encode() if isinstance(arg, str) else arg
                info.size = len(data)
            elif kind in "lh":
                info.linkname = arg
            elif kind in "cb":
                info.devmajor, info.devminor = 1, 3
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def zstd_bytes(data):
    if not shutil.which("zstd"):
        return None
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True,
                          check=True).stdout


def layer_tar():
    # First byte: bit 0 keep_setuid, bit 1 two layers (the rest split in the middle; tarfile pads
    # each small stream to 10240 bytes, so two small tars split evenly).
    basic = tar_bytes([("etc/", "d", None, 0o755), ("etc/hosts", "f", "127.0.0.1 h\n", 0o644),
                       ("usr/bin/tool", "f", "#!/bin/sh\n", 0o755),
                       ("usr/bin/alias", "l", "tool", 0o777),
                       ("usr/bin/hard", "h", "usr/bin/tool", 0o755),
                       ("run/fifo", "p", None, 0o600), ("./abs", "l", "/etc/hosts", 0o777)])
    seeds = {
        "basic": b"\x00" + basic,
        "basic-gzip": b"\x00" + gzip.compress(basic, mtime=0),
        "basic-gnu": b"\x00" + tar_bytes([("a" * 150 + "/b" * 60, "f", "long", 0o644),
                                          ("l", "l", "t" * 200, 0o777)], tarfile.GNU_FORMAT),
        "pax-long": b"\x00" + tar_bytes([("d/" + "/".join(["n" * 100] * 4), "f", "x", 0o644),
                                         ("d/" + "n" * 300, "f", "x", 0o644)]),
        "utf8-names": b"\x00" + tar_bytes([("caf\u00e9/na\u00efve.txt", "f", "ok", 0o644),
                                           ("\u6587\u4ef6", "l", "caf\u00e9", 0o777)]),
        "traversal": b"\x00" + tar_bytes([("../escape", "f", "x", 0o644)]),
        "traversal-inner": b"\x00" + tar_bytes([("a/../../escape", "f", "x", 0o644)]),
        "absolute": b"\x00" + tar_bytes([("/etc/passwd", "f", "x", 0o644)]),
        "symlink-escape": b"\x00" + tar_bytes([("evil", "l", "/", 0o777),
                                               ("evil/tmp/pwned", "f", "x", 0o644)]),
        "symlink-escape-relative": b"\x00" + tar_bytes([("up", "l", "../..", 0o777),
                                                        ("up/pwned", "f", "x", 0o644)]),
        "symlink-then-file": b"\x00" + tar_bytes([("f", "l", "/etc/passwd", 0o777),
                                                  ("f", "f", "replaced", 0o644)]),
        "hardlink-outside": b"\x00" + tar_bytes([("h", "h", "../../etc/passwd", 0o644)]),
        "hardlink-missing": b"\x00" + tar_bytes([("h", "h", "nothing", 0o644)]),
        "hardlink-through-symlink": b"\x00" + tar_bytes([("s", "l", "/etc", 0o777),
                                                         ("h", "h", "s/passwd", 0o644)]),
        "device": b"\x00" + tar_bytes([("dev/null", "c", None, 0o666),
                                       ("dev/sda", "b", None, 0o660)]),
        "setuid": b"\x00" + tar_bytes([("su", "f", "x", 0o4755), ("sg", "f", "x", 0o2755),
                                       ("shared/", "d", None, 0o2775)]),
        "setuid-kept": b"\x01" + tar_bytes([("su", "f", "x", 0o4755)]),
        "whiteouts": b"\x02" + tar_bytes([("a/x", "f", "x", 0o644), ("a/y", "f", "y", 0o644),
                                          ("b/z", "f", "z", 0o644)]) +
                     tar_bytes([("a/.wh.x", "f", "", 0o644), (".wh.b", "f", "", 0o644),
                                ("a/.wh..wh..opq", "f", "", 0o644), ("a/new", "f", "n", 0o644)]),
        "escape-across-layers": b"\x02" + tar_bytes([("out", "l", "/tmp", 0o777)]) +
                                tar_bytes([("out/pwned", "f", "x", 0o644),
                                           ("out/.wh..wh..opq", "f", "", 0o644)]),
        "replace-types": b"\x02" + tar_bytes([("x/inner", "f", "i", 0o644),
                                              ("y", "f", "file", 0o644)]) +
                         tar_bytes([("x", "f", "now a file", 0o644), ("y/", "d", None, 0o755)]),
        "gzip-bomb": b"\x00" + gzip.compress(tar_bytes([("zeros", "f", bytes(16 << 20), 0o644)]),
                                             mtime=0),
        "gzip-truncated": b"\x00" + gzip.compress(basic, mtime=0)[:200],
        "garbage": b"\x00" + b"not a tar at all" * 40,
        "empty": b"\x00",
    }
    z = zstd_bytes(basic)
    if z:
        seeds["basic-zstd"] = b"\x00" + z
    for name, data in seeds.items():
        write("layer_tar", name, data)


def oci_manifest():
    # First byte % 6: 0 config blob, 1 index, 2 OCI manifest, 3 Docker manifest,
    # 4 docker-save manifest.json, 5 stored ImageConfig.
    def d(obj):
        return json.dumps(obj, separators=(",", ":")).encode()
    h = lambda s: "sha256:" + hashlib.sha256(s.encode()).hexdigest()
    oci_m = "application/vnd.oci.image.manifest.v1+json"
    oci_i = "application/vnd.oci.image.index.v1+json"
    layer_t = "application/vnd.oci.image.layer.v1.tar+gzip"
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": ["PATH=/usr/bin", "LANG=C.UTF-8"], "WorkingDir": "/work",
                         "User": "1000:1000", "Entrypoint": ["/bin/sh", "-c"], "Cmd": ["echo hi"],
                         "Labels": {"org.example.team": "agents"}},
              "rootfs": {"type": "layers", "diff_ids": [h("a"), h("b")]}}
    desc = lambda mt, s, **kw: dict({"mediaType": mt, "digest": h(s), "size": len(s)}, **kw)
    manifest = {"schemaVersion": 2, "mediaType": oci_m,
                "config": desc("application/vnd.oci.image.config.v1+json", "c"),
                "layers": [desc(layer_t, "a"), desc(layer_t, "b")]}
    index = {"schemaVersion": 2, "mediaType": oci_i, "manifests": [
        desc(oci_m, "arm", platform={"os": "linux", "architecture": "arm64", "variant": "v8"}),
        desc("application/vnd.in-toto+json", "att",
             platform={"os": "unknown", "architecture": "unknown"}),
        desc(oci_m, "amd", platform={"os": "linux", "architecture": "amd64"}),
        desc(oci_i, "nested")]}
    seeds = {
        "config": b"\x00" + d(config),
        "config-minimal": b"\x00" + d({"rootfs": {"type": "layers", "diff_ids": []}}),
        "config-nulls": b"\x00" + d({"config": {"Env": None, "Cmd": None, "Labels": None},
                                     "rootfs": {"type": "layers", "diff_ids": []}}),
        "config-bad-types": b"\x00" + d({"config": {"Env": "A=1", "Cmd": [1], "User": 5},
                                         "rootfs": {"type": "layers", "diff_ids": ["md5:0"]}}),
        "config-nul": b"\x00" + b'{"config":{"Env":["A=b\\u0000c"]},'
                      b'"rootfs":{"type":"layers","diff_ids":[]}}',
        "index": b"\x01" + d(index),
        "index-unplatformed": b"\x01" + d({"schemaVersion": 2, "manifests": [desc(oci_m, "x")]}),
        "index-two-unplatformed": b"\x01" + d({"manifests": [desc(oci_m, "x"), desc(oci_m, "y")]}),
        "index-bad-size": b"\x01" + d({"manifests": [dict(desc(oci_m, "x"), size=-1)]}),
        "index-deep": b"\x01" + b"[" * 64 + b"]" * 64,
        "manifest": b"\x02" + d(manifest),
        "manifest-docker": b"\x03" + d(dict(
            manifest, mediaType="application/vnd.docker.distribution.manifest.v2+json",
            config=desc("application/vnd.docker.container.image.v1+json", "c"),
            layers=[desc("application/vnd.docker.image.rootfs.diff.tar.gzip", "a")])),
        "manifest-unknown-layer": b"\x02" + d(dict(manifest, layers=[desc("text/plain", "a")])),
        "manifest-wrong-type": b"\x02" + d(dict(manifest, mediaType=oci_i)),
        "docker-save": b"\x04" + d([{"Config": h("c")[7:] + ".json", "RepoTags": ["a:latest"],
                                      "Layers": ["l1/layer.tar", "./blobs/sha256/" + h("a")[7:]]}]),
        "docker-save-traversal": b"\x04" + d([{"Config": "c.json",
                                                "Layers": ["../../etc/shadow", "/abs"]}]),
        "docker-save-two": b"\x04" + d([{"Config": "a.json", "Layers": []},
                                         {"Config": "b.json", "Layers": []}]),
        "stored": b"\x05" + d({"env": ["A=1"], "working_dir": "/w", "user": "u",
                                "entrypoint": ["e"], "cmd": ["c"], "labels": {"k": "v"}}),
        "stored-bad": b"\x05" + d({"env": [["x"]], "working_dir": "rel"}),
    }
    for name, data in seeds.items():
        write("oci_manifest", name, data)


def dockerfile():
    """Dockerfiles as image::parse_dockerfile reads them: an agent team's typical files (apt,
    pip, npm), every form and substitution, and each refusal (multi-stage, heredocs, ADD of a
    URL or an archive, RUN --mount, unknown instructions)."""
    seeds = {
        'args-scope': b'\x01ARG TAG=1 IMG=base\nFROM --platform=$BUILDPLATFORM ${IMG}:${TAG}\nARG TAG\nARG TARGETARCH\nARG C=$TAG-c\nRUN echo $TAG $C $TARGETARCH\nENV TAG=env\nRUN echo $TAG\n',
        'escape-backtick': b'\x00# escape=`\nFROM img\nRUN dir C:\\ `\n    && echo `$HOME\nENV P=C:\\path Q="a`"b"\nCOPY a`  b C:/dest/\n',
        'ignored': b'\x02FROM img\nEXPOSE 80/tcp\nVOLUME ["/data"]\nSTOPSIGNAL SIGTERM\nHEALTHCHECK --interval=5s CMD curl -f http://localhost/\nMAINTAINER someone\nENTRYPOINT ["/app"]\n',
        'json-edge': b'\x00FROM img\nRUN [ -f /x ] && echo\nCMD [not json\nENTRYPOINT []\nCMD ["a\\u00e9", "\\ud83d\\ude00"]\nCOPY ["with space", "./x/../y/"]\nRUN [[[[[[[[[[[["a"]]]]]]]]]]]]\n',
        'limits-small': b'\x04FROM img\nENV A=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nENV B=$A$A$A$A$A$A\nRUN true\nRUN true\nRUN true\nRUN true\nRUN true\nRUN true\nRUN true\nRUN true\nRUN true\nRUN true\n',
        'nasty-continuations': b'\x04FROM img\r\nRUN a \\\r\n# c\r\n\r\n   b \\  \t\r\n\\\r\n\\\r\nRUN last \\',
        'refuse-add-archive': b'\x00FROM img\nADD vendor.tar.gz /opt/vendor/\n',
        'refuse-add-url': b'\x00FROM img\nADD https://example.com/tool.tar.gz /opt/\nADD git@github.com:o/r.git /src\n',
        'refuse-heredoc': b'\x00FROM img\nRUN <<EOF\necho hi\nEOF\nCOPY <<-"X" /etc/x\n',
        'refuse-misc': b'\x00FROM img\nONBUILD RUN make\nRUN ["a", 1]\nSHELL /bin/bash\nFROBNICATE\n',
        'refuse-multistage': b'\x00FROM golang:1.22 AS build\nRUN go build -o /out/app .\nFROM debian\nCOPY --from=build /out/app /app\n',
        'refuse-run-mount': b'\x00FROM img\nRUN --mount=type=cache,target=/root/.cache pip install x\n',
        'substitutions': b'\x03FROM img\nARG X\nENV SET=v EMPTY=\nENV a=${SET:-x} b=${EMPTY:-x} c=${UNSET:+y} d=${SET:+y} e=\\$SET f=\'${SET}\' g="\\$SET" h=${X:-${SET:-z}} i=$ j=a$-b\nENV k="${UNSET:?must be set}"\n',
        'typical-apt': b'\x01FROM debian:bookworm\nARG A\nARG DEBIAN_FRONTEND=noninteractive\nRUN apt-get update \\\n # install the tools\n && apt-get install -y --no-install-recommends git curl ca-certificates \\\n\n && rm -rf /var/lib/apt/lists/*\nSHELL ["/bin/bash", "-o", "pipefail", "-c"]\nRUN echo "$A" | tee /a\nENTRYPOINT /usr/bin/env bash\n',
        'typical-node': b'\x02FROM node:20\nWORKDIR /usr/src/app\nCOPY package*.json ./\nRUN npm ci --omit=dev\nCOPY . .\nEXPOSE 3000\nENV NODE_ENV=production PORT=3000\nCMD node server.js\n',
        'typical-python': b'\x03# syntax=docker/dockerfile:1\nARG PY=3.12\nFROM python:${PY}-slim\nENV PIP_NO_CACHE_DIR=1 \\\n    APP_HOME=/app\nWORKDIR $APP_HOME\nCOPY requirements.txt .\nRUN pip install -r requirements.txt && \\\n    rm -rf /root/.cache\nCOPY --chown=agent:agent --chmod=0755 src/ ./src/\nUSER agent\nLABEL org.opencontainers.image.title="agent env" version=1\nENTRYPOINT ["python3", "-m", "agent"]\nCMD ["--serve"]\n',
    }
    for name, data in seeds.items():
        write("dockerfile", name, data)


if __name__ == "__main__":
    frame_decoder()
    api_request()
    agent_request()
    agent_conn()
    upper_listing()
    exec_report()
    tls_hello()
    dns()
    host()
    http_request()
    qmp()
    firecracker_api()
    snapshot_manifest()
    e2b_wire()
    egress_wire()
    layer_tar()
    oci_manifest()
    dockerfile()
