"""Plants files that hang a naive reader in the workspace — a FIFO with no writer, a FIFO with a
reader blocked in open(), a FIFO held open for writing, a listening Unix socket, a symlink to
a FIFO — then snapshots (the daemon opens the
layer's files on the host, and an open(O_RDONLY) of a FIFO blocks until a writer comes), rolls
back to the snapshot and restores it.
Blocked by: the store opens a regular file only after an O_PATH lstat check, with O_NONBLOCK,
and records FIFOs and sockets by type without opening them. Verified: every call answers
within 60 s, the FIFO is a FIFO again after rollback and restore, the daemon stays healthy.
space-attack: sandbox=host-fresh timeout=120
"""
import time

from hostside import SANDBOX, api, broken, daemon_healthy, escaped, finish, note, sh, sh_ok, space

sh_ok(SANDBOX, """set -e
mkdir -p /root/f
mkfifo /root/f/lonely /root/f/with-reader /root/f/held
ln -s lonely /root/f/link-to-fifo
echo data > /root/f/regular
""")
sh(SANDBOX, "cat /root/f/with-reader > /dev/null", detach=True)   # blocked in open()
sh(SANDBOX, "exec 3<>/root/f/held; sleep 1000", detach=True)      # holds it open, both ends
sh(SANDBOX, "python3 -c \"import socket,time; s=socket.socket(socket.AF_UNIX); "
            "s.bind('/root/f/sock'); s.listen(1); time.sleep(1000)\"", detach=True)
time.sleep(0.5)
CHECK = "stat -c '%n %F' /root/f/lonely /root/f/with-reader /root/f/held; cat /root/f/regular"


def timed(what, fn):
    t0 = time.monotonic()
    try:
        r = fn()
    except OSError as e:
        escaped("%s: no answer within 60 s (%s)" % (what, e))
        finish()
    dt = time.monotonic() - t0
    note("%s: %s in %.1fs" % (what, getattr(r, "status", r), dt))
    return r


r = timed("snapshot", lambda: api("POST", "/v1/sandboxes/%s/snapshots" % SANDBOX, {},
                                  timeout=60))
if r.status != 201:
    broken("snapshot failed: %r" % r)
snap = r.json["id"]
if r.json.get("skipped"):
    note("skipped: %s" % r.json["skipped"][:4])
if not daemon_healthy():
    escaped("spaced is unhealthy after the snapshot")
new = None
try:
    r = timed("restore", lambda: api("POST", "/v1/snapshots/%s/restore" % snap, {}, timeout=60))
    if r.status != 201:
        broken("restore failed: %r" % r)
    new = r.json["id"]
    r = timed("rollback", lambda: api("POST", "/v1/sandboxes/%s/rollback" % SANDBOX,
                                      {"snapshot": snap}, timeout=60))
    if r.status != 200:
        broken("rollback failed: %r" % r)
    for sid in (new, SANDBOX):
        rc, out, err = sh(sid, CHECK, timeout=30)
        text = out.decode()
        if text.count("fifo") != 3 or "data" not in text:
            escaped("%s: FIFOs or files not as snapshotted: %r %r" % (sid, text, err[-200:]))
    # A FIFO read after a restore must not be connected to anything of the source.
    rc, out, err = sh(new, "timeout 2 cat /root/f/held; echo rc=$?", timeout=30)
    note("read of the restored FIFO: %s" % out.decode().strip()[-20:])
finally:
    if new:
        space("rm", "--force", new, timeout=60)
    api("DELETE", "/v1/snapshots/%s" % snap)
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
