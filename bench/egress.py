"""Egress gateway benchmark: what SPACE's gateway costs an HTTPS client, side by side with a
direct connection and with Debian's mitmproxy doing the same job. Called by bench/run.sh after
bench.py; also runs alone:

  BUILD_DIR=build-release python3 bench/egress.py --out bench/results/egress-DATE.md

One file, two roles. `egress.py client ...` is the client program: stdlib http.client + ssl,
run with /usr/bin/python3 on the host or inside a sandbox, it times (time.perf_counter, in the
process, after it started) (a) N GETs of a small file, each on a new connection (TCP + CONNECT
+ TLS handshake included), (b) N GETs on one kept-alive connection, and (c) downloads of a
large file, and prints the samples as JSON. Without `client` this is the driver: it starts the
local HTTPS "internet" of the egress tests (tests/integration/egress_upstream.py, 127.0.0.2,
its own test CA), a private spaced (temporary socket and state dir, config in the style of
test_egress.py) and one mitmdump (private confdir), runs the same client for every variant:

  direct               host client -> 127.0.0.2:port, SNI = the name
  SPACE tunneled       sandbox client -> CONNECT git.example.test:443 -> SNI check -> relay
  SPACE intercepted    sandbox client -> CONNECT api.example.test:443 (a secret is bound to
                       it): TLS terminated with the sandbox CA, request authorized, placeholder
                       replaced, new TLS to the upstream, response scanned for the secret
  mitmproxy intercepted  host client -> mitmdump CONNECT api.example.test:443, TLS terminated
                       with mitmproxy's CA, upstream verified against the test CA
  mitmproxy pass-through host client -> mitmdump CONNECT git.example.test:443 (ignore_hosts)

interleaved over --rounds rounds so that load changes on the shared host hit every variant,
and writes a markdown table to --out. Everything it starts (spaced, sandboxes, mitmdump, the
upstream) is stopped by pid and its temporary directory removed, whatever happens.
"""

import argparse
import http.client
import json
import os
import socket
import ssl
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
CLIENT_PYTHON = "/usr/bin/python3"
SANDBOX_SCRIPT = "/tmp/egress.py"
SMALL = "/hello.txt"  # 20 bytes, from egress_upstream.make_site
TOKEN_VAR = "API_TOKEN"

# --------------------------------------------------------------------------------------------
# The client (stdlib only: it runs inside sandboxes, where this file is alone in /tmp)


class BenchConnection(http.client.HTTPSConnection):
    """HTTPS to `name` (SNI, Host, certificate check), reached either directly at `dial`
    (host, port) or through an HTTP proxy's CONNECT name:443 at `proxy` (host, port)."""

    def __init__(self, name, context, dial=None, proxy=None, timeout=60):
        super().__init__(name, 443, context=context, timeout=timeout)
        self.bench_name, self.bench_dial, self.bench_proxy = name, dial, proxy

    def connect(self):
        s = socket.create_connection(self.bench_proxy or self.bench_dial, self.timeout)
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.bench_proxy:
                target = "%s:443" % self.bench_name
                s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
                head = b""
                while b"\r\n\r\n" not in head:  # nothing follows the proxy's answer
                    chunk = s.recv(4096)
                    if not chunk:
                        raise OSError("proxy closed the connection during CONNECT")
                    head += chunk
                status = head.split(b"\r\n", 1)[0]
                if status.split()[1:2] != [b"200"]:
                    raise OSError("CONNECT %s refused: %r" % (target, status))
            self.sock = self._context.wrap_socket(s, server_hostname=self.bench_name)
        except BaseException:
            s.close()
            raise


