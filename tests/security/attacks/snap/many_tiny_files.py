"""Fills the workspace with 200000 tiny files (a few bytes each, in 200 directories) and asks
for snapshots — a full one, then an incremental one on top — to make spaced, which walks the
layer and builds the manifest in its own memory (outside every cgroup of the sandbox), grow
without bound or stall.
Blocked by: one snapshot is taken at a time, a tree holds at most max_entries (500k in
spaced), manifests are written and parsed entry by entry (no JSON document of the whole tree),
and the memory goes back once a snapshot is recorded. What a manifest costs in memory is
proportional to its entries (two manifests, the parent and the new one, are held during an
incremental snapshot), so the bound checked here is proportional too: spaced's RSS may grow by
at most 64 MiB + 3 KiB per file while the snapshots run (a fixed 64 MiB would need manifests
streamed to disk), and must be back within 64 MiB of where it started afterwards (nothing
kept, nothing leaked). Each snapshot answers (or is refused with an error object) within 120 s,
the daemon stays healthy and the sandbox is thawed afterwards.
space-attack: sandbox=host-fresh opts=--memory=2G,--disk=2G timeout=300
"""
import os
import sys
import time

from hostside import SANDBOX, api, daemon_healthy, escaped, finish, note, sh, sh_ok
import harness  # noqa: E402  (hostside put it on the path)

DAEMON_PID = int(os.environ["SPACE_DAEMON_PID"])

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
sampler = harness.RssSampler(DAEMON_PID, 0.05)
sampler.start()
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
peak = sampler.stop()
after = harness.vm_rss_bytes(DAEMON_PID) - sampler.start_rss
budget = (64 << 20) + 3 * 1024 * N
note("spaced's RSS: +%d MiB at most while snapshotting (budget %d MiB), +%d MiB after" % (
    peak >> 20, budget >> 20, after >> 20))
if peak > budget:
    escaped("spaced grew by %d MiB for %d files (more than 64 MiB + 3 KiB per file)" % (
        peak >> 20, N))
if after > 64 << 20:
    escaped("spaced kept %d MiB after the snapshots were recorded" % (after >> 20))
rc, out, err = sh(SANDBOX, "echo thawed", timeout=30)
if out != b"thawed\n":
    escaped("the sandbox does not run after the snapshots: %r %r" % (out, err))
for s in snaps:
    api("DELETE", "/v1/snapshots/%s" % s)
finish()
