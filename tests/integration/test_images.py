"""Images: importing a small root filesystem tarball (built here from a few host binaries and
the libraries ldd names), running in it, listing and removing it; a hostile tarball cannot
write outside the image; and `space doctor` describes the host."""

import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid

from harness import SpaceTestCase, main

TOOLS = ["sh", "echo", "cat", "ls", "id", "hostname", "uname", "true"]


def _libs(binary):
    """The shared libraries and loader a binary needs, as absolute paths (from ldd)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        if "=>" in parts:
            i = parts.index("=>")
            if i + 1 < len(parts) and parts[i + 1].startswith("/"):
                libs.append(parts[i + 1])
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])  # the loader
    return libs


def build_rootfs_tar(path, marker):
    """A minimal root filesystem: /bin with TOOLS, their libraries at the paths ldd gives,
    /etc with passwd and a marker file, and empty mount points."""
    members = {}
    for tool in TOOLS:
        src = shutil.which(tool, path="/usr/bin:/bin")
        members["bin/" + tool] = os.path.realpath(src)
        for lib in _libs(src):
            members[lib.lstrip("/")] = os.path.realpath(lib)
    with tarfile.open(path, "w:gz") as tar:
        dirs = {"bin", "etc", "tmp", "root", "proc", "dev", "sys", "run", "var", "usr"}
        for name in members:
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        for d in sorted(dirs):
            ti = tarfile.TarInfo(d)
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(ti)
        for name, src in sorted(members.items()):
            with open(src, "rb") as f:
                data = f.read()
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o755
            tar.addfile(ti, io.BytesIO(data))
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
                           ("etc/group", "root:x:0:\n"), ("etc/marker", marker)):
            data = text.encode()
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(data), 0o644
            tar.addfile(ti, io.BytesIO(data))


class ImagesTest(SpaceTestCase):

    def import_image(self, name, tarball):
        return self.space("image", "import", name, tarball, timeout=120)

    def test_import_run_list_remove(self):
        name = "it-" + uuid.uuid4().hex[:8]
        marker = "image marker %s\n" % name
        tarball = os.path.join(self.tmp, name + ".tar.gz")
        build_rootfs_tar(tarball, marker)
        rc, out, err = self.import_image(name, tarball)
        self.assertEqual(rc, 0, (out, err))
        self.addCleanup(self.space, "image", "rm", name)

        rc, out, err = self.space("run", "--image", name, "--", "/bin/sh", "-c",
                                  "cat /etc/marker; cd /bin && echo *; "
                                  "test -e /usr/bin/python3 && echo HAS_PYTHON; hostname; id -u")
        self.assertEqual(rc, 0, (out, err))
        lines = out.splitlines()
        self.assertEqual(lines[0] + "\n", marker)
        self.assertEqual(sorted(lines[1].split()), sorted(TOOLS))
        self.assertNotIn("HAS_PYTHON", out)
        self.assertRegex(lines[2], r"^sb_")
        self.assertEqual(lines[3], "0")

        # The image is read-only underneath; each sandbox gets its own writable layer.
        sid = self.create("--image", name)
        self.exec_ok(sid, "/bin/sh", "-c", "echo changed > /etc/marker")
        self.assertEqual(self.exec_ok(sid, "cat", "/etc/marker"), "changed\n")
        rc, out, err = self.space("run", "--image", name, "--", "cat", "/etc/marker")
        self.assertEqual((rc, out), (0, marker), err)
        self.space_ok("rm", sid)

        images = self.api_list("/v1/images", "images")
        self.assertIn(name, [i.get("name") for i in images])
        rc, out, err = self.space("image", "ls")
        self.assertEqual(rc, 0, err)
        self.assertIn(name, out)

        self.space_ok("image", "rm", name)
        rc, out, err = self.space("run", "--image", name, "--", "true")
        self.assertEqual(rc, 125, (out, err))
        self.assertNotIn(name, [i.get("name") for i in self.api_list("/v1/images", "images")])

    def test_import_errors(self):
        bad = os.path.join(self.tmp, "not-a-tar.tar")
        with open(bad, "wb") as f:
            f.write(b"this is not a tar archive" * 100)
        rc, out, err = self.import_image("it-bad", bad)
        self.assertEqual(rc, 125, (out, err))
        rc, out, err = self.import_image("it-missing", os.path.join(self.tmp, "missing.tar"))
        self.assertNotEqual(rc, 0)
        tarball = os.path.join(self.tmp, "ok.tar.gz")
        build_rootfs_tar(tarball, "x\n")
        for bad_name in ("../evil", "a/b", "", "host"):
            rc, out, err = self.import_image(bad_name, tarball)
            self.assertNotEqual(rc, 0, "image name %r accepted" % bad_name)
        rc, out, err = self.space("run", "--image", "no-such-image", "--", "true")
        self.assertEqual(rc, 125, (out, err))

    def test_hostile_tarballs_stay_inside(self):
        # One archive per attack, so that each is tried even when the importer stops at the
        # first bad entry.
        tag = uuid.uuid4().hex[:8]
        landing = os.path.join(self.tmp, "landing-" + tag)
        os.mkdir(landing)
        dotdot_target = "/tmp/space-it-dotdot-evil-" + tag
        abs_target = "/tmp/space-it-abs-evil-" + tag

        def member_file(name, data=b"evil\n"):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            return ti, io.BytesIO(data)

        def member_link(name, target, kind):
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = kind, target
            return ti, None

        attacks = {
            "dotdot": [member_file("../../../../../../../.." + dotdot_target)],
            "absolute": [member_file(abs_target)],
            "symlink-then-file": [member_link("escape", landing, tarfile.SYMTYPE),
                                  member_file("escape/through-symlink")],
            "symlink-dir-then-file": [member_link("etc/escape", "../../../../../../" + landing,
                                                  tarfile.SYMTYPE),
                                      member_file("etc/escape/through-relative-symlink")],
            "hardlink-to-host": [member_link("hardlink", "/etc/shadow", tarfile.LNKTYPE)],
            "hardlink-dotdot": [member_link("hardlink2", "../../../../../../etc/shadow",
                                            tarfile.LNKTYPE)],
        }
        shadow_ino = os.stat("/etc/shadow").st_ino if os.path.exists("/etc/shadow") else None
        for attack, members in attacks.items():
            with self.subTest(attack=attack):
                tarball = os.path.join(self.tmp, "hostile-%s.tar" % attack)
                with tarfile.open(tarball, "w") as tar:
                    for d in ("bin", "etc", "tmp"):
                        ti = tarfile.TarInfo(d)
                        ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                        tar.addfile(ti)
                    for ti, data in members:
                        tar.addfile(ti, data)
                name = "it-hostile-%s-%s" % (attack, tag)
                rc, out, err = self.import_image(name, tarball)
                if rc == 0:
                    self.addCleanup(self.space, "image", "rm", name)
                else:
                    self.assertEqual(rc, 125, (out, err))
                self.assertFalse(os.path.exists(dotdot_target))
                self.assertFalse(os.path.exists(abs_target))
                self.assertEqual(os.listdir(landing), [])
                for root, _, files in os.walk(self.tmp):
                    for f in files:
                        if f.startswith("hardlink") and shadow_ino is not None:
                            st = os.lstat(os.path.join(root, f))
                            self.assertFalse(st.st_ino == shadow_ino and
                                             st.st_dev == os.stat("/etc/shadow").st_dev,
                                             "a hard link to the host's /etc/shadow was made")


class HostImageEtcTest(SpaceTestCase):
    """The host image carries the host's non-secret /etc the tools need (docs/linux-runtime.md,
    "The host image"), read-only where it is bound, and none of the files that hold secrets."""

    BOUND = ["/etc/fonts", "/var/cache/fontconfig", "/etc/chromium.d"]
    COPIED = ["/etc/matplotlibrc", "/etc/chromium/master_preferences", "/etc/services"]
    SECRET = ["/etc/shadow", "/etc/gshadow", "/etc/ssh", "/etc/sudoers", "/etc/machine-id",
              "/etc/gitconfig", "/etc/npmrc", "/etc/pip.conf", "/etc/environment",
              "/etc/profile.d", "/etc/hostname"]

    def test_etc_carried_and_secrets_not(self):
        sid = self.create()
        for path in self.BOUND + self.COPIED:
            if not os.path.exists(path):
                continue
            self.exec_ok(sid, "test", "-e", path)
        for path in self.BOUND:
            if not os.path.isdir(path):
                continue
            # Live and read-only: the same entries as the host's, and a write is refused.
            inside = self.exec_ok(sid, "ls", "-A", path).split()
            self.assertEqual(sorted(inside), sorted(os.listdir(path)), path)
            rc, _, err = self.space("exec", sid, "--", "touch", path + "/space-probe")
            self.assertNotEqual(rc, 0, "could write into " + path)
            self.assertIn("Read-only file system", err)
            self.assertFalse(os.path.exists(path + "/space-probe"))
        # The attack: look for each secret-holding host file inside. None may be there.
        rc, out, _ = self.space("exec", sid, "--", "sh", "-c",
                                "for f in %s; do test -e $f && echo $f; done; true"
                                % " ".join(self.SECRET))
        self.assertEqual(out.split(), [], "host files that may hold secrets are visible")
        # Chromium's managed policy directory is the skeleton's own (so spaced can write the
        # sandbox's policy there), not a bind of the host's /etc/chromium.
        policy = json.loads(self.exec_ok(sid, "cat", "/etc/chromium/policies/managed/space.json"))
        ca = self.exec_ok(sid, "cat", "/etc/space/ca.crt")
        der64 = "".join(l for l in ca.splitlines() if l and not l.startswith("-----"))
        self.assertEqual(policy, {"CACertificates": [der64], "EncryptedClientHelloEnabled": False})
        diff = json.loads(self.space_ok("diff", sid, "--json"))  # the daemon's files are not
        for kind in ("added", "changed", "deleted"):           # the agent's changes
            self.assertEqual(diff.get(kind, []), [], diff)


class DoctorTest(SpaceTestCase):

    def test_doctor(self):
        rc, out, err = self.space("doctor")
        self.assertEqual(rc, 0, err)
        low = out.lower()
        self.assertIn("namespace", low)
        self.assertIn("cgroup", low)
        self.assertRegex(out, r"\n  linux +available: kernel ")
        self.assertIn("space doctor --all", out)
        rc, out, err = self.space("doctor", "--all")
        self.assertEqual(rc, 0, err)
        self.assertIn("seccomp", out.lower())
        rc, out, err = self.space("doctor", "--json")
        if rc == 0:
            json.loads(out)


if __name__ == "__main__":
    main()
