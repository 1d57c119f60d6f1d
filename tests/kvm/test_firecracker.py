"""The firecracker runtime (docs/firecracker-runtime.md) end to end on a KVM host, through the
real spaced and CLI: `make test-kvm`, or ctest -L kvm.

It needs /dev/kvm, the user's `firecracker` and `jailer` (PATH, or $SPACE_FIRECRACKER and
$SPACE_JAILER), root, the guest kernel (`make build`) and busybox-static. Without them it prints
what is missing and exits 77, which ctest reports as skipped.

What it checks:
- template restore: the first sandbox of an image boots its template, every later one loads
  it; create-from-template latency (a median, printed; bench/ reports it properly), and that
  each restored copy has its own hostname, clock, entropy and memory (a file in one VM's RAM is
  not in another's) and its own disk;
- the lifecycle: exec (exit codes, stdin), files in and out, egress through the gateway (an
  allowed host answers, another is refused, no interface but lo), pause (PATCH /vm: no exec, no
  guest CPU) and resume, limits (the cgroup; the profile's disk rate limiter);
- snapshots: full then diff snapshots into the store, rollback and restore resume the machine
  (RAM, processes), and a rebuilt image disk is refused;
- a restart of spaced (SIGKILL, SIGTERM) reattaches to the running VM;
- confinement from the host: Firecracker runs as the sandbox's uid with seccomp, in its own
  namespaces and chroot, with no tap device; `space rm` leaves no process, cgroup, jail or
  state."""

import json
import os
import platform
import shutil
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from harness import cgroup_dirs, main, read_text, wait_for  # noqa: E402
from test_qemu import APPLETS  # noqa: E402
from vm_image import BUSYBOX, KERNEL, VmSuite, start_upstream, upstream_config  # noqa: E402

FIRECRACKER = os.environ.get("SPACE_FIRECRACKER") or shutil.which("firecracker")
JAILER = os.environ.get("SPACE_JAILER") or shutil.which("jailer")


def missing():
    out = []
    if not os.path.exists("/dev/kvm"):
        out.append("no /dev/kvm (a bare-metal host, or nested virtualization)")
    elif not os.access("/dev/kvm", os.R_OK | os.W_OK):
        out.append("/dev/kvm is not usable by this user")
    if not FIRECRACKER or not JAILER:
        out.append("firecracker/jailer not found: put a release's binaries in PATH or set "
                   "SPACE_FIRECRACKER and SPACE_JAILER (docs/firecracker-runtime.md)")
    if os.geteuid() != 0:
        out.append("not root (the jailer needs root)")
    if not os.path.exists(KERNEL):
        out.append("no guest kernel at %s: `make build`" % KERNEL)
    if not os.path.exists(BUSYBOX):
        out.append("no %s: apt-get install busybox-static" % BUSYBOX)
    return out


