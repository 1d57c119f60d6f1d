"""Makes spaced burn host CPU for the sandbox outside every cgroup limit: the sandbox creates a
1 TiB sparse file (no memory, no disk), a client starts downloading it and hangs up after
1 MiB — what an impatient user or a crashed orchestrator does. The daemon must stop the
transfer; if it keeps draining the file from the agent, one abandoned download pins a daemon
thread and a host CPU for an hour, and a loop of them takes the host down.
Measured from the host: the daemon's thread count and its CPU time during 3 seconds after
the client left.
Blocked when: an abandoned transfer is cancelled (the daemon stops crediting and tells the
agent to drop it, or closes the stream).
space-attack: sandbox=host-fresh timeout=60
"""
import os
import socket
import time

from hostside import SANDBOX, SOCKET, api, escaped, finish, note, sh_ok

pid = api("GET", "/v1/health").json["pid"]
hz = os.sysconf("SC_CLK_TCK")


def cpu_seconds():
    fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / hz


def threads():
    return len(os.listdir("/proc/%d/task" % pid))


sh_ok(SANDBOX, "truncate -s 1T /tmp/sparse")
base_threads = threads()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(SOCKET)
s.sendall(b"GET /v1/sandboxes/%s/files?path=/tmp/sparse HTTP/1.1\r\nHost: x\r\n\r\n" %
          SANDBOX.encode())
got = 0
while got < (1 << 20):
    d = s.recv(65536)
    if not d:
        break
    got += len(d)
s.close()
time.sleep(1)
c0 = cpu_seconds()
time.sleep(3)
burned = cpu_seconds() - c0
extra = threads() - base_threads
note("client read %d KiB and left; then spaced used %.2f CPU-s in 3 s, %+d threads" % (
    got >> 10, burned, extra))
if burned > 0.5 or extra > 0:
    escaped("spaced keeps draining the abandoned 1 TiB download (%.2f CPU-s in 3 s, %+d "
            "threads): host CPU outside the sandbox's limits" % (burned, extra))
finish()
