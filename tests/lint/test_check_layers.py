#!/usr/bin/env python3
"""The layering check checked (ctest lint.layers_checker): scripts/check-layers.py run on small
temporary trees fails on an upward include and on a sibling include, naming each, and passes a
tree whose includes all point down. Its finer rules too: api/, e2b/ and gateway/ include only
the daemon's interface headers; host/ has its level under the runtimes; inside runtime/, the
linux, qemu and firecracker runtimes stand above the shared files and do not include each
other."""
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
    # The layers above the daemon see its interfaces only (check-layers.py DAEMON_INTERFACES).
    "api/server.h": '#include "daemon/service.h"\n',
    "daemon/service.h": '#include "daemon/service_types.h"\n#include "runtime/runtime.h"\n',
    "daemon/service_types.h": '#include "common/error.h"\n',
    "host/cgroup.h": '#include "common/error.h"\n#include "tls/digest.h"\n',
    "tls/digest.h": '#include "common/error.h"\n',
    "runtime/runtime.h": '#include "common/error.h"\n',
    "runtime/vmm.cc": '#include "runtime/runtime.h"\n#include "host/cgroup.h"\n',
    "runtime/linux/linux_runtime.cc": '#include "runtime/runtime.h"\n#include "host/cgroup.h"\n',
    "runtime/qemu/qemu_runtime.cc": '#include "runtime/qemu/qmp.h"\n#include "runtime/vmm.h"\n',
    "runtime/qemu/qmp.h": '#include "common/error.h"\n',
    "runtime/vmm.h": '#include "runtime/runtime.h"\n',
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

    # --- the daemon's interfaces: api/, e2b/ and gateway/ include no other daemon/ header.

    def test_api_including_the_daemon_itself_fails(self):
        r = check_with({"daemon/daemon.h": '#include "daemon/service.h"\n',
                        "api/auth.cc": '#include "daemon/service.h"\n#include "daemon/daemon.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('src/api/auth.cc:2: #include "daemon/daemon.h"', r.stdout)
        self.assertIn("only the daemon's interfaces", r.stdout)
        self.assertNotIn("src/api/auth.cc:1", r.stdout)
        self.assertEqual(r.stdout.count("src/"), 1, r.stdout)

    def test_every_interface_header_passes_from_each_layer_above(self):
        headers = ["daemon/service.h", "daemon/service_types.h", "daemon/sandbox_state.h",
                   "daemon/tokens.h", "daemon/caller.h"]
        files = {h: '#include "common/error.h"\n' for h in headers}
        text = "".join(f'#include "{h}"\n' for h in headers)
        files.update({"api/auth.cc": text, "e2b/door.cc": text, "gateway/tokens.cc": text})
        r = check_with(files)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_gateway_and_e2b_including_daemon_internals_fail(self):
        r = check_with({"daemon/token_store.h": '#include "daemon/tokens.h"\n',
                        "daemon/tokens.h": '#include "common/error.h"\n',
                        "gateway/tokens.cc": '#include "daemon/token_store.h"\n',
                        "e2b/door.cc": '#include "daemon/tokens.h"\n#include "daemon/store.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('src/gateway/tokens.cc:1: #include "daemon/token_store.h"', r.stdout)
        self.assertIn('src/e2b/door.cc:2: #include "daemon/store.h"', r.stdout)
        self.assertNotIn("src/e2b/door.cc:1", r.stdout)

    def test_spaced_may_include_the_daemon_itself(self):
        # spaced's main starts the daemon: the interface rule is for api/, e2b/ and gateway/.
        r = check_with({"daemon/daemon.h": '#include "daemon/service.h"\n',
                        "spaced/main.cc": '#include "daemon/daemon.h"\n#include "api/server.h"\n'})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    # --- host/: above common, proto and tls, below the runtimes and the confined helpers.

    def test_host_including_a_runtime_fails(self):
        r = check_with({"host/launch.cc": '#include "host/cgroup.h"\n#include "runtime/vmm.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('src/host/launch.cc:2: #include "runtime/vmm.h"', r.stdout)
        self.assertIn("higher runtime/", r.stdout)

    def test_lower_levels_including_host_fail(self):
        r = check_with({"common/fd.h": '#include "host/cgroup.h"\n',
                        "tls/x509.h": '#include "host/cgroup.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("src/common/fd.h:1", r.stdout)
        self.assertIn("src/tls/x509.h:1", r.stdout)

    def test_helpers_above_host_may_use_it(self):
        r = check_with({"egressd/confine.cc": '#include "host/cgroup.h"\n',
                        "upper_reader/confine.cc": '#include "host/cgroup.h"\n',
                        "egress/proxy.cc": '#include "host/cgroup.h"\n'})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    # --- inside runtime/: the shared files, then linux | qemu | firecracker, then the registry.

    def test_one_runtime_including_another_fails(self):
        r = check_with({"runtime/linux/launcher.h": '#include "runtime/runtime.h"\n',
                        "runtime/firecracker/vsock.cc":
                            '#include "runtime/vmm.h"\n#include "runtime/linux/launcher.h"\n',
                        "runtime/qemu/qmp.cc": '#include "runtime/firecracker/api.h"\n',
                        "runtime/firecracker/api.h": '#include "runtime/runtime.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('src/runtime/firecracker/vsock.cc:2: #include "runtime/linux/launcher.h"',
                      r.stdout)
        self.assertIn('src/runtime/qemu/qmp.cc:1: #include "runtime/firecracker/api.h"', r.stdout)
        self.assertIn("sibling runtime", r.stdout)
        self.assertNotIn("vsock.cc:1", r.stdout)

    def test_shared_runtime_file_including_a_runtime_fails(self):
        r = check_with({"runtime/vm_host.cc": '#include "runtime/qemu/qmp.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('src/runtime/vm_host.cc:1: #include "runtime/qemu/qmp.h"', r.stdout)
        self.assertIn("includes higher runtime/qemu/", r.stdout)

    def test_registry_above_the_runtimes_passes_and_they_do_not_include_it(self):
        r = check_with({"runtime/registry.h": '#include "runtime/runtime.h"\n',
                        "runtime/registry.cc": '#include "runtime/registry.h"\n'
                                               '#include "runtime/linux/linux_runtime.h"\n'
                                               '#include "runtime/qemu/qemu_runtime.h"\n',
                        "runtime/linux/linux_runtime.h": '#include "runtime/runtime.h"\n',
                        "runtime/qemu/qemu_runtime.h": '#include "runtime/vmm.h"\n',
                        "daemon/daemon.cc": '#include "runtime/registry.h"\n'
                                            '#include "runtime/linux/linux_runtime.h"\n'})
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = check_with({"runtime/registry.h": '#include "runtime/runtime.h"\n',
                        "runtime/qemu/qmp.cc": '#include "runtime/registry.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('src/runtime/qemu/qmp.cc:1: #include "runtime/registry.h"', r.stdout)

    def test_runtime_subdirectory_without_a_level_fails(self):
        r = check_with({"runtime/kata/kata.cc": '#include "runtime/runtime.h"\n'})
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("runtime/kata/", r.stdout)


if __name__ == "__main__":
    unittest.main()
