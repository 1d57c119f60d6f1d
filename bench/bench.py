"""SPACE benchmark driver (Python 3 stdlib only), called by bench/run.sh.

Measures, against a private daemon on a temporary socket and state directory (N = $BENCH_N,
default 100; the issue's figure wants BENCH_N=500; C = $BENCH_CLIENTS, default 16):
  floor        fork + execvp + waitpid of /bin/true, timed by bench/spawn_timer.c
  run          `space run -- true` end to end (new sandbox, exec, destroy), same timer;
               sequential, then C spawn_timers at once (clients.py)
  exec (CLI)   `space exec ID -- true` in one long-lived sandbox, same timer
  exec (API)   POST /v1/sandboxes/{id}/exec {"cmd":["true"]} to the exit event, over one
               Unix-socket connection per request from this process (no client fork)
  create+rm    POST /v1/sandboxes then DELETE, over the API; sequential and C threads at once
               (creates + destroys per second)
  first output POST /v1/sandboxes, exec `echo hi` to its first stdout event, DELETE; sequential
               and C threads at once (clients.py)
  peers        bwrap, crun, runsc, unshare running `true` (peers.py), same timer; a peer that
               cannot run here gets a row with its error
  idle memory  host memory per idle sandbox over $BENCH_IDLE (default 16) sandboxes
               (idle_memory.py)
  create       POST /v1/sandboxes to its 201 answer: the cold path (no pool), and from a warm
               pool ($BENCH_POOL, default 16 sandboxes) that is full before each create; then
               `space run`, create+rm and first output again with the pool, each row with its
               pool hits; and where cold creation's time goes, per step, from /metrics
  default      a spaced with no config file, as users start it (the default pool; `space run`
               destroys in the background): `space run -- true` sequential and C clients, API
               create + DELETE?wait=false sequential and C threads
The first rows run against a spaced configured with `"pools": []`.
and writes a markdown table to the --out file.
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import re
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


def metrics(sock):
    status, body = request(sock, "GET", "/metrics")
    if status != 200:
        sys.exit("bench: GET /metrics: %d" % status)
    return body.decode()


def metric(text, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    total = None
    for line in text.splitlines():
        m = re.match(r"^(\w+)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total = (total or 0) + float(m.group(3))
    return total


def pool_counts(sock):
    text = metrics(sock)
    return (metric(text, "space_pool_hits_total") or 0, metric(text, "space_pool_misses_total") or 0)


def percentile(sorted_ms, p):
    if not sorted_ms:
        return float("nan")
    k = (len(sorted_ms) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (sorted_ms[hi] - sorted_ms[lo]) * (k - lo)


def summarize(name, how, samples_ms, per_s=None):
    """A row. per_s: operations per second; by default 1000 / mean (one client at a time)."""
    s = sorted(samples_ms)
    mean = sum(s) / len(s) if s else float("nan")
    return {"name": name, "how": how, "n": len(s), "p50": percentile(s, 50),
            "p90": percentile(s, 90), "p99": percentile(s, 99), "mean": mean,
            "per_s": per_s if per_s is not None else 1000 / mean}


def timed_spawns(timer, n, argv, env, wrap=()):
    """Runs spawn_timer (under the `wrap` prefix, if any: the timer itself runs inside it, so it
    is not timed); returns latencies in ms. Fails loudly if any run failed."""
    p = subprocess.run(list(wrap) + [timer, str(n)] + argv, capture_output=True, text=True,
                       env=env, timeout=1800)
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


def start_daemon(spaced, state, sock, log, config=None):
    args = [spaced, "--state-dir", state, "--socket", sock]
    if config:
        args += ["--config", config]
    daemon = subprocess.Popen(args,
                              stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            if request(sock, "GET", "/v1/health")[0] == 200:
                return daemon
        except OSError:
            pass
        if daemon.poll() is not None or time.monotonic() > deadline:
            stop_daemon(daemon, sock)
            sys.exit("bench: spaced did not start; see %s" % log.name)
        time.sleep(0.05)


def stop_daemon(daemon, sock):
    """Destroys what is left, then stops our daemon (by pid) whatever happened."""
    try:
        if daemon.poll() is None:
            status, body = request(sock, "GET", "/v1/sandboxes")
            listed = json.loads(body) if status == 200 else {}
            for sb in listed.get("sandboxes", []) if isinstance(listed, dict) else listed:
                request(sock, "DELETE", "/v1/sandboxes/%s?force=true" % sb["id"])
    except Exception as e:  # noqa: BLE001 - cleanup is best effort, stopping is not
        print("bench: cleanup: %s" % e, file=sys.stderr)
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def space_rows(args, n, clients, space, sock, env, rows):
    """Every SPACE row, in table order."""
    import clients as conc  # here, not at the top: clients.py imports this module

    def step(what):
        print("bench: %s" % what, file=sys.stderr)

    step("warming up")
    timed_spawns(args.timer, 5, [space, "run", "--", "true"], env)

    step("floor (fork+exec+wait /bin/true) x%d" % n)
    rows.append(summarize("floor: fork+exec+wait `/bin/true`", "C timer (bench/spawn_timer.c)",
                          timed_spawns(args.timer, n, ["/bin/true"], env)))

    step("space run -- true x%d" % n)
    rows.append(summarize("`space run -- true` (create, exec, destroy), no pool",
                          "C timer spawning the CLI",
                          timed_spawns(args.timer, n, [space, "run", "--", "true"], env)))

    step("space run -- true x%d, %d clients" % (n, clients))
    samples, wall = conc.cli_clients(args.timer, n, clients, [space, "run", "--", "true"], env)
    rows.append(summarize("`space run -- true`, %d clients at once" % clients,
                          "%d C timers at once" % clients, samples, len(samples) / wall))

    status, body = request(sock, "POST", "/v1/sandboxes", {})
    if status != 201:
        sys.exit("bench: create failed: %d %s" % (status, body[:300]))
    sid = json.loads(body)["id"]
    try:
        step("space exec ID -- true x%d" % n)
        rows.append(summarize("`space exec ID -- true` (one sandbox)", "C timer spawning the CLI",
                              timed_spawns(args.timer, n, [space, "exec", sid, "--", "true"],
                                           env)))
        step("API exec x%d" % n)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            status, body = request(sock, "POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
            samples.append((time.perf_counter() - t0) * 1000)
            last = json.loads(body.splitlines()[-1]) if status == 200 else {}
            if last.get("type") != "exit" or last.get("exit_code") != 0:
                sys.exit("bench: API exec failed: %d %s" % (status, body[-300:]))
        rows.append(summarize("API exec of `true` to its exit event (one sandbox)",
                              "Python http.client, no client fork", samples))
    finally:
        request(sock, "DELETE", "/v1/sandboxes/%s" % sid)

    for c in (1, clients):
        step("API create+delete x%d, %d client(s)" % (n, c))
        got, wall = conc.api_clients(sock, n, c, conc.cycle_create_delete)
        who = "Python http.client" if c == 1 else "%d Python threads, a connection each" % c
        rows.append(summarize("API create + delete" + ("" if c == 1 else ", %d clients" % c), who,
                              got["cycle"], len(got["cycle"]) / wall))
    for c in (1, clients):
        step("API create -> first output -> delete x%d, %d client(s)" % (n, c))
        got, wall = conc.api_clients(sock, n, c, conc.cycle_first_output)
        who = "Python http.client" if c == 1 else "%d Python threads, a connection each" % c
        tail = "" if c == 1 else ", %d clients" % c
        rows.append(summarize("API create -> first output of `echo hi`" + tail, who,
                              got["first_output"], len(got["cycle"]) / wall))
        rows.append(summarize("API create -> first output -> delete" + tail, who,
                              got["cycle"], len(got["cycle"]) / wall))


def wait_pool_full(sock, size, timeout=10):
    deadline = time.monotonic() + timeout
    while (metric(metrics(sock), "space_pool_ready") or 0) < size:
        if time.monotonic() > deadline:
            sys.exit("bench: the warm pool did not refill to %d within %d s" % (size, timeout))
        time.sleep(0.002)


def create_ready(sock, n, pool_size=0):
    """n times: POST /v1/sandboxes timed to its 201 answer, then DELETE (not timed). With a
    pool, waits until it is full again before each create. Returns (latencies ms, server-side
    mean ms from /metrics)."""
    path = "pool" if pool_size else "cold"
    before = metrics(sock)
    samples = []
    for _ in range(n):
        if pool_size:
            wait_pool_full(sock, pool_size)
        t0 = time.perf_counter()
        status, body = request(sock, "POST", "/v1/sandboxes", {})
        t1 = time.perf_counter()
        if status != 201:
            sys.exit("bench: create failed: %d %s" % (status, body[:300]))
        samples.append((t1 - t0) * 1000)
        request(sock, "DELETE", "/v1/sandboxes/%s" % json.loads(body)["id"])
    after = metrics(sock)

    def delta(name):
        return (metric(after, name, path=path) or 0) - (metric(before, name, path=path) or 0)
    count = delta("space_sandbox_create_path_seconds_count")
    server = delta("space_sandbox_create_path_seconds_sum") * 1000 / count if count else float("nan")
    return samples, server


def cold_steps(before, after):
    """Mean milliseconds per cold create, by step, between two /metrics texts."""
    steps = []
    for line in after.splitlines():
        m = re.match(r'^space_sandbox_create_step_seconds_sum\{step="([^"]*)"\}\s+(\S+)$', line)
        if not m:
            continue
        step = m.group(1)
        count = ((metric(after, "space_sandbox_create_step_count", step=step) or 0) -
                 (metric(before, "space_sandbox_create_step_count", step=step) or 0))
        total = float(m.group(2)) - (metric(before, "space_sandbox_create_step_seconds_sum",
                                            step=step) or 0)
        if count:
            steps.append((step, total * 1000 / count, int(count)))
    return steps


def cold_rows(n, sock, rows):
    """The cold create row; returns the steps of its creates (cold_steps)."""
    print("bench: API create -> ready, cold path x%d" % n, file=sys.stderr)
    before = metrics(sock)
    samples, server = create_ready(sock, n)
    rows.append(summarize("API create -> ready, cold path (no pool)",
                          "Python http.client; spaced's own time, mean: %.2f ms" % server, samples))
    return cold_steps(before, metrics(sock))


def with_hits(sock, what, fn):
    """fn()'s result, and `what` followed by how many of its creates were pool hits."""
    h0, m0 = pool_counts(sock)
    out = fn()
    h1, m1 = pool_counts(sock)
    return out, "%s; pool hits %d of %d" % (what, h1 - h0, (h1 - h0) + (m1 - m0))


