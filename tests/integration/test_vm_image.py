"""VM disks (`space image build-vm`, docs/vm-guest.md): an imported image becomes an ext4 disk
labelled space-image that passes e2fsck, holds the agent at /.space/space-agent (0755, root)
and keeps the image's owners; a second build is a cache hit;
`space image rm` removes it; the host image and unknown images are refused with a message."""

import json
import os
import shutil
import subprocess
import uuid

from harness import BUILD_DIR, SpaceTestCase, main
from test_images import build_rootfs_tar


def debugfs(disk, request):
    return subprocess.run(["debugfs", "-R", request, disk], capture_output=True, text=True,
                          timeout=60).stdout


class VmImageTest(SpaceTestCase):

    def test_build_vm_cache_and_remove(self):
        if not shutil.which("mke2fs") or not shutil.which("debugfs"):
            self.skipTest("e2fsprogs is not installed (scripts/install-deps.sh)")
        name = "vm-" + uuid.uuid4().hex[:8]
        tarball = os.path.join(self.tmp, name + ".tar.gz")
        build_rootfs_tar(tarball, "vm marker\n")
        rc, out, err = self.space("image", "import", name, tarball, timeout=120)
        self.assertEqual(rc, 0, (out, err))
        removed = False
        try:
            rc, out, err = self.space("image", "build-vm", name, "--json", timeout=300)
            self.assertEqual(rc, 0, (out, err))
            disk = json.loads(out)
            self.assertFalse(disk["cached"], disk)
            path = disk["path"]
            self.assertTrue(os.path.isfile(path), disk)
            self.assertTrue(path.startswith(self.daemon.state_dir), path)
            # progress lines on stderr, one per step
            self.assertIn("formatting ext4", err)
            self.assertIn("e2fsck", err)

            fsck = subprocess.run(["e2fsck", "-fn", path], capture_output=True, text=True,
                                  timeout=120)
            self.assertEqual(fsck.returncode, 0, fsck.stdout + fsck.stderr)
            label = subprocess.run(["e2label", path], capture_output=True, text=True).stdout
            self.assertEqual(label.strip(), "space-image")
            st = debugfs(path, "stat /.space/space-agent")
            self.assertIn("Mode:  0755", st)
            self.assertIn("User:     0   Group:     0", st)
            agent_size = os.path.getsize(os.path.join(BUILD_DIR, "space-agent"))
            self.assertIn("Size: %d" % agent_size, st)
            self.assertIn("vm marker", debugfs(path, "cat /etc/marker"))
            # the image's tree, owners as the archive gave them (root)
            self.assertIn("User:     0", debugfs(path, "stat /bin/sh"))

            # a second build: the same disk, untouched
            mtime = os.stat(path).st_mtime_ns
            rc, out2, err2 = self.space("image", "build-vm", name, "--json", timeout=120)
            self.assertEqual(rc, 0, (out2, err2))
            self.assertTrue(json.loads(out2)["cached"], out2)
            self.assertEqual(os.stat(path).st_mtime_ns, mtime)
            rc, _, err3 = self.space("image", "build-vm", name, timeout=120)
            self.assertEqual(rc, 0, err3)
            self.assertIn("is current", err3)

            rc, out, err = self.space("image", "rm", name)
            self.assertEqual(rc, 0, (out, err))
            removed = True
            self.assertFalse(os.path.exists(path))
            rc, _, err = self.space("image", "build-vm", name)
            self.assertEqual(rc, 125)
            self.assertIn("unknown image", err)
        finally:
            if not removed:
                self.space("image", "rm", name)

    def test_host_image_refused(self):
        rc, out, err = self.space("image", "build-vm", "host")
        self.assertEqual(rc, 125, (out, err))
        self.assertIn("space image import", err)
        r = self.api("POST", "/v1/images/host/vm")
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json["error"]["code"], "invalid_argument")


if __name__ == "__main__":
    main()
