"""Package managers and plotting inside a linux sandbox, as agents run them, through the egress
gateway to a local HTTPS "internet" (wl_site.py on 127.0.0.2, its own test CA) that requires
credentials the sandbox never holds:

- pip, in a venv (`python3 -m venv`), installs a wheel from a PEP 503 index that wants a Bearer
  token (a secret whose definition sets the header) or Basic credentials in the index URL
  (`https://__token__:$PYPI_TOKEN@host/simple/`: the gateway substitutes the placeholder inside
  the base64);
- npm installs from a registry that wants a token, named in `.npmrc` as
  `//host/:_authToken=${NPM_TOKEN}`;
- matplotlib (Debian's python3-matplotlib) renders a PNG with no MATPLOTLIBRC set (the host
  image carries /etc/matplotlibrc).

Each time the upstream receives the real secret and nothing inside the sandbox contains it.
docs/workloads.md lists the commands.
"""

import base64
import json
import os
import shutil
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402
import wl_site  # noqa: E402

PYPI = "pypi.example.test"        # Bearer, set by the gateway (secret with "header")
PYPI_BASIC = "pypi-basic.example.test"  # Basic, placeholder in the index URL
NPM = "npm.example.test"          # Bearer, placeholder in .npmrc
PYPI_SECRET = "pypi-bearer-secret-4c1d93"
BASIC_SECRET = "pypi-basic-secret-8e2a57"
NPM_SECRET = "npm-token-secret-61f0b8"
SECRETS = (PYPI_SECRET, BASIC_SECRET, NPM_SECRET)