class FirecrackerTest(VmSuite):

    @classmethod
    def daemon_config(cls):
        cls.upstream = start_upstream()
        config = upstream_config(cls.upstream.server_address[1])
        config["profiles"]["slowdisk"] = {"vm": {"disk_bandwidth": "1M", "disk_iops": 100}}
        config["vm"] = {"firecracker": FIRECRACKER, "jailer": JAILER, "boot_timeout_s": 30}
        return config

    @classmethod
    def check_host(cls):
        pass  # missing() decided before main(): exit 77 where firecracker cannot run

    @classmethod
    def prepare_class(cls):
        cls.make_class_image("bb", APPLETS)

    def vm(self, *opts):
        return self.create("--runtime", "firecracker", "--image", self.image, *opts)

    def fc_pid(self, sid):
        return self.inspect(sid)["host_pid"]

    def jail(self, sid):
        # <state>/firecracker/jails/<firecracker's file name>/<sandbox id with - for _>
        jails = os.path.join(self.daemon.state_dir, "firecracker", "jails")
        names = os.listdir(jails) if os.path.isdir(jails) else []
        return os.path.join(jails, names[0] if names else "firecracker", sid.replace("_", "-"))

    def test_template_restore_is_fast_and_each_copy_is_its_own(self):
        first = self.vm()  # boots the template, then restores from it
        templates = os.listdir(os.path.join(self.daemon.state_dir, "firecracker", "templates"))
        self.assertEqual(len([t for t in templates if not t.startswith(".")]), 1, templates)
        times = []
        boxes = []
        for _ in range(5):
            t0 = time.monotonic()
            boxes.append(self.vm())
            times.append(time.monotonic() - t0)
        print("create from template (CLI, end to end): median %.1f ms, max %.1f ms"
              % (statistics.median(times) * 1000, max(times) * 1000))
        a, b = boxes[0], boxes[1]
        self.assertEqual(self.exec_ok(a, "hostname").strip(), a)
        self.assertEqual(self.exec_ok(b, "hostname").strip(), b)
        rand = "head -c 32 /dev/urandom | od -An -tx1"
        self.assertNotEqual(self.exec_ok(a, "sh", "-c", rand), self.exec_ok(b, "sh", "-c", rand))
        self.assertLess(abs(int(self.exec_ok(a, "date", "+%s")) - time.time()), 2.5)
        # Memory and disk are each copy's own.
        self.exec_ok(a, "sh", "-c", "echo only-a > /dev/shm/m; echo only-a > /root/d")
        rc, out, err = self.space("exec", b, "--", "cat", "/dev/shm/m", "/root/d")
        self.assertNotEqual(rc, 0)
        self.assertNotIn("only-a", out)
        self.assertEqual(self.exec_ok(first, "uname", "-r").strip()[:4], "6.1.")
        self.assertNotEqual(self.exec_ok(first, "uname", "-r").strip(), platform.release())

    def test_lifecycle_exec_files_egress_pause(self):
        sid = self.vm("--memory", "256M")
        rc, out, err = self.space("exec", sid, "--", "sh", "-c", "cat; echo oops >&2; exit 7",
                                  input="from stdin")
        self.assertEqual((rc, out, err.strip()), (7, "from stdin", "oops"))
        src = os.path.join(self.tmp, "in.txt")
        with open(src, "w") as f:
            f.write("payload\n")
        self.space_ok("cp", src, sid + ":/root/in.txt")
        self.assertEqual(self.exec_ok(sid, "cat", "/root/in.txt"), "payload\n")
        dst = os.path.join(self.tmp, "out.txt")
        self.space_ok("cp", sid + ":/root/in.txt", dst)
        self.assertEqual(read_text(dst), "payload\n")
        # `space diff` reads the VM's disk in the jail (paused, confined reader), as for qemu.
        diff = json.loads(self.space_ok("diff", sid, "--json"))
        self.assertIn("/root/in.txt", diff["added"])
        self.assertEqual(diff["deleted"], [])
        out = self.exec_ok(sid, "wget", "-q", "-O", "-", "http://allowed.test/hi")
        self.assertEqual(out, "hello from upstream /hi")
        rc, out, err = self.space("exec", sid, "--", "wget", "-q", "-O", "-", "http://denied.test/")
        self.assertNotEqual(rc, 0)
        self.assertIn("403", err)
        links = self.exec_ok(sid, "cat", "/proc/net/dev")
        self.assertEqual([l.split(":")[0].strip() for l in links.splitlines()[2:]], ["lo"])
        pid = self.fc_pid(sid)
        self.space_ok("pause", sid)
        rc, out, err = self.space("exec", sid, "--", "true")
        self.assertEqual(rc, 125)
        self.assertIn("paused", err)
        def ticks():
            f = read_text("/proc/%d/stat" % pid).rsplit(")", 1)[1].split()
            return int(f[11]) + int(f[12])
        t0 = ticks()
        time.sleep(1.0)
        self.assertLessEqual(ticks() - t0, 5, "a paused VM kept running")
        self.space_ok("resume", sid)
        self.assertEqual(self.exec_ok(sid, "cat", "/root/in.txt"), "payload\n")

    def test_profile_rate_limits_the_disk(self):
        sid = self.vm("--profile", "slowdisk", "--disk", "64M")
        t0 = time.monotonic()
        self.exec_ok(sid, "dd", "if=/dev/zero", "of=/root/f", "bs=64k", "count=48",
                     "oflag=direct", timeout=60)
        self.assertGreater(time.monotonic() - t0, 1.5, "3 MiB at 1 MiB/s took under 1.5 s")

    def test_snapshots_full_diff_rollback_restore(self):
        sid = self.vm("--memory", "192M", "--disk", "96M")
        self.exec_ok(sid, "sh", "-c", "echo disk-1 > /root/f; echo ram-1 > /dev/shm/r; "
                                      "(sleep 1001 &)")
        def sleeper(box):
            ps = json.loads(self.space_ok("ps", box, "--json"))
            pids = [p["pid"] for p in ps if p["argv"][:2] == ["sleep", "1001"]]
            return pids[0] if pids else None
        pid = wait_for(lambda: sleeper(sid), 20, what="the sleeper")
        snap = json.loads(self.space_ok("snapshot", sid, "--name", "fc-1", "--json"))
        self.assertEqual((snap["contents"], snap["processes"]), ("machine", "resumed"))
        self.exec_ok(sid, "sh", "-c", "echo disk-2 > /root/f; echo ram-2 > /dev/shm/r")
        self.space_ok("snapshot", sid, "--name", "fc-2")  # a diff over fc-1's memory
        self.exec_ok(sid, "sh", "-c", "echo disk-3 > /root/f; echo ram-3 > /dev/shm/r; "
                                      "kill %d" % pid)
        before = self.fc_pid(sid)
        rb = json.loads(self.space_ok("rollback", sid, "fc-2", "--json"))["rollback"]
        self.assertEqual(rb["processes"], "resumed")
        self.assertNotEqual(self.fc_pid(sid), before)
        self.assertEqual(self.exec_ok(sid, "cat", "/root/f", "/dev/shm/r"), "disk-2\nram-2\n")
        self.assertEqual(sleeper(sid), pid)
        self.assertEqual(self.exec_ok(sid, "hostname").strip(), sid)
        other = json.loads(self.space_ok("restore", "fc-1", "--json"))["id"]
        self.addCleanup(self._destroy_quietly, other)
        self.assertEqual(self.exec_ok(other, "cat", "/root/f", "/dev/shm/r"), "disk-1\nram-1\n")
        self.assertEqual(self.exec_ok(other, "hostname").strip(), other)
        out = self.exec_ok(other, "wget", "-q", "-O", "-", "http://allowed.test/restored")
        self.assertEqual(out, "hello from upstream /restored")

    def test_vm_survives_a_daemon_restart(self):
        sid = self.vm()
        pid = self.fc_pid(sid)
        self.exec_ok(sid, "sh", "-c", "echo kept > /root/kept")
        for sig in (signal.SIGKILL, signal.SIGTERM):
            self.daemon.stop(sig)
            self.assertTrue(os.path.exists("/proc/%d" % pid), "Firecracker died with spaced")
            self.daemon.start()
            self.assertEqual(self.fc_pid(sid), pid)
            self.assertEqual(self.exec_ok(sid, "cat", "/root/kept"), "kept\n")

    def test_firecracker_is_confined_and_rm_leaves_nothing(self):
        sid = self.vm()
        pid = self.fc_pid(sid)
        argv = read_text("/proc/%d/cmdline" % pid).split("\0")
        self.assertEqual(os.path.basename(argv[0]), "firecracker", argv)
        jid = sid.replace("_", "-")
        self.assertTrue("--id=" + jid in argv or jid in argv[argv.index("--id") + 1:][:1]
                        if "--id" in argv else "--id=" + jid in argv, argv)
        fields = dict(l.split(":", 1) for l in read_text("/proc/%d/status" % pid).splitlines()
                      if ":" in l)
        uid_base = self.inspect(sid)["uid_base"]
        self.assertEqual({int(u) for u in fields["Uid"].split()}, {uid_base})
        self.assertEqual(fields["Seccomp"].strip(), "2")
        self.assertEqual(int(fields["CapEff"].strip(), 16), 0)
        for ns in ("pid", "mnt", "net", "ipc", "uts", "cgroup"):
            self.assertNotEqual(os.readlink("/proc/%d/ns/%s" % (pid, ns)),
                                os.readlink("/proc/self/ns/%s" % ns), ns)
        dev = read_text("/proc/%d/net/dev" % pid)
        self.assertEqual([l.split(":")[0].strip() for l in dev.splitlines()[2:]], ["lo"])
        root = "/proc/%d/root" % pid
        self.assertFalse(os.path.exists(root + "/etc/shadow"))
        self.assertFalse(os.path.exists(root + self.daemon.state_dir))
        self.assertTrue([d for d in cgroup_dirs() if sid in d])
        jail = self.jail(sid)
        self.assertTrue(os.path.isdir(jail))
        self.space_ok("rm", sid)
        wait_for(lambda: not os.path.exists("/proc/%d" % pid), 10, what="Firecracker to exit")
        self.assertEqual([d for d in cgroup_dirs() if sid in d], [])
        self.assertFalse(os.path.exists(jail))
        wait_for(lambda: not os.path.exists(os.path.join(self.daemon.state_dir, "sandboxes", sid)),
                 10, what="the sandbox's state to be removed")

    def test_doctor_and_errors(self):
        doctor = json.loads(self.space_ok("doctor", "--json"))
        fc = doctor["runtimes"]["firecracker"]
        self.assertTrue(fc["available"], fc)
        self.assertEqual(doctor["snapshots"]["by_runtime"]["firecracker"]["processes"], "resumed")
        rc, out, err = self.space("create", "--runtime", "firecracker", "--image", "host")
        self.assertEqual(rc, 125)
        self.assertIn("build-vm", err)


if __name__ == "__main__":
    why = missing()
    if why:
        print("test_firecracker: SKIPPED on this host: " + "; ".join(why))
        sys.exit(77)
    main()