def host_port(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def client_main(argv):
    ap = argparse.ArgumentParser(prog="egress.py client")
    ap.add_argument("--name", required=True, help="TLS server name and Host")
    ap.add_argument("--dial", type=host_port, help="HOST:PORT to connect to directly")
    ap.add_argument("--proxy", type=host_port, help="HOST:PORT of an HTTP CONNECT proxy")
    ap.add_argument("--ca", required=True, help="the only CA file trusted")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--big", default="", help="path of the large file")
    ap.add_argument("--big-size", type=int, default=0)
    ap.add_argument("--big-reps", type=int, default=0)
    args = ap.parse_args(argv)
    if bool(args.dial) == bool(args.proxy):
        ap.error("exactly one of --dial, --proxy")
    ctx = ssl.create_default_context(cafile=args.ca)
    # Like a client holding a credential: the sandbox's placeholder (the gateway swaps in the
    # secret on the intercepted host), a dummy of the same length elsewhere.
    headers = {"Authorization": "Bearer " + os.environ.get(TOKEN_VAR, "none"),
               "Accept-Encoding": "identity"}

    def connection():
        return BenchConnection(args.name, ctx, dial=args.dial, proxy=args.proxy)

    def get(conn, path):
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        if r.status != 200 or len(body) == 0:
            raise SystemExit("client: GET https://%s%s: %d %r" % (args.name, path, r.status,
                                                                  body[:200]))

    # Untimed warm-up: the interceptors mint (and cache) a leaf certificate for the host on
    # its first connection; that one-off cost is not what the rows measure.
    conn = connection()
    get(conn, SMALL)
    issuer = dict(x[0] for x in conn.sock.getpeercert()["issuer"]).get("commonName", "?")
    tls = {"version": conn.sock.version(), "issuer": issuer}
    conn.close()

    out = {"tls": tls, "new": [], "keepalive": [], "big": []}
    for _ in range(args.n):
        t0 = time.perf_counter()
        conn = connection()
        get(conn, SMALL)
        conn.close()
        out["new"].append((time.perf_counter() - t0) * 1000)

    conn = connection()
    get(conn, SMALL)  # connect and handshake, untimed
    for _ in range(args.n):
        t0 = time.perf_counter()
        get(conn, SMALL)
        out["keepalive"].append((time.perf_counter() - t0) * 1000)
    conn.close()

    buf = memoryview(bytearray(1 << 18))
    for _ in range(args.big_reps):
        t0 = time.perf_counter()
        conn = connection()
        conn.request("GET", args.big, headers=headers)
        r = conn.getresponse()
        got = 0
        while True:
            k = r.readinto(buf)
            if not k:
                break
            got += k
        dt = time.perf_counter() - t0
        conn.close()
        if r.status != 200 or got != args.big_size:
            raise SystemExit("client: GET %s: %d, %d of %d bytes" % (args.big, r.status, got,
                                                                     args.big_size))
        out["big"].append({"bytes": got, "seconds": dt})
    json.dump(out, sys.stdout)
    print()


# --------------------------------------------------------------------------------------------
# The driver

MITM_ADDON = '''"""mitmdump addon of bench/egress.py: the resolver overrides spaced gets in its
config ("name:port" -> [address, port]), so mitmproxy dials the local upstream for the test
names without /etc/hosts."""
import json
import os

RESOLVE = json.loads(os.environ["SPACE_BENCH_RESOLVE"])


class Resolve:
    def server_connect(self, data):
        host, port = data.server.address
        to = RESOLVE.get("%s:%d" % (host, port))
        if to:
            data.server.address = (to[0], int(to[1]))


addons = [Resolve()]
'''

VARIANTS = [
    # key, label, where the client runs, what is between it and the upstream
    ("direct", "direct", "host", "nothing: 127.0.0.2:port, SNI api.example.test"),
    ("space-tunnel", "SPACE tunneled", "sandbox",
     "gateway: CONNECT git.example.test:443 on 127.0.0.1:3128, SNI checked, bytes relayed"),
    ("space-intercept", "SPACE intercepted", "sandbox",
     "gateway: CONNECT api.example.test:443 (a secret is bound to it): TLS terminated with "
     "the sandbox CA, request authorized, placeholder replaced, new TLS to the upstream, "
     "response scanned for the secret"),
    ("mitm-intercept", "mitmproxy intercepted", "host",
     "mitmdump: CONNECT api.example.test:443, TLS terminated with its CA, new TLS to the "
     "upstream (verified against the test CA)"),
    ("mitm-tunnel", "mitmproxy pass-through", "host",
     "mitmdump: CONNECT git.example.test:443, `ignore_hosts`: bytes relayed"),
]


def run_checked(argv, env=None, timeout=300, what=None):
    import subprocess
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError("%s failed (rc %d): %s" % (what or " ".join(argv), p.returncode,
                                                      (p.stderr or p.stdout).strip()[-2000:]))
    return p.stdout


def free_port(host="127.0.0.1"):
    s = socket.socket()
    try:
        s.bind((host, 0))
        return s.getsockname()[1]
    finally:
        s.close()


def wait_until(cond, timeout, what, proc=None):
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("%s: the process exited (rc %d)" % (what, proc.returncode))
        if time.monotonic() > deadline:
            raise RuntimeError("%s: timed out after %ds" % (what, timeout))
        time.sleep(0.05)


def can_connect(addr):
    try:
        socket.create_connection(addr, 1).close()
        return True
    except OSError:
        return False


def stop_pid(proc, timeout=20):
    """SIGTERM, then SIGKILL, a process this driver started (by pid)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
        proc.kill()
        proc.wait()


def remove_work(work):
    """rm -rf the scratch directory, never through something still mounted below it."""
    import shutil
    real = os.path.realpath(work)
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f]
    if any(m == real or m.startswith(real + "/") for m in mounts):
        print("bench: leaving %s in place: something is still mounted below it" % work,
              file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)


def mitmdump_version():
    import subprocess
    try:
        out = subprocess.run(["mitmdump", "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if line.startswith("Mitmproxy:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def ms_row(samples):
    s = sorted(samples)
    import bench as base
    return {"n": len(s), "p50": base.percentile(s, 50), "p90": base.percentile(s, 90),
            "p99": base.percentile(s, 99), "mean": sum(s) / len(s)}


def median(xs):
    s = sorted(xs)
    k = len(s) // 2
    return s[k] if len(s) % 2 else (s[k - 1] + s[k]) / 2


class Bench:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.build = os.path.abspath(os.environ.get("BUILD_DIR", "build-release"))
        self.space = os.path.join(self.build, "space")
        self.sock = os.path.join(work, "space.sock")
        self.env = dict(os.environ, SPACE_SOCKET=self.sock)
        self.upstream = self.daemon = self.mitm = None
        self.sandbox = None
        self.samples = {}  # variant -> {"new": [...], "keepalive": [...], "big": [...]}
        self.skipped = {}  # variant -> why
        self.tls = {}  # variant -> what the client saw: TLS version, issuer of the server cert

    # -- setup ---------------------------------------------------------------------------------

    def start_upstream(self):
        sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
        from egress_upstream import Upstream

        class BenchUpstream(Upstream):
            # TCP_NODELAY on accepted connections. http.server writes the headers and the body
            # of a response in two sends; with Nagle on, the second waits for the client's
            # delayed ACK (40 ms on Linux) and every row would measure that timer instead.
            def _handler(self):
                class Handler(super()._handler()):
                    disable_nagle_algorithm = True
                return Handler

        os.makedirs(os.path.join(self.work, "upstream"))
        self.upstream = BenchUpstream(os.path.join(self.work, "upstream"))
        self.big_size = self.args.big_mib << 20
        self.big_path = "/big-%dm.bin" % self.args.big_mib
        with open(os.path.join(self.upstream.site, self.big_path[1:]), "wb") as f:
            for _ in range(self.args.big_mib):
                f.write(os.urandom(1 << 20))
        self.upstream.start()
        up = "%s:%d" % ("127.0.0.2", self.upstream.https_port)
        self.resolve = {"api.example.test:443": up, "git.example.test:443": up}

    def start_daemon(self):
        import subprocess
        import bench as base
        config = {
            "profiles": {"test": {"egress": {
                "allow": ["api.example.test", "git.example.test"],
                "allow_networks": ["127.0.0.2/32"]}}},
            "secrets": {TOKEN_VAR: {"value": "bench-secret-value-0123456789abcdef",
                                    "hosts": ["api.example.test"], "profiles": ["test"]}},
            "gateway": {"resolve": self.resolve,
                        "upstream_ca_files": [self.upstream.certs["ca"]],
                        "sandbox_ca_files": [self.upstream.certs["ca"]]},
        }
        cfg = os.path.join(self.work, "spaced.json")
        with open(cfg, "w") as f:
            json.dump(config, f, indent=2)
        log = open(os.path.join(self.work, "spaced.log"), "wb")
        self.daemon = subprocess.Popen(
            [os.path.join(self.build, "spaced"), "--state-dir", os.path.join(self.work, "state"),
             "--socket", self.sock, "--config", cfg],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)

        def healthy():
            try:
                return base.request(self.sock, "GET", "/v1/health")[0] == 200
            except OSError:
                return False
        wait_until(healthy, 30, "spaced (log: %s)" % log.name, self.daemon)
        out = run_checked([self.space, "create", "--secret", TOKEN_VAR], env=self.env,
                          what="space create")
        self.sandbox = out.strip().split()[-1]
        run_checked([self.space, "cp", os.path.abspath(__file__),
                     "%s:%s" % (self.sandbox, SANDBOX_SCRIPT)], env=self.env, what="space cp")

    def start_mitmdump(self):
        import subprocess
        self.mitm_version = mitmdump_version()
        if self.mitm_version is None:
            why = "mitmdump not installed (`scripts/install-deps.sh --bench`)"
            self.skipped.update({"mitm-intercept": why, "mitm-tunnel": why})
            return
        d = os.path.join(self.work, "mitmproxy")
        os.makedirs(d)
        addon = os.path.join(d, "resolve_addon.py")
        with open(addon, "w") as f:
            f.write(MITM_ADDON)
        self.mitm_port = free_port()
        resolve = {k: host_port(v) for k, v in self.resolve.items()}
        env = dict(os.environ, HOME=d, SPACE_BENCH_RESOLVE=json.dumps(resolve))
        log = open(os.path.join(self.work, "mitmdump.log"), "wb")
        self.mitm = subprocess.Popen(
            ["mitmdump", "-q", "--set", "confdir=%s" % d,
             "--listen-host", "127.0.0.1", "--listen-port", str(self.mitm_port),
             "--set", "ssl_verify_upstream_trusted_ca=%s" % self.upstream.certs["ca"],
             # Stream bodies as the gateway does (mitmproxy's default buffers each whole body).
             "--set", "stream_large_bodies=1m",
             "--ignore-hosts", r"^git\.example\.test$", "-s", addon],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.mitm_ca = os.path.join(d, "mitmproxy-ca-cert.pem")
        wait_until(lambda: os.path.exists(self.mitm_ca) and
                   can_connect(("127.0.0.1", self.mitm_port)), 60,
                   "mitmdump (log: %s)" % log.name, self.mitm)

    # -- measuring -----------------------------------------------------------------------------

    def client_argv(self, key, n, reps):
        common = ["--n", str(n), "--big", self.big_path, "--big-size", str(self.big_size),
                  "--big-reps", str(reps)]
        up = "127.0.0.2:%d" % self.upstream.https_port
        mitm = "127.0.0.1:%d" % getattr(self, "mitm_port", 0)
        test_ca = self.upstream.certs["ca"]
        host = [CLIENT_PYTHON, os.path.abspath(__file__), "client"]
        inside = [self.space, "exec", self.sandbox, "--", CLIENT_PYTHON, SANDBOX_SCRIPT,
                  "client", "--proxy", "127.0.0.1:3128", "--ca", "/etc/space/ca-bundle.crt"]
        return {
            "direct": host + ["--dial", up, "--name", "api.example.test", "--ca", test_ca],
            "space-tunnel": inside + ["--name", "git.example.test"],
            "space-intercept": inside + ["--name", "api.example.test"],
            "mitm-intercept": host + ["--proxy", mitm, "--name", "api.example.test",
                                      "--ca", getattr(self, "mitm_ca", "")],
            "mitm-tunnel": host + ["--proxy", mitm, "--name", "git.example.test",
                                   "--ca", test_ca],
        }[key] + common

    def measure(self):
        rounds = self.args.rounds
        n = -(-self.args.n // rounds)
        reps = -(-self.args.big_reps // rounds)
        # On the host the client holds a dummy token as long as the sandbox's placeholder.
        env = dict(self.env, **{TOKEN_VAR: "space_ph_%s_%s" % (TOKEN_VAR, "0" * 32)})
        for r in range(rounds):
            for key, _, _, _ in VARIANTS:
                if key in self.skipped:
                    continue
                print("egress bench: round %d/%d: %s (%d GETs x2, %d x %d MiB)" %
                      (r + 1, rounds, key, n, reps, self.args.big_mib), file=sys.stderr)
                out = run_checked(self.client_argv(key, n, reps), env=env, what="client " + key)
                got = json.loads(out.strip().splitlines()[-1])
                acc = self.samples.setdefault(key, {"new": [], "keepalive": [], "big": []})
                for k in acc:
                    acc[k] += got[k]
                self.tls[key] = got["tls"]

    def gateway_check(self):
        """The audit log must show the gateway did what each variant claims."""
        out = run_checked([self.space, "audit", self.sandbox, "--json"], env=self.env,
                          what="space audit")
        events = [json.loads(line) for line in out.splitlines() if line.strip()]
        tunnels = sum(1 for e in events if e["kind"] == "egress.tunnel"
                      and e["data"].get("host") == "git.example.test")
        intercepted = sum(1 for e in events if e["kind"] == "egress.request"
                          and e["data"].get("host") == "api.example.test"
                          and e["data"].get("via") == "intercept"
                          and e["data"].get("secrets") == [TOKEN_VAR])
        denied = sum(1 for e in events if e["kind"] in ("egress.denied", "egress.error"))
        return tunnels, intercepted, denied

    # -- teardown ------------------------------------------------------------------------------

    def close(self):
        import bench as base
        try:
            if self.daemon is not None and self.daemon.poll() is None:
                status, body = base.request(self.sock, "GET", "/v1/sandboxes")
                listed = json.loads(body) if status == 200 else {}
                for sb in listed.get("sandboxes", []) if isinstance(listed, dict) else listed:
                    base.request(self.sock, "DELETE", "/v1/sandboxes/%s?force=true" % sb["id"])
        except Exception as e:  # noqa: BLE001 - best effort; stopping below is not
            print("egress bench: cleanup: %s" % e, file=sys.stderr)
        finally:
            stop_pid(self.daemon)
            stop_pid(self.mitm)
            if self.upstream is not None:
                self.upstream.stop()


# --------------------------------------------------------------------------------------------
# The report


def report(b, load0, load1, audit, started):
    import platform
    import bench as base
    a = b.args
    mitm = "%s (Debian)" % b.mitm_version if b.mitm_version else "not installed"
    keys = [k for k, _, _, _ in VARIANTS if k in b.samples]
    label = {k: lab for k, lab, _, _ in VARIANTS}
    python = run_checked([CLIENT_PYTHON, "-c", "import platform; "
                          "print(platform.python_version())"]).strip()
    lines = [
        "# SPACE egress gateway benchmark, %s" % started.strftime("%Y-%m-%d %H:%M"),
        "",
        "- commit: `%s`, build: `%s` (CMAKE_BUILD_TYPE=%s)" % (
            base.git_rev(), os.path.basename(b.build), base.build_type(b.build)),
        "- host: %s, %d CPUs (%s), kernel %s; Python %s, %s; mitmproxy %s" % (
            platform.node(), os.cpu_count(), base.cpu_model(), platform.release(), python,
            ssl.OPENSSL_VERSION, mitm),
        "- load average at the start: %.2f %.2f %.2f, at the end: %.2f %.2f %.2f "
        "(other work on the host skews results)" % (load0 + load1),
        "- one client program for every variant (`bench/egress.py client`: http.client + ssl "
        "under %s), timed inside the client with time.perf_counter, process start excluded; "
        "one untimed warm-up connection per client run (interceptors mint a host certificate "
        "on the first); %d rounds with the variants interleaved, so load changes hit all of "
        "them" % (CLIENT_PYTHON, a.rounds),
        "- upstream: the egress tests' local HTTPS server (tests/integration/egress_upstream.py,"
        " Python's threaded `http.server` on 127.0.0.2, P-256 test CA, TCP_NODELAY set by the "
        "bench), the same for every variant. It is slow and sets the floor: the proxies' cost "
        "is the difference from direct, not the absolute figures",
        "- latencies in milliseconds; \"added\" is p50 minus direct's p50; \"x direct\" is p50 "
        "over direct's p50",
        "",
        "## Variants",
        "",
        "| variant | client in | between client and upstream | TLS the client sees |",
        "|---|---|---|---|",
    ]
    for k, lab, where, how in VARIANTS:
        t = b.tls.get(k)
        seen = "%s, certificate from \"%s\"" % (t["version"], t["issuer"]) if t else \
            "not measured: " + b.skipped.get(k, "?")
        lines.append("| %s | %s | %s | %s |" % (lab, where, how, seen))
    lines.append("")

    def latency_table(title, key):
        d = ms_row(b.samples["direct"][key])["p50"]
        t = ["## %s" % title, "",
             "| variant | N | p50 | p90 | p99 | mean | added | x direct |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for k in keys:
            r = ms_row(b.samples[k][key])
            t.append("| %s | %d | %.2f | %.2f | %.2f | %.2f | %+.2f | %.2f |" % (
                label[k], r["n"], r["p50"], r["p90"], r["p99"], r["mean"], r["p50"] - d,
                r["p50"] / d))
        return t + [""]

    lines += latency_table("GET of a 20-byte file, a new connection each (TCP connect, CONNECT, "
                           "TLS handshake, request, response, close)", "new")
    lines += latency_table("GET of a 20-byte file on one kept-alive connection", "keepalive")

    def mbps(x):
        return x["bytes"] / x["seconds"] / 1e6
    dmed = median([mbps(x) for x in b.samples["direct"]["big"]])
    lines += ["## Throughput: a %d MiB download on a new connection, MB/s (10^6 bytes)" %
              a.big_mib,
              "",
              "| variant | runs | median | min | max | x direct |",
              "|---|---:|---:|---:|---:|---:|"]
    for k in keys:
        v = [mbps(x) for x in b.samples[k]["big"]]
        lines.append("| %s | %d | %.1f | %.1f | %.1f | %.2f |" % (
            label[k], len(v), median(v), min(v), max(v), median(v) / dmed))
    tunnels, intercepted, denied = audit
    # Per client run: a warm-up, n new connections, one kept-alive one, one per download;
    # the kept-alive connection carries n + 1 requests.
    runs = a.rounds
    n, reps = -(-a.n // runs), -(-a.big_reps // runs)
    want_tunnels, want_requests = runs * (n + 2 + reps), runs * (2 * n + 2 + reps)
    mismatch = "" if (tunnels, intercepted, denied) == (want_tunnels, want_requests, 0) else \
        " **Expected %d, %d and 0: some variant did not take the path it claims.**" % (
            want_tunnels, want_requests)
    lines += [
        "",
        "## Notes",
        "",
        "- The sandboxed client runs under a sandbox's default limits (1 CPU, seccomp, its own "
        "network namespace whose only way out is the gateway that `spaced` serves from the "
        "host); the direct and mitmproxy clients run on the host. Client, proxy and upstream "
        "share the host's %d CPUs, so throughput is bounded by the Python ends." %
        os.cpu_count(),
        "- The gateway's audit log for the sandbox holds %d `egress.tunnel` events for "
        "git.example.test, %d intercepted `egress.request` events for api.example.test with "
        "the secret injected, and %d denials or errors. The gateway records every intercepted "
        "request (`egress.request`, `credential.use`) and scans each response for the secret; "
        "`mitmdump -q` records nothing.%s" % (tunnels, intercepted, denied, mismatch),
        "- mitmproxy runs with a private confdir, `ssl_verify_upstream_trusted_ca` = the test "
        "CA, `ignore_hosts` = git.example.test (pass-through), `stream_large_bodies=1m` (it "
        "streams bodies like the gateway; its default buffers each whole body) and a small "
        "addon applying the same resolver overrides as spaced's `gateway.resolve`.",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "client":
        return client_main(sys.argv[2:])
    import datetime
    import signal
    import tempfile
    sys.path.insert(0, HERE)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", help="scratch directory (default: a new one under /tmp, removed)")
    ap.add_argument("--n", type=int, default=int(os.environ.get("BENCH_EGRESS_N", "200")),
                    help="GETs per latency row (default $BENCH_EGRESS_N or 200)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--big-mib", type=int, default=32)
    ap.add_argument("--big-reps", type=int, default=8)
    args = ap.parse_args()
    # SIGTERM (e.g. from run.sh's caller) unwinds through the finally blocks below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("egress bench: terminated"))
    own_work = args.work is None
    work = tempfile.mkdtemp(prefix="space-egress-bench.") if own_work else args.work
    os.makedirs(work, exist_ok=True)
    started = datetime.datetime.now()
    load0 = os.getloadavg()
    b = Bench(args, work)
    b.mitm_version = None
    try:
        b.start_upstream()
        b.start_daemon()
        b.start_mitmdump()
        b.measure()
        audit = b.gateway_check()
        load1 = os.getloadavg()
    finally:
        b.close()
        if own_work:
            remove_work(work)
    text = report(b, load0, load1, audit, started)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    print("egress bench: wrote %s" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
