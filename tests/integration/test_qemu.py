"""The qemu runtime (docs/qemu-runtime.md) through the real spaced and CLI, under TCG where the
host has no KVM: a microVM, a clone of its image's template, runs its own kernel (`uname -r`
differs from the host's); two clones of one template differ in hostname, random bytes and
files, and the template's sealed RAM cannot be changed through a running QEMU's fd; it runs
execs, takes files in and out, reaches an allowed host only through the egress gateway (the
agent carries the connection over its channel) and is refused others, pauses (QMP stop: no
exec, no guest CPU) and resumes, is snapshotted as a whole machine (QEMU's migration stream and
its disk) and rolled back or restored with its RAM and processes, survives a restart of spaced (SIGKILL or SIGTERM: the new spaced reattaches to the running
VM), and leaves nothing behind on `space rm`: no QEMU process, no
cgroup, no state. Host-side checks of the confinement: QEMU runs as the sandbox's unprivileged
uid with no_new_privs and seccomp, in namespaces of its own, with no network device and no
shared directory on its command line; inside, the guest has only `lo`.

The image is busybox (Debian's busybox-static) imported from a tarball and made a VM disk by
`space image build-vm`. Bounded: a few boots and restores of a few seconds each."""

import json
import os
import platform
import signal
import subprocess
import time

from harness import cgroup_dirs, main, read_text, wait_for
from vm_image import VmSuite, start_upstream, upstream_config

APPLETS = ["sh", "wget", "cat", "echo", "uname", "ls", "sleep", "hostname", "ip", "nc", "id",
           "head", "grep", "wc", "dd", "df", "mount", "date", "od",
           "blockdev", "sync"]


