"""Attacks the daemon's own walks of sandbox-controlled trees: a 20000-level deep directory
chain and a directory of 120000 entries in the writable layer, then asks for the diff (which
spaced computes itself, on the host, by walking the layer) and downloads the deep tree as a
tar. The daemon may refuse (4xx/5xx with an error object) but must not crash, hang, or run
out of fds.
Blocked by: bounded walks (entry limits), fd-per-level recursion bounded by the nofile limit
and errors instead of crashes.
space-attack: sandbox=host-fresh opts=--memory=512M timeout=120
"""
import os
import time

from hostside import SANDBOX, api, daemon_healthy, escaped, finish, note, sh_ok

sh_ok(SANDBOX, r"""python3 - <<'EOF'
import os
os.makedirs('/root/wide', exist_ok=True)
fd = os.open('/root/wide', os.O_RDONLY)
for i in range(120000):
    os.close(os.open('f%d' % i, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
os.chdir('/root')
for i in range(20000):
    os.mkdir('d')
    os.chdir('d')
open('bottom', 'w').write('x')
EOF""", timeout=120)
pid = api("GET", "/v1/health").json["pid"]
fds_before = len(os.listdir("/proc/%d/fd" % pid))
t0 = time.monotonic()
r = api("GET", "/v1/sandboxes/%s/diff" % SANDBOX, timeout=90)
note("diff: %d in %.1fs" % (r.status, time.monotonic() - t0))
if r.status >= 500 and not (isinstance(r.json, dict) and "error" in r.json):
    escaped("diff answered %d without an error object" % r.status)
if not daemon_healthy():
    escaped("spaced died or hangs after the diff")
    finish()
t0 = time.monotonic()
r = api("GET", "/v1/sandboxes/%s/files?path=/root/d" % SANDBOX, timeout=90)
note("tar of the deep tree: %d (%d bytes) in %.1fs" % (r.status, len(r.body),
                                                       time.monotonic() - t0))
if not daemon_healthy():
    escaped("spaced died or hangs after the tar download")
fds_after = len(os.listdir("/proc/%d/fd" % pid))
if fds_after > fds_before + 5:
    escaped("spaced leaked fds: %d -> %d" % (fds_before, fds_after))
finish()
