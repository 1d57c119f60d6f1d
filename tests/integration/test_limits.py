"""Resource limits: memory (an OOM kill is reported as such), pids (a fork bomb stays inside
and the sandbox can still be removed), CPU quota and the writable layer's size."""

import os
import time

from harness import (SpaceTestCase, cgroup_dirs, main, proc_cpu_ticks, proc_pids, read_text,
                     wait_for)

ALLOC_200MB = "b = b'x' * (200 << 20); print(len(b))"


class LimitsTest(SpaceTestCase):

    def test_oom_is_reported(self):
        sid = self.create("--memory", "32M")
        info = self.inspect(sid)
        self.assertEqual(info["usage"].get("memory_limit", 32 << 20), 32 << 20, info)
        rc, out, err = self.space("exec", sid, "--", "python3", "-c", ALLOC_200MB, timeout=120)
        self.assertEqual(rc, 137, (out, err))
        self.assertNotIn(str(200 << 20), out)
        info = self.inspect(sid)
        self.assertGreaterEqual(info["usage"]["oom_kills"], 1, info)

        # The API's exit event says so too.
        r, events = self.api_exec(sid, ["python3", "-c", ALLOC_200MB])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(events[-1]["type"], "exit")
        self.assertTrue(events[-1].get("oom_killed"), events[-1])
        self.assertEqual(events[-1].get("signal"), 9, events[-1])

        # The sandbox itself survives its process's OOM.
        self.assertEqual(self.exec_ok(sid, "echo", "alive"), "alive\n")

        # SysV shm outlives its processes, so no OOM kill frees it: its namespace holds at most
        # half the memory limit (kernel.shmall), which leaves the agent room to live.
        shmall = int(self.exec_ok(sid, "cat", "/proc/sys/kernel/shmall"))
        self.assertEqual(shmall * os.sysconf("SC_PAGE_SIZE"), 16 << 20)

    def test_run_oom_exit_code(self):
        rc, out, err = self.space("run", "--memory", "32M", "--", "python3", "-c", ALLOC_200MB,
                                  timeout=120)
        self.assertEqual(rc, 137, (out, err))

    def test_memory_usage_is_reported(self):
        sid = self.create("--memory", "128M")
        self.space_ok("exec", sid, "--detach", "--", "python3", "-c",
                      "import time; b = b'x' * (48 << 20); time.sleep(1000)")
        wait_for(lambda: self.inspect(sid)["usage"]["memory_bytes"] > 40 << 20, timeout=20,
                 what="memory usage to reach 40 MB")

    def _pids_limit_enforced(self):
        """A harmless probe first: 40 sleeps in a --pids 16 sandbox must not all start."""
        sid = self.create("--pids", "16")
        out = self.exec_ok(sid, "python3", "-c",
                           "import subprocess\n"
                           "ok = 0\n"
                           "ps = []\n"
                           "for i in range(40):\n"
                           "    try:\n"
                           "        ps.append(subprocess.Popen(['sleep', '30'])); ok += 1\n"
                           "    except OSError:\n"
                           "        pass\n"
                           "print(ok)\n"
                           "for p in ps: p.kill()\n")
        started = int(out.strip())
        self.space_ok("rm", "--force", sid)
        return started < 16

    def _host_pids_in(self, sid):
        """Host pids whose cgroup is the sandbox's (counted from outside, not by the daemon)."""
        out = []
        for pid in proc_pids():
            if ("/%s" % sid) in read_text("/proc/%d/cgroup" % pid):
                out.append(pid)
        return out

    def test_fork_bomb_stays_inside(self):
        if not self._pids_limit_enforced():
            self.fail("--pids is not enforced; not running the fork bomb")
        other = self.create()
        bomb = self.create("--pids", "64")
        # Bounded even without a limit (2^11 shells, 20 s each), so a broken limit cannot take
        # the build machine down.
        self.space_ok("exec", bomb, "--detach", "--", "sh", "-c",
                      "f() { if [ $1 -gt 0 ]; then f $(($1-1)) & f $(($1-1)) & fi; "
                      "sleep 20; }; f 11 2>/dev/null")
        time.sleep(3)
        peak = host_peak = 0
        for _ in range(5):
            peak = max(peak, self.inspect(bomb)["usage"].get("pids", 0))
            host_peak = max(host_peak, len(self._host_pids_in(bomb)))
            time.sleep(0.2)
        print("fork bomb: peak %d pids (daemon's count), %d seen from the host" %
              (peak, host_peak))
        self.assertLessEqual(peak, 64)
        self.assertLessEqual(host_peak, 64)
        # The bomb did hit the limit: the kernel counted refused forks (v1 and v2 pids.events).
        events = [read_text(os.path.join(d, "pids.events")) for d in cgroup_dirs()
                  if d.endswith("/" + bomb) and os.path.exists(os.path.join(d, "pids.events"))]
        refused = sum(int(l.split()[1]) for e in events for l in e.splitlines()
                      if l.startswith("max "))
        self.assertTrue(events, "no pids cgroup found for %s" % bomb)
        self.assertGreater(refused, 0, "no fork was refused: the bomb never reached --pids")
        t0 = time.monotonic()
        self.assertEqual(self.exec_ok(other, "echo", "unaffected", timeout=60), "unaffected\n")
        print("exec in a neighbour of a fork bomb: %.2fs" % (time.monotonic() - t0))
        self.space_ok("rm", "--force", bomb, timeout=60)
        self.assertNotIn(bomb, self.list_ids())
        wait_for(lambda: not self._host_pids_in(bomb), timeout=20,
                 what="the fork bomb's processes to be gone from the host")

    def _cpu_seconds(self, sid):
        usage = self.inspect(sid)["usage"]
        if isinstance(usage.get("cpu_usage_ns"), int):
            return usage["cpu_usage_ns"] / 1e9
        return sum(proc_cpu_ticks(p) for p in self.sandbox_host_pids(sid)) / 100

    def test_cpu_quota(self):
        sid = self.create("--cpus", "0.5")
        c0 = self._cpu_seconds(sid)
        t0 = time.monotonic()
        self.exec_ok(sid, "sh", "-c",
                     "timeout 3 sh -c 'while :; do :; done' & "
                     "timeout 3 sh -c 'while :; do :; done'; wait", timeout=60)
        wall = time.monotonic() - t0
        used = self._cpu_seconds(sid) - c0
        print("--cpus 0.5: %.2fs CPU in %.2fs wall" % (used, wall))
        self.assertLess(used / wall, 0.75)
        self.assertGreater(used / wall, 0.2)

    def test_disk_limit(self):
        sid = self.create("--disk", "16M")
        rc, out, err = self.space("exec", sid, "--", "dd", "if=/dev/zero", "of=/root/big",
                                  "bs=1M", "count=64")
        self.assertNotEqual(rc, 0)
        self.assertIn("No space left on device", err)
        self.exec_ok(sid, "rm", "/root/big")
        self.assertEqual(self.exec_ok(sid, "sh", "-c", "echo ok > /root/small && cat /root/small"),
                         "ok\n")


if __name__ == "__main__":
    main()