class QemuRuntimeTest(VmSuite):

    @classmethod
    def daemon_config(cls):
        cls.upstream = start_upstream()
        return upstream_config(cls.upstream.server_address[1])

    @classmethod
    def prepare_class(cls):
        cls.make_class_image("bb", APPLETS)

    def vm(self, *opts):
        sid = self.create("--runtime", "qemu", "--image", self.image, *opts)
        self.addCleanup(self._destroy_quietly, sid)
        return sid

    def qemu_pid(self, sid):
        return self.inspect(sid)["host_pid"]

    def test_vm_lifecycle_exec_files_egress(self):
        sid = self.vm("--memory", "256M", "--cpus", "1")
        # Its own kernel, its own hostname.
        guest = self.exec_ok(sid, "uname", "-r").strip()
        self.assertNotEqual(guest, platform.release())
        self.assertTrue(guest.startswith("6.1."), guest)
        self.assertEqual(self.exec_ok(sid, "hostname").strip(), sid)
        # inspect says which accelerator runs it, and why not KVM where it is TCG: the same
        # verdict as doctor's.
        vm = self.inspect(sid)["vm"]
        doctor = json.loads(self.space_ok("doctor", "--json"))
        self.assertEqual(vm["accelerator"], doctor["runtimes"]["qemu"]["accelerator"])
        if vm["accelerator"] == "tcg":
            self.assertIn(doctor["host"]["kvm"]["reason"], vm["accelerator_note"])
        # Ports are not forwarded into microVMs (yet): a clear refusal, not a hang.
        rc, _, err = self.space("port", sid, "8080", "--listen", "127.0.0.1:0")
        self.assertEqual(rc, 125)
        self.assertIn("linux sandboxes only", err)
        # Exit codes, stdin, stderr pass through.
        rc, out, err = self.space("exec", sid, "--", "sh", "-c", "cat; echo oops >&2; exit 7",
                                  input="from stdin")
        self.assertEqual((rc, out, err.strip()), (7, "from stdin", "oops"))
        # Files in and out, and they live on the VM's own disk.
        src = os.path.join(self.tmp, "in.txt")
        with open(src, "w") as f:
            f.write("payload\n")
        self.space_ok("cp", src, sid + ":/root/in.txt")
        self.assertEqual(self.exec_ok(sid, "cat", "/root/in.txt"), "payload\n")
        self.exec_ok(sid, "sh", "-c", "echo made-inside > /root/out.txt")
        dst = os.path.join(self.tmp, "out.txt")
        self.space_ok("cp", sid + ":/root/out.txt", dst)
        self.assertEqual(read_text(dst), "made-inside\n")
        # The pids limit is the guest's own cgroup.
        self.assertIn("sandbox", self.exec_ok(sid, "cat", "/proc/self/cgroup"))
        # ps lists guest processes, the agent first.
        ps = json.loads(self.space_ok("ps", sid, "--json"))
        self.assertTrue(any("space-agent" in " ".join(p["argv"]) for p in ps), ps)

        # Egress: only through the gateway. The allowed host answers, another is refused by
        # the gateway (403), and with the proxy variables unset nothing resolves or routes.
        out = self.exec_ok(sid, "wget", "-q", "-O", "-", "http://allowed.test/hi")
        self.assertEqual(out, "hello from upstream /hi")
        rc, out, err = self.space("exec", sid, "--", "wget", "-q", "-O", "-", "http://denied.test/")
        self.assertNotEqual(rc, 0)
        self.assertIn("403", err)
        # The transparent HTTP listener too: a client that ignores the proxy variables and talks
        # to 127.0.0.1:80 in the guest reaches the gateway's, which goes by the Host header.
        req = "printf 'GET /%s HTTP/1.0\\r\\nHost: %s\\r\\n\\r\\n' | nc 127.0.0.1 80"
        self.assertIn("hello from upstream /plain",
                      self.exec_ok(sid, "sh", "-c", req % ("plain", "allowed.test")))
        self.assertIn(" 403 ", self.exec_ok(sid, "sh", "-c", req % ("no", "denied.test")))
        rc, out, err = self.space(
            "exec", sid, "--", "sh", "-c",
            "unset http_proxy HTTP_PROXY; wget -q -T 3 -O - http://127.0.0.1:%d/ || "
            "wget -q -T 3 -O - http://10.0.2.2/ || echo unreachable"
            % self.upstream.server_address[1])
        self.assertEqual(out.strip().splitlines()[-1], "unreachable", (out, err))
        links = self.exec_ok(sid, "cat", "/proc/net/dev")
        ifaces = [l.split(":")[0].strip() for l in links.splitlines()[2:]]
        self.assertEqual(ifaces, ["lo"], links)
        audit = self.space_ok("audit", sid, "--json")
        self.assertIn("allowed.test", audit)

        # Pause: QMP stop. An exec is refused and QEMU burns no CPU; resume continues.
        pid = self.qemu_pid(sid)
        self.space_ok("pause", sid)
        self.assertEqual(self.inspect(sid)["state"], "paused")
        rc, out, err = self.space("exec", sid, "--", "true")
        self.assertEqual(rc, 125)
        self.assertIn("paused", err)
        def ticks():
            f = read_text("/proc/%d/stat" % pid).rsplit(")", 1)[1].split()
            return int(f[11]) + int(f[12])
        t0 = ticks()
        time.sleep(1.0)
        self.assertLessEqual(ticks() - t0, 15, "a paused VM kept running")
        self.space_ok("resume", sid)
        self.assertEqual(self.exec_ok(sid, "cat", "/root/in.txt"), "payload\n")

        # `space diff` reads the VM's own disk (test_qemu_diff.py has the details).
        diff = json.loads(self.space_ok("diff", sid, "--json"))
        self.assertIn("/root/in.txt", diff["added"])
        self.assertIn("/root/out.txt", diff["added"])

    def test_snapshot_rollback_restore_resume_the_machine(self):
        sid = self.vm("--memory", "192M", "--disk", "96M")
        # State on the disk, in RAM only (/dev/shm) and in a running process.
        self.exec_ok(sid, "sh", "-c",
                     "echo disk-1 > /root/f; echo ram-1 > /dev/shm/r; (sleep 1001 &)")
        def sleeper(box):
            ps = json.loads(self.space_ok("ps", box, "--json"))
            pids = [p["pid"] for p in ps if p["argv"][:2] == ["sleep", "1001"]]
            return pids[0] if pids else None
        # The backgrounded subshell may not have exec'd sleep yet when the exec returns.
        pid = wait_for(lambda: sleeper(sid), 60, what="the sleeper to start")
        snap = json.loads(self.space_ok("snapshot", sid, "--name", "vm-1", "--json"))
        self.assertEqual((snap["contents"], snap["processes"]), ("machine", "resumed"))
        self.assertGreater(snap["logical_bytes"], 96 << 20)  # the disk and the memory
        # The VM runs on after its snapshot; then it changes everything.
        self.exec_ok(sid, "sh", "-c",
                     "echo disk-2 > /root/f; echo ram-2 > /dev/shm/r; kill %d" % pid)
        self.assertIsNone(sleeper(sid))
        # A snapshot of a paused VM leaves it paused.
        self.space_ok("pause", sid)
        self.space_ok("snapshot", sid, "--name", "vm-2")
        self.assertEqual(self.inspect(sid)["state"], "paused")
        rc, out, err = self.space("exec", sid, "--", "true")
        self.assertIn("paused", err)
        self.space_ok("resume", sid)
        time.sleep(3)  # a resumed clock that nobody set would now be behind the host's

        qemu_before = self.qemu_pid(sid)
        rb = json.loads(self.space_ok("rollback", sid, "vm-1", "--json"))["rollback"]
        self.assertEqual(rb["processes"], "resumed")
        self.assertNotEqual(self.qemu_pid(sid), qemu_before)
        self.assertFalse(os.path.exists("/proc/%d" % qemu_before), "the old QEMU lives on")
        # Disk, RAM and the process are those of the snapshot.
        self.assertEqual(self.exec_ok(sid, "cat", "/root/f", "/dev/shm/r"), "disk-1\nram-1\n")
        self.assertEqual(sleeper(sid), pid)
        self.assertEqual(self.exec_ok(sid, "hostname").strip(), sid)
        guest_now = int(self.exec_ok(sid, "date", "+%s"))
        self.assertLess(abs(guest_now - time.time()), 2.5, "the guest's clock was not set")

        # The state before the rollback was kept: it restores into a sandbox of its own, with
        # its own name, and egress through the gateway.
        other = json.loads(self.space_ok("restore", rb["saved_as"], "--json"))["id"]
        self.addCleanup(self._destroy_quietly, other)
        self.assertEqual(self.exec_ok(other, "cat", "/root/f", "/dev/shm/r"), "disk-2\nram-2\n")
        self.assertEqual(self.exec_ok(other, "hostname").strip(), other)
        out = self.exec_ok(other, "wget", "-q", "-O", "-", "http://allowed.test/restored")
        self.assertEqual(out, "hello from upstream /restored")
        # Two machines resumed from one snapshot draw different random numbers.
        twin = json.loads(self.space_ok("restore", "vm-1", "--json"))["id"]
        self.addCleanup(self._destroy_quietly, twin)
        self.assertEqual(sleeper(twin), pid)
        rand = "head -c 32 /dev/urandom | od -An -tx1"
        self.assertNotEqual(self.exec_ok(sid, "sh", "-c", rand), self.exec_ok(twin, "sh", "-c", rand))

        # Removing them leaves no QEMU, cgroup or state; the snapshots stay.
        pids = [self.qemu_pid(b) for b in (sid, other, twin)]
        for b in (sid, other, twin):
            self.space_ok("rm", b)
        for p in pids:
            wait_for(lambda: not os.path.exists("/proc/%d" % p), 10, what="QEMU to exit")
        for b in (sid, other, twin):
            self.assertEqual([d for d in cgroup_dirs() if b in d], [])
            wait_for(lambda: not os.path.exists(
                os.path.join(self.daemon.state_dir, "sandboxes", b)), 10, what="state removed")
        names = [x["name"] for x in json.loads(self.space_ok("snapshots", sid, "--json"))]
        self.assertIn("vm-1", names)

        # A machine resumes only on the image disk it ran on: once the image's VM disk is
        # rebuilt, its snapshots are refused with the reason, and nothing is made.
        self.space_ok("image", "rm", self.image)
        self.space_ok("image", "import", self.image, os.path.join(self.tmp, "busybox.tar.gz"))
        self.space_ok("image", "build-vm", self.image)
        rc, out, err = self.space("restore", "vm-1")
        self.assertEqual(rc, 125)
        self.assertIn("rebuilt", err)
        self.assertEqual(os.listdir(os.path.join(self.daemon.state_dir, "sandboxes")), [])

    def test_qemu_is_confined_and_rm_leaves_nothing(self):
        sid = self.vm()
        pid = self.qemu_pid(sid)
        cmdline = read_text("/proc/%d/cmdline" % pid).split("\0")
        joined = " ".join(cmdline)
        # No network device, no shared directory, the seccomp sandbox on.
        for needle in ("-netdev", "virtio-net", "virtfs", "-fsdev", "vhost-user", "9p"):
            self.assertNotIn(needle, joined)
        self.assertIn("none", cmdline[cmdline.index("-nic") + 1])
        self.assertIn("spawn=deny", joined)
        status = read_text("/proc/%d/status" % pid)
        fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
        uid = int(fields["Uid"].split()[0])
        self.assertEqual(uid, self.inspect(sid)["uid_base"])
        self.assertNotEqual(uid, 0)
        self.assertEqual(fields["NoNewPrivs"].strip(), "1")
        self.assertEqual(fields["Seccomp"].strip(), "2")
        self.assertEqual(int(fields["CapEff"].strip(), 16), 0)
        for ns in ("pid", "mnt", "net", "ipc", "uts"):
            self.assertNotEqual(os.readlink("/proc/%d/ns/%s" % (pid, ns)),
                                os.readlink("/proc/self/ns/%s" % ns), ns)
        # QEMU's root is the jail: no host state is visible to it.
        root = "/proc/%d/root" % pid
        self.assertFalse(os.path.exists(root + self.daemon.state_dir))
        self.assertFalse(os.path.exists(root + "/etc/shadow"))
        self.assertEqual(sorted(os.listdir(root + "/vm")),
                         sorted(os.listdir(os.path.join(self.daemon.state_dir, "sandboxes", sid,
                                                        "vm"))))
        cgroups = [d for d in cgroup_dirs() if sid in d]
        self.assertTrue(cgroups)

        self.space_ok("rm", sid)
        wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10, what="QEMU to exit")
        self.assertEqual([d for d in cgroup_dirs() if sid in d], [])
        wait_for(lambda: not os.path.exists(os.path.join(self.daemon.state_dir, "sandboxes", sid)),
                 10, what="the sandbox's state to be removed")

    def test_guest_root_cannot_write_the_shared_image_disk(self):
        # Every VM of an image shares its disk, read-only (virtio's read-only flag, and QEMU's
        # readonly=on below it). Guest root tries to clear the flag and writes over it: the
        # writes fail, the host's file is unchanged, and another VM of the image reads its files.
        import hashlib
        disk = os.path.join(self.daemon.state_dir, "images", self.image, "vm.ext4")
        def digest():
            with open(disk, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()
        before = digest()
        sid = self.vm()
        blocks = sorted(os.path.basename(p) for p in
                        self.exec_ok(sid, "ls", "/sys/block").split() if p.startswith("vd"))
        self.assertEqual(blocks, ["vda", "vdb"])  # the image and its own disk, nothing else
        rc, out, err = self.space(
            "exec", sid, "--", "sh", "-c",
            "blockdev --setrw /dev/vda; blockdev --setrw /dev/vdb; "
            "dd if=/dev/zero of=/dev/vda bs=4096 count=64 conv=fsync 2>&1; echo dd=$?; "
            "dd if=/dev/zero of=/dev/vda bs=4096 seek=1 count=64 oflag=direct 2>&1; "
            "echo direct=$?; sync")
        self.assertIn("dd=1", out, out + err)
        self.assertIn("direct=1", out, out + err)
        self.assertEqual(digest(), before, "a guest wrote the shared image disk")
        other = self.vm()
        self.assertEqual(self.exec_ok(other, "sh", "-c", "ls /bin | wc -l").strip(),
                         str(len(APPLETS) + 1))

    def test_clones_of_one_template_are_distinct_and_cannot_change_it(self):
        # Every VM of an image and limits is a clone of one template (docs/qemu-runtime.md,
        # "Templates"): the same saved machine, yet each has its own hostname, random numbers,
        # RAM and disk, and none can change the template the others map.
        a, b = self.vm(), self.vm()
        template = self.inspect(a)["vm"]["template"]
        self.assertTrue(template)
        self.assertEqual(self.inspect(b)["vm"]["template"], template)
        tdir = os.path.join(self.daemon.state_dir, "qemu", "templates", template)
        self.assertEqual(sorted(os.listdir(tdir)), ["disk.img", "machine.json", "ram", "state"])
        for f in os.listdir(tdir):
            st = os.stat(os.path.join(tdir, f))
            self.assertEqual((st.st_uid, st.st_mode & 0o222), (0, 0), f)  # root's, read-only
        self.assertEqual(self.exec_ok(a, "hostname").strip(), a)
        self.assertEqual(self.exec_ok(b, "hostname").strip(), b)
        rand = "head -c 32 /dev/urandom | od -An -tx1"
        ra, rb = self.exec_ok(a, "sh", "-c", rand), self.exec_ok(b, "sh", "-c", rand)
        self.assertNotEqual(ra, rb, "two clones drew the same random bytes")
        # Writes: disk, guest RAM (a tmpfs), same paths, different contents; neither sees the
        # other's.
        for sid in (a, b):
            self.exec_ok(sid, "sh", "-c", "echo %s > /root/who; echo %s > /tmp/who; "
                         "echo only-%s > /root/only-%s" % (sid, sid, sid, sid))
        for sid, other in ((a, b), (b, a)):
            self.assertEqual(self.exec_ok(sid, "cat", "/root/who", "/tmp/who"),
                             "%s\n%s\n" % (sid, sid))
            rc, _, _ = self.space("exec", sid, "--", "cat", "/root/only-" + other)
            self.assertNotEqual(rc, 0, "%s sees %s's file" % (sid, other))
        # The attack a compromised QEMU could try on the RAM every clone maps: through its own
        # fd, change the template's pages. Even root fails on the sealed memfd: write,
        # truncate, punch a hole, map it shared and writable.
        import mmap
        pid = self.qemu_pid(a)
        link = "/proc/%d/fd/13" % pid
        self.assertTrue(os.readlink(link).startswith("/memfd:space-qemu-template"),
                        os.readlink(link))
        fd = os.open(link, os.O_RDWR)
        try:
            before = os.pread(fd, 1 << 16, 1 << 20)
            with self.assertRaises(PermissionError):
                os.pwrite(fd, b"attacker" * 512, 1 << 20)
            with self.assertRaises(PermissionError):
                os.ftruncate(fd, 0)
            with self.assertRaises(PermissionError):
                mmap.mmap(fd, 1 << 21, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            p = subprocess.run(["fallocate", "--punch-hole", "--offset", str(1 << 20),
                                "--length", "65536", link], capture_output=True, text=True)
            self.assertNotEqual(p.returncode, 0, "punched a hole in the template's RAM")
            self.assertEqual(os.pread(fd, 1 << 16, 1 << 20), before)
        finally:
            os.close(fd)
        # After all that, a new clone of the template runs as the first did.
        c = self.vm()
        self.assertEqual(self.inspect(c)["vm"]["template"], template)
        self.assertEqual(self.exec_ok(c, "hostname").strip(), c)
        rc, _, _ = self.space("exec", c, "--", "cat", "/root/who")
        self.assertNotEqual(rc, 0)

    def test_vm_survives_a_daemon_restart(self):
        sid = self.vm()
        pid = self.qemu_pid(sid)
        self.exec_ok(sid, "sh", "-c", "echo kept > /root/kept")
        for sig in (signal.SIGKILL, signal.SIGTERM):
            self.daemon.stop(sig)
            self.assertTrue(os.path.exists("/proc/%d" % pid), "QEMU died with spaced")
            self.daemon.start()
            # The same VM, reattached: its files, exec, and egress through the new gateway.
            self.assertEqual(self.qemu_pid(sid), pid)
            self.assertEqual(self.exec_ok(sid, "cat", "/root/kept"), "kept\n")
            out = self.exec_ok(sid, "wget", "-q", "-O", "-", "http://allowed.test/again")
            self.assertEqual(out, "hello from upstream /again")
        self.assertIn("sandbox.reattach", self.space_ok("audit", sid, "--json"))

    def test_errors_are_clear(self):
        # An image without a VM disk says what to run.
        rc, out, err = self.space("create", "--runtime", "qemu", "--image", "host")
        self.assertEqual(rc, 125)
        self.assertIn("binds the host's /usr and cannot boot in a VM", err)
        self.assertIn("space image import NAME DIR", err)
        rc, out, err = self.space("create", "--runtime", "qemu", "--image", self.image,
                                  "--memory", "64M")
        self.assertEqual(rc, 125)
        self.assertIn("at least 128M", err)
        doctor = json.loads(self.space_ok("doctor", "--json"))
        q = doctor["runtimes"]["qemu"]
        self.assertTrue(q["available"], q)
        # KVM only where a test boot of the guest proved it (a /dev/kvm that opens is not
        # enough: nested PVM opens and creates VMs but boots no stock kernel); else TCG, with
        # the reason in doctor's host.kvm and the runtime's note.
        kvm = doctor["host"]["kvm"]
        self.assertEqual(kvm, q["kvm"])
        self.assertEqual(q["accelerator"], "kvm" if kvm["usable"] else "tcg")
        if not os.path.exists("/dev/kvm"):
            self.assertEqual((kvm["usable"], kvm["decided_by"]), (False, "device facts"))
            self.assertIn("no /dev/kvm", kvm["reason"])
        if os.path.exists("/sys/module/kvm_pvm") and not (
                os.path.exists("/sys/module/kvm_intel") or os.path.exists("/sys/module/kvm_amd")):
            # Nested PVM, with or without a node: never KVM for a stock guest.
            self.assertFalse(kvm["usable"])
            self.assertIn("PVM", kvm["reason"])
        if not kvm["usable"]:
            self.assertIn(kvm["reason"], q["note"])
            self.assertIn("TCG", q["note"])
        if kvm["decided_by"].startswith("boot probe"):
            self.assertTrue(os.path.exists(os.path.join(self.daemon.state_dir,
                                                        "kvm-probe.json")))
        self.assertEqual(doctor["snapshots"]["by_runtime"]["qemu"]["processes"], "resumed")
        self.assertEqual(doctor["snapshots"]["by_runtime"]["linux"]["processes"], "restarted")
        # Nothing was left by the refused creates.
        self.assertEqual(os.listdir(os.path.join(self.daemon.state_dir, "sandboxes")), [])


if __name__ == "__main__":
    main()
