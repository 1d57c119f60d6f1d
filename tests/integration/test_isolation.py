"""What a sandbox can see and do: only its own processes (pid 1 is space-agent), a read-only
image, no access to another sandbox's files, its id as hostname, only `lo`, an unprivileged
host uid, and the confinement a process inside has (no_new_privs, seccomp, no mount, no new
namespaces). Security tests assert the negative."""

import os

from harness import SpaceTestCase, main, proc_status_field


class IsolationTest(SpaceTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sid = cls.create_for_class()

    def test_sees_only_its_own_processes(self):
        out = self.exec_ok(self.sid, "ps", "-e", "-o", "pid=,comm=")
        rows = [l.split(None, 1) for l in out.strip().splitlines()]
        self.assertLess(len(rows), 10, out)
        pid1 = [r for r in rows if r[0] == "1"]
        self.assertEqual(len(pid1), 1, out)
        argv0 = self.exec_ok(self.sid, "cat", "/proc/1/cmdline").split("\0")[0]
        self.assertEqual(argv0, "space-agent")
        # The host's pid 1 and the test runner are invisible.
        out = self.exec_ok(self.sid, "sh", "-c", "ls /proc | grep -c '^[0-9]'")
        self.assertLess(int(out), 10)
        rc, _, _ = self.space("exec", self.sid, "--", "test", "-e", "/proc/%d" % os.getpid())
        if os.getpid() > 20:
            self.assertNotEqual(rc, 0, "the test runner's pid is visible inside")

    def test_usr_is_read_only(self):
        for path in ("/usr/space-it-probe", "/usr/bin/space-it-probe"):
            rc, out, err = self.space("exec", self.sid, "--", "python3", "-c",
                                      "import os, errno\n"
                                      "try:\n"
                                      "    open(%r, 'w')\n"
                                      "    print('WROTE')\n"
                                      "except OSError as e:\n"
                                      "    print(errno.errorcode[e.errno])\n" % path)
            self.assertEqual(rc, 0, err)
            self.assertIn(out.strip(), ("EROFS", "EACCES", "EPERM"))
            self.assertFalse(os.path.exists(path))
        rc, out, err = self.space("exec", self.sid, "--", "touch", "/usr/bin/space-it-new")
        self.assertNotEqual(rc, 0)
        self.assertIn("Read-only file system", err)
        # Existing files: not writable either (they belong to a host uid the sandbox lacks).
        rc, out, err = self.space("exec", self.sid, "--", "sh", "-c", "echo x >> /usr/bin/python3")
        self.assertNotEqual(rc, 0)

    def test_cannot_read_another_sandboxs_files(self):
        a = self.create()
        b = self.create()
        self.exec_ok(a, "sh", "-c", "echo TOPSECRET > /tmp/secret && chmod 644 /tmp/secret")
        self.assertEqual(self.exec_ok(a, "cat", "/tmp/secret"), "TOPSECRET\n")
        rc, out, _ = self.space("exec", b, "--", "cat", "/tmp/secret")
        self.assertNotEqual(rc, 0)
        self.assertNotIn("TOPSECRET", out)
        self.assertEqual(self.exec_ok(b, "ls", "-A", "/tmp"), "")
        # Nor through /proc: a's processes do not exist in b.
        self.space_ok("exec", a, "--detach", "--", "sleep", "1000")
        out = self.exec_ok(b, "ps", "-e", "-o", "comm=")
        self.assertNotIn("sleep", out)
        # Nor by searching its writable places.
        rc, out, _ = self.space("exec", b, "--", "sh", "-c",
                                "grep -rl TOPSECRET /tmp /root /var /run /home /mnt /opt /srv "
                                "2>/dev/null | head -5", timeout=120)
        self.assertNotIn("secret", out)

    def test_hostname_is_id(self):
        self.assertEqual(self.exec_ok(self.sid, "hostname").strip(), self.sid)
        self.assertEqual(self.exec_ok(self.sid, "cat", "/proc/sys/kernel/hostname").strip(),
                         self.sid)

    def test_network_only_loopback(self):
        out = self.exec_ok(self.sid, "cat", "/proc/net/dev")
        ifaces = [l.split(":")[0].strip() for l in out.splitlines()[2:] if ":" in l]
        self.assertEqual(ifaces, ["lo"], out)
        rc, out, err = self.space("exec", self.sid, "--", "python3", "-c",
                                  "import socket\n"
                                  "s = socket.socket()\n"
                                  "s.settimeout(3)\n"
                                  "try:\n"
                                  "    s.connect(('10.255.255.1', 80))\n"
                                  "    print('CONNECTED')\n"
                                  "except OSError as e:\n"
                                  "    print('refused', e.errno)\n")
        self.assertNotIn("CONNECTED", out)

    def test_root_inside_is_unprivileged_outside(self):
        self.assertEqual(self.exec_ok(self.sid, "id", "-u").strip(), "0")
        pids = self.sandbox_host_pids(self.sid)
        self.assertTrue(pids)
        for pid in pids:
            uid = proc_status_field(pid, "Uid")
            if uid is None:
                continue  # exited meanwhile
            real, eff = (int(x) for x in uid.split()[:2])
            self.assertNotEqual(real, 0, "sandbox process %d runs as host root" % pid)
            self.assertNotEqual(eff, 0, "sandbox process %d runs as host root" % pid)

    def test_process_confinement(self):
        status = self.exec_ok(self.sid, "cat", "/proc/self/status")
        fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
        self.assertEqual(fields["NoNewPrivs"].strip(), "1")
        self.assertEqual(fields["Seccomp"].strip(), "2")
        cap_eff = int(fields["CapEff"].strip(), 16)
        self.assertFalse(cap_eff & (1 << 21), "CAP_SYS_ADMIN is effective inside")
        self.assertFalse(cap_eff & (1 << 16), "CAP_SYS_MODULE is effective inside")

    def test_cannot_mount_or_unshare(self):
        rc, _, err = self.space("exec", self.sid, "--", "mount", "-t", "tmpfs", "x", "/mnt")
        self.assertNotEqual(rc, 0, err)
        rc, _, err = self.space("exec", self.sid, "--", "unshare", "-U", "-r", "true")
        self.assertNotEqual(rc, 0, err)
        rc, _, err = self.space("exec", self.sid, "--", "unshare", "-n", "true")
        self.assertNotEqual(rc, 0, err)
        rc, out, _ = self.space("exec", self.sid, "--", "cat", "/proc/self/mountinfo")
        self.assertNotIn(" /mnt ", out)

    def test_cannot_see_host_files(self):
        # The host's own state is not visible: not the test's temp dir, not /root, not /work.
        rc, out, _ = self.space("exec", self.sid, "--", "ls", "-A", self.tmp)
        self.assertNotEqual(rc, 0, out)
        rc, out, _ = self.space("exec", self.sid, "--", "ls", "/work")
        self.assertNotEqual(rc, 0, out)
        out = self.exec_ok(self.sid, "cat", "/etc/passwd")
        with open("/etc/passwd") as f:
            host = f.read()
        self.assertNotEqual(out, host, "the sandbox sees the host's /etc/passwd")


if __name__ == "__main__":
    main()
