"""Browsing: Debian's headless Chromium inside a linux sandbox, launched as agents launch it
(`chromium --headless --no-sandbox ...`, nothing else worked around), through the egress
gateway to a local HTTPS site (wl_site.py on 127.0.0.2, its own test CA) — on a host the
gateway intercepts (a secret is bound to it) and on one it tunnels. The screenshot is copied
out and its pixels checked; a sub-resource from a denied host is refused before it leaves the
gateway; a WebSocket to an allowed host carries messages both ways; nothing is left running
after the browser exits. Then a Playwright script (playwright-core from npm, Debian's chromium
as its browser) does the same inside the sandbox. docs/workloads.md says what Chromium needs.
"""

import json
import os
import shutil
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402
import wl_site  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
INTERCEPTED = "icpt.example.test"  # BROWSE_TOKEN is bound to it: the gateway terminates TLS
TUNNELED = "tunnel.example.test"   # allowed, nothing bound, no path rule: TLS relayed as is
DENIED = "denied.example.test"     # resolvable by the gateway, but no rule allows it
SECRET = "browse-secret-value-0b7e41d2"
# As an agent runs it: headless, --no-sandbox (no user namespaces for Chromium's own sandbox
# inside a container), a window size for the screenshot.
HEADLESS = "chromium --headless --no-sandbox --window-size=320,240"


@unittest.skipUnless(os.access(CHROMIUM, os.X_OK),
                     "Debian's chromium is not installed (scripts/install-deps.sh installs it)")
