"""The TypeScript SDK (sdk/typescript) against a real spaced: builds it with the TypeScript
compiler from npm (`npm ci`, pinned by package-lock.json), runs its node:test suite
(sdk/typescript/test/) against this class's daemon, over the Unix socket and over the TCP
listener with tokens, and runs the README's quick start as pasted.
"""

import os
import re
import subprocess
import tempfile
import unittest

from harness import REPO, SpaceTestCase, npm_ci

SDK = os.path.join(REPO, "sdk", "typescript")


def run(argv, cwd, env=None, timeout=600):
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (" ".join(argv), p.returncode,
                                                          p.stdout[-4000:], p.stderr[-4000:]))
    return p


def build_sdk():
    """npm ci, then `npm run build` (tsc, and the code interpreter's script into dist/)."""
    npm_ci(SDK)
    run(["npm", "run", "--silent", "build"], SDK)


class TypeScriptSdkTest(SpaceTestCase):
    API_LISTEN = True

    @classmethod
    def prepare_class(cls):
        build_sdk()

    def token(self, ops):
        r = self.api("POST", "/v1/tokens", {"name": "ts-" + "-".join(ops), "profiles": ["test"],
                                            "ops": ops, "ttl": "1h"})
        self.assertEqual(r.status, 201, r.body)
        return r.json["token"]

    def test_node_test_suite(self):
        env = dict(os.environ, SPACE_SOCKET=self.daemon.socket,
                   SPACE_TEST_API="http://127.0.0.1:%d" % self.port,
                   SPACE_TEST_TOKEN=self.token(["read", "create", "exec", "files", "lifecycle"]),
                   SPACE_TEST_RO_TOKEN=self.token(["read"]))
        env.pop("SPACE_API", None)
        p = subprocess.run(["node", "--test", "--test-reporter=spec", "test/"], cwd=SDK, env=env,
                           capture_output=True, text=True, timeout=300)
        print(p.stdout[-6000:])
        self.assertEqual(p.returncode, 0, p.stdout[-6000:] + p.stderr[-3000:])
        self.assertRegex(p.stdout, r"pass [1-9]")
        self.assertRegex(p.stdout, r"fail 0")
        self.assertNotRegex(p.stdout, r"skipped [1-9]")

    def test_readme_quick_start_runs_as_pasted(self):
        with open(os.path.join(SDK, "README.md")) as fh:
            block = re.search(r"```js\n(.*?)```", fh.read(), re.S).group(1)
        with tempfile.TemporaryDirectory() as app:
            # An app that depends on the package, as `npm install ./sdk/typescript` leaves it.
            os.makedirs(os.path.join(app, "node_modules"))
            os.symlink(SDK, os.path.join(app, "node_modules", "space-sandbox"))
            with open(os.path.join(app, "main.mjs"), "w") as fh:
                fh.write(block)
            env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
            env.pop("SPACE_API", None)
            p = subprocess.run(["node", "main.mjs"], cwd=app, env=env, capture_output=True,
                               text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["42", "hello.py"])


if __name__ == "__main__":
    unittest.main()
