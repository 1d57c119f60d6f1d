"""What the E2B door's suites share (test_e2b_*.py, docs/e2b.md): a test class whose spaced also
listens for E2B's protocol, E2B's official SDKs installed from tests/e2b's lock file, and API keys
in E2B's form made the way a user makes them (`space token create ... --e2b`)."""

import os
import shutil
import subprocess
import unittest

from harness import REPO, SPACE, SpaceTestCase, free_port, npm_ci

E2B_DIR = os.path.join(REPO, "tests", "e2b")  # package.json + package-lock.json: e2b, @e2b/...
ALL_OPS = ("read", "create", "exec", "files", "lifecycle")


def e2b_key(socket, name, profile="test", ops=ALL_OPS, ttl="2h"):
    """`space token create --name NAME --profile P --op ... --ttl T --e2b` against the daemon on
    `socket`: the key E2B's SDKs take as E2B_API_KEY ("e2b_" and 76 hex digits)."""
    argv = [SPACE, "token", "create", "--name", name, "--profile", profile, "--ttl", ttl,
            "--e2b"]
    for op in ops:
        argv += ["--op", op]
    p = subprocess.run(argv, env=dict(os.environ, SPACE_SOCKET=socket), capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError("space token create --e2b failed: " + p.stderr)
    key = p.stdout.strip()
    if not (key.startswith("e2b_") and len(key) == 80):
        raise AssertionError("not an E2B key: %r" % key)
    return key


class E2bDoorTestCase(SpaceTestCase):
    """spaced with SPACE's TCP API (cls.port) and the E2B door (cls.e2b_port, with E2B_DOMAIN
    for Host routing when set); E2B's SDKs installed; cls.key, a key with every operation of
    profile "test". Each test checks that spaced is still alive after it."""

    API_LISTEN = True
    E2B_DOMAIN = ""

    @classmethod
    def daemon_config(cls):
        cfg = super().daemon_config()
        cls.e2b_port = free_port()
        cfg["e2b"] = {"listen": "127.0.0.1:%d" % cls.e2b_port}
        if cls.E2B_DOMAIN:
            cfg["e2b"]["domain"] = cls.E2B_DOMAIN
        return cfg

    @classmethod
    def prepare_class(cls):
        if shutil.which("node") is None:
            raise unittest.SkipTest("node is not installed (scripts/install-deps.sh)")
        npm_ci(E2B_DIR)
        cls.key = e2b_key(cls.daemon.socket, cls.__name__.lower())

    @classmethod
    def e2b_env(cls, key=None):
        """Only what a user sets for E2B's SDKs (and PATH, HOME)."""
        url = "http://127.0.0.1:%d" % cls.e2b_port
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": os.environ.get("HOME", "/root"),
                "E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": key or cls.key}

    def tearDown(self):
        self.assertTrue(self.daemon.alive(), "spaced died:\n%s" % self.daemon.log_tail())
