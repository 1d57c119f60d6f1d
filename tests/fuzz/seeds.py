#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/seed-*), a dozen
small, hand-made inputs each that reach the interesting paths. Inputs the fuzzers found that
crashed something are kept next to them as crash-* files and never regenerated here.
Usage: python3 tests/fuzz/seeds.py   (idempotent)
"""

import json
import os
import struct

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


if __name__ == "__main__":
    frame_decoder()
    api_request()
    agent_request()
    agent_conn()
    upper_listing()
    exec_report()
