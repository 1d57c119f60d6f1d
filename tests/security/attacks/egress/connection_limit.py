"""Exhausts the gateway's threads and file descriptors from one sandbox: holds 48 idle
connections to the proxy (the suite's profile allows 32 at a time), then fills the transparent
TLS listener and tries the other listeners, then opens and drops 400 connections in a burst,
then checks that, once everything is closed, the gateway serves this sandbox again at once.
Blocked by: a per-sandbox limit on concurrent gateway connections across all its listeners
(max_connections): the extra ones are answered 429 (or closed, on the TLS listener) at accept,
and a connection's slot is freed when it ends. The runner checks the daemon stays healthy.
space-attack: sandbox=fresh timeout=60
"""
import socket
import time

LIMIT = 32
escapes, notes = [], []


def state(s):
    """'open' (accepted, waiting for us), '429', 'closed', or the first bytes."""
    s.setblocking(False)
    try:
        d = s.recv(200)
    except BlockingIOError:
        return "open"
    except OSError:
        return "closed"
    if not d:
        return "closed"
    return "429" if d.startswith(b"HTTP/1.1 429") else repr(d[:30])


def request(port=3128):
    """The status line of one request, or "" when the connection was refused or reset before
    an answer (as a refusal may be: the guest's relay resets what it cannot carry)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET http://plain.example.test/echo HTTP/1.1\r\nHost: plain.example.test\r\n"
                  b"Connection: close\r\n\r\n" if port == 3128 else
                  b"GET /echo HTTP/1.1\r\nHost: plain.example.test\r\nConnection: close\r\n\r\n")
    except OSError:
        return ""
    s.settimeout(10)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    s.close()
    return out.split(b"\r\n", 1)[0].decode("latin-1")


def connect(port):
    """A connection, or None when it was reset or refused at once (as the guest's relay may do
    with a connection over the sandbox's bound: a refusal too)."""
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return None


held = [connect(3128) for _ in range(48)]
time.sleep(1)
states = [state(s) if s is not None else "closed" for s in held]
held = [s for s in held if s is not None]
opened = states.count("open")
refused = states.count("429") + states.count("closed")
if opened > LIMIT:
    escapes.append("%d of 48 idle proxy connections were accepted (limit %d)" % (opened, LIMIT))
elif refused != 48 - opened:
    escapes.append("unexpected answers: %s" % sorted(set(states)))
else:
    notes.append("48 idle: %d held, %d refused" % (opened, refused))
for port in (80, 443, 3128):
    got = request(port)
    if "429" not in got and got:
        escapes.append("a new request on :%d while full was answered %r" % (port, got))
for s in held:
    s.close()
time.sleep(0.5)

# The TLS listener counts too: fill it, then knock on the others.
held = [s for s in (connect(443) for _ in range(LIMIT + 4)) if s is not None]
time.sleep(1)
extra = [state(s) for s in held].count("open")
got = request(80)
if "429" not in got and got:
    escapes.append("transparent :80 answered %r with %d TLS connections held" % (got, extra))
else:
    notes.append("TLS listener full: :80 answered %s" % (got or "nothing"))
for s in held:
    s.close()

# Churn: many short connections must not leak slots.
for _ in range(400):
    try:
        socket.create_connection(("127.0.0.1", 3128), timeout=5).close()
    except OSError:
        pass
start = time.monotonic()
deadline, got = start + 15, ""
while time.monotonic() < deadline:
    got = request(3128)
    if got.startswith("HTTP/1.1 200"):
        break
    time.sleep(0.2)
if not got.startswith("HTTP/1.1 200"):
    print("ERROR: 15 s after closing everything the gateway still answers %r" % got)
    raise SystemExit(2)
notes.append("served again %.1f s after the churn" % (time.monotonic() - start))
if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: " + "; ".join(notes))
