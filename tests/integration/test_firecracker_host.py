"""The firecracker runtime on a host that cannot run it (no /dev/kvm, or no Firecracker
binaries), through the real spaced and CLI: `space doctor` lists exactly what is missing, and
`space create --runtime firecracker` fails with the first reason and what to do, leaving no
sandbox, jail, cgroup or file behind. On a host that can run it this suite is skipped: the whole
lifecycle is tests/kvm/test_firecracker.py (`make test-kvm`)."""

import json
import os
import shutil
import unittest

from harness import SpaceTestCase, cgroup_dirs, main


def can_run_firecracker():
    return (os.access("/dev/kvm", os.R_OK | os.W_OK) and shutil.which("firecracker")
            and shutil.which("jailer"))


class FirecrackerUnavailableTest(SpaceTestCase):

    @classmethod
    def daemon_config(cls):
        # Binaries that certainly do not exist, so that the answer does not depend on PATH.
        return {"vm": {"firecracker": "space-test-no-firecracker", "jailer": "space-test-no-jailer"}}

    @classmethod
    def setUpClass(cls):
        if can_run_firecracker():
            raise unittest.SkipTest("this host runs Firecracker: make test-kvm covers it")
        super().setUpClass()

    def test_doctor_says_what_is_missing(self):
        doctor = json.loads(self.space_ok("doctor", "--json"))
        fc = doctor["runtimes"]["firecracker"]
        self.assertFalse(fc["available"])
        text = " ".join(fc["missing"])
        self.assertIn("space-test-no-firecracker not found in PATH", text)
        self.assertIn("jailer", text)
        if not os.path.exists("/dev/kvm"):
            self.assertIn("no /dev/kvm", text)
        self.assertEqual(fc["supported_versions"], "1.10 to 1.16")
        self.assertEqual(doctor["snapshots"]["by_runtime"]["firecracker"]["contents"], "machine")

    def test_create_fails_with_the_reason_and_leaves_nothing(self):
        before = set(cgroup_dirs())
        for args in (["create", "--runtime", "firecracker"],
                     ["run", "--runtime", "firecracker", "--", "true"]):
            rc, out, err = self.space(*args)
            self.assertEqual(rc, 125, (out, err))
            self.assertIn("the firecracker runtime cannot run on this host", err)
            self.assertIn("no /dev/kvm" if not os.path.exists("/dev/kvm") else "not found", err)
        self.assertEqual(os.listdir(os.path.join(self.daemon.state_dir, "sandboxes")), [])
        self.assertFalse(os.path.exists(os.path.join(self.daemon.state_dir, "firecracker",
                                                     "jails")))
        self.assertEqual(set(cgroup_dirs()) - before, set())
        listed = json.loads(self.space_ok("ls", "--json"))
        self.assertEqual(listed if isinstance(listed, list) else listed.get("sandboxes"), [])


if __name__ == "__main__":
    main()
