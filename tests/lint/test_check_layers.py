#!/usr/bin/env python3
"""The layering check checked (ctest lint.layers_checker): scripts/check-layers.py run on small
temporary trees fails on an upward include and on a sibling include, naming each, and passes a
tree whose includes all point down."""
import pathlib
import subprocess
import sys
import tempfile
import unittest

CHECKER = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "check-layers.py"


def write_tree(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    src = root / "src"
    for rel, text in files.items():
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return src


def run_checker(src: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), str(src)], capture_output=True,
                          text=True, timeout=60)


CLEAN = {
    "common/error.h": "#pragma once\n#include <string>\n",
    "tls/x509.h": '#include "common/error.h"\n',
    "daemon/store.cc": '#include "daemon/store.h"\n#include "audit/sqlite_stmt.h"\n',
    "daemon/store.h": '#include "common/error.h"\n#include <gtest/gtest.h>\n',
    "audit/sqlite_stmt.h": '#include "common/error.h"\n',
    "spaced/main.cc": '#include "api/server.h"\n#include "daemon/store.h"\n',
    "api/server.h": '#include "daemon/store.h"\n',
}


def check_with(files):
    """Runs the checker over CLEAN with `files` (path -> text) added or replaced."""
    tree = dict(CLEAN, **files)
    with tempfile.TemporaryDirectory() as tmp:
        return run_checker(write_tree(pathlib.Path(tmp), tree))


class CheckLayersTest(unittest.TestCase):
    def test_clean_tree_passes(self):
        r = check_with({})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_upward_include_fails_and_is_named(self):
        r = check_with({"audit/audit_log.cc":
                        '#include "audit/sqlite_stmt.h"\n\n#include "daemon/store.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('src/audit/audit_log.cc:3: #include "daemon/store.h"', r.stdout)
        self.assertIn("higher daemon/", r.stdout)
        self.assertNotIn("sqlite_stmt", r.stdout)

    def test_sibling_include_fails(self):
        r = check_with({"proto/frame.cc": '#include "tls/x509.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("src/proto/frame.cc:1", r.stdout)
        self.assertIn("sibling", r.stdout)

    def test_common_including_anything_above_fails(self):
        r = check_with({"common/hex.h": '#pragma once\n#  include "tls/x509.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("src/common/hex.h:2", r.stdout)

    def test_api_including_the_e2b_door_fails(self):
        # The E2B door sits above the API it reuses: the API never reaches up into it.
        r = check_with({"e2b/door.h": '#include "api/server.h"\n',
                        "api/router.cc": '#include "e2b/door.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('src/api/router.cc:1: #include "e2b/door.h"', r.stdout)
        self.assertNotIn("src/e2b/door.h", r.stdout)

    def test_directory_without_a_level_fails(self):
        r = check_with({"newthing/x.cc": '#include "common/error.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("newthing/", r.stdout)


if __name__ == "__main__":
    unittest.main()