def pool_rows(args, n, clients, space, sock, env, rows, size):
    """The rows again against a spaced with a warm pool of `size` for the default template."""
    import clients as conc

    def step(what):
        print("bench: warm pool: %s" % what, file=sys.stderr)

    wait_pool_full(sock, size, timeout=120)
    step("API create -> ready x%d" % n)
    (samples, server), how = with_hits(
        sock,
        "Python http.client, pool full before each create; spaced's own time, mean: %.2f ms",
        lambda: create_ready(sock, n, size))
    rows.append(summarize("API create -> ready, from a warm pool", how % server, samples))

    wait_pool_full(sock, size)
    step("space run -- true x%d" % n)
    samples, how = with_hits(sock, "C timer spawning the CLI", lambda: timed_spawns(
        args.timer, n, [space, "run", "--", "true"], env))
    rows.append(summarize("`space run -- true`, warm pool", how, samples))

    wait_pool_full(sock, size)
    step("space run -- true x%d, %d clients" % (n, clients))
    (samples, wall), how = with_hits(
        sock, "%d C timers at once" % clients,
        lambda: conc.cli_clients(args.timer, n, clients, [space, "run", "--", "true"], env))
    rows.append(summarize("`space run -- true`, %d clients, warm pool" % clients, how, samples,
                          len(samples) / wall))

    # (cycle, what it times, [(row name, key of the latency)])
    cycles = [(conc.cycle_create_delete, "API create+delete", [("API create + delete", "cycle")]),
              (conc.cycle_first_output, "API create -> first output -> delete",
               [("API create -> first output of `echo hi`", "first_output"),
                ("API create -> first output -> delete", "cycle")])]
    for cycle, what, names in cycles:
        for c in (1, clients):
            wait_pool_full(sock, size)
            step("%s x%d, %d client(s)" % (what, n, c))
            who = "Python http.client" if c == 1 else "%d Python threads, a connection each" % c
            (got, wall), how = with_hits(sock, who, lambda: conc.api_clients(sock, n, c, cycle))
            tail = ", warm pool" + ("" if c == 1 else ", %d clients" % c)
            for name, key in names:
                rows.append(summarize(name + tail, how, got[key], len(got["cycle"]) / wall))


