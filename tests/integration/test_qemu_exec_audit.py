"""Exec auditing inside a microVM (docs/audit.md, "How execs are observed (microVMs)"): the
agent, as the guest's init, sees every execve of the processes it starts and of their
descendants and reports them; spaced appends them to the sandbox's hash chain as `proc.exec`
events marked `guest_reported`, linked to the API exec by its `stream`. A storm of execs in the
guest is cut by the per-sandbox rate limit (here lowered to 20/s with a burst of 300) and the
cut is counted in `proc.exec_dropped` events; spaced stays healthy and its memory flat; the
chain verifies; `space audit` shows the records as guest-reported.

One qemu sandbox (TCG here: a boot takes seconds), booted from busybox (Debian's
busybox-static) imported from a tarball and made a VM disk by `space image build-vm`. That
busybox runs `ls` by name as an in-process applet (fork, no execve: there is nothing to audit),
so the test runs /bin/ls by its path, which does exec; `cat` re-executes busybox through
/proc/self/exe with argv[0] "cat"."""

import json
import sys
import time

from harness import main, wait_for
from vm_image import VmSuite

APPLETS = ["sh", "ls", "cat", "true", "seq", "echo", "hostname"]
STORM = 2000
RATE, BURST = 20, 300


class QemuExecAuditTest(VmSuite):

    @classmethod
    def daemon_config(cls):
        return {"vm": {"boot_timeout_s": 120},
                "audit_guest_execs_per_s": RATE, "audit_guest_execs_burst": BURST}

    @classmethod
    def prepare_class(cls):
        cls.make_class_image("bbx", APPLETS, files={"etc/hostname": "bb-guest\n"})

    def events(self, sid, kind=None):
        r = self.api("GET", "/v1/sandboxes/%s/audit" % sid)
        self.assertEqual(r.status, 200, r)
        return [e for e in r.json["events"] if kind is None or e["kind"] == kind]

    def guest_execs(self, sid):
        return [e["data"] for e in self.events(sid, "proc.exec")
                if e["data"].get("guest_reported") is True]

    def find(self, execs, pred, what):
        hits = [e for e in execs if pred(e)]
        self.assertTrue(hits, "no guest proc.exec for %s among %s" % (
            what, json.dumps([e.get("argv") for e in execs])[-3000:]))
        return hits[0]

    def dropped(self, sid):
        return [e["data"] for e in self.events(sid, "proc.exec_dropped")]

    def verify(self, sid):
        rc, out, err = self.space("audit", sid, "--verify")
        self.assertEqual(rc, 0, (out, err))
        self.assertIn("hash chain intact", out)

    def test_guest_execs_are_audited_and_a_storm_is_rate_limited(self):
        sid = self.create("--runtime", "qemu", "--image", self.image, "--memory", "256M")

        # --- every exec of an API exec's tree, guest-reported, linked to the API exec.
        out = self.exec_ok(sid, "sh", "-c", "/bin/ls /; cat /etc/hostname")
        self.assertTrue(out.endswith("bb-guest\n"), out)
        start = self.events(sid, "exec.start")[-1]["data"]
        self.assertEqual(start["argv"], ["sh", "-c", "/bin/ls /; cat /etc/hostname"])

        def mine():
            return [e for e in self.guest_execs(sid) if e.get("stream") == start["stream"]]

        def complete():
            ex = mine()
            argv0 = [e["argv"][0] for e in ex if e["argv"]]
            return ex if {"sh", "/bin/ls", "cat"} <= set(argv0) else None
        ex = wait_for(complete, 30, what="proc.exec records of sh, ls and cat")
        sh = self.find(ex, lambda e: e["argv"] == ["sh", "-c", "/bin/ls /; cat /etc/hostname"]
                       and e["resolved"] == "/bin/sh", "sh -c")
        ls = self.find(ex, lambda e: e["argv"] == ["/bin/ls", "/"], "/bin/ls")
        cat = self.find(ex, lambda e: e["argv"] == ["cat", "/etc/hostname"], "cat")
        self.assertEqual(ls["ppid"], sh["pid"])
        self.assertEqual(ls["resolved"], "/bin/ls")
        # The shell forks for cat, or execs it in its own place as the last command.
        self.assertIn(sh["pid"], (cat["pid"], cat["ppid"]))
        for e in (sh, ls, cat):
            self.assertEqual(e["syscall"], "execve")
            self.assertEqual(e["uid"], 0)
            self.assertIsInstance(e["pid"], int)
            self.assertNotIn("host_pid", e)  # guest pids only: the host cannot vouch for them
        # The API's own view of the same exec is there too.
        end = self.events(sid, "exec.end")[-1]["data"]
        self.assertEqual((end["stream"], end["exit_code"]), (start["stream"], 0))
        # `space audit` says which records the guest reported.
        text = self.space_ok("audit", sid)
        line = [l for l in text.splitlines() if "proc.exec" in l and "argv: /bin/ls /" in l]
        self.assertTrue(line, text[-3000:])
        self.assertIn("(guest-reported)", line[0])
        self.verify(sid)

        # --- a storm: /bin/true by its path, a real exec each time.
        rss_before = self.daemon.rss()
        t0 = time.monotonic()
        out = self.exec_ok(sid, "sh", "-c",
                           "for i in $(seq %d); do /bin/true; done; echo storm-done" % STORM,
                           timeout=600)
        storm_s = time.monotonic() - t0
        self.assertEqual(out.strip(), "storm-done")
        # spaced stays healthy: it answers, runs execs, and its memory did not follow the storm.
        r = self.api("GET", "/v1/health")
        self.assertEqual(r.status, 200, r)
        time.sleep(1.2)  # past the once-a-second bound on proc.exec_dropped
        self.assertEqual(self.exec_ok(sid, "echo", "alive").strip(), "alive")
        self.assertLess(self.daemon.rss() - rss_before, 64 << 20)

        self.space_ok("rm", sid)  # its last drop count is written when its channel closes
        trues = [e for e in self.guest_execs(sid) if e["argv"] == ["/bin/true"]]
        drops = self.dropped(sid)
        self.assertTrue(drops, "no proc.exec_dropped after %d execs" % STORM)
        limited = sum(d["rate_limited"] for d in drops)
        counted = sum(d["count"] for d in drops)
        for d in drops:
            self.assertEqual(d["count"],
                             d["rate_limited"] + d["dropped_by_guest"] + d["malformed"], d)
            self.assertEqual(d["malformed"], 0, d)
        sys.stderr.write("storm: %d execs in %.1f s: %d recorded, %d counted in %d "
                         "proc.exec_dropped events (%d rate-limited)\n"
                         % (STORM, storm_s, len(trues), counted, len(drops), limited))
        self.assertGreater(limited, 0)
        # Each /bin/true was recorded or counted (the counts also cover the shell's other
        # execs, hence at least).
        self.assertGreaterEqual(len(trues) + counted, STORM)
        # ... and no more was recorded than the bucket allows: its size, plus its rate over the
        # time the storm took (and a little for the echo after it).
        self.assertLess(len(trues), STORM)
        self.assertLessEqual(len(trues), BURST + RATE * (storm_s + 3))
        # At most one proc.exec_dropped a second (plus the last one).
        self.assertLessEqual(len(drops), storm_s + 4)
        text = self.space_ok("audit", sid)
        self.assertIn("proc.exec_dropped  count=", text)
        self.verify(sid)


if __name__ == "__main__":
    main()
