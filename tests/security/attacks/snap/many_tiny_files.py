"""Fills the workspace with 200000 tiny files (a few bytes each, in 200 directories) and asks
for snapshots — a full one, then an incremental one on top — to make spaced, which walks the
layer and builds the manifest in its own memory (outside every cgroup of the sandbox), grow
without bound or stall.
Blocked by: manifests are built and sealed entry by entry within the store's bounds
(max_entries); spaced's RSS may grow by at most 64 MiB during the attempt (verify=daemon_rss),
each snapshot answers (or is refused with an error object) within 120 s, the daemon stays
healthy and the sandbox is thawed afterwards.
space-attack: sandbox=host-fresh opts=--memory=2G,--disk=2G timeout=300 verify=daemon_rss
"""
import time

from hostside import SANDBOX, api, daemon_healthy, escaped, finish, note, sh, sh_ok

N, DIRS = 200000, 200
t0 = time.monotonic()
sh_ok(SANDBOX, r"""python3 - <<'EOF'
import os
for d in range(%d):
    os.makedirs('/root/tiny/d%%03d' %% d)
for i in range(%d):
    with open('/root/tiny/d%%03d/f%%06d' %% (i %% %d, i), 'w') as f:
        f.write('%%d\n' %% (i %% 5000))
EOF""" % (DIRS, N, DIRS), timeout=200)
note("%d files made in %.0fs" % (N, time.monotonic() - t0))

snaps = []
for kind in ("full", "incremental"):
    if kind == "incremental":
        sh_ok(SANDBOX, "echo changed > /root/tiny/d000/f000000; touch /root/tiny/new")
    t0 = time.monotonic()
    try:
        r = api("POST", "/v1/sandboxes/%s/snapshots" % SANDBOX, {}, timeout=120)
    except OSError as e:
        escaped("%s snapshot of %d files: no answer in 120 s (%s)" % (kind, N, e))
        break
    dt = time.monotonic() - t0
    if r.status == 201:
        snaps.append(r.json["id"])
        note("%s snapshot: %d files, %d new bytes, %d reused, in %.1fs" % (
            kind, r.json.get("files", -1), r.json.get("new_bytes", -1),
            r.json.get("reused_files", -1), dt))
    elif isinstance(r.json, dict) and "error" in r.json and r.status < 500:
        note("%s snapshot refused in %.1fs: %d %s" % (kind, dt, r.status,
                                                     r.json["error"].get("message", "")[:120]))
    else:
        escaped("%s snapshot answered %d without an error object: %r" % (kind, r.status,
                                                                          r.body[:200]))
    if not daemon_healthy():
        escaped("spaced died or hangs after the %s snapshot" % kind)
        finish()
rc, out, err = sh(SANDBOX, "echo thawed", timeout=30)
if out != b"thawed\n":
    escaped("the sandbox does not run after the snapshots: %r %r" % (out, err))
for s in snaps:
    api("DELETE", "/v1/snapshots/%s" % s)
finish()
