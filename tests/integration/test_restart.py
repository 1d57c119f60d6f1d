"""Daemon restarts: sandboxes outlive their daemon (SIGTERM or SIGKILL) and a new daemon on the
same state dir takes them over (listed, exec works, files and processes still there); a sandbox
whose agent died while no daemon ran is cleaned up on start with nothing leaked."""

import os
import signal
import subprocess
import time

from harness import SPACE, SpaceTestCase, main, wait_for


class RestartTest(SpaceTestCase):

    def restart(self, sig):
        agent_pids = {}
        for sid in self.list_ids():
            agent_pids[sid] = self.agent_pid(sid)
        rc = self.daemon.stop(sig)
        if sig == signal.SIGKILL:
            self.assertEqual(rc, -signal.SIGKILL)
        else:
            self.assertIn(rc, (0, -signal.SIGTERM), "spaced exit status on SIGTERM")
        for sid, pid in agent_pids.items():
            self.assertTrue(os.path.exists("/proc/%d" % pid),
                            "agent of %s died with the daemon (%s)" % (sid, sig))
        self.daemon.start()

    def test_sandbox_survives_sigterm_and_sigkill(self):
        before = self.snapshot_host()
        before["daemon_fds"] = before["daemon_namespaces"] = None  # the daemon's pid changes
        sid = self.create()
        self.exec_ok(sid, "sh", "-c", "echo persisted > /root/keep")
        self.space_ok("exec", sid, "--detach", "--", "sleep", "1000")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with self.subTest(signal=sig.name):
                self.restart(sig)
                self.assertIn(sid, self.list_ids())
                self.assertEqual(self.inspect(sid)["state"], "running")
                self.assertEqual(self.exec_ok(sid, "cat", "/root/keep"), "persisted\n")
                self.assertIn("sleep", self.space_ok("ps", sid))
                self.assertEqual(self.space_ok("exec", sid, "--", "cat", input="stdin ok\n"),
                                 "stdin ok\n")
        self.space_ok("rm", sid)
        self.assert_no_leaks(before)

    def test_paused_sandbox_survives_restart(self):
        sid = self.create()
        self.space_ok("pause", sid)
        self.restart(signal.SIGKILL)
        self.assertEqual(self.inspect(sid)["state"], "paused")
        self.space_ok("resume", sid)
        self.assertEqual(self.exec_ok(sid, "echo", "ok"), "ok\n")

    def test_sandbox_whose_agent_died_is_cleaned_up(self):
        before = self.snapshot_host()
        before["daemon_fds"] = before["daemon_namespaces"] = None
        keep = self.create()
        dead = self.create()
        self.space_ok("exec", dead, "--detach", "--", "sleep", "1000")
        dead_pids = self.sandbox_host_pids(dead)
        self.assertGreaterEqual(len(dead_pids), 2)
        self.daemon.stop(signal.SIGKILL)
        # The agent is PID 1 of the sandbox's pid namespace: killing it ends every process.
        os.kill(dead_pids[0], signal.SIGKILL)
        wait_for(lambda: not any(os.path.exists("/proc/%d" % p) for p in dead_pids), timeout=10,
                 what="the dead sandbox's processes to go")
        self.daemon.start()
        wait_for(lambda: dead not in self.list_ids(), timeout=15,
                 what="the daemon to drop the sandbox whose agent died")
        self.assertIn(keep, self.list_ids())
        self.assertEqual(self.exec_ok(keep, "echo", "ok"), "ok\n")
        rc, _, err = self.space("exec", dead, "--", "true")
        self.assertEqual(rc, 125, err)
        self.space_ok("rm", keep)
        self.assert_no_leaks(before)

    def test_client_of_a_killed_daemon_fails_cleanly(self):
        sid = self.create()
        p = subprocess.Popen([SPACE, "exec", sid, "--", "sleep", "30"], env=self.env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1)
        self.daemon.stop(signal.SIGKILL)
        t0 = time.monotonic()
        try:
            _, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            self.fail("space exec hung after the daemon died")
        self.assertEqual(p.returncode, 125, err)
        self.assertLess(time.monotonic() - t0, 20)
        self.daemon.start()
        self.assertIn(sid, self.list_ids())
        self.assertEqual(self.exec_ok(sid, "echo", "ok"), "ok\n")


if __name__ == "__main__":
    main()
