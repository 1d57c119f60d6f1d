"""Page-load benchmark: how long headless Chromium takes to load a local site through SPACE's
egress gateway, beside the same Chromium loading it directly, in the same run. Called by
bench/run.sh; also runs alone:

  BUILD_DIR=build-release python3 bench/page_load.py --out bench/results/page-load-DATE.md

The site is the workload suite's (tests/workloads/wl_site.py: Python's threaded http.server on
127.0.0.2, its own test CA) with one page, /bench.html, that pulls a stylesheet, a script and
8 images from its own host: 11 requests per load. One Playwright driver (playwright-core from
tests/workloads/package.json, Debian's /usr/bin/chromium as the browser) starts the browser
once and loads the page N times, each in a fresh browser context (its own cache and
connections: every load pays DNS, TCP, CONNECT and TLS again), timing `page.goto(url,
{waitUntil: "load"})` with performance.now() in the driver. Variants:

  direct             the driver and Chromium on the host, --host-resolver-rules mapping the name
                     to 127.0.0.2:port, the test CA trusted through the same managed policy
                     (CACertificates) the sandbox gets, bound over /etc/chromium in a private
                     mount namespace (unshare -m: the host's /etc is not touched)
  SPACE tunneled     the driver and Chromium in a sandbox (default limits but --cpus = the
                     host's CPUs, as the direct browser has), through the gateway's proxy
                     (CONNECT, SNI checked, bytes relayed)
  SPACE intercepted  the same sandbox, a host a secret is bound to: TLS terminated with the
                     sandbox CA, each request authorized, new TLS to the upstream, responses
                     scanned for the secret

A sandbox cannot reach the site any other way than through the gateway (that is the point of
it), so "direct" is the host: the same binary, flags, driver and page. The variants are
interleaved over --rounds rounds; the report gives medians and their ratio to direct.
Everything started (spaced and its sandbox, the site) is stopped by pid and the scratch
directory removed.
"""

import argparse
import base64
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
WORKLOADS = os.path.join(REPO, "tests", "workloads")
TUNNELED, INTERCEPTED = "tunnel.example.test", "icpt.example.test"
TOKEN_VAR = "PAGE_TOKEN"

DRIVER = r"""// bench/page_load.py's driver: N loads of URL, each in a fresh context; prints JSON.
const { chromium } = require('playwright-core');
(async () => {
  const [url, n, rules] = [process.argv[2], Number(process.argv[3]), process.argv[4]];
  const args = rules ? ['--host-resolver-rules=' + rules] : [];
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args });
  const ms = [];
  try {
    for (let i = 0; i <= n; i++) {
      const ctx = await browser.newContext();
      const page = await ctx.newPage();
      const t0 = performance.now();
      const resp = await page.goto(url, { waitUntil: 'load' });
      const dt = performance.now() - t0;
      const ok = await page.evaluate(() => document.querySelectorAll('img.ok').length);
      if (resp.status() !== 200 || ok !== 8)
        throw new Error(`load ${i}: ${resp.status()}, ${ok} of 8 images`);
      if (i > 0) ms.push(dt);  // the first load warms the browser (and the gateway's leaf cache)
      await ctx.close();
    }
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(ms));
})().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
"""


