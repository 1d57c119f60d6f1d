"""api/openapi.yaml is valid OpenAPI 3.0: `npm ci` here (Redocly CLI and swagger-parser, pinned by
package-lock.json; harness.npm_ci, as the SDK and MCP suites install theirs), then validate.mjs
lints the file with Redocly (redocly.yaml: the structural and spec rules as errors) and
validates it with swagger-parser, after a self-check that both refuse a planted slip.

No daemon is involved: whether the server answers as the file says is
tests/integration/test_openapi_conformance.py's business, and whether the file lists exactly the
server's routes is tests/unit/api/openapi_test.cc's. By hand: cd tests/openapi && npm ci &&
node validate.mjs.
"""

import os
import re
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402

INSTALL = "cd tests/openapi && npm ci"


class OpenApiSpecTest(unittest.TestCase):
    def test_spec_is_valid_openapi(self):
        if shutil.which("node") is None or shutil.which("npm") is None:
            self.fail("node and npm are needed (scripts/install-deps.sh installs them)")
        try:
            harness.npm_ci(HERE)
        except AssertionError as e:
            self.fail("the pinned validators (tests/openapi/node_modules) are missing and could "
                      "not be installed; `%s` installs them (it needs the npm registry or npm's "
                      "cache):\n%s" % (INSTALL, e))
        p = subprocess.run(["node", "validate.mjs"], cwd=HERE, capture_output=True, text=True,
                           timeout=300)
        print(p.stdout[-12000:])
        if p.returncode == 2:
            self.fail(p.stderr.strip() or "validate.mjs: node_modules is not what "
                      "package-lock.json pins; `%s` reinstalls it" % INSTALL)
        self.assertEqual(p.returncode, 0, p.stdout[-8000:] + p.stderr[-3000:])
        m = re.search(r"^(\d+) passed, (\d+) failed$", p.stdout, re.M)
        self.assertIsNotNone(m, "validate.mjs printed no summary")
        self.assertEqual(m.group(2), "0")
        # The self-check ran, and both validators passed the file itself.
        self.assertRegex(p.stdout, r"ok   self-check: redocly refuses")
        self.assertRegex(p.stdout, r"ok   self-check: swagger-parser refuses")
        self.assertRegex(p.stdout, r"ok   redocly \S+ lint")
        self.assertRegex(p.stdout, r"ok   swagger-parser \S+ validate")


if __name__ == "__main__":
    unittest.main()
