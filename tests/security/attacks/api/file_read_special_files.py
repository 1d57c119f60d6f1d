"""Ties up the daemon with files that never end or never answer: GET of a FIFO nobody
writes, of /dev/zero and /dev/urandom (endless), of /proc/self/mem, and of a socket, directly
and through symlinks. Each must be refused at once without pinning a daemon thread or growing
its memory; afterwards the daemon's thread count must come back down. (Regular files that are
huge are res/abandoned_download_pins_daemon.)
Blocked by: reads of non-regular files are refused (the file API copies regular files and
directories), decided from a stat of the resolved path.
space-attack: sandbox=host-fresh verify=daemon_rss timeout=60
"""
import os
import time
import urllib.parse

from hostside import SANDBOX, api, daemon_healthy, escaped, finish, note, sh_ok

pid = api("GET", "/v1/health").json["pid"]


def threads():
    return len(os.listdir("/proc/%d/task" % pid))


base = threads()
sh_ok(SANDBOX, "mkfifo /tmp/fifo; python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
               "s.bind('/tmp/sock')\"")
sh_ok(SANDBOX, "ln -sfn /dev/zero /tmp/zero-link; ln -sfn /tmp/fifo /tmp/fifo-link")
for p in ("/tmp/fifo", "/tmp/sock", "/proc/self/mem", "/dev/urandom", "/dev/zero",
          "/tmp/zero-link", "/tmp/fifo-link", "/proc/self/fd/0", "/dev/stdin"):
    t0 = time.monotonic()
    try:
        r = api("GET", "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, urllib.parse.quote(p)),
                timeout=15)
        what = "%d" % r.status
        if r.status == 200:
            escaped("GET %s streamed %d bytes of a non-regular file" % (p, len(r.body)))
    except OSError as e:
        what = "no answer in 15 s (%s)" % e.__class__.__name__
        escaped("GET %s: %s" % (p, what))
    note("GET %s: %s in %.1fs" % (p, what, time.monotonic() - t0))
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
