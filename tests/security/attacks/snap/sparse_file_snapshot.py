"""Makes a 64 GiB sparse file in a 2 GiB workspace (`truncate -s 64G`: no block is allocated,
tmpfs allows it) and asks for a snapshot: a store that reads every byte of it hashes and chunks
64 GiB of zeros in spaced (outside every cgroup of the sandbox) while the sandbox stays frozen —
a few bytes of sandbox work buy minutes of host CPU per snapshot, and rolling snapshots repeat
it.
Blocked by: the store reads only a file's data (SEEK_DATA/SEEK_HOLE) or refuses a file larger
than its layer can hold. Verified from the host: spaced spends at most 10 s of CPU on the
snapshot, which answers (or is refused with an error object) within 60 s; the sandbox runs
afterwards.
space-attack: sandbox=host-fresh opts=--disk=2G timeout=150
"""
import time

from hostside import SANDBOX, api, daemon_healthy, escaped, finish, note, sh, sh_ok

sh_ok(SANDBOX, "truncate -s 64G /root/sparse && echo tail >> /root/sparse && "
               "du -k /root/sparse && ls -l /root/sparse")
pid = api("GET", "/v1/health").json["pid"]


def cpu_s():
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, USER_HZ = 100


c0, t0 = cpu_s(), time.monotonic()
try:
    r = api("POST", "/v1/sandboxes/%s/snapshots" % SANDBOX, {}, timeout=60)
    status = r.status
except OSError as e:
    r, status = None, "no answer (%s)" % e
dt, cpu = time.monotonic() - t0, cpu_s() - c0
note("snapshot: %s in %.1fs, spaced used %.1fs CPU" % (status, dt, cpu))
if r is None:
    escaped("a snapshot of a 64 GiB sparse file: no answer within 60 s (%.1fs CPU)" % cpu)
elif r.status == 201:
    note("logical_bytes %s, new_bytes %s" % (r.json.get("logical_bytes"), r.json.get("new_bytes")))
    api("DELETE", "/v1/snapshots/%s" % r.json["id"])
elif not (isinstance(r.json, dict) and "error" in r.json):
    escaped("the snapshot answered %d without an error object" % r.status)
if cpu > 10:
    escaped("spaced spent %.0fs of CPU on a snapshot of a 64 GiB sparse file" % cpu)
if r is None:  # let the store finish before the runner's teardown, within the timeout
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        before = cpu_s()
        time.sleep(2)
        if cpu_s() - before < 0.5:  # spaced is idle again
            break
rc, out, _ = sh(SANDBOX, "echo alive", timeout=60)
if out != b"alive\n":
    escaped("the sandbox does not run after the snapshot")
if not daemon_healthy():
    escaped("spaced is unhealthy")
finish()
