"""git clone throughput through SPACE's egress gateway, side by side with a direct clone from
the host, in the same run. Called by bench/run.sh; also runs alone:

  BUILD_DIR=build-release python3 bench/git_clone.py --out bench/results/git-clone-DATE.md

It makes a bare repository of --mib MiB (default 50) of incompressible blobs (os.urandom, 1 MiB
files, one commit), serves it with the workload suite's smart-HTTP server
(tests/workloads/git_server.py: `git http-backend` behind Python's threaded HTTPS server on
127.0.0.2, the egress tests' test CA) twice: with a token required (git.example.test) and open
(open.example.test). Then, interleaved over --runs runs so that load changes hit every variant:

  direct            host: git clone https://x-access-token:TOKEN@git.example.test:PORT/...
                    (http.curloptResolve to 127.0.0.2, GIT_SSL_CAINFO = the test CA)
  SPACE intercepted sandbox (--secret GIT_TOKEN, bound to git.example.test): the placeholder in
                    the URL, sent as Basic auth; the gateway terminates TLS, decodes the
                    credential, puts the token in, re-encodes it, and masks the response
  SPACE tunneled    sandbox: open.example.test, no secret bound, TLS relayed after the SNI check

Each clone is timed where it runs (a small Python wrapper around `git clone`, time.perf_counter,
the process start of the wrapper excluded), its working copy removed after; the report gives the
median, min and max seconds, MB/s of the pack (the repository's size on the server) and the
ratio of each median to direct's. Everything it starts (spaced, its sandbox, the servers) is
stopped by pid and its temporary directory removed.
"""

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "tests", "workloads"))

import bench as base  # noqa: E402
import egress as eg  # noqa: E402 - helpers: run_checked, wait_until, stop_pid, remove_work

TOKEN = "ghp_BenchCl0neT0ken00112233445566778899"
TIMER = ("import subprocess, sys, time; t = time.perf_counter(); "
         "subprocess.run(sys.argv[1:], check=True); print(time.perf_counter() - t)")
VARIANTS = [
    ("direct", "direct", "host", "git -> 127.0.0.2 (token in the URL)"),
    ("intercepted", "SPACE intercepted", "sandbox",
     "git -> CONNECT git.example.test -> TLS terminated, Basic credential decoded, placeholder "
     "replaced, re-encoded -> new TLS to the server; response masked"),
    ("tunneled", "SPACE tunneled", "sandbox",
     "git -> CONNECT open.example.test -> SNI check -> bytes relayed"),
]


