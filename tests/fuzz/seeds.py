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
    PING, PONG, CONNECT, RESET = range(1, 17)
AGENT_STREAM = 0x80000000  # egress streams the agent opens


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


if __name__ == "__main__":
    frame_decoder()
    api_request()
    agent_request()
    agent_conn()
