"""Starves the API of threads and fds: opens 600 idle connections (more than max_connections)
plus 100 that send half a request header and stall, then checks that /v1/health still
answers from a fresh connection within 5 s, and that the daemon's fd count returns to where
it was once the connections close.
Blocked by: max_connections (512, excess ones get 503), header idle timeouts, a thread per
connection that ends with it.
space-attack: sandbox=host timeout=90
"""
import os
import socket
import time

from hostside import SOCKET, api, escaped, finish, note

pid = api("GET", "/v1/health").json["pid"]


def fds():
    return len(os.listdir("/proc/%d/fd" % pid))


base = fds()
conns = []
refused = 0
for i in range(700):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(SOCKET)
        if i >= 600:
            s.sendall(b"GET /v1/health HTTP/1.1\r\nHo")
        conns.append(s)
    except OSError:
        refused += 1
        s.close()
time.sleep(0.5)
t0 = time.monotonic()
try:
    r = api("GET", "/v1/health", timeout=5)
    status = r.status
except OSError as e:
    status = str(e)
took = time.monotonic() - t0
note("700 idle connections (%d refused at connect); health from a fresh one: %s in %.2fs" % (
    refused, status, took))
if status not in (200, 503):
    escaped("health check failed under the flood: %s" % status)
for s in conns:
    s.close()
deadline = time.monotonic() + 20
while fds() > base + 5 and time.monotonic() < deadline:
    time.sleep(0.2)
if fds() > base + 5:
    escaped("daemon fds %d -> %d after the flood closed" % (base, fds()))
r = api("GET", "/v1/health", timeout=10)
if r.status != 200:
    escaped("health %d after the flood" % r.status)
note("fds back to %d (from %d)" % (fds(), base))
finish()
