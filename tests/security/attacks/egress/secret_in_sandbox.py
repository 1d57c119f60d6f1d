"""Looks for the real value of API_TOKEN inside the sandbox after using it: makes requests that
get the secret injected (through the proxy and the transparent listener) and keeps a process
that made one alive, then searches every process's environment and command line, the files the
gateway installed (/etc/space: the sandbox CA and trust bundle), every file of the writable
file system (/, /tmp, /root, /dev/shm, /run; not /proc, /sys or the read-only /usr), and the
memory of its own process and of the child that used the secret (/proc/PID/mem). The secret's
value starts with a prefix the runner passes; its placeholder must be what the environment holds.
Blocked by: the secret never enters the sandbox: the environment holds only a random
placeholder, the gateway swaps it on the host side and masks the value in responses, and the
sandbox CA's private key stays with spaced.
space-attack: sandbox=fresh opts=--secret,API_TOKEN timeout=60
"""
import os
import re
import subprocess
import sys

# The value is PREFIX_<hex>; the prefix alone is in this process's environment and code.
SECRET_RE = re.compile(re.escape(os.environ["SPACE_EGRESS_SECRET_PREFIX"]).encode() +
                       rb"_[0-9a-f]{8}")
PH = os.environ.get("API_TOKEN", "")
escapes, notes = [], []
if not re.fullmatch(r"space_ph_API_TOKEN_[0-9a-f]{32}", PH):
    print("ERROR: $API_TOKEN is not a placeholder: %r" % PH[:60])
    raise SystemExit(2)

USE = r'''
import os, socket, ssl, sys, time
import requests
ph = os.environ["API_TOKEN"]
r = requests.get("https://api.example.test/echo?q=" + ph,
                 headers={"Authorization": "Bearer " + ph}, timeout=15)
t = ssl.create_default_context(cafile="/etc/space/ca-bundle.crt").wrap_socket(
    socket.create_connection(("127.0.0.1", 443)), server_hostname="api.example.test")
t.sendall(b"GET /split-echo HTTP/1.1\r\nHost: api.example.test\r\nAuthorization: Bearer %s\r\n"
          b"Connection: close\r\n\r\n" % ph.encode())
body = b""
while True:
    b = t.recv(65536)
    if not b:
        break
    body += b
keep = [r.text, r.headers, body]
sys.stdout.write("%d %d\n" % (r.status_code, body.count(b"*" * 20)))
sys.stdout.flush()
time.sleep(60)
'''
child = subprocess.Popen([sys.executable, "-c", USE], stdout=subprocess.PIPE)
line = child.stdout.readline().decode().split()
if line[:1] != ["200"] or int(line[1]) < 1:
    print("ERROR: the request that uses the secret failed: %r" % line)
    raise SystemExit(2)


def search(label, data):
    m = SECRET_RE.search(data)
    if m:
        i = m.start()
        escapes.append("%s holds the secret: %r" % (label, data[max(0, i - 20):i + 40]))
        return True
    return False


for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for f in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, f), "rb") as fh:
                search("/proc/%s/%s" % (pid, f), fh.read())
        except OSError:
            pass
files = 0
for top in ["/", "/dev/shm"]:
    for root, dirs, names in os.walk(top):
        if root == "/":
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "usr", "dev")]
        for n in names:
            p = os.path.join(root, n)
            try:
                if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > 64 << 20:
                    continue
                with open(p, "rb") as fh:
                    search(p, fh.read())
                files += 1
            except OSError:
                pass
installed = os.listdir("/etc/space") if os.path.isdir("/etc/space") else []
if [n for n in installed if "key" in n.lower()]:
    escapes.append("/etc/space holds %s" % installed)
for name in installed:
    with open("/etc/space/" + name, "rb") as fh:
        if b"PRIVATE KEY" in fh.read():
            escapes.append("/etc/space/%s holds a private key" % name)


def scan_memory(pid):
    """Searches every readable mapping of `pid`; returns bytes searched (or None if refused)."""
    total = 0
    try:
        maps = open("/proc/%d/maps" % pid).read().splitlines()
        mem = open("/proc/%d/mem" % pid, "rb", 0)
    except OSError:
        return None
    with mem:
        for m in maps:
            rng, perms = m.split()[:2]
            if "r" not in perms:
                continue
            lo, hi = (int(x, 16) for x in rng.split("-"))
            if hi - lo > 512 << 20:
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, OverflowError, ValueError):
                continue
            total += len(data)
            if search("memory of pid %d at %s" % (pid, rng), data):
                break
    return total


mine = scan_memory(os.getpid())
theirs = scan_memory(child.pid)
child.kill()
child.wait()
if escapes:
    print("ESCAPED: " + "; ".join(escapes)[:1500])
    raise SystemExit(1)
print("BLOCKED: the secret was injected upstream (masked answers seen) but is nowhere inside: "
      "environ/cmdline of every process, %d files, %s MiB of this process's memory, %s of the "
      "child's that used it; $API_TOKEN is the placeholder" %
      (files, (mine or 0) >> 20,
       "%d MiB" % (theirs >> 20) if theirs is not None else "none (refused)"))
