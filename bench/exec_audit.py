#!/usr/bin/env python3
"""Exec auditing overhead: execs per second inside one sandbox, with exec auditing (seccomp user
notification, the default) and without (`"audit_execs": false` in the daemon's config file).

Usage: BUILD_DIR=build-release python3 bench/exec_audit.py [--execs N] [--rounds R]
Starts a private spaced per mode under a temporary directory and removes everything after.
The workload is a shell loop of N `/bin/true` execs inside the sandbox, timed end to end
(fork + exec + wait per iteration), best of R rounds.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import request  # noqa: E402  (HTTP over the Unix socket)


def run_mode(build, audit, n, rounds):
    work = tempfile.mkdtemp(prefix="space-bench-audit-")
    sock, state = os.path.join(work, "s.sock"), os.path.join(work, "state")
    cfg = os.path.join(work, "spaced.json")
    with open(cfg, "w") as f:
        json.dump({"audit_execs": audit}, f)
    log = open(os.path.join(work, "spaced.log"), "wb")
    daemon = subprocess.Popen([os.path.join(build, "spaced"), "--config", cfg, "--state-dir",
                               state, "--socket", sock], stdout=log, stderr=log,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if request(sock, "GET", "/v1/health")[0] == 200:
                    break
            except OSError:
                pass
            if daemon.poll() is not None or time.monotonic() > deadline:
                sys.exit("bench: spaced did not start; see %s" % log.name)
            time.sleep(0.05)
        status, body = request(sock, "POST", "/v1/sandboxes", {})
        if status != 201:
            sys.exit("bench: create failed: %d %s" % (status, body[:300]))
        sid = json.loads(body)["id"]
        loop = "i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done" % n
        best = None
        for _ in range(rounds):
            t0 = time.perf_counter()
            status, body = request(sock, "POST", "/v1/sandboxes/%s/exec" % sid,
                                   {"cmd": ["sh", "-c", loop]})
            dt = time.perf_counter() - t0
            last = json.loads(body.splitlines()[-1]) if status == 200 else {}
            if last.get("exit_code") != 0:
                sys.exit("bench: exec failed: %d %s" % (status, body[-300:]))
            best = dt if best is None else min(best, dt)
        logged = None
        if audit:
            status, body = request(sock, "GET", "/v1/sandboxes/%s/audit" % sid)
            logged = sum(1 for e in json.loads(body)["events"]
                         if e["kind"] == "proc.exec" and e["data"].get("argv") == ["/bin/true"])
        request(sock, "DELETE", "/v1/sandboxes/%s" % sid)
        return n / best, logged
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--execs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    build = os.path.abspath(os.environ.get("BUILD_DIR", "build-release"))
    off, _ = run_mode(build, False, a.execs, a.rounds)
    on, logged = run_mode(build, True, a.execs, a.rounds)
    print("| exec auditing | execs/s (`/bin/true` loop of %d, best of %d) |" % (a.execs, a.rounds))
    print("|---|---|")
    print("| off (`audit_execs: false`) | %.0f |" % off)
    print("| on (seccomp notify + audit log) | %.0f (%.1f%% of off; %d of %d logged per round) |"
          % (on, 100.0 * on / off, (logged or 0) // a.rounds, a.execs))


if __name__ == "__main__":
    main()
