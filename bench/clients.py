"""Concurrent clients for bench/bench.py: the same work as the sequential rows, from C clients at
once, each with its own connection (API) or its own process (CLI).

  cli_clients      C copies of spawn_timer at once, each timing its share of `space run -- true`
  api_clients      C Python threads at once, each running its share of a cycle over its own
                   Unix-socket connection (a new one per request, as the sequential rows do):
                     create_delete    POST /v1/sandboxes, DELETE
                     first_output     POST /v1/sandboxes, POST .../exec ["echo", "hi"] until its
                                      first "stdout" event (time to first output), drain to the
                                      exit event, DELETE (the full cycle)

Each returns the per-operation latencies in ms and the wall-clock seconds from the moment all
clients were released to the moment the last finished, so that throughput is operations / wall.
Any failed operation stops the benchmark with its status and body: no result is made up.
"""

import json
import subprocess
import sys
import threading
import time

from bench import UnixHTTPConnection, request


def shares(n, clients):
    """n operations over `clients` clients: each gets ceil(n / clients), so at least n in all."""
    per = -(-n // clients)
    return [per] * clients


def cli_clients(timer, n, clients, argv, env):
    """Runs `clients` spawn_timers at once; returns (latencies ms, wall s)."""
    procs = []
    t0 = time.perf_counter()
    for per in shares(n, clients):
        procs.append(subprocess.Popen([timer, str(per)] + argv, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env))
    samples, errors = [], []
    for p in procs:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            errors.append(err.strip()[-1000:])
        samples += [float(x) / 1000 for x in out.split()]
    wall = time.perf_counter() - t0
    if errors:
        sys.exit("bench: %d of %d concurrent clients of `%s` failed: %s" % (
            len(errors), clients, " ".join(argv), errors[0]))
    return samples, wall


def create(sock):
    status, body = request(sock, "POST", "/v1/sandboxes", {})
    if status != 201:
        raise RuntimeError("create: %d %s" % (status, body[:300]))
    return json.loads(body)["id"]


def delete(sock, sid, wait=True):
    query = "" if wait else "?wait=false"
    status, body = request(sock, "DELETE", "/v1/sandboxes/%s%s" % (sid, query))
    if status != 204:
        raise RuntimeError("delete %s: %d %s" % (sid, status, body[:300]))


def exec_until_first_output(sock, sid):
    """POST exec of `echo hi`; returns the perf_counter time of the first stdout event after
    checking that the stream ends with exit code 0."""
    conn = UnixHTTPConnection(sock)
    try:
        conn.request("POST", "/v1/sandboxes/%s/exec" % sid,
                     body=json.dumps({"cmd": ["echo", "hi"]}).encode(),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError("exec %s: %d %s" % (sid, r.status, r.read()[:300]))
        first, last = None, {}
        while True:
            line = r.readline()
            if not line:
                break
            if not line.strip():
                continue
            last = json.loads(line)
            if first is None and last.get("type") == "stdout":
                first = time.perf_counter()
        if first is None or last.get("type") != "exit" or last.get("exit_code") != 0:
            raise RuntimeError("exec %s: no stdout or no clean exit; last event %s" % (sid, last))
        return first
    finally:
        conn.close()


def cycle_create_delete(sock):
    t0 = time.perf_counter()
    delete(sock, create(sock))
    return {"cycle": (time.perf_counter() - t0) * 1000}


def cycle_create_delete_nowait(sock):
    """Like cycle_create_delete, but the DELETE answers once the sandbox is unreachable and
    spaced tears it down in the background (?wait=false, as `space run` sends)."""
    t0 = time.perf_counter()
    delete(sock, create(sock), wait=False)
    return {"cycle": (time.perf_counter() - t0) * 1000}


def cycle_first_output(sock):
    t0 = time.perf_counter()
    sid = create(sock)
    try:
        first = exec_until_first_output(sock, sid)
    except BaseException:
        request(sock, "DELETE", "/v1/sandboxes/%s?force=true" % sid)
        raise
    delete(sock, sid)
    t1 = time.perf_counter()
    return {"first_output": (first - t0) * 1000, "cycle": (t1 - t0) * 1000}


def api_clients(sock, n, clients, cycle):
    """Runs `cycle` n times (at least) over `clients` threads; returns ({key: [ms]}, wall s)."""
    results, errors = [], []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def client(count):
        mine = []
        start.wait()
        try:
            for _ in range(count):
                mine.append(cycle(sock))
        except Exception as e:  # noqa: BLE001 - reported below, stops the benchmark
            with lock:
                errors.append(str(e))
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=client, args=(per,)) for per in shares(n, clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        sys.exit("bench: %d of %d API clients failed: %s" % (len(errors), clients, errors[0]))
    return {k: [r[k] for r in results] for k in results[0]}, wall