def default_rows(args, n, clients, space, sock, env, rows):
    """`space run -- true` and API create + delete against a spaced started with no config file,
    as a user's is: it keeps the default warm pool (docs/pools.md) and `space run` destroys in
    the background."""
    import clients as conc

    def step(what):
        print("bench: default config: %s" % what, file=sys.stderr)

    size = int(metric(metrics(sock), "space_pool_size") or 0)
    if not size:
        sys.exit("bench: a spaced without a config file has no default pool")
    wait_pool_full(sock, size, timeout=60)
    timed_spawns(args.timer, 5, [space, "run", "--", "true"], env)

    step("space run -- true x%d" % n)
    samples, how = with_hits(sock, "C timer spawning the CLI", lambda: timed_spawns(
        args.timer, n, [space, "run", "--", "true"], env))
    rows.append(summarize("`space run -- true`, default config (pool of %d)" % size, how, samples))
    step("space run -- true x%d, %d clients" % (n, clients))
    (samples, wall), how = with_hits(
        sock, "%d C timers at once" % clients,
        lambda: conc.cli_clients(args.timer, n, clients, [space, "run", "--", "true"], env))
    rows.append(summarize("`space run -- true`, %d clients, default config" % clients, how,
                          samples, len(samples) / wall))
    for c in (1, clients):
        step("API create + delete (wait=false) x%d, %d client(s)" % (n, c))
        who = "Python http.client" if c == 1 else "%d Python threads, a connection each" % c
        (got, wall), how = with_hits(sock, who, lambda: conc.api_clients(
            sock, n, c, conc.cycle_create_delete_nowait))
        rows.append(summarize("API create + delete?wait=false, %s, default config" % (
            "1 client" if c == 1 else "%d clients" % c), how, got["cycle"],
            len(got["cycle"]) / wall))
    return size


