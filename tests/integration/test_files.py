"""Files in and out of a sandbox: `space cp` both ways for files and directory trees, symlinks
that point outside the sandbox (they must stay links or resolve inside, never reach the host's
files), the files API, and `space diff`."""

import hashlib
import os
import tempfile

from harness import MiB, SpaceTestCase, main


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class FilesTest(SpaceTestCase):

    def setUp(self):
        self.sid = self.create()
        self.host = tempfile.mkdtemp(dir=self.tmp, prefix="host-")

    def hpath(self, *parts):
        return os.path.join(self.host, *parts)

    def test_cp_file_in_and_out(self):
        src = self.hpath("in.bin")
        with open(src, "wb") as f:
            f.write(os.urandom(2 * MiB + 123))
        self.space_ok("cp", src, "%s:/root/in.bin" % self.sid)
        out = self.exec_ok(self.sid, "sha256sum", "/root/in.bin")
        self.assertEqual(out.split()[0], sha(src))

        self.exec_ok(self.sid, "sh", "-c", "head -c 1500000 /dev/urandom > /tmp/out.bin")
        inside = self.exec_ok(self.sid, "sha256sum", "/tmp/out.bin").split()[0]
        dst = self.hpath("out.bin")
        self.space_ok("cp", "%s:/tmp/out.bin" % self.sid, dst)
        self.assertEqual(sha(dst), inside)

    def test_cp_empty_file_and_into_directory(self):
        src = self.hpath("empty")
        open(src, "w").close()
        self.space_ok("cp", src, "%s:/tmp/" % self.sid)
        self.assertEqual(self.exec_ok(self.sid, "stat", "-c", "%s %F", "/tmp/empty").strip(),
                         "0 regular empty file")

    def test_cp_directory_in_and_out(self):
        tree = self.hpath("tree")
        os.makedirs(os.path.join(tree, "a", "b"))
        with open(os.path.join(tree, "top.txt"), "w") as f:
            f.write("top\n")
        with open(os.path.join(tree, "a", "b", "deep.txt"), "w") as f:
            f.write("deep\n")
        os.chmod(os.path.join(tree, "a", "b", "deep.txt"), 0o751)
        os.symlink("../top.txt", os.path.join(tree, "a", "link"))
        self.space_ok("cp", tree, "%s:/root/tree" % self.sid)
        out = self.exec_ok(self.sid, "sh", "-c",
                           "cd /root/tree && find . | sort && cat a/b/deep.txt a/link && "
                           "stat -c %a a/b/deep.txt && readlink a/link")
        self.assertEqual(out, ".\n./a\n./a/b\n./a/b/deep.txt\n./a/link\n./top.txt\n"
                              "deep\ntop\n751\n../top.txt\n")

        self.exec_ok(self.sid, "sh", "-c",
                     "mkdir -p /root/gen/x && echo one > /root/gen/x/one && "
                     "echo two > /root/gen/two && ln -s x/one /root/gen/l")
        dst = self.hpath("gen-out")
        self.space_ok("cp", "%s:/root/gen" % self.sid, dst)
        with open(os.path.join(dst, "x", "one")) as f:
            self.assertEqual(f.read(), "one\n")
        with open(os.path.join(dst, "two")) as f:
            self.assertEqual(f.read(), "two\n")
        self.assertTrue(os.path.islink(os.path.join(dst, "l")))
        self.assertEqual(os.readlink(os.path.join(dst, "l")), "x/one")

    def test_symlink_to_host_file_is_copied_out_as_a_link(self):
        # /etc/shadow exists on the host; inside it is the sandbox's own (or missing).
        self.exec_ok(self.sid, "sh", "-c",
                     "mkdir -p /root/d && ln -s /etc/shadow /root/d/shadow && "
                     "ln -s ../../../../../../etc/shadow /root/d/rel && echo x > /root/d/f")
        dst = self.hpath("d-out")
        self.space_ok("cp", "%s:/root/d" % self.sid, dst)
        for name in ("shadow", "rel"):
            p = os.path.join(dst, name)
            self.assertTrue(os.path.islink(p), "%s was not copied as a symlink" % name)
        host_shadow = None
        if os.path.exists("/etc/shadow"):
            with open("/etc/shadow", "rb") as f:
                host_shadow = f.read()

        # Copying the link itself: a link, or the sandbox's own target; never the host's file.
        for name in ("shadow", "rel"):
            out = self.hpath("single-" + name)
            rc, _, err = self.space("cp", "%s:/root/d/%s" % (self.sid, name), out)
            if rc == 0 and not os.path.islink(out) and host_shadow is not None:
                with open(out, "rb") as f:
                    self.assertNotEqual(f.read(), host_shadow,
                                        "cp of a symlink returned the host's /etc/shadow")

    def test_dotdot_paths_stay_inside(self):
        # A host file at a known path; the sandbox must not be able to name it.
        secret = self.hpath("host-secret")
        with open(secret, "w") as f:
            f.write("HOST SECRET\n")
        for path in ("/etc/../../../../../..%s" % secret, "/../../..%s" % secret):
            out = self.hpath("dotdot-out")
            rc, _, err = self.space("cp", "%s:%s" % (self.sid, path), out)
            if rc == 0:
                with open(out) as f:
                    self.assertNotIn("HOST SECRET", f.read())
            else:
                self.assertEqual(rc, 125, err)
            if os.path.exists(out):
                os.unlink(out)
        # Through a symlink planted inside that points at the host path.
        self.exec_ok(self.sid, "ln", "-s", secret, "/tmp/abs")
        self.exec_ok(self.sid, "ln", "-s", "../../../../../../../.." + secret, "/tmp/rel")
        for link in ("/tmp/abs", "/tmp/rel"):
            out = self.hpath("link-out")
            rc, _, err = self.space("cp", "%s:%s" % (self.sid, link), out)
            if rc == 0 and not os.path.islink(out):
                with open(out) as f:
                    self.assertNotIn("HOST SECRET", f.read())
            if os.path.lexists(out):
                os.unlink(out)

    def test_cp_in_through_symlink_stays_inside(self):
        target = self.hpath("landing")
        os.mkdir(target)
        self.exec_ok(self.sid, "ln", "-s", target, "/root/escape")
        src = self.hpath("payload")
        with open(src, "w") as f:
            f.write("payload\n")
        self.space("cp", src, "%s:/root/escape/pwned" % self.sid)
        self.assertFalse(os.path.exists(os.path.join(target, "pwned")),
                         "cp into the sandbox wrote through a symlink onto the host")
        # Directory upload through the same link.
        tree = self.hpath("uptree")
        os.mkdir(tree)
        with open(os.path.join(tree, "f"), "w") as f:
            f.write("f\n")
        self.space("cp", tree, "%s:/root/escape/tree" % self.sid)
        self.assertEqual(os.listdir(target), [])

    def test_cp_errors(self):
        rc, _, err = self.space("cp", "%s:/no/such/file" % self.sid, self.hpath("x"))
        self.assertEqual(rc, 125, err)
        self.assertRegex(err.lower(), "not found|no such file")
        rc, _, err = self.space("cp", self.hpath("missing"), "%s:/tmp/x" % self.sid)
        self.assertNotEqual(rc, 0)
        rc, _, err = self.space("cp", "sb_doesnotexist:/etc/passwd", self.hpath("x"))
        self.assertEqual(rc, 125, err)
        # Writing onto the read-only image fails cleanly.
        src = self.hpath("ro")
        with open(src, "w") as f:
            f.write("x")
        rc, _, err = self.space("cp", src, "%s:/usr/bin/space-it-ro" % self.sid)
        self.assertEqual(rc, 125, err)
        self.assertFalse(os.path.exists("/usr/bin/space-it-ro"))

    def test_files_api(self):
        r = self.api("PUT", "/v1/sandboxes/%s/files?path=/tmp/api.txt" % self.sid,
                     b"via api\n", headers={"Content-Type": "application/octet-stream"})
        self.assertIn(r.status, (200, 201, 204), r)
        self.assertEqual(self.exec_ok(self.sid, "cat", "/tmp/api.txt"), "via api\n")
        r = self.api("GET", "/v1/sandboxes/%s/files?path=/tmp/api.txt" % self.sid)
        self.assertEqual((r.status, r.body), (200, b"via api\n"))
        r = self.api("GET", "/v1/sandboxes/%s/files?path=/tmp/nope" % self.sid)
        self.assert_api_error(r, 404, 404)
        r = self.api("GET", "/v1/sandboxes/%s/files?path=relative/path" % self.sid)
        self.assert_api_error(r, 400, 400)
        r = self.api("GET", "/v1/sandboxes/%s/files" % self.sid)
        self.assert_api_error(r, 400, 400)

    def test_diff(self):
        # Pick files of the image that root inside may change and delete.
        cands = ["/etc/passwd", "/etc/group", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"]
        changed = deleted = None
        for c in cands:
            rc, _, _ = self.space("exec", self.sid, "--", "sh", "-c",
                                  "test -f %s && echo '# space-it' >> %s" % (c, c))
            if rc == 0:
                changed = c
                break
        for c in cands:
            if c == changed:
                continue
            rc, _, _ = self.space("exec", self.sid, "--", "sh", "-c",
                                  "test -f %s && rm %s" % (c, c))
            if rc == 0:
                deleted = c
                break
        self.exec_ok(self.sid, "sh", "-c", "mkdir -p /root/newdir && echo n > /root/newdir/n && "
                                           "echo a > /tmp/added.txt")
        self.assertIsNotNone(changed, "root inside could not modify any of %s" % cands)
        self.assertIsNotNone(deleted, "root inside could not delete any of %s" % cands)

        r = self.api("GET", "/v1/sandboxes/%s/diff" % self.sid)
        self.assertEqual(r.status, 200, r)
        d = r.json
        self.assertIn("/tmp/added.txt", d["added"])
        self.assertIn("/root/newdir/n", d["added"])
        self.assertIn(changed, d["changed"])
        self.assertIn(deleted, d["deleted"])
        self.assertNotIn(changed, d["added"])
        for k in ("added", "changed", "deleted"):
            self.assertEqual(d[k], sorted(d[k]))

        rc, out, err = self.space("diff", self.sid)
        self.assertEqual(rc, 0, err)
        for p in ("/tmp/added.txt", changed, deleted):
            self.assertIn(p, out)

    def test_diff_fresh_sandbox_is_empty(self):
        r = self.api("GET", "/v1/sandboxes/%s/diff" % self.sid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json, {"added": [], "changed": [], "deleted": []})


if __name__ == "__main__":
    main()
