"""Grows spaced's memory through the API server's request-body parser: after a valid request
head, a chunked body whose first chunk line never ends — 96 MiB of chunk extension
(";aaaa..."), then on a new connection 96 MiB of leading zeros in a chunk size, then a trailer
field line of 96 MiB. Each is one "line" the parser must see whole before it can act, and none
of it is body data, so no body limit applies: an unbounded read buffer holds all of it. spaced
runs outside every sandbox's cgroup, so this is the host's memory (any local client of the TCP
listener with any valid token, or of the socket, can send it). The runner samples spaced's RSS
(verify=daemon_rss: at most +64 MiB); the attempt also requires a refusal.
Blocked by: the server bounds each connection's read buffer (src/api/server.cc,
ApiServer::Options::buffer_limit, 64 KiB, as the egress gateway does): a chunk line past it is
answered 400 and the connection closed, long before 96 MiB, and the daemon's memory stays flat.
space-attack: sandbox=host timeout=120 verify=daemon_rss
"""
import os
import re
import socket
import threading
import time

from hostside import SOCKET, daemon_healthy, escaped, finish, note

MIB = 96
PID = int(os.environ.get("SPACE_DAEMON_PID", "0"))


def rss():
    try:
        with open("/proc/%d/status" % PID) as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) << 10
    except (OSError, AttributeError, ValueError):
        return 0


# A route that reads its body before anything else and can change nothing: the exec of a
# sandbox that does not exist.
HEAD = (b"POST /v1/sandboxes/sb_000000000000/exec HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
base = rss()
for what, prefix, filler in [("chunk extension", b"3;x=", b"a"), ("chunk-size zeros", b"", b"0"),
                             ("trailer line", b"0\r\nX-T: ", b"b")]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(SOCKET)
    s.settimeout(30)
    answer = []

    def reader():
        try:
            answer.append(s.recv(200))
        except OSError:
            pass

    t = threading.Thread(target=reader)
    t.start()
    block = filler * (1 << 20)
    sent, peak = 0, 0
    try:
        s.sendall(HEAD + prefix)
        for _ in range(MIB):
            s.sendall(block)
            sent += 1
            peak = max(peak, rss() - base)
            if answer:
                break
    except OSError:
        pass
    time.sleep(0.5)  # let the runner's sampler see the daemon while it holds the line
    peak = max(peak, rss() - base)
    refused_early = bool(answer)  # before the client gave up: not the answer to an EOF
    try:
        s.shutdown(socket.SHUT_WR)  # an answer still owed comes now at the latest
    except OSError:
        pass
    t.join(5)
    s.close()
    first = (answer[0] if answer else b"").split(b"\r\n", 1)[0].decode("latin-1")
    status = first.split(" ")[1] if first.startswith("HTTP/1.1 ") else ""
    note("%s: %d MiB sent, answer %s, spaced +%d MiB" % (what, sent, first or "none",
                                                         peak >> 20))
    if status.startswith("5"):
        escaped("%s: answered %s" % (what, first))
    elif not (status.startswith("4") and refused_early):
        escaped("%s: the server took %d MiB of one chunk line without refusing it (%s)" %
                (what, sent, first or "no answer"))
    if peak > (64 << 20):
        escaped("%s: spaced grew by %d MiB" % (what, peak >> 20))
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
