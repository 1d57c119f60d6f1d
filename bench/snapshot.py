"""Snapshot benchmark: what snapshots, rollbacks and restores cost against the size of a
sandbox's workspace and how much of it changed. Called by bench/run.sh after the others; also
runs alone:

  BUILD_DIR=build-release python3 bench/snapshot.py --out bench/results/snapshot-DATE.md \
      [--sizes 64,256,1024] [--rates 0,1,10] [--runs 3] [--big-runs 1]

Against a private spaced (temporary socket and state directory), for each workspace size S (MiB)
and each run: a fresh sandbox (--disk and --memory sized for S: the writable layer is a tmpfs)
gets S MiB of incompressible files (8 MiB each, from /dev/urandom inside the sandbox), then

  full snapshot       POST /v1/sandboxes/{id}/snapshots of the new workspace (no parent)
  for each change rate R% (0 = nothing changed):
    (after a rollback) a snapshot of the unchanged workspace: the rollback gave the layer new
                      inodes, so it reads every file again; reported as its own row
    change            R% of S rewritten in place (1 MiB blocks spread over the files), untimed
    snapshot          the next snapshot (incremental: unchanged files are not re-read)
    restore           POST /v1/snapshots/{that}/restore: a new sandbox holding its files,
                      until the 201 (the sandbox runs); destroyed again, untimed
    rollback          POST /v1/sandboxes/{id}/rollback to the full snapshot (includes the
                      snapshot of the state before it that a rollback keeps)

Times are wall-clock seconds of the API call from this process (no CLI start); bytes are the
snapshot's own figures (logical_bytes, new_bytes: compressed bytes it added to the store,
reused_files) and the store's size on disk. Medians over --runs runs (--big-runs for 1 GiB and
more). Random bytes do not compress: a workspace of source code stores far less. Everything it
starts is stopped by pid and the temporary directory removed.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench as base  # noqa: E402  (git_rev, build_type, cpu_model, UnixHTTPConnection)
from egress import remove_work  # noqa: E402

MiB = 1 << 20
FILE_MIB = 8

# Run inside the sandbox: rewrite `changed` bytes of the files in /root/ws in 1 MiB blocks
# spread over the files (argv: changed bytes).
CHANGE_PY = r"""
import os, sys
changed = int(sys.argv[1])
files = sorted(os.listdir('/root/ws'))
blocks = -(-changed // (1 << 20))
left = changed
for k in range(blocks):
    n = min(1 << 20, left)
    left -= n
    name = files[(k * len(files)) // blocks]
    with open('/root/ws/' + name, 'r+b') as f:
        f.seek((1 << 20) * (1 + k % 6))
        f.write(os.urandom(n))
"""


def median(xs):
    s = sorted(xs)
    if not s:
        return float("nan")
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


def mib(n):
    return "%.1f MiB" % (n / MiB)


class Bench:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.build = os.path.abspath(os.environ.get("BUILD_DIR", "build-release"))
        self.space = os.path.join(self.build, "space")
        self.sock = os.path.join(work, "space.sock")
        self.state = os.path.join(work, "state")
        self.env = dict(os.environ, SPACE_SOCKET=self.sock)
        self.daemon = None
        self.rows = {}    # (size, label) -> {"snapshot": [...], "new": [...], ...}

    def call(self, method, path, body=None, ok=(200, 201, 202, 204)):
        conn = base.UnixHTTPConnection(self.sock, timeout=900)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json"} if data else {})
            r = conn.getresponse()
            raw = r.read()
        finally:
            conn.close()
        if r.status not in ok:
            raise RuntimeError("%s %s: %d %s" % (method, path, r.status, raw[:400]))
        return json.loads(raw) if raw else None

    def timed(self, method, path, body=None):
        t0 = time.perf_counter()
        out = self.call(method, path, body)
        return time.perf_counter() - t0, out

    def sh(self, sid, script, timeout=600):
        p = subprocess.run([self.space, "exec", sid, "--", "sh", "-c", script], env=self.env,
                           capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise RuntimeError("exec in %s failed (rc %d): %s" % (sid, p.returncode,
                                                                  p.stderr[-500:]))
        return p.stdout

    def start(self):
        os.makedirs(self.state)
        log = open(os.path.join(self.work, "spaced.log"), "wb")
        self.daemon = subprocess.Popen(
            [os.path.join(self.build, "spaced"), "--state-dir", self.state, "--socket",
             self.sock], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.call("GET", "/v1/health")
                return
            except (OSError, RuntimeError):
                if self.daemon.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("spaced did not start; see %s" % log.name)
                time.sleep(0.05)

    def stop(self):
        try:
            if self.daemon is not None and self.daemon.poll() is None:
                for sb in self.call("GET", "/v1/sandboxes").get("sandboxes", []):
                    self.call("DELETE", "/v1/sandboxes/%s?force=true" % sb["id"])
        except Exception as e:  # noqa: BLE001 - best effort; stopping below is not
            print("snapshot bench: cleanup: %s" % e, file=sys.stderr)
        finally:
            if self.daemon is not None and self.daemon.poll() is None:
                self.daemon.terminate()
                try:
                    self.daemon.wait(30)
                except subprocess.TimeoutExpired:
                    self.daemon.kill()
                    self.daemon.wait()

    def store_bytes(self):
        total = 0
        for dp, _, fns in os.walk(os.path.join(self.state, "snapshots")):
            for n in fns:
                try:
                    total += os.lstat(os.path.join(dp, n)).st_blocks * 512
                except OSError:
                    pass
        return total

    def add(self, size, label, **vals):
        row = self.rows.setdefault((size, label), {})
        for k, v in vals.items():
            row.setdefault(k, []).append(v)

    def run_size(self, size_mib, runs):
        files = max(1, size_mib // FILE_MIB)
        mem = "%dM" % max(512, size_mib * 2 + 256)
        disk = "%dM" % (size_mib * 2 + 256)
        for run in range(runs):
            print("snapshot bench: %d MiB, run %d/%d" % (size_mib, run + 1, runs),
                  file=sys.stderr)
            sb = self.call("POST", "/v1/sandboxes", {"memory": mem, "disk": disk})
            sid = sb["id"]
            snaps = []
            store0 = self.store_bytes()
            try:
                t0 = time.perf_counter()
                self.sh(sid, "mkdir /root/ws && for i in $(seq 1 %d); do head -c %d /dev/urandom "
                             "> /root/ws/f$i; done" % (files, FILE_MIB * MiB))
                self.add(size_mib, "fill", seconds=time.perf_counter() - t0)
                dt, full = self.timed("POST", "/v1/sandboxes/%s/snapshots" % sid, {})
                snaps.append(full["id"])
                self.add(size_mib, "full", snapshot=dt, logical=full["logical_bytes"],
                         new=full["new_bytes"], reused=full["reused_files"],
                         files=full["files"])
                rolled_back = False
                for rate in self.args.rates:
                    if rolled_back:
                        # A rollback gives the layer new inodes: the first snapshot after it
                        # reads every file again (its chunks dedup). It is the parent of the
                        # timed one below, so that one is incremental like the first rate's.
                        dt, again = self.timed("POST", "/v1/sandboxes/%s/snapshots" % sid, {})
                        snaps.append(again["id"])
                        self.add(size_mib, "after-rollback", snapshot=dt,
                                 logical=again["logical_bytes"], new=again["new_bytes"],
                                 reused=again["reused_files"], files=again["files"])
                    changed = int(size_mib * MiB * rate / 100)
                    if changed:
                        self.sh(sid, "python3 - %d <<'EOF'\n%s\nEOF" % (changed, CHANGE_PY))
                    dt, inc = self.timed("POST", "/v1/sandboxes/%s/snapshots" % sid, {})
                    snaps.append(inc["id"])
                    label = "%g%%" % rate
                    dt_restore, new = self.timed("POST", "/v1/snapshots/%s/restore" % inc["id"],
                                                 {})
                    self.call("DELETE", "/v1/sandboxes/%s" % new["id"])
                    dt_rb, rb = self.timed("POST", "/v1/sandboxes/%s/rollback" % sid,
                                           {"snapshot": full["id"]})
                    rolled_back = True
                    saved = (rb.get("rollback") or {}).get("saved_as")
                    if saved:
                        snaps.append(saved)
                    self.add(size_mib, label, snapshot=dt, logical=inc["logical_bytes"],
                             new=inc["new_bytes"], reused=inc["reused_files"],
                             files=inc["files"], restore=dt_restore, rollback=dt_rb,
                             changed=changed)
                self.add(size_mib, "store", grown=self.store_bytes() - store0)
            finally:
                self.call("DELETE", "/v1/sandboxes/%s" % sid, ok=(204, 404, 409))
                for s in snaps:
                    self.call("DELETE", "/v1/snapshots/%s" % s, ok=(204, 404))


def report(b, load0, load1, started):
    a = b.args
    lines = [
        "# SPACE snapshot benchmark, %s" % started.strftime("%Y-%m-%d %H:%M"),
        "",
        "- commit: `%s`, build: `%s` (CMAKE_BUILD_TYPE=%s)" % (
            base.git_rev(), os.path.basename(b.build), base.build_type(b.build)),
        "- host: %s, %d CPUs (%s), kernel %s" % (platform.node(), os.cpu_count(),
                                                base.cpu_model(), platform.release()),
        "- load average at the start: %.2f %.2f %.2f, at the end: %.2f %.2f %.2f "
        "(other work on the host skews results)" % (load0 + load1),
        "- workspace: S MiB of /dev/urandom bytes in %d MiB files in a fresh sandbox "
        "(incompressible: new bytes are the worst case); change R%%: R%% of S rewritten in "
        "place in 1 MiB blocks spread over the files" % FILE_MIB,
        "- times: wall-clock seconds of the API call (Unix socket, from Python), medians over "
        "n runs; `snapshot` after the change is incremental (parent = the previous one); "
        "`restore` = a new sandbox from it, until it runs; `rollback` = back to the full "
        "snapshot in place (includes the snapshot of the state before it)",
        "- bytes: the snapshot's new_bytes (compressed bytes it added to the store) and "
        "reused_files (files taken from the parent unread). Chunks average 1 MiB "
        "(content-defined), so a rewritten 1 MiB block stores the 2-3 chunks it touches; "
        "`store growth per run` = the store's size on disk after a run (full snapshot, one "
        "incremental per rate, the snapshots rollbacks keep) minus before it",
        "- `0%, first after a rollback`: a rollback gives the layer new inodes, so the next "
        "snapshot reads every file again (nothing new is stored); it is the parent of the "
        "timed incremental snapshot of every rate after the first",
        "",
        "| workspace | change | n | snapshot s | new bytes | reused files | restore s | "
        "rollback s | MiB/s (full) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in a.sizes:
        for label in ["full"] + ["%g%%" % r for r in a.rates] + ["after-rollback"]:
            row = b.rows.get((size, label))
            if not row:
                continue
            snap = median(row["snapshot"])
            name = {"full": "full (first)",
                    "after-rollback": "0%, first after a rollback"}.get(label, label)
            lines.append("| %d MiB | %s | %d | %.2f | %s | %d | %s | %s | %s |" % (
                size, name, len(row["snapshot"]), snap,
                mib(median(row["new"])), median(row["reused"]),
                "%.2f" % median(row["restore"]) if "restore" in row else "",
                "%.2f" % median(row["rollback"]) if "rollback" in row else "",
                "%.0f" % (median(row["logical"]) / MiB / snap) if label == "full" else ""))
    lines += ["", "| workspace | fill s (untimed above) | files | store growth per run |",
              "|---:|---:|---:|---:|"]
    for size in a.sizes:
        fill, full = b.rows.get((size, "fill")), b.rows.get((size, "full"))
        store = b.rows.get((size, "store"))
        if fill and full and store:
            lines.append("| %d MiB | %.1f | %d | %s |" % (size, median(fill["seconds"]),
                                                        median(full["files"]),
                                                        mib(median(store["grown"]))))
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", help="scratch directory (default: a new one under /tmp)")
    ap.add_argument("--sizes", default=os.environ.get("BENCH_SNAPSHOT_SIZES", "64,256,1024"),
                    help="workspace sizes in MiB (default 64,256,1024)")
    ap.add_argument("--rates", default="0,1,10", help="change rates in percent")
    ap.add_argument("--runs", type=int, default=3, help="runs per size below 1 GiB")
    ap.add_argument("--big-runs", type=int, default=1, help="runs per size of 1 GiB and more")
    args = ap.parse_args()
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    args.rates = [float(x) for x in args.rates.split(",") if x]
    work = args.work or "/tmp/space-snapbench.%d" % os.getpid()
    os.makedirs(work, exist_ok=False)
    started, load0 = datetime.datetime.now(), os.getloadavg()
    b = Bench(args, work)
    try:
        b.start()
        for size in args.sizes:
            b.run_size(size, args.runs if size < 1024 else args.big_runs)
    finally:
        b.stop()
        remove_work(work)
    text = report(b, load0, os.getloadavg(), started)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
