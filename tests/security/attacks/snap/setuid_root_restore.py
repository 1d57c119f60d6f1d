"""Makes setuid and setgid binaries as sandbox root (a copy of `id` owned by 0:0 with mode 6755,
one owned by 1000 with 4755, one by 65534), snapshots the sandbox and restores the snapshot into
another sandbox (whose uid range differs), then rolls the first back too — hoping that the
daemon, which writes the restored files on the host as host root, leaves one owned by host root
(uid 0 on the host: a setuid-root binary the host could run) or by the source's range (a file the
other sandbox's ids own).
Blocked by: restore shifts every owner from the source's range to the target's range and sets
modes after owners. Verified from the host: every entry of the new writable layer (reached
through the agent's fd 6) is owned by ids inside the sandbox's own range, and inside `stat`
shows the same owners and modes as in the source.
space-attack: sandbox=host-fresh timeout=90
"""
import os

from hostside import SANDBOX, api, broken, escaped, finish, note, sh, sh_ok, space

sh_ok(SANDBOX, """set -e
mkdir -p /root/suid
cp /usr/bin/id /root/suid/root-id && chmod 6755 /root/suid/root-id
cp /usr/bin/id /root/suid/u1000 && chown 1000:1000 /root/suid/u1000 && chmod 4755 /root/suid/u1000
cp /usr/bin/id /root/suid/nobody && chown 65534:65534 /root/suid/nobody && chmod 6755 /root/suid/nobody
mkdir /root/suid/sgid-dir && chown 0:1000 /root/suid/sgid-dir && chmod 2775 /root/suid/sgid-dir
echo x > /root/suid/sgid-dir/f
""")
STAT = "stat -c '%n %u:%g %a' /root/suid/root-id /root/suid/u1000 /root/suid/nobody " \
       "/root/suid/sgid-dir /root/suid/sgid-dir/f"
want = sh_ok(SANDBOX, STAT).decode()


def uid_range(sid):
    info = api("GET", "/v1/sandboxes/%s" % sid).json or {}
    pid = info.get("host_pid")
    if not isinstance(pid, int):
        broken("no host_pid for %s: %r" % (sid, info))
    with open("/proc/%d/uid_map" % pid) as f:
        inside, base, count = (int(x) for x in f.read().split()[:3])
    return pid, base, count


def check_layer(sid, what):
    pid, base, count = uid_range(sid)
    upper = "/proc/%d/fd/6/upper" % pid
    if not os.path.isdir(upper):
        broken("cannot reach the writable layer of %s at %s" % (sid, upper))
    n = 0
    for dp, dns, fns in os.walk(upper):
        for name in dns + fns + ([] if dp != upper else ["."]):
            p = os.path.join(dp, name)
            st = os.lstat(p)
            n += 1
            for kind, v in (("uid", st.st_uid), ("gid", st.st_gid)):
                if not base <= v < base + count:
                    bits = oct(st.st_mode & 0o7777)
                    escaped("%s (%s): %s is owned by host %s %d, outside %d..%d (mode %s)" % (
                        sid, what, os.path.relpath(p, upper), kind, v, base, base + count - 1,
                        bits))
    rc, out, _ = sh(sid, STAT)
    if out.decode() != want:
        escaped("%s (%s): owners/modes inside differ: %r, source had %r" % (
            sid, what, out.decode(), want))
    note("%s (%s): %d entries in range %d+%d" % (sid, what, n, base, count))
    return base


r = api("POST", "/v1/sandboxes/%s/snapshots" % SANDBOX, {}, timeout=60)
if r.status != 201:
    broken("snapshot failed: %r" % r)
snap = r.json["id"]
src_base = check_layer(SANDBOX, "source")
rc, out, err = space("restore", snap, timeout=120)
if rc != 0:
    broken("restore failed (rc %d): %s" % (rc, err.decode()[-300:]))
new = out.decode().strip().splitlines()[-1]
try:
    new_base = check_layer(new, "restored")
    if new_base == src_base:
        escaped("the restored sandbox shares the source's uid range %d" % src_base)
    # Run the restored setuid-root binary as an unprivileged user: root inside at most.
    rc, out, err = sh(new, "setpriv --reuid=1000 --regid=1000 --clear-groups "
                           "/root/suid/root-id -u 2>&1 || su -s /bin/sh nobody -c "
                           "'/root/suid/root-id -u' 2>&1")
    note("restored setuid binary run as 1000 says euid %r" % out.decode().strip()[-40:])
    rc, out, err = space("rollback", SANDBOX, snap, timeout=120)
    if rc != 0:
        broken("rollback failed (rc %d): %s" % (rc, err.decode()[-300:]))
    check_layer(SANDBOX, "rolled back")
finally:
    space("rm", "--force", new, timeout=60)
    api("DELETE", "/v1/snapshots/%s" % snap)
finish()