def peer_rows(args, n, env, rows, notes):
    import peers

    for p in peers.prepare(args.work):
        if p.error:
            print("bench: peer %s cannot run here: %s" % (p.name, p.error), file=sys.stderr)
            rows.append({"name": p.name, "how": p.how, "error": p.error})
            continue
        print("bench: peer %s x%d" % (p.name, n), file=sys.stderr)
        rows.append(summarize(p.name, p.how, timed_spawns(args.timer, n, p.argv, env, p.wrap)))
        if p.wrap:
            # Say why the wrapper is there: the exact error crun gives in the host's namespace.
            error = peers.trial(p.argv, [])
            notes.append("%s runs in a private mount namespace with /sys/fs/cgroup/unified "
                         "detached there (the host's is untouched); in the host's namespace it "
                         "fails: `%s`" % (p.name, error or "(it ran)"))
        shown = [os.path.join("<work>", os.path.relpath(a, args.work))
                 if a.startswith(args.work) else a for a in p.argv]
        notes.append("%s: `%s`" % (p.name, " ".join(shown)))


def fmt_mib(b):
    return "%.2f" % (b / (1 << 20))


def memory_lines(m):
    if "error" in m:
        return ["Not measured: %s" % m["error"]]
    lines = [
        "%d idle sandboxes (default profile, nothing run in them), measured from the host "
        "before and after creating them, divided by %d; MiB per sandbox "
        "(method: bench/idle_memory.py, bench/README.md)." % (m["k"], m["k"]),
        "",
        "| what | MiB per idle sandbox |",
        "|---|---:|",
        "| **per idle sandbox: spaced PSS + new processes' PSS + cgroup file/tmpfs pages + "
        "writable layer** | "
        "**%s** |" % fmt_mib(m["total"]),
        "| spaced RSS growth | %s |" % fmt_mib(m["spaced_rss"]),
        "| spaced PSS growth | %s |" % fmt_mib(m["spaced_pss"]),
        "| new processes (%.1f per sandbox): RSS | %s |" % (m["procs"], fmt_mib(m["procs_rss"])),
        "| new processes: PSS | %s |" % fmt_mib(m["procs_pss"]),
    ]
    if m.get("cgroups_found"):
        lines += [
            "| cgroup (%s) memory usage | %s |" % (m["cgroup_version"], fmt_mib(m["cgroup_usage"])),
            "| cgroup anonymous pages | %s |" % fmt_mib(m["cgroup_anon"]),
            "| cgroup file + tmpfs pages | %s |" % fmt_mib(m["cgroup_file"]),
        ]
    lines.append("| writable layer in use (the CA and trust store spaced writes; charged to spaced's "
                 "memory cgroup) | %s |" % fmt_mib(m.get("layer", 0)))
    lines.append("| host MemAvailable drop (host-wide, noisy) | %s |" % fmt_mib(m["mem_available"]))
    if m.get("note"):
        lines += ["", m["note"]]
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--timer", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    build = os.path.abspath(os.environ.get("BUILD_DIR", "build-release"))
    n = int(os.environ.get("BENCH_N", "100"))
    clients = int(os.environ.get("BENCH_CLIENTS", "16"))
    idle = int(os.environ.get("BENCH_IDLE", "16"))
    pool_size = int(os.environ.get("BENCH_POOL", "16"))
    space, spaced = os.path.join(build, "space"), os.path.join(build, "spaced")
    sock = os.path.join(args.work, "space.sock")
    state = os.path.join(args.work, "state")
    env = dict(os.environ, SPACE_SOCKET=sock)
    load0 = os.getloadavg()
    t_start = time.monotonic()

    import idle_memory

    log = open(os.path.join(args.work, "spaced.log"), "wb")
    rows, notes = [], []
    # First without any pool: the cold path, and idle sandboxes with nothing else running.
    no_pool = os.path.join(args.work, "no-pool.json")
    with open(no_pool, "w") as f:
        json.dump({"pools": []}, f)
    daemon = start_daemon(spaced, state, sock, log, no_pool)
    try:
        space_rows(args, n, clients, space, sock, env, rows)
        steps = cold_rows(n, sock, rows)
        print("bench: idle memory, %d sandboxes" % idle, file=sys.stderr)
        try:
            memory = idle_memory.measure(sock, daemon.pid, idle)
        except (OSError, RuntimeError) as e:
            memory = {"error": str(e)}
    finally:
        stop_daemon(daemon, sock)
    # The same daemon binary with a warm pool of the default template.
    config = os.path.join(args.work, "pool.json")
    with open(config, "w") as f:
        json.dump({"pools": [{"profile": "test", "size": pool_size}]}, f)
    pooled_state = os.path.join(args.work, "state-pool")
    daemon = start_daemon(spaced, pooled_state, sock, log, config)
    try:
        pool_rows(args, n, clients, space, sock, env, rows, pool_size)
    finally:
        stop_daemon(daemon, sock)
    # What a user gets: no config file, so the default pool; `space run` destroys in the
    # background.
    daemon = start_daemon(spaced, os.path.join(args.work, "state-default"), sock, log)
    try:
        default_size = default_rows(args, n, clients, space, sock, env, rows)
    finally:
        stop_daemon(daemon, sock)
    # Peers after our daemon is gone, so that it costs them nothing.
    peer_rows(args, n, env, rows, notes)
    load1 = os.getloadavg()

    floor = rows[0]["p50"]
    run = rows[1]["p50"]
    lines = [
        "# SPACE benchmark, %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "",
        "- commit: `%s`, build: `%s` (CMAKE_BUILD_TYPE=%s)" % (git_rev(), os.path.basename(build),
                                                              build_type(build)),
        "- host: %s, %d CPUs (%s), kernel %s" % (platform.node(), os.cpu_count(), cpu_model(),
                                                  platform.release()),
        "- load average at the start: %.2f %.2f %.2f, at the end: %.2f %.2f %.2f (other work on "
        "the host skews results); %.0f s in all" % (load0 + load1 + (time.monotonic() - t_start,)),
        "- N = %d per row (BENCH_N; concurrent rows: at least N over %d clients); latencies in "
        "milliseconds; \"x floor\" and \"x run\" are p50 over the p50 of the floor and of "
        "sequential `space run -- true`; \"per s\" is operations per second: 1000 / mean for "
        "one client, operations / wall-clock time for concurrent clients" % (n, clients),
        "",
        "| what | measured by | N | p50 | p90 | p99 | mean | x floor | x run | per s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append("| %s | not run here: %s | 0 | - | - | - | - | - | - | - |" % (
                r["name"], r["error"].replace("|", "\\|")))
            continue
        lines.append("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f | %.1f | %.2f | %.1f |" % (
            r["name"], r["how"], r["n"], r["p50"], r["p90"], r["p99"], r["mean"],
            r["p50"] / floor, r["p50"] / run, r["per_s"]))
    lines += ["", "## Where cold creation's time goes", "",
              "Mean milliseconds per step of a cold create (no pool) over the %d sequential creates "
              "of the row \"API create -> ready, cold path\", from spaced's `/metrics` "
              "(`space_sandbox_create_step_seconds_sum` and `_count` before and after it); "
              "\"launch\" steps are the runtime's (src/runtime/linux), the rest the daemon's. "
              "The first rows ran against a spaced configured with `\"pools\": []`, the "
              "warm-pool rows against a second one with `\"pools\": [{\"profile\": "
              "\"test\", \"size\": %d}]`, the \"default config\" rows against a third with no "
              "config file (the default pool: %d sandboxes here)." % (
                  max((c for _, _, c in steps), default=0), pool_size, default_size),
              "", "| step | mean ms |", "|---|---:|"]
    lines += ["| %s | %.3f |" % (name, ms) for name, ms, _ in steps]
    lines.append("| **total** | **%.3f** |" % sum(ms for _, ms, _ in steps))
    lines += ["", "## Host memory per idle sandbox", ""] + memory_lines(memory)
    lines += ["", "## Peers", "",
              "Each peer runs `true` in a fresh sandbox, timed by the same C timer as the floor "
              "and `space run` (bench/peers.py):", ""]
    lines += ["- " + x for x in notes]
    lines.append("")
    text = "\n".join(lines)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    print("bench: wrote %s" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
