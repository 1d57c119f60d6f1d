"""`space diff` of a qemu microVM (docs/snapshots.md, "diff"): the files are on the VM's own ext4
writable disk, which the host never mounts; the agent syncs the guest's file system, QEMU stops
the vCPUs, and the confined space-upper-reader lists the disk's overlay upper layer. The same
commands in a linux sandbox of the same image give the same added/changed/deleted lists (less
what each runtime makes at its own creation), through the CLI and the API. Then the guest, as
root, overwrites its own writable block device with garbage: diff answers a clear error, spaced
lives on, and nothing is left behind (no reader process, no host object).

The image is busybox (Debian's busybox-static) from a tarball, made a VM disk by `space image
build-vm`, as in test_qemu.py. One VM (TCG here: a boot takes seconds)."""

import json
import os

from harness import BUILD_DIR, main, proc_cmdline, proc_pids
from vm_image import VmSuite

APPLETS = ["sh", "cat", "echo", "ls", "rm", "mkdir", "ln", "dd", "grep", "sync", "true", "od",
           "head", "sleep"]
READER = os.path.join(BUILD_DIR, "space-upper-reader")

# The image's own files that the commands below change.
IMAGE_FILES = {"etc/motd": "hello\n", "etc/issue": "busybox\n", "srv/data/old": "old\n",
               "srv/data/older": "older\n"}

COMMANDS = " && ".join([
    "echo new > /root/added.txt",
    "echo spaced > '/root/sp ace.txt'",
    "mkdir -p /root/newdir/sub",
    "echo n > /root/newdir/sub/n",
    "echo more >> /etc/motd",                            # a file of the image, modified
    "rm /etc/issue",                                     # one deleted
    "rm /bin/od",                                        # a symlink of the image, deleted
    "rm -r /srv/data && mkdir /srv/data && echo x > /srv/data/x",  # an opaque directory
])

EXPECTED = {
    "added": ["/root/added.txt", "/root/newdir", "/root/newdir/sub", "/root/newdir/sub/n",
              "/root/sp ace.txt", "/srv/data/x"],
    "changed": ["/etc/motd", "/srv/data"],
    "deleted": ["/bin/od", "/etc/issue"],
}


def readers_running():
    return [pid for pid in proc_pids()
            if os.path.basename((proc_cmdline(pid) or [""])[0]) == "space-upper-reader"]


class QemuDiffTest(VmSuite):

    @classmethod
    def daemon_config(cls):
        return {"vm": {"boot_timeout_s": 120}}

    @classmethod
    def check_host(cls):
        super().check_host()
        if not os.access(READER, os.X_OK):
            raise AssertionError("%s is not built (ninja space-upper-reader)" % READER)

    @classmethod
    def prepare_class(cls):
        cls.make_class_image("bbdiff", APPLETS, dirs=("srv", "srv/data"), files=IMAGE_FILES)

    def diff(self, sid):
        return json.loads(self.space_ok("diff", sid, "--json", timeout=120))

    def test_diff_like_linux_then_a_hostile_disk(self):
        before = self.snapshot_host()
        vm = self.create("--runtime", "qemu", "--image", self.image, "--memory", "256M",
                         "--disk", "64M")
        lx = self.create("--runtime", "linux", "--image", self.image)

        # A fresh VM has changed nothing: what space-vminit and spaced made at its creation
        # (mount points, the egress trust store) is left out, as spaced's own files are for
        # linux.
        self.assertEqual(self.diff(vm), {"added": [], "changed": [], "deleted": []})
        lx_fresh = self.diff(lx)

        for sid in (vm, lx):
            self.exec_ok(sid, "sh", "-c", COMMANDS)

        # The API: exactly the expected lists, sorted, and the same as the linux sandbox's.
        r = self.api("GET", "/v1/sandboxes/%s/diff" % vm, timeout=120)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json, EXPECTED)
        lx_after = self.diff(lx)
        like_linux = {k: sorted(set(lx_after[k]) - set(lx_fresh[k])) for k in EXPECTED}
        self.assertEqual(r.json, like_linux, "linux: fresh %s, after %s" % (lx_fresh, lx_after))
        # The CLI: the same, as text and as JSON.
        self.assertEqual(self.diff(vm), EXPECTED)
        text = self.space_ok("diff", vm, timeout=120)
        want = sorted([(p, m) for k, m in (("added", "A"), ("changed", "C"), ("deleted", "D"))
                       for p in EXPECTED[k]])
        self.assertEqual(text, "".join("%s %s\n" % (m, p) for p, m in want))
        # The VM went on running (stopped only while its disk was read).
        self.assertEqual(self.inspect(vm)["state"], "running")
        self.assertEqual(self.exec_ok(vm, "cat", "/root/newdir/sub/n"), "n\n")
        # A paused VM cannot flush its writes: refused with the reason, and it stays paused.
        self.space_ok("pause", vm)
        rc, out, err = self.space("diff", vm, timeout=120)
        self.assertEqual(rc, 125, (out, err))
        self.assertIn("paused", err)
        self.assertEqual(self.inspect(vm)["state"], "paused")
        self.space_ok("resume", vm)
        self.assertEqual(readers_running(), [])

        # A hostile guest: root inside overwrites its own writable disk (the one labelled
        # space-rw) with garbage. diff says what is wrong, promptly; spaced is unharmed.
        find_rw = ("for d in /dev/vd?; do if dd if=$d bs=1 skip=1144 count=8 2>/dev/null | "
                   "grep -q space-rw; then echo $d; fi; done")
        dev = self.exec_ok(vm, "sh", "-c", find_rw).strip()
        self.assertRegex(dev, r"^/dev/vd[a-z]$")
        self.space("exec", vm, "--", "sh", "-c",
                   "dd if=/dev/urandom of=%s bs=64k count=128 conv=fsync 2>/dev/null; "
                   "sync" % dev, timeout=120)
        rc, out, err = self.space("diff", vm, timeout=120)
        self.assertEqual(rc, 125, (out, err))
        self.assertTrue(err.strip(), "no error message")
        self.assertNotIn("internal", err.lower(), err)
        r = self.api("GET", "/v1/sandboxes/%s/diff" % vm, timeout=120)
        self.assert_api_error(r, 400, 599)
        self.assertNotEqual(r.status, 500, r)
        self.assertTrue(self.daemon.alive())
        self.assertEqual(readers_running(), [])
        self.assertEqual(self.diff(lx), lx_after, "the other sandbox is unaffected")

        for sid in (vm, lx):
            self.space_ok("rm", "--force", sid, timeout=60)
        self.assert_no_leaks(before)
        self.assertEqual(readers_running(), [])


if __name__ == "__main__":
    main()
