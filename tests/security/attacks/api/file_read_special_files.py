"""Ties up the daemon with files that never end or never answer: GET of a FIFO nobody
writes, of /dev/zero (endless) with the client hanging up after 1 MiB, of /dev/urandom, of
/proc/self/mem, and of a socket. Each must fail or be abandoned without pinning a daemon
thread or growing its memory; afterwards the daemon's thread count must come back down.
Blocked by: reads of non-regular files are refused (the file API copies regular files and
directories), and an abandoned transfer stops.
space-attack: sandbox=host-fresh verify=daemon_rss timeout=90
"""
import os
import socket
import time
import urllib.parse

from hostside import SANDBOX, SOCKET, api, daemon_healthy, escaped, finish, note, sh_ok

pid = api("GET", "/v1/health").json["pid"]


def threads():
    return len(os.listdir("/proc/%d/task" % pid))


base = threads()
sh_ok(SANDBOX, "mkfifo /tmp/fifo; python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
               "s.bind('/tmp/sock')\"")
for p in ("/tmp/fifo", "/tmp/sock", "/proc/self/mem", "/dev/urandom"):
    t0 = time.monotonic()
    try:
        r = api("GET", "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, urllib.parse.quote(p)),
                timeout=15)
        what = "%d" % r.status
    except OSError as e:
        what = "client timeout (%s)" % e.__class__.__name__
    note("GET %s: %s in %.1fs" % (p, what, time.monotonic() - t0))
for p in ("/dev/zero", "/dev/urandom"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(SOCKET)
    s.sendall(b"GET /v1/sandboxes/%s/files?path=%s HTTP/1.1\r\nHost: x\r\n\r\n" %
              (SANDBOX.encode(), p.encode()))
    got = 0
    try:
        while got < (1 << 20):
            d = s.recv(65536)
            if not d:
                break
            got += len(d)
    except OSError:
        pass
    s.close()
    note("GET %s: client hung up after %d KiB" % (p, got >> 10))
deadline = time.monotonic() + 15
while threads() > base + 2 and time.monotonic() < deadline:
    time.sleep(0.2)
if threads() > base + 2:
    escaped("spaced still runs %d threads more than before (%d -> %d): abandoned transfers "
            "pin threads" % (threads() - base, base, threads()))
else:
    note("daemon threads back to %d" % threads())
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
