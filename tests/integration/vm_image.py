"""What the microVM suites (test_qemu*.py, tests/kvm/test_firecracker.py) share: a busybox image
made from the host's busybox-static (a tarball `space image import`s, then `space image
build-vm`), the checks that skip them where the guest kernel, busybox or QEMU is missing, a
local upstream for egress, and VmSuite, their base class."""

import http.server
import io
import os
import shutil
import subprocess
import tarfile
import threading
import unittest
import uuid

from harness import BUILD_DIR, SPACE, SpaceTestCase

BUSYBOX = "/bin/busybox"
KERNEL = os.path.join(BUILD_DIR, "guest", "vmlinux")


def busybox_tar(path, applets, dirs=(), files=None, host_files=()):
    """A gzip'd tar at `path`: /bin/busybox and a symlink to it per applet, the directories
    bin, etc, root, tmp (1777) and `dirs`, `files` ({arcname: text or bytes}, mode 0644) and
    `host_files` ((host path, arcname) pairs)."""
    with tarfile.open(path, "w:gz") as tar:
        for d in ("bin", "etc", "root", "tmp", *dirs):
            ti = tarfile.TarInfo(d)
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(ti)
        tar.add(BUSYBOX, arcname="bin/busybox")
        for a in applets:
            ti = tarfile.TarInfo("bin/" + a)
            ti.type = tarfile.SYMTYPE
            ti.linkname = "busybox"
            tar.addfile(ti)
        for name, body in (files or {}).items():
            data = body.encode() if isinstance(body, str) else body
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            tar.addfile(ti, io.BytesIO(data))
        for src, arc in host_files:
            tar.add(src, arcname=arc)


def skip_without_vm():
    """Raises unittest.SkipTest where this host cannot run the suites' microVMs."""
    if not os.path.exists(KERNEL):
        raise unittest.SkipTest(
            "no guest kernel at %s: `make build` makes it (scripts/guest-kernel.sh)" % KERNEL)
    if not os.path.exists(BUSYBOX) or not shutil.which("qemu-system-x86_64"):
        raise unittest.SkipTest(
            "busybox-static or qemu-system-x86 missing: scripts/install-deps.sh installs them")


def make_vm_image(socket, name, tarball):
    """`space image import NAME TARBALL` and `space image build-vm NAME` against `socket`."""
    env = dict(os.environ, SPACE_SOCKET=socket)
    for args in (("image", "import", name, tarball), ("image", "build-vm", name)):
        p = subprocess.run([SPACE, *args], capture_output=True, text=True, timeout=300, env=env)
        if p.returncode != 0:
            raise AssertionError("%s: %s %s" % (args, p.stdout, p.stderr))


class HelloUpstream(http.server.BaseHTTPRequestHandler):
    """An "internet" host on loopback: answers every GET with "hello from upstream <path>"."""

    def do_GET(self):
        body = b"hello from upstream " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def start_upstream():
    """A HelloUpstream on 127.0.0.1 (an ephemeral port), served from a daemon thread; the
    caller shutdown()s it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HelloUpstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def upstream_config(port, allow=("allowed.test",)):
    """A daemon config whose profile "test" may reach `allow` (names of the upstream on
    127.0.0.1:port: allowed.test, and denied.test, which no profile allows), for microVMs that
    boot in at most 120 s."""
    return {"profiles": {"test": {"egress": {"allow": list(allow),
                                             "allow_networks": ["127.0.0.0/8"]}}},
            "gateway": {"resolve": {"allowed.test": "127.0.0.1:%d" % port,
                                    "denied.test": "127.0.0.1:%d" % port}},
            "vm": {"boot_timeout_s": 120}}


class VmSuite(SpaceTestCase):
    """A class of microVM tests: setUpClass skips where this host cannot run them
    (check_host) before anything starts; prepare_class() makes the class's image
    (make_class_image). tearDownClass also stops cls.upstream, for classes whose daemon_config()
    started one (start_upstream)."""

    upstream = None

    @classmethod
    def check_host(cls):
        skip_without_vm()

    @classmethod
    def make_class_image(cls, prefix, applets, **tar_args):
        """cls.image: a busybox image named PREFIX-<random> with `applets` (busybox_tar's other
        arguments in tar_args), imported and built for VMs by the class's daemon."""
        cls.image = "%s-%s" % (prefix, uuid.uuid4().hex[:8])
        tarball = os.path.join(cls.tmp, "busybox.tar.gz")
        busybox_tar(tarball, applets, **tar_args)
        make_vm_image(cls.daemon.socket, cls.image, tarball)

    @classmethod
    def setUpClass(cls):
        cls.check_host()
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            if cls.upstream is not None:
                cls.upstream.shutdown()
                cls.upstream = None
