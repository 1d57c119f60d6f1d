"""Pushes 256 MiB of stdin at an exec that never reads it (sleep), as fast as the socket
takes it, while sampling spaced's RSS. The daemon must apply back-pressure (stop reading the
client) instead of buffering what the process does not consume.
Blocked by: stdin credits between daemon and agent (the agent acknowledges bytes that entered
the pipe; the daemon keeps at most a window unacknowledged).
space-attack: sandbox=host-fresh verify=daemon_rss timeout=60
"""
import json
import socket
import threading
import time

from hostside import SANDBOX, SOCKET, api, escaped, finish, note

pid = api("GET", "/v1/health").json["pid"]


def rss():
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    return 0


head = json.dumps({"cmd": ["sleep", "30"], "stdin": True}).encode() + b"\n"
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(SOCKET)
s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Transfer-Encoding: chunked\r\n\r\n" % SANDBOX.encode())
s.sendall(b"%x\r\n%s\r\n" % (len(head), head))
sent = [0]
chunk = b"100000\r\n" + b"z" * 0x100000 + b"\r\n"


def pump():
    try:
        while sent[0] < (256 << 20):
            s.sendall(chunk)
            sent[0] += 1 << 20
    except OSError:
        pass


t = threading.Thread(target=pump, daemon=True)
base = peak = rss()
t.start()
t0 = time.monotonic()
while time.monotonic() - t0 < 4:
    peak = max(peak, rss())
    time.sleep(0.05)
accepted = sent[0]
s.shutdown(socket.SHUT_RDWR)
s.close()
t.join(5)
note("client got %d MiB of stdin accepted in 4 s; daemon RSS %d -> peak %d MiB" % (
    accepted >> 20, base >> 20, peak >> 20))
if peak - base > 48 << 20:
    escaped("spaced grew by %d MiB buffering stdin nobody reads" % ((peak - base) >> 20))
finish()
