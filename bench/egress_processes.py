#!/usr/bin/env python3
"""What a gateway process per sandbox costs (docs/egress.md, "One process, or one per
sandbox"): two private daemons side by side, one with `gateway.sandboxes_per_process` 0 (one
space-egress for every sandbox, the default) and one with 1, creates alternated between them
so that both see the same machine. Rows: POST /v1/sandboxes to its 201 answer on the cold path
(no pool) and from a warm pool that is full before each create (each sandbox deleted after,
untimed); the mean of the create step "gateway attach" from /metrics; and the memory of the
per-sandbox daemon's space-egress processes while it holds --idle idle sandboxes (smaps_rollup:
RSS, PSS, private).

  python3 bench/egress_processes.py --work /tmp/x --out bench/results/egress-processes-DATE.md
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "security"))

import bench as base  # noqa: E402
from posture import gateway_pids  # noqa: E402

MODES = (0, 1)
POOL = 4


def attach_step(text):
    total = base.metric(text, "space_sandbox_create_step_seconds_sum", step="gateway attach")
    count = base.metric(text, "space_sandbox_create_step_count", step="gateway attach")
    return (total or 0.0), (count or 0)


def smaps(pid):
    vals = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            k, _, rest = line.partition(":")
            if k in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                vals[k] = int(rest.split()[0])
    return vals


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=int(os.environ.get("BENCH_N", "100")))
    ap.add_argument("--idle", type=int, default=16)
    args = ap.parse_args()
    build = os.environ.get("BUILD_DIR", "build-release")
    spaced = os.path.join(base.REPO, build, "spaced")
    if not os.path.exists(spaced):
        sys.exit("bench: %s is missing (make bench builds it)" % spaced)
    os.makedirs(args.work, exist_ok=True)
    daemons = {}
    logs = []
    samples, attach = {}, {}

    def settled(sock, pooled, procs):
        """Waits until the pool is full and the gateway processes are back to `procs`, so that
        each create starts from the same idle state."""
        if pooled:
            base.wait_pool_full(sock, POOL)
        deadline = time.monotonic() + 10
        while base.metric(base.metrics(sock), "space_egress_processes") != procs:
            if time.monotonic() > deadline:
                sys.exit("bench: the gateway processes did not settle to %d" % procs)
            time.sleep(0.002)

    try:
        load_start = os.getloadavg()
        # Two phases (cold, pooled), each with its two daemons alternated create by create.
        for pooled in (False, True):
            phase = {}
            for per in MODES:
                d = os.path.join(args.work, "p%d-%s" % (per, "pool" if pooled else "cold"))
                os.makedirs(d)
                cfg = {"gateway": {"sandboxes_per_process": per},
                       "pools": [{"size": POOL}] if pooled else []}
                with open(os.path.join(d, "c.json"), "w") as f:
                    json.dump(cfg, f)
                log = open(os.path.join(d, "spaced.log"), "ab")
                logs.append(log)
                sock = os.path.join(d, "s.sock")
                proc = base.start_daemon(spaced, os.path.join(d, "state"), sock, log,
                                         os.path.join(d, "c.json"))
                daemons[(pooled, per)] = phase[(pooled, per)] = (proc, sock)
            steady = {}
            for key, (_, sock) in phase.items():
                if key[0]:
                    base.wait_pool_full(sock, POOL)
                time.sleep(0.5)
                steady[key] = base.metric(base.metrics(sock), "space_egress_processes")
            before = {k: attach_step(base.metrics(s)) for k, (_, s) in phase.items()}
            for key in phase:
                samples[key] = []
            for _ in range(args.n):
                for key, (_, sock) in phase.items():
                    settled(sock, key[0], steady[key])
                    t0 = time.perf_counter()
                    status, body = base.request(sock, "POST", "/v1/sandboxes", {})
                    t1 = time.perf_counter()
                    if status != 201:
                        sys.exit("bench: create failed: %d %s" % (status, body[:300]))
                    samples[key].append((t1 - t0) * 1000)
                    base.request(sock, "DELETE", "/v1/sandboxes/%s" % json.loads(body)["id"])
            for key, (_, sock) in phase.items():
                t, c = attach_step(base.metrics(sock))
                t0, c0 = before[key]
                attach[key] = (t - t0) * 1000 / (c - c0) if c > c0 else float("nan")
            if pooled:
                continue
            # Memory: the per-sandbox cold daemon holds --idle idle sandboxes.
            proc, sock = daemons[(False, 1)]
            ids = []
            for _ in range(args.idle):
                status, body = base.request(sock, "POST", "/v1/sandboxes", {})
                if status != 201:
                    sys.exit("bench: create failed: %d %s" % (status, body[:300]))
                ids.append(json.loads(body)["id"])
            time.sleep(1)
            mem = [smaps(p) for p in gateway_pids(proc.pid)]
            for sid in ids:
                base.request(sock, "DELETE", "/v1/sandboxes/%s" % sid)
        load_end = os.getloadavg()
    finally:
        for proc, sock in daemons.values():
            base.stop_daemon(proc, sock)
        for log in logs:
            log.close()
        shutil.rmtree(args.work, ignore_errors=True)

    def row(name, key_fn):
        a, b = samples[key_fn(0)], samples[key_fn(1)]
        sa, sb = sorted(a), sorted(b)
        pa, pb = statistics.median(a), statistics.median(b)
        return ("| %s | %d | %.2f | %.2f | %.2f | %.2f | %+.2f | %.2f |" %
                (name, len(a), pa, base.percentile(sa, 90), pb, base.percentile(sb, 90),
                 pb - pa, pb / pa))

    med = {k: statistics.median([m[k] for m in mem]) for k in mem[0]} if mem else {}
    lines = [
        "# Gateway process per sandbox: cost, %s" % datetime.datetime.now().strftime(
            "%Y-%m-%d %H:%M"),
        "",
        "- commit: `%s`, build: `%s` (CMAKE_BUILD_TYPE=%s)" % (
            base.git_rev(), build, base.build_type(os.path.join(base.REPO, build))),
        "- host: %d CPUs (%s), kernel %s" % (os.cpu_count(), base.cpu_model(), os.uname().release),
        "- load average at the start: %.2f %.2f %.2f, at the end: %.2f %.2f %.2f" % (
            load_start + load_end),
        "- two private daemons at a time, `gateway.sandboxes_per_process` 0 (one space-egress "
        "for every sandbox) and 1 (one per sandbox, %d spares): first both without a pool, then "
        "both with a warm pool of %d; one create (POST /v1/sandboxes to its 201, then DELETE, "
        "untimed) on each in turn, %d rounds; before each create the daemon is idle again (its "
        "pool full, its spares started): a spare's start (about 28 ms of CPU) follows each "
        "per-sandbox create and is not in these figures" % (2, POOL, args.n),
        "- latencies in milliseconds; \"added\" is the per-sandbox p50 minus the shared p50",
        "",
        "| create | N | shared p50 | shared p90 | per-sandbox p50 | per-sandbox p90 | added "
        "| x shared |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        row("cold path (no pool)", lambda per: (False, per)),
        row("from a full warm pool", lambda per: (True, per)),
        "",
        "Create step \"gateway attach\" (mean, from /metrics, cold path): shared %.2f ms, "
        "per-sandbox %.2f ms." % (attach[(False, 0)], attach[(False, 1)]),
        "",
        "Memory of the per-sandbox daemon's %d space-egress processes with %d idle sandboxes "
        "(the spares included), median per process: RSS %d kB, PSS %d kB, private %d kB "
        "(clean %d, dirty %d). RSS counts the shared libraries each maps; PSS divides them "
        "among the processes." % (len(mem), args.idle, med.get("Rss", 0), med.get("Pss", 0),
                                   med.get("Private_Clean", 0) + med.get("Private_Dirty", 0),
                                   med.get("Private_Clean", 0), med.get("Private_Dirty", 0)),
    ]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