class ToolsTest(harness.SpaceTestCase):

    @classmethod
    def daemon_config(cls):
        cls.site = wl_site.Site(cls.tmp, "denied.example.test").start()
        cls.site.auth = {
            PYPI: "Bearer " + PYPI_SECRET,
            PYPI_BASIC: "Basic " + base64.b64encode(b"__token__:" + BASIC_SECRET.encode()).decode(),
            NPM: "Bearer " + NPM_SECRET,
        }
        target = "%s:%d" % (wl_site.HOST, cls.site.port)
        return {
            "profiles": {"test": {"egress": {"allow": [PYPI, PYPI_BASIC, NPM],
                                             "allow_networks": ["127.0.0.2/32"]}}},
            "secrets": {
                "PYPI_BEARER": {"value": PYPI_SECRET, "hosts": [PYPI], "profiles": ["test"],
                                "header": "Authorization", "format": "Bearer {}"},
                "PYPI_TOKEN": {"value": BASIC_SECRET, "hosts": [PYPI_BASIC],
                               "profiles": ["test"]},
                "NPM_TOKEN": {"value": NPM_SECRET, "hosts": [NPM], "profiles": ["test"]},
            },
            "gateway": {"resolve": {"%s:443" % h: target for h in (PYPI, PYPI_BASIC, NPM)},
                        "upstream_ca_files": [cls.site.certs["ca"]]},
        }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sid = cls.create_for_class("--secret", "PYPI_BEARER", "--secret", "PYPI_TOKEN",
                                       "--secret", "NPM_TOKEN")

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.site.stop()

    def sh(self, script, timeout=180):
        return self.space("exec", self.sid, "--", "sh", "-c", script, timeout=timeout)

    def sh_ok(self, script, timeout=180):
        rc, out, err = self.sh(script, timeout)
        self.assertEqual(rc, 0, "in sandbox: %s\nrc %d\nstdout: %s\nstderr: %s" %
                         (script, rc, out[-3000:], err[-3000:]))
        return out

    def assert_secrets_absent(self):
        """No secret value in the sandbox's files (what pip, npm and the venv wrote included),
        in any process's environment, in `space inspect`, or in the audit log. The search runs
        here, on what the sandbox hands out, so that it puts no secret into the sandbox."""
        rc, files, err = self.space(
            "exec", self.sid, "--", "sh", "-c",
            "tar -cf - --ignore-failed-read /root /tmp /home /etc /var /workspace 2>/dev/null;"
            " cat /proc/[0-9]*/environ 2>/dev/null; true", binary=True, timeout=240)
        self.assertEqual(rc, 0, err[-2000:])
        self.assertGreater(len(files), 1 << 20, "the sandbox's files did not come out")
        audit = self.space_ok("audit", self.sid, "--json")
        inspect = json.dumps(self.inspect(self.sid))
        for s in SECRETS:
            self.assertNotIn(s.encode(), files)
            self.assertNotIn(s, audit)
            self.assertNotIn(s, inspect)

    def received(self, host):
        with self.site.lock:
            return [r for r in self.site.requests if (r["host"] or "").split(":")[0] == host]

    def venv(self, path):
        """A fresh venv at `path` (one per test: a wheel already there would not be fetched)."""
        self.sh_ok("rm -rf %s && python3 -m venv %s" % (path, path))

    def test_pip_bearer_header(self):
        self.venv("/tmp/venv-bearer")
        out = self.sh_ok("/tmp/venv-bearer/bin/pip install -q --disable-pip-version-check "
                         "--no-cache-dir --index-url https://%s/simple/ spacedemo && "
                         "/tmp/venv-bearer/bin/python -c 'import spacedemo; print(spacedemo.VALUE)'"
                         % PYPI)
        self.assertEqual(out.strip().splitlines()[-1], "42")
        got = self.received(PYPI)
        self.assertTrue(any(r["path"].startswith("/packages/") for r in got), got)
        self.assertTrue(all(r["authorization"] == "Bearer " + PYPI_SECRET for r in got), got)
        self.assert_secrets_absent()

    def test_pip_basic_in_index_url(self):
        self.venv("/tmp/venv-basic")
        rc, out, err = self.sh(
            "/tmp/venv-basic/bin/pip install -q --disable-pip-version-check --no-cache-dir "
            "--index-url \"https://__token__:$PYPI_TOKEN@%s/simple/\" spacedemo && "
            "/tmp/venv-basic/bin/python -c 'import spacedemo; print(spacedemo.VALUE)'"
            % PYPI_BASIC)
        self.assertEqual(rc, 0, "pip failed: %s %s" % (out[-2000:], err[-2000:]))
        self.assertEqual(out.strip().splitlines()[-1], "42")
        self.assertTrue(any(r["path"].startswith("/packages/") and
                            r["authorization"] == self.site.auth[PYPI_BASIC]
                            for r in self.received(PYPI_BASIC)))
        self.assert_secrets_absent()

    @unittest.skipUnless(shutil.which("npm"), "npm is not installed (scripts/install-deps.sh)")
    def test_npm_token_in_npmrc(self):
        out = self.sh_ok(
            "mkdir -p /tmp/napp && cd /tmp/napp && "
            "printf '%%s\\n' 'registry=https://%s/' '//%s/:_authToken=${NPM_TOKEN}' > .npmrc && "
            "npm install --no-audit --no-fund --loglevel=error npmdemo >/dev/null && "
            "node -e 'console.log(require(\"npmdemo\"))'" % (NPM, NPM))
        self.assertEqual(out.strip().splitlines()[-1], "42")
        got = self.received(NPM)
        self.assertTrue(any(r["path"].endswith(".tgz") for r in got), got)
        self.assertTrue(all(r["authorization"] == "Bearer " + NPM_SECRET for r in got), got)
        # What the sandbox keeps (.npmrc, npm's cache) holds the placeholder only.
        npmrc = self.sh_ok("cat /tmp/napp/.npmrc")
        self.assertIn("${NPM_TOKEN}", npmrc)
        self.assert_secrets_absent()

    def test_matplotlib_renders_png(self):
        # No MATPLOTLIBRC, no MPLBACKEND: what `python3` finds in the host image is enough.
        out = self.sh_ok(
            "env -u MATPLOTLIBRC -u MPLBACKEND python3 -c '"
            "import matplotlib; matplotlib.use(\"Agg\"); import matplotlib.pyplot as plt\n"
            "fig, ax = plt.subplots(figsize=(2, 2), dpi=50)\n"
            "ax.plot([0, 1], [0, 1]); ax.set_title(\"space\")\n"
            "fig.savefig(\"/tmp/plot.png\"); print(matplotlib.matplotlib_fname())' 2>&1")
        self.assertNotIn("Could not find matplotlibrc", out)
        self.assertEqual(out.strip().splitlines()[-1], "/etc/matplotlibrc")
        local = os.path.join(self.tmp, "plot.png")
        self.space_ok("cp", self.sid + ":/tmp/plot.png", local)
        with open(local, "rb") as f:
            png = f.read()
        w, h, rows = wl_site.png_pixels(png)
        self.assertEqual((w, h), (100, 100))
        self.assertIn((255, 255, 255), rows[2])  # the figure's white background


if __name__ == "__main__":
    harness.main()