def bench_page(root):
    """/bench.html and its 10 sub-resources under the site's root."""
    os.makedirs(os.path.join(root, "b"), exist_ok=True)
    with open(os.path.join(root, "b", "style.css"), "w") as f:
        f.write("body{margin:0;font:14px sans-serif}" + "p{color:#333}" * 2000 + "\n")
    with open(os.path.join(root, "b", "app.js"), "w") as f:
        f.write("window.bench = %s;\n" % json.dumps(["x" * 64] * 800))
    for i in range(8):
        with open(os.path.join(root, "b", "i%d.gif" % i), "wb") as f:
            f.write(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;" + bytes(20000))
    imgs = "".join('<img src="/b/i%d.gif?v=%d" onload="this.className=\'ok\'">' % (i, i)
                   for i in range(8))
    with open(os.path.join(root, "bench.html"), "w") as f:
        f.write('<!DOCTYPE html><html><head><title>bench</title>'
                '<link rel="stylesheet" href="/b/style.css"><script src="/b/app.js"></script>'
                '</head><body><p>page-load bench</p>%s</body></html>\n' % imgs)


def run(argv, env=None, timeout=600, what=None):
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError("%s failed (rc %d): %s" % (what or " ".join(argv[:3]), p.returncode,
                                                      (p.stderr or p.stdout).strip()[-2000:]))
    return p.stdout


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
        self.site = self.daemon = self.sandbox = None
        self.samples = {"direct": [], "tunnel": [], "intercept": []}

    def start(self):
        sys.path.insert(0, WORKLOADS)
        sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
        import harness
        import wl_site
        harness.npm_ci(WORKLOADS)
        self.site = wl_site.Site(self.work, "denied.example.test")
        bench_page(self.site.root)
        self.site.start()
        target = "127.0.0.2:%d" % self.site.port
        self.rules = "MAP *.example.test %s" % target
        config = {
            "pools": [],
            "profiles": {"test": {"egress": {"allow": [TUNNELED, INTERCEPTED],
                                             "allow_networks": ["127.0.0.2/32"]}}},
            "secrets": {TOKEN_VAR: {"value": "page-load-secret-0123456789",
                                    "hosts": [INTERCEPTED], "profiles": ["test"]}},
            "gateway": {"resolve": {"%s:443" % h: target for h in (TUNNELED, INTERCEPTED)},
                        "upstream_ca_files": [self.site.certs["ca"]],
                        "sandbox_ca_files": [self.site.certs["ca"]]},
        }
        cfg = os.path.join(self.work, "spaced.json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        log = open(os.path.join(self.work, "spaced.log"), "wb")
        self.daemon = subprocess.Popen(
            [os.path.join(self.build, "spaced"), "--state-dir", os.path.join(self.work, "state"),
             "--socket", self.sock, "--config", cfg],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        harness.wait_for(lambda: os.path.exists(self.sock) and self.healthy(), timeout=30,
                         what="spaced (log %s)" % log.name)
        # As many CPUs as the host's browser has (the default is 1): the rows then differ by
        # the path to the site, not by the CPU the browser may use.
        self.sandbox = run([self.space, "create", "--secret", TOKEN_VAR,
                            "--cpus", str(os.cpu_count())], env=self.env,
                           what="space create").strip().split()[-1]
        driver = os.path.join(self.work, "driver.js")
        with open(driver, "w") as f:
            f.write(DRIVER)
        run([self.space, "exec", self.sandbox, "--", "mkdir", "-p", "/root/pl"], env=self.env)
        run([self.space, "cp", os.path.join(WORKLOADS, "node_modules"),
             self.sandbox + ":/root/pl/node_modules"], env=self.env, what="space cp")
        run([self.space, "cp", driver, self.sandbox + ":/root/pl/driver.js"], env=self.env)
        # The host's Chromium trusts the test CA the way the sandbox's does: a managed policy,
        # here in a directory bound over /etc/chromium in a private mount namespace.
        pol = os.path.join(self.work, "host-chromium")
        os.makedirs(os.path.join(pol, "policies", "managed"))
        der = subprocess.run(["openssl", "x509", "-in", self.site.certs["ca"], "-outform", "DER"],
                             capture_output=True, check=True).stdout
        with open(os.path.join(pol, "policies", "managed", "bench.json"), "w") as f:
            json.dump({"CACertificates": [base64.b64encode(der).decode()],
                       "EncryptedClientHelloEnabled": False}, f)
        self.host_policy = pol
        os.symlink(os.path.join(WORKLOADS, "node_modules"), os.path.join(self.work, "node_modules"))

    def healthy(self):
        try:
            return run([self.space, "ls"], env=self.env, timeout=10) is not None
        except (RuntimeError, subprocess.TimeoutExpired):
            return False

    def load(self, key, n):
        if key == "direct":
            argv = ["unshare", "-m", "sh", "-c",
                    'mount --bind "$0" /etc/chromium && exec node "$1" "$2" "$3" "$4"',
                    self.host_policy, os.path.join(self.work, "driver.js"),
                    "https://%s/bench.html" % TUNNELED, str(n), self.rules]
            env = dict(os.environ, HOME=os.path.join(self.work, "home"))
            for k in list(env):
                if k.lower().endswith("_proxy"):
                    del env[k]
        else:
            host = TUNNELED if key == "tunnel" else INTERCEPTED
            argv = [self.space, "exec", self.sandbox, "--cwd", "/root/pl", "--", "node",
                    "driver.js", "https://%s/bench.html" % host, str(n)]
            env = self.env
        out = run(argv, env=env, what="the %s driver" % key)
        self.samples[key] += json.loads(out.strip().splitlines()[-1])

    def measure(self):
        per = -(-self.args.n // self.args.rounds)
        for _ in range(self.args.rounds):
            for key in self.samples:
                self.load(key, per)

    def via(self):
        out = run([self.space, "audit", self.sandbox, "--json"], env=self.env)
        events = [json.loads(line) for line in out.splitlines() if line.strip()]
        tunnels = sum(1 for e in events if e["kind"] == "egress.tunnel" and
                      e["data"].get("host") == TUNNELED)
        requests = sum(1 for e in events if e["kind"] == "egress.request" and
                       e["data"].get("host") == INTERCEPTED)
        denied = {}
        for e in events:
            if e["kind"] in ("egress.denied", "egress.error"):
                what = "%s %s: %s" % (e["kind"], e["data"].get("host"),
                                      e["data"].get("reason") or e["data"].get("error"))
                denied[what] = denied.get(what, 0) + 1
        return tunnels, requests, denied

    def close(self):
        try:
            if self.sandbox:
                subprocess.run([self.space, "rm", "--force", self.sandbox], env=self.env,
                               capture_output=True, timeout=60)
        finally:
            if self.daemon is not None and self.daemon.poll() is None:
                self.daemon.terminate()
                try:
                    self.daemon.wait(20)
                except subprocess.TimeoutExpired:
                    self.daemon.kill()
                    self.daemon.wait()
            if self.site is not None:
                self.site.stop()


def report(b, started, load0, load1, audit):
    sys.path.insert(0, HERE)
    import bench as base
    chromium = run(["/usr/bin/chromium", "--version"]).strip()
    label = {"direct": "direct (host)", "tunnel": "SPACE tunneled",
             "intercept": "SPACE intercepted"}
    d = median(b.samples["direct"])
    lines = [
        "# Page load through the SPACE gateway, %s" % started.strftime("%Y-%m-%d %H:%M"),
        "",
        "- commit: `%s`, build: `%s` (CMAKE_BUILD_TYPE=%s)" % (
            base.git_rev(), os.path.basename(b.build), base.build_type(b.build)),
        "- host: %s, %d CPUs (%s), kernel %s; %s; Node %s; playwright-core from "
        "tests/workloads/package.json" % (
            platform.node(), os.cpu_count(), base.cpu_model(), platform.release(), chromium,
            run(["node", "--version"]).strip()),
        "- load average at the start: %.2f %.2f %.2f, at the end: %.2f %.2f %.2f" % (
            load0 + load1),
        "- one page, /bench.html of tests/workloads/wl_site.py on 127.0.0.2 (HTML, a "
        "stylesheet, a script, 8 images: 11 requests, ~240 KB), loaded in a fresh browser "
        "context each time (new connections and TLS handshakes, empty cache); time of "
        "`page.goto(url, {waitUntil: 'load'})` in the Playwright driver; one warm-up load per "
        "run left out; %d rounds with the variants interleaved" % b.args.rounds,
        "- direct: the same Chromium, driver and page on the host, straight to 127.0.0.2 "
        "(a sandbox has no way out but the gateway, so the host is the only direct path); the "
        "test CA trusted there by the same CACertificates policy the sandbox gets; the sandbox "
        "has the default limits except `--cpus %d` (the host's CPUs, as the direct browser "
        "has; the default is 1)" % os.cpu_count(),
        "",
        "| variant | loads | median ms | min | max | x direct |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for k in ("direct", "tunnel", "intercept"):
        s = b.samples[k]
        lines.append("| %s | %d | %.1f | %.1f | %.1f | %.2f |" % (
            label[k], len(s), median(s), min(s), max(s), median(s) / d))
    tunnels, requests, denied = audit
    lines += ["", "The sandbox's audit log holds %d `egress.tunnel` events for %s, %d "
              "intercepted `egress.request` events for %s and %d denials or errors%s" % (
                  tunnels, TUNNELED, requests, INTERCEPTED, sum(denied.values()),
                  ": " + "; ".join("%d x %s" % (n, w) for w, n in sorted(denied.items()))
                  if denied else ".")]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", help="scratch directory (default: a new one under /tmp, removed)")
    ap.add_argument("--n", type=int, default=int(os.environ.get("BENCH_PAGE_N", "40")),
                    help="loads per variant (default $BENCH_PAGE_N or 40)")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    if not os.access("/usr/bin/chromium", os.X_OK):
        sys.exit("page-load bench: /usr/bin/chromium is missing (scripts/install-deps.sh)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("page-load bench: terminated"))
    own_work = args.work is None
    work = tempfile.mkdtemp(prefix="space-page-bench.") if own_work else args.work
    os.makedirs(work, exist_ok=True)
    os.chmod(work, 0o755)
    started, load0 = datetime.datetime.now(), os.getloadavg()
    b = Bench(args, work)
    try:
        b.start()
        b.measure()
        audit = b.via()
        load1 = os.getloadavg()
    finally:
        b.close()
        if own_work:
            sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
            import harness
            harness.safe_rmtree(work)
    text = report(b, started, load0, load1, audit)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    print("page-load bench: wrote %s" % args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
