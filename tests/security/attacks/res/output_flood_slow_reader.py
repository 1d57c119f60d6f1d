"""Floods output while the client does not read: starts an exec that writes 512 MiB through
the API, reads nothing for 4 seconds while sampling spaced's RSS, then hangs up. The daemon
must buffer at most a flow-control window, and closing the connection must kill the exec's
process tree.
Blocked by: per-stream flow control between agent and daemon, credits only for what the
client consumed, and kill-on-disconnect.
space-attack: sandbox=host-fresh verify=daemon_rss timeout=60
"""
import json
import os
import socket
import time

from hostside import SANDBOX, SOCKET, api, escaped, finish, note

pid = api("GET", "/v1/health").json["pid"]


def rss():
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    return 0


body = json.dumps({"cmd": ["sh", "-c", "head -c 536870912 /dev/zero; echo done"]}).encode()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(SOCKET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % (SANDBOX.encode(), len(body)) + body)
base = rss()
peak = base
t0 = time.monotonic()
while time.monotonic() - t0 < 4:
    peak = max(peak, rss())
    time.sleep(0.05)
s.close()
grew = peak - base
note("daemon RSS %d MiB -> peak %d MiB while the client stalled" % (base >> 20, peak >> 20))
if grew > 48 << 20:
    escaped("spaced grew by %d MiB for one stalled reader" % (grew >> 20))
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    procs = api("GET", "/v1/sandboxes/%s/processes" % SANDBOX).json
    procs = procs if isinstance(procs, list) else (procs or {}).get("processes", [])
    if not any("head" in " ".join(p.get("argv", [])) for p in procs):
        break
    time.sleep(0.2)
else:
    escaped("the flooding exec outlived its client's connection")
note("the exec died with its connection")
finish()
