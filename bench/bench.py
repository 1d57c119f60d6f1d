"""SPACE benchmark driver (Python 3 stdlib only), called by bench/run.sh.

Measures, against a private daemon on a temporary socket and state directory:
  floor        fork + execvp + waitpid of /bin/true, timed by bench/spawn_timer.c
  run          `space run -- true` end to end (new sandbox, exec, destroy), same timer
  exec (CLI)   `space exec ID -- true` in one long-lived sandbox, same timer
  exec (API)   POST /v1/sandboxes/{id}/exec {"cmd":["true"]} to the exit event, over one
               Unix-socket connection per request from this process (no client fork)
  create+rm    POST /v1/sandboxes then DELETE, over the API
and writes a markdown table to the --out file. Peer sandboxes (bwrap, crun, runsc) come later:
add them in PEERS below.
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def request(sock, method, path, body=None):
    conn = UnixHTTPConnection(sock)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json"} if data else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def percentile(sorted_ms, p):
    if not sorted_ms:
        return float("nan")
    k = (len(sorted_ms) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (sorted_ms[hi] - sorted_ms[lo]) * (k - lo)


def summarize(name, how, samples_ms):
    s = sorted(samples_ms)
    return {"name": name, "how": how, "n": len(s), "p50": percentile(s, 50),
            "p90": percentile(s, 90), "p99": percentile(s, 99),
            "mean": sum(s) / len(s) if s else float("nan")}


def timed_spawns(timer, n, argv, env):
    """Runs spawn_timer; returns latencies in ms. Fails loudly if any run failed."""
    p = subprocess.run([timer, str(n)] + argv, capture_output=True, text=True, env=env,
                       timeout=600)
    if p.returncode != 0:
        sys.exit("bench: %s failed: %s" % (" ".join(argv), p.stderr.strip()[-2000:]))
    return [float(x) / 1000 for x in p.stdout.split()]


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def git_rev():
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except OSError:
        return "unknown"


def build_type(build):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_BUILD_TYPE:"):
                    return line.split("=", 1)[1].strip() or "unset"
    except OSError:
        pass
    return "unknown"


# Peers to compare against, each a (name, argv) measured like `space run -- true`. Filled in by a
# later issue (DESIGN.md §6 lists what works on the build machine: bwrap, crun in a private
# mount namespace, runsc). Example: ("bwrap --unshare-all", ["bwrap", "--unshare-all",
#   "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"]).
PEERS = []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--timer", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    build = os.path.abspath(os.environ.get("BUILD_DIR", "build-release"))
    n = int(os.environ.get("BENCH_N", "100"))
    space, spaced = os.path.join(build, "space"), os.path.join(build, "spaced")
    sock = os.path.join(args.work, "space.sock")
    state = os.path.join(args.work, "state")
    env = dict(os.environ, SPACE_SOCKET=sock)
    load0 = os.getloadavg()

    log = open(os.path.join(args.work, "spaced.log"), "wb")
    daemon = subprocess.Popen([spaced, "--state-dir", state, "--socket", sock],
                              stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    rows = []
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

        print("bench: warming up", file=sys.stderr)
        timed_spawns(args.timer, 5, [space, "run", "--", "true"], env)

        print("bench: floor (fork+exec+wait /bin/true) x%d" % n, file=sys.stderr)
        rows.append(summarize("floor: fork+exec+wait `/bin/true`",
                              "C timer (bench/spawn_timer.c)",
                              timed_spawns(args.timer, n, ["/bin/true"], env)))

        print("bench: space run -- true x%d" % n, file=sys.stderr)
        rows.append(summarize("`space run -- true` (create, exec, destroy)",
                              "C timer spawning the CLI",
                              timed_spawns(args.timer, n, [space, "run", "--", "true"], env)))

        status, body = request(sock, "POST", "/v1/sandboxes", {})
        if status != 201:
            sys.exit("bench: create failed: %d %s" % (status, body[:300]))
        sid = json.loads(body)["id"]
        try:
            print("bench: space exec ID -- true x%d" % n, file=sys.stderr)
            rows.append(summarize("`space exec ID -- true` (one sandbox)",
                                  "C timer spawning the CLI",
                                  timed_spawns(args.timer, n, [space, "exec", sid, "--", "true"],
                                               env)))
            print("bench: API exec x%d" % n, file=sys.stderr)
            samples = []
            for _ in range(n):
                t0 = time.perf_counter()
                status, body = request(sock, "POST", "/v1/sandboxes/%s/exec" % sid,
                                       {"cmd": ["true"]})
                samples.append((time.perf_counter() - t0) * 1000)
                last = json.loads(body.splitlines()[-1]) if status == 200 else {}
                if last.get("type") != "exit" or last.get("exit_code") != 0:
                    sys.exit("bench: API exec failed: %d %s" % (status, body[-300:]))
            rows.append(summarize("API exec of `true` to its exit event (one sandbox)",
                                  "Python http.client, no client fork", samples))
        finally:
            request(sock, "DELETE", "/v1/sandboxes/%s" % sid)

        print("bench: API create+delete x%d" % n, file=sys.stderr)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            status, body = request(sock, "POST", "/v1/sandboxes", {})
            if status != 201:
                sys.exit("bench: create failed: %d %s" % (status, body[:300]))
            request(sock, "DELETE", "/v1/sandboxes/%s" % json.loads(body)["id"])
            samples.append((time.perf_counter() - t0) * 1000)
        rows.append(summarize("API create + delete", "Python http.client", samples))

        for name, argv in PEERS:
            rows.append(summarize(name, "C timer", timed_spawns(args.timer, n, argv, env)))
    finally:
        # Leave nothing: destroy what is left, then stop our daemon (by pid) whatever happened.
        try:
            status, body = request(sock, "GET", "/v1/sandboxes")
            listed = json.loads(body) if status == 200 else {}
            for sb in listed.get("sandboxes", []) if isinstance(listed, dict) else listed:
                request(sock, "DELETE", "/v1/sandboxes/%s?force=true" % sb["id"])
        except Exception as e:  # noqa: BLE001 - cleanup is best effort, stopping is not
            print("bench: cleanup: %s" % e, file=sys.stderr)
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()

    floor = rows[0]["p50"]
    lines = [
        "# SPACE benchmark, %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "",
        "- commit: `%s`, build: `%s` (CMAKE_BUILD_TYPE=%s)" % (git_rev(), os.path.basename(build),
                                                              build_type(build)),
        "- host: %s, %d CPUs (%s), kernel %s" % (platform.node(), os.cpu_count(), cpu_model(),
                                                  platform.release()),
        "- load average at the start: %.2f %.2f %.2f (other work on the host skews results)" %
        load0,
        "- N = %d per row; latencies in milliseconds; \"x floor\" is p50 over the floor's p50" % n,
        "",
        "| what | measured by | N | p50 | p90 | p99 | mean | x floor |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.1f |" % (
            r["name"], r["how"], r["n"], r["p50"], r["p90"], r["p99"], r["mean"],
            r["p50"] / floor))
    lines += [
        "",
        "## Peers",
        "",
        "Not measured yet (a later issue): bwrap `--unshare-all`, crun, runsc. They go in "
        "`PEERS` in bench/bench.py and appear as rows above.",
        "",
    ]
    text = "\n".join(lines)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    print("bench: wrote %s" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