class Bench:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.build = os.path.abspath(os.environ.get("BUILD_DIR", "build-release"))
        self.space = os.path.join(self.build, "space")
        self.sock = os.path.join(work, "space.sock")
        self.env = dict(os.environ, SPACE_SOCKET=self.sock)
        self.servers, self.daemon, self.sandbox = [], None, None
        self.samples = {k: [] for k, _, _, _ in VARIANTS}

    def start_servers(self):
        from egress_upstream import make_test_ca
        from git_server import GitServer, git
        self.certs = make_test_ca(self.work)
        root = os.path.join(self.work, "repos")
        src = os.path.join(self.work, "src")
        git("init", "-q", "-b", "main", src)
        for i in range(self.args.mib):
            with open(os.path.join(src, "blob%03d.bin" % i), "wb") as f:
                f.write(os.urandom(1 << 20))
        git("add", "-A", cwd=src)
        git("commit", "-q", "-m", "blobs", cwd=src)
        os.makedirs(root)
        git("clone", "-q", "--bare", src, os.path.join(root, "big.git"))
        subprocess.run(["rm", "-rf", src], check=True)
        # The pack as served: what a clone moves.
        self.pack_bytes = sum(os.path.getsize(p) for p in
                              _files(os.path.join(root, "big.git", "objects")))
        self.auth = GitServer(root, self.certs["cert"], self.certs["key"], token=TOKEN).start()
        self.open = GitServer(root, self.certs["cert"], self.certs["key"]).start()
        self.servers = [self.auth, self.open]

    def start_daemon(self):
        config = {
            "profiles": {"test": {"egress": {
                "allow": ["git.example.test", "open.example.test"],
                "allow_networks": ["127.0.0.2/32"]}}},
            "secrets": {"GIT_TOKEN": {"value": TOKEN, "hosts": ["git.example.test"],
                                      "profiles": ["test"]}},
            "gateway": {"resolve": {"git.example.test:443": "127.0.0.2:%d" % self.auth.port,
                                    "open.example.test:443": "127.0.0.2:%d" % self.open.port},
                        "upstream_ca_files": [self.certs["ca"]],
                        "sandbox_ca_files": [self.certs["ca"]]},
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
        eg.wait_until(healthy, 30, "spaced (log: %s)" % log.name, self.daemon)
        out = eg.run_checked([self.space, "create", "--secret", "GIT_TOKEN", "--memory", "1G"],
                             env=self.env, what="space create")
        self.sandbox = out.strip().split()[-1]

    def clone_argv(self, key):
        dest = "/tmp/bench-clone"
        if key == "direct":
            dest = os.path.join(self.work, "clone")
            url = "https://x-access-token:%s@git.example.test:%d/big.git" % (TOKEN,
                                                                             self.auth.port)
            return ["python3", "-c", TIMER, "git", "-c",
                    "http.curloptResolve=git.example.test:%d:127.0.0.2" % self.auth.port,
                    "clone", "-q", url, dest], dest
        host = "git.example.test" if key == "intercepted" else "open.example.test"
        script = ('rm -rf {d}; /usr/bin/python3 -c "{t}" git clone -q '
                  '"https://x-access-token:$GIT_TOKEN@{h}/big.git" {d} && rm -rf {d}'
                  .format(d=dest, h=host, t=TIMER.replace('"', '\\"')))
        return [self.space, "exec", self.sandbox, "--", "sh", "-c", script], None

    def measure(self):
        env = dict(self.env, GIT_SSL_CAINFO=self.certs["ca"], GIT_TERMINAL_PROMPT="0",
                   GIT_CONFIG_NOSYSTEM="1")
        for r in range(self.args.runs + 1):  # run 0 is a warm-up, not counted
            for key, _, _, _ in VARIANTS:
                print("git clone bench: run %d/%d: %s" % (r, self.args.runs, key),
                      file=sys.stderr)
                argv, dest = self.clone_argv(key)
                out = eg.run_checked(argv, env=env, timeout=900, what="clone " + key)
                if dest:
                    subprocess.run(["rm", "-rf", dest], check=True)
                if r > 0:
                    self.samples[key].append(float(out.strip().splitlines()[-1]))

    def gateway_check(self):
        out = eg.run_checked([self.space, "audit", self.sandbox, "--json"], env=self.env,
                             what="space audit")
        events = [json.loads(line) for line in out.splitlines() if line.strip()]
        injected = sum(1 for e in events if e["kind"] == "credential.use"
                       and e["data"].get("host") == "git.example.test")
        tunnels = sum(1 for e in events if e["kind"] == "egress.tunnel"
                      and e["data"].get("host") == "open.example.test")
        denied = [e["data"] for e in events if e["kind"] in ("egress.denied", "egress.error")]
        return injected, tunnels, denied

    def close(self):
        try:
            if self.daemon is not None and self.daemon.poll() is None and self.sandbox:
                base.request(self.sock, "DELETE", "/v1/sandboxes/%s?force=true" % self.sandbox)
        except Exception as e:  # noqa: BLE001 - best effort; stopping below is not
            print("git clone bench: cleanup: %s" % e, file=sys.stderr)
        finally:
            eg.stop_pid(self.daemon)
            for s in self.servers:
                s.stop()


def _files(root):
    for d, _, names in os.walk(root):
        for n in names:
            yield os.path.join(d, n)


def report(b, load0, load1, audit, started):
    import platform
    a = b.args
    git_version = eg.run_checked(["git", "--version"]).strip()
    lines = [
        "# SPACE git clone benchmark, %s" % started.strftime("%Y-%m-%d %H:%M"),
        "",
        "- commit: `%s`, build: `%s` (CMAKE_BUILD_TYPE=%s)" % (
            base.git_rev(), os.path.basename(b.build), base.build_type(b.build)),
        "- host: %s, %d CPUs (%s), kernel %s; %s" % (
            platform.node(), os.cpu_count(), base.cpu_model(), platform.release(), git_version),
        "- load average at the start: %.2f %.2f %.2f, at the end: %.2f %.2f %.2f "
        "(other work on the host skews results)" % (load0 + load1),
        "- repository: %d MiB of random 1 MiB blobs in one commit; %.1f MB of objects on the "
        "server (incompressible: the pack is as large)" % (a.mib, b.pack_bytes / 1e6),
        "- server: tests/workloads/git_server.py (`git http-backend` behind Python's threaded "
        "HTTPS server on 127.0.0.2, which buffers each CGI answer whole), the same for every "
        "variant; each clone timed where it runs with time.perf_counter around `git clone`; "
        "one warm-up run, then %d runs with the variants interleaved" % a.runs,
        "",
        "| variant | clone in | path | runs | median s | min s | max s | MB/s | x direct |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    d = eg.median(b.samples["direct"])
    for key, label, where, how in VARIANTS:
        s = b.samples[key]
        m = eg.median(s)
        lines.append("| %s | %s | %s | %d | %.2f | %.2f | %.2f | %.1f | %.2f |" % (
            label, where, how, len(s), m, min(s), max(s), b.pack_bytes / m / 1e6, m / d))
    injected, tunnels, denied = audit
    lines += [
        "",
        "## Notes",
        "",
        "- The sandboxed clones run under the sandbox's default limits (memory raised to 1G) in its own "
        "network namespace; git, spaced and the server share the host's %d CPUs." %
        os.cpu_count(),
        "- The gateway's audit log holds %d `credential.use` events for git.example.test (the "
        "token put into each intercepted request), %d `egress.tunnel` events for "
        "open.example.test and %d denials or errors%s." % (
            injected, tunnels, len(denied),
            "" if not denied else " (%s)" % "; ".join(sorted({
                "%s %s: %s" % (d.get("via", "?"), d.get("host", "?"),
                               d.get("reason", d.get("error", "?"))[:100])
                for d in denied}))[:600]),
    ]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", help="scratch directory (default: a new one under /tmp, removed)")
    ap.add_argument("--mib", type=int, default=50, help="repository size in MiB (default 50)")
    ap.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_GIT_RUNS", "5")),
                    help="timed clones per variant (default $BENCH_GIT_RUNS or 5)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("git clone bench: terminated"))
    own_work = args.work is None
    work = tempfile.mkdtemp(prefix="space-git-bench.") if own_work else args.work
    os.makedirs(work, exist_ok=True)
    started = datetime.datetime.now()
    load0 = os.getloadavg()
    b = Bench(args, work)
    try:
        b.start_servers()
        b.start_daemon()
        b.measure()
        audit = b.gateway_check()
        load1 = os.getloadavg()
    finally:
        b.close()
        if own_work:
            eg.remove_work(work)
    text = report(b, load0, load1, audit, started)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    print("git clone bench: wrote %s" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