class BrowserTest(harness.SpaceTestCase):

    @classmethod
    def daemon_config(cls):
        cls.site = wl_site.Site(cls.tmp, DENIED).start()
        target = "%s:%d" % (wl_site.HOST, cls.site.port)
        return {
            "profiles": {"test": {"egress": {"allow": [INTERCEPTED, TUNNELED],
                                             "allow_networks": ["127.0.0.2/32"]}}},
            "secrets": {"BROWSE_TOKEN": {"value": SECRET, "hosts": [INTERCEPTED],
                                         "profiles": ["test"]}},
            "gateway": {"resolve": {"%s:443" % h: target
                                    for h in (INTERCEPTED, TUNNELED, DENIED)},
                        "upstream_ca_files": [cls.site.certs["ca"]],
                        "sandbox_ca_files": [cls.site.certs["ca"]]},
        }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # The defaults (512 MiB, 256 pids) are what this runs under: docs/workloads.md.
        cls.sid = cls.create_for_class("--secret", "BROWSE_TOKEN")

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.site.stop()

    # -- helpers -------------------------------------------------------------------------------

    def sh(self, script, timeout=120):
        return self.space("exec", self.sid, "--", "sh", "-c", script, timeout=timeout)

    def sh_ok(self, script, timeout=120):
        rc, out, err = self.sh(script, timeout)
        self.assertEqual(rc, 0, "in sandbox: %s\nrc %d\nstdout: %s\nstderr: %s" %
                         (script, rc, out[-3000:], err[-3000:]))
        return out

    def audit(self):
        out = self.space_ok("audit", self.sid, "--json")
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def copy_out(self, path):
        local = os.path.join(self.tmp, os.path.basename(path) + ".%d" % len(os.listdir(self.tmp)))
        self.space_ok("cp", "%s:%s" % (self.sid, path), local)
        with open(local, "rb") as f:
            return f.read()

    def assert_painted(self, png, width=320, height=240):
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n", "not a PNG: %r" % png[:16])
        w, h, rows = wl_site.png_pixels(png)
        self.assertEqual((w, h), (width, height))
        for x, y in ((w // 2, h - 10), (w - 5, h // 2), (10, h - 5)):
            got = rows[y][x]
            self.assertTrue(all(abs(a - b) <= 3 for a, b in zip(got, wl_site.COLOUR)),
                            "pixel (%d,%d) is %r, the page paints %r" %
                            (x, y, got, wl_site.COLOUR))

    def assert_no_process_left(self):
        """Once the browser's exec returned, only the agent (pid 1) is left in the sandbox."""
        last = []

        def only_agent():
            last[:] = json.loads(self.space_ok("ps", self.sid, "--json"))
            return [p for p in last if p.get("pid") != 1] == []
        try:
            harness.wait_for(only_agent, timeout=15, what="the browser's processes to go")
        except AssertionError:
            self.fail("processes left in the sandbox: %s" % json.dumps(last)[:3000])

    def via_of(self, host):
        """How the gateway carried `host`: 'intercept' (egress.request events), 'tunnel', or
        None."""
        events = self.audit()
        if any(e["kind"] == "egress.request" and e["data"].get("host") == host and
               e["data"].get("via") == "intercept" for e in events):
            return "intercept"
        if any(e["kind"] == "egress.tunnel" and e["data"].get("host") == host for e in events):
            return "tunnel"
        return None

    # -- tests ---------------------------------------------------------------------------------

    def screenshot(self, host):
        self.sh_ok("rm -f /tmp/p.png && %s --screenshot=/tmp/p.png https://%s/ 2>/tmp/chromium.err"
                   " || { cat /tmp/chromium.err >&2; exit 1; }" % (HEADLESS, host), timeout=150)
        png = self.copy_out("/tmp/p.png")
        self.assert_painted(png)
        self.assertIn(host, self.site.seen_hosts())
        self.assert_no_process_left()

    def test_screenshot_intercepted(self):
        self.screenshot(INTERCEPTED)
        self.assertEqual(self.via_of(INTERCEPTED), "intercept")

    def test_screenshot_tunneled(self):
        self.screenshot(TUNNELED)
        self.assertEqual(self.via_of(TUNNELED), "tunnel")

    def test_denied_subresources_refused(self):
        dom = self.sh_ok("%s --dump-dom https://%s/ 2>/dev/null" % (HEADLESS, INTERCEPTED),
                         timeout=150)
        # The page's JS saw both loads fail...
        self.assertIn('<p id="img">img-error</p>', dom)
        self.assertIn('<p id="script">script-error</p>', dom)
        # ... because the gateway refused them: the upstream (which would have answered for
        # that name, the resolver override has it) never saw a request for it.
        self.assertNotIn(DENIED, self.site.seen_hosts())
        denied = [e for e in self.audit() if e["kind"] == "egress.denied" and
                  e["data"].get("host") == DENIED]
        self.assertTrue(denied, "no egress.denied event for %s" % DENIED)
        self.assert_no_process_left()

    def websocket(self, host):
        before = len(self.site.ws)
        dom = self.sh_ok("%s --dump-dom https://%s/ws.html 2>/dev/null" % (HEADLESS, host),
                         timeout=150)
        self.assertIn('<p id="ws">ws:echo:hello</p>', dom)  # server -> browser
        self.assertEqual(self.site.ws[before:], ["hello", "got:echo:hello"])  # browser -> server
        self.assert_no_process_left()

    def test_websocket_tunneled(self):
        self.websocket(TUNNELED)
        self.assertEqual(self.via_of(TUNNELED), "tunnel")

    def test_websocket_intercepted(self):
        self.websocket(INTERCEPTED)
        self.assertEqual(self.via_of(INTERCEPTED), "intercept")

    def test_secret_not_in_sandbox(self):
        # The browser's host is bound to a secret; the sandbox holds only its placeholder.
        env = self.inspect(self.sid)["env"]
        self.assertTrue(env["BROWSE_TOKEN"].startswith("space_ph_BROWSE_TOKEN_"), env)
        # Searched here, on what the sandbox hands out (the browser's profile and cache under
        # /root included), so that the search puts no secret into the sandbox.
        rc, files, err = self.space(
            "exec", self.sid, "--", "sh", "-c",
            "tar -cf - --ignore-failed-read /root /tmp /etc 2>/dev/null;"
            " cat /proc/[0-9]*/environ 2>/dev/null; true", binary=True, timeout=120)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertGreater(len(files), 1 << 16)
        self.assertNotIn(SECRET.encode(), files)
        self.assertNotIn(SECRET, self.space_ok("audit", self.sid, "--json"))

    @unittest.skipUnless(shutil.which("npm") and shutil.which("node"),
                         "node and npm are needed (scripts/install-deps.sh installs them)")
    def test_playwright(self):
        harness.npm_ci(HERE)  # playwright-core, pinned by package-lock.json; no browser download
        self.space_ok("exec", self.sid, "--", "mkdir", "-p", "/root/pw")
        self.space_ok("cp", os.path.join(HERE, "node_modules"), self.sid + ":/root/pw/node_modules")
        self.space_ok("cp", os.path.join(HERE, "playwright_page.js"),
                      self.sid + ":/root/pw/playwright_page.js")
        out = self.sh_ok("cd /root/pw && node playwright_page.js https://%s/ /tmp/pw.png"
                         % INTERCEPTED, timeout=150)
        seen = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(seen["status"], 200, seen)
        self.assertEqual(seen["title"], "space workload site")
        self.assertEqual(seen["background"], "rgb(%d, %d, %d)" % wl_site.COLOUR)
        self.assertEqual((seen["img"], seen["script"]), ("img-error", "script-error"))
        self.assert_painted(self.copy_out("/tmp/pw.png"))
        self.assertNotIn(DENIED, self.site.seen_hosts())
        self.assert_no_process_left()


if __name__ == "__main__":
    harness.main()
