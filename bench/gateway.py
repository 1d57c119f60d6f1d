#!/usr/bin/env python3
"""What space-gateway adds to a request (docs/cluster.md): the same calls made straight to a
node (HTTPS with the cluster's client certificate) and through a gateway in front of it (HTTPS
with a token; the gateway's kept-alive mutual-TLS connection to the node), alternated call by
call so that both see the same machine, each on a kept-alive client connection.

Rows: GET /v1/sandboxes/{id} (routing alone), exec of `true` (a streamed answer), and create of
a linux sandbox (each deleted after, untimed). Reported: medians and p90 in ms, the difference of the medians (the
gateway's added latency; the issue's target is under 1 ms p50) and the ratio.

  python3 bench/gateway.py --work /tmp/x --out bench/results/gateway-DATE.md [--n 200]
"""

import argparse
import datetime
import http.client
import json
import os
import shutil
import ssl
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("SPACE_BUILD_DIR", os.path.abspath(
    os.path.join(HERE, "..", os.environ.get("BUILD_DIR", "build-release"))))
import bench as base  # noqa: E402
from harness import SPACED, Daemon, free_port, wait_for  # noqa: E402
from test_cluster import GATEWAY, make_pki  # noqa: E402


class Client:
    """A kept-alive HTTPS connection; reconnects when the server closed it."""

    def __init__(self, host, port, ctx, headers):
        self.host, self.port, self.ctx, self.headers = host, port, ctx, headers
        self.conn = None

    def call(self, method, path, body=None):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, self.port, timeout=60,
                                                        context=self.ctx)
            try:
                data = json.dumps(body).encode() if body is not None else None
                h = dict(self.headers)
                if data is not None:
                    h["Content-Type"] = "application/json"
                t0 = time.perf_counter()
                self.conn.request(method, path, body=data, headers=h)
                r = self.conn.getresponse()
                raw = r.read()
                dt = time.perf_counter() - t0
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, raw, dt
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=int(os.environ.get("BENCH_N", "100")))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    pki = os.path.join(a.work, "pki")
    os.makedirs(pki, exist_ok=True)
    make_pki(pki)
    ip, port = "127.0.0.2", free_port()
    node = Daemon(os.path.join(a.work, "n1"), name="spaced-n1", config={
        "node": {"name": "n1", "url": "https://%s:%d" % (ip, port)},
        "api_listen": "%s:%d" % (ip, port),
        "api_tls": {"cert": os.path.join(pki, "node.pem"), "key": os.path.join(pki, "node.key"),
                    "client_ca": os.path.join(pki, "ca.pem")},
    })
    os.makedirs(node.root, exist_ok=True)
    gw = None
    try:
        node.start()
        nodes_file = os.path.join(a.work, "nodes.json")
        with open(nodes_file, "w") as f:
            json.dump({"nodes": [{"name": "n1", "url": "https://%s:%d" % (ip, port)}]}, f)
        out = subprocess.run([GATEWAY, "token", "create", "--name", "bench", "--profile", "*",
                              "--op", "read,create,exec,files,lifecycle"],
                             capture_output=True, text=True, check=True).stdout
        token = next(l.strip() for l in out.splitlines() if l.strip().startswith("spt_"))
        entry = json.loads(next(l.strip() for l in out.splitlines() if l.strip().startswith("{")))
        tokens = os.path.join(a.work, "tokens.json")
        with open(tokens, "w") as f:
            json.dump({"tokens": [entry]}, f)
        gport = free_port()
        gcfg = os.path.join(a.work, "gateway.json")
        with open(gcfg, "w") as f:
            json.dump({"listen": "127.0.0.1:%d" % gport,
                       "tls": {"cert": os.path.join(pki, "public.pem"),
                               "key": os.path.join(pki, "public.key")},
                       "node_tls": {"cert": os.path.join(pki, "client.pem"),
                                    "key": os.path.join(pki, "client.key"),
                                    "ca": os.path.join(pki, "ca.pem")},
                       "discovery": {"static": nodes_file}, "tokens_file": tokens}, f)
        log = open(os.path.join(a.work, "gateway.log"), "ab")
        gw = subprocess.Popen([GATEWAY, "--config", gcfg, "--log-level", "warn"], stdout=log,
                              stderr=log, start_new_session=True)
        ca = os.path.join(pki, "ca.pem")
        direct_ctx = ssl.create_default_context(cafile=ca)
        direct_ctx.load_cert_chain(os.path.join(pki, "client.pem"), os.path.join(pki, "client.key"))
        direct = Client(ip, port, direct_ctx, {})
        via = Client("127.0.0.1", gport, ssl.create_default_context(cafile=ca),
                     {"Authorization": "Bearer " + token})

        def gw_up():
            try:
                return via.call("GET", "/v1/nodes")[0] == 200 and \
                    json.loads(via.call("GET", "/v1/nodes")[1])[0]["status"] == "active"
            except OSError:
                return False
        wait_for(gw_up, timeout=30, what="the gateway")
        st, raw, _ = direct.call("POST", "/v1/sandboxes", {})
        sid = json.loads(raw)["id"]
        rows = []

        def measure(name, fn):
            d, g = [], []
            for i in range(5):  # warm both paths
                fn(direct), fn(via)
            for i in range(a.n):
                first, second = (direct, via) if i % 2 == 0 else (via, direct)
                t1 = fn(first)
                t2 = fn(second)
                (d if first is direct else g).append(t1)
                (g if first is direct else d).append(t2)
            md, mg = statistics.median(d) * 1000, statistics.median(g) * 1000
            rows.append((name, md, pct(d, 90) * 1000, mg, pct(g, 90) * 1000, mg - md, mg / md))
            print("%-28s direct %.2f ms, via gateway %.2f ms (+%.2f)" % (name, md, mg, mg - md))

        def get(c):
            st, raw, dt = c.call("GET", "/v1/sandboxes/" + sid)
            assert st == 200, raw
            return dt

        def exec_true(c):
            st, raw, dt = c.call("POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
            assert st == 200 and b'"exit"' in raw, raw
            return dt

        def create(c):
            # Timed: the create. The delete that follows (untimed) keeps the node's load flat.
            st, raw, dt = c.call("POST", "/v1/sandboxes", {})
            assert st == 201, raw
            st2, raw2, _ = c.call("DELETE", "/v1/sandboxes/%s?force=true" % json.loads(raw)["id"])
            assert st2 == 204, raw2
            return dt

        measure("GET /v1/sandboxes/{id}", get)
        measure("exec `true`", exec_true)
        measure("create (linux)", create)
        direct.call("DELETE", "/v1/sandboxes/%s?force=true" % sid)

        lines = [
            "# space-gateway: added latency — %s" % datetime.date.today().isoformat(),
            "",
            "Machine: %s, %d CPUs, kernel %s; build %s (%s); %d calls per row, direct and "
            "through the gateway alternated call by call, each on a kept-alive HTTPS connection "
            "(the gateway's to the node: mutual TLS, kept alive)." % (
                base.cpu_model(), os.cpu_count(), os.uname().release, base.git_rev(),
                base.build_type(os.environ['SPACE_BUILD_DIR']), a.n),
            "",
            "| call | direct p50 (ms) | direct p90 | via gateway p50 (ms) | via gateway p90 | "
            "added p50 (ms) | ratio |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, md, d90, mg, g90, add, ratio in rows:
            lines.append("| %s | %.2f | %.2f | %.2f | %.2f | %+.2f | %.2fx |" %
                         (name, md, d90, mg, g90, add, ratio))
        lines += ["", "Rerun: `BENCH_ONLY=gateway make bench` (or `python3 bench/gateway.py "
                  "--work DIR --out FILE --n N`)."]
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("wrote", a.out)
    finally:
        if gw is not None:
            gw.terminate()
            gw.wait(30)
        if node.alive():
            node.stop()
        shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
