"""The egress gateway as its own process (space-egress; docs/egress.md, "The gateway process").

* Killing it with SIGKILL while a sandbox runs 16 downloads through it: the downloads fail
  cleanly (curl reports an error, none hangs), a new request succeeds within a second, the
  sandbox and its files are untouched, a new process with the same posture serves, and the
  interruption is in the sandbox's audit log.
* A compromised gateway process (a stand-in speaking its control protocol, put in place with
  `gateway.binary`) asks spaced for secrets its sandbox was not granted and for sandboxes that do
  not exist, reports forged audit events and sends mistyped messages: spaced refuses each,
  records none of them, counts the malformed ones (space_egress_control_refused_total) and
  reads on.
* With `gateway.sandboxes_per_process: 1` every sandbox has a process of its own (two spares
  wait, started): killing one sandbox's process interrupts only that sandbox (another's
  download completes), each process has the posture, a destroyed sandbox's process ends, and a
  compromised process serving one sandbox asks for a neighbour's granted secret and is refused.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import harness
from test_egress import SECRET, EgressBase

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "security"))

import posture  # noqa: E402

DOWNLOADS = 16

# Inside the sandbox: 16 downloads of a 1 MiB file at a sandbox-wide 64 KiB/s (so all are in
# flight for many seconds); READY once each has bytes; then waits for them to end and times how
# long a new request takes to succeed after the first one failed.
DOWNLOAD_SCRIPT = r'''
import json, os, subprocess, sys, time
procs = []
for i in range(%(n)d):
    procs.append(subprocess.Popen(
        ["curl", "-sS", "--max-time", "120", "-o", "/tmp/dl%%d" %% i,
         "https://git.example.test/big.bin"], stderr=subprocess.PIPE))
deadline = time.time() + 60
while time.time() < deadline:
    if all(os.path.exists("/tmp/dl%%d" %% i) and os.path.getsize("/tmp/dl%%d" %% i) > 0
           for i in range(%(n)d)):
        break
    time.sleep(0.05)
open("/tmp/ready", "w").close()
first_fail = None
codes = []
for p in procs:
    p.wait()
    codes.append(p.returncode)
    if p.returncode != 0 and first_fail is None:
        first_fail = time.time()
errors = [p.stderr.read().decode(errors="replace").strip()[-200:] for p in procs]
t0 = first_fail or time.time()
ok_after = None
tries = 0
while time.time() - t0 < 10:
    tries += 1
    r = subprocess.run(["curl", "-sS", "--max-time", "5", "https://api.example.test/echo"],
                       capture_output=True)
    if r.returncode == 0:
        ok_after = time.time() - t0
        break
    time.sleep(0.02)
print(json.dumps({"codes": codes, "errors": errors, "ok_after": ok_after, "tries": tries}))
'''

# A stand-in for a compromised space-egress: it speaks the control protocol (egress/wire.h) and
# tries what a process taken over by a sandbox's bytes would try.
FAKE_GATEWAY = r'''#!/usr/bin/env python3
import json, os, socket, sys
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake-results.jsonl")
ctl = socket.socket(fileno=3)
def send(m): ctl.send(json.dumps(m).encode())
def note(m):
    with open(out, "a") as f: f.write(json.dumps(m) + "\n")
seq = 100
pending = {}
while True:
    data, fds, _, _ = socket.recv_fds(ctl, 1 << 22, 16)
    if not data:
        break
    m = json.loads(data)
    for fd in fds:
        os.close(fd)
    op = m.get("op")
    if op == "init":
        note({"init_secrets": sorted(m.get("secrets", {})),
              "init_has_values": any("value" in d or "env" in d or "file" in d or "command" in d
                                     for d in m.get("secrets", {}).values())})
        send({"op": "ready", "pid": os.getpid()})
    elif op == "attach":
        sid = m["id"]
        # Sandboxes attached before this one (to this process or another stand-in).
        try:
            with open(out) as f:
                earlier = [json.loads(l).get("attach") for l in f if l.strip()]
        except FileNotFoundError:
            earlier = []
        neighbours = sorted({e for e in earlier if e and e != sid})
        note({"attach": sid, "pid": os.getpid(), "grants": [g["name"] for g in m["grants"]],
              "known": sorted(m.get("known", {}))})
        send({"op": "reply", "seq": m["seq"], "ok": True})
        asks = [("granted", sid, "API_TOKEN"), ("not_granted", sid, "LIVE_ONLY"),
                ("other_sandbox", "sb_doesnotexist", "API_TOKEN")]
        asks += [("neighbour " + n, n, "API_TOKEN") for n in neighbours]
        for what, ask_id, name in asks:
            seq += 1
            pending[seq] = what
            send({"op": "secret", "seq": seq, "id": ask_id, "name": name})
        send({"op": "audit", "id": sid, "kind": "sandbox.destroy", "data": {"forged": 1}})
        send({"op": "audit", "id": "sb_doesnotexist", "kind": "egress.denied",
              "data": {"forged": 2}})
        # Mistyped fields: spaced must read on (the genuine event below is then recorded).
        send({"op": 1})
        send({"op": "audit", "id": 5, "kind": ["egress.denied"], "data": {"forged": 4}})
        send({"op": "reply", "seq": "x", "error": "y"})
        # More of the same (egress/wire.h's parser refuses and counts each one): an unknown op,
        # a seq out of range or mistyped, a reply neither ok nor an error, data that is no
        # object, a second ready, fds where the kind takes none, a packet that is not JSON,
        # one nested too deep.
        send({"op": "launch", "argv": ["sh"]})
        send({"op": "secret", "seq": 2 ** 64 - 1, "id": sid, "name": "API_TOKEN"})
        send({"op": "secret", "seq": "1", "id": sid, "name": "API_TOKEN"})
        send({"op": "reply", "seq": 1, "ok": "yes"})
        send({"op": "audit", "id": sid, "kind": "egress.denied", "data": [1]})
        send({"op": "ready", "pid": os.getpid()})
        r, w = os.pipe()
        socket.send_fds(ctl, [json.dumps({"op": "reply", "seq": 1, "ok": True}).encode()], [r])
        os.close(r)
        os.close(w)
        ctl.send(b"not json")
        ctl.send(b'{"op":"audit","data":' + b"[" * 10000 + b"]" * 10000 + b"}")
        send({"op": "audit", "id": sid, "kind": "egress.denied", "data": {"genuine": 3}})
    elif op == "secret":
        note({"secret": pending.get(m.get("seq")), "value": m.get("value"),
              "error": m.get("error")})
    elif op in ("detach", "stats"):
        send({"op": "reply", "seq": m["seq"], "ok": True})
'''


def exec_in_background(test, sid, *argv):
    """`space exec sid -- argv` started, not waited for: the Popen (stdout, stderr piped)."""
    return subprocess.Popen([harness.SPACE, "exec", sid, "--"] + list(argv),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=test.env())


class GatewayProcessTest(EgressBase):

    @classmethod
    def daemon_config(cls):
        cfg = super().daemon_config()
        cfg["profiles"]["many"] = {"egress": {
            "allow": ["git.example.test", "api.example.test"],
            "allow_networks": ["127.0.0.2/32"], "max_connections": 64, "bandwidth": "64K"}}
        return cfg

    def gateway_pid(self):
        pids = posture.gateway_pids(self.daemon.pid)
        self.assertEqual(len(pids), 1, "space-egress children of spaced: %s" % pids)
        return pids[0]

    def test_sigkill_during_downloads(self):
        sid = self.create("--profile", "many")
        self.sh_ok("echo kept > /tmp/mine", sid=sid)
        old = self.gateway_pid()
        script = DOWNLOAD_SCRIPT % {"n": DOWNLOADS}
        p = exec_in_background(self, sid, "python3", "-c", script)
        try:
            harness.wait_for(lambda: self.space("exec", sid, "--", "test", "-e",
                                                "/tmp/ready")[0] == 0,
                             timeout=60, interval=0.2, what="16 downloads in flight")
            self.assertIsNone(p.poll(), "the downloads ended before the kill")
            os.kill(old, signal.SIGKILL)
            out, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 0, err.decode(errors="replace")[-2000:])
        res = json.loads(out.decode().strip().splitlines()[-1])
        # Every download failed (none finished: 1 MiB at 64 KiB/s takes minutes) and none hung.
        self.assertEqual(len(res["codes"]), DOWNLOADS)
        self.assertTrue(all(c != 0 for c in res["codes"]), res)
        # A new request succeeded within a second of the first failure.
        self.assertIsNotNone(res["ok_after"], res)
        self.assertLess(res["ok_after"], 1.0, res)
        print("gateway killed: %d downloads failed (curl codes %s); a new request succeeded "
              "%.0f ms after the first failure (%d tries)" %
              (DOWNLOADS, sorted(set(res["codes"])), res["ok_after"] * 1000, res["tries"]),
              file=sys.stderr)
        # Nothing else was lost: the sandbox, its files, its secret injection, a new process
        # with the same posture.
        self.assertEqual(self.sh_ok("cat /tmp/mine", sid=sid).strip(), "kept")
        new = self.gateway_pid()
        self.assertNotEqual(new, old)
        problems, summary = posture.check_gateway_process(self.daemon.pid)
        self.assertEqual(problems, [], summary)
        out = self.sh_ok('curl -sS https://api.example.test/echo -H "Authorization: $API_TOKEN"')
        got = [e for e in self.upstream.echoes() if e["host"] == "api.example.test"]
        self.assertEqual(got[-1]["headers"]["authorization"], SECRET)
        self.assertNotIn(SECRET, out)
        events = [e for e in self.audit_events(sid) if e["kind"] == "egress.interrupted"]
        self.assertEqual(len(events), 1, events)
        self.assertIn("signal KILL", events[0]["data"]["reason"])
        metrics = self.api("GET", "/metrics").body.decode()
        self.assertIn("space_egress_process_restarts_total 1", metrics)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sid = cls.create_for_class("--secret", "API_TOKEN")


class PerSandboxProcessTest(EgressBase):
    """gateway.sandboxes_per_process 1: every sandbox has a space-egress of its own, which ends
    with it; killing one interrupts only its sandbox."""

    @classmethod
    def daemon_config(cls):
        cfg = super().daemon_config()
        cfg["gateway"]["sandboxes_per_process"] = 1
        cfg["profiles"]["fast"] = {"egress": {
            "allow": ["git.example.test", "api.example.test"],
            "allow_networks": ["127.0.0.2/32"], "bandwidth": "512K"}}
        return cfg

    SPARES = 2  # EgressPool::kSpares: started and unused, so that creates need not wait

    def served_by(self, sid):
        """The pid of the space-egress serving `sid`, from spaced's log."""
        m = re.findall(r"egress: %s is served by gateway process (\d+)" % sid,
                       self.daemon.log_text())
        self.assertEqual(len(m), 1, "log lines for %s: %s" % (sid, m))
        return int(m[0])

    def wait_processes(self, n):
        """Waits until spaced counts n gateway processes (a spare counts once its start-up
        handshake is over, after its confinement; it may show in /proc before)."""
        harness.wait_for(lambda: "space_egress_processes %d\n" % n in
                         self.api("GET", "/metrics").body.decode(), timeout=10,
                         what="space_egress_processes %d" % n)

    def test_each_sandbox_its_own_process(self):
        self.wait_processes(self.SPARES)
        self.assertEqual(len(posture.gateway_pids(self.daemon.pid)), self.SPARES)
        a = self.create("--profile", "fast")
        b = self.create("--profile", "fast")
        c = self.create("--secret", "API_TOKEN")
        pa, pb, pc = self.served_by(a), self.served_by(b), self.served_by(c)
        self.assertEqual(len({pa, pb, pc}), 3, (pa, pb, pc))
        # The spares have been refilled; each process, spare or serving, has the posture.
        self.wait_processes(3 + self.SPARES)
        self.assertTrue({pa, pb, pc} <= set(posture.gateway_pids(self.daemon.pid)))
        problems, summary = posture.check_gateway_process(self.daemon.pid, want=3 + self.SPARES)
        self.assertEqual(problems, [], summary)
        # B downloads 1 MiB at 512 KiB/s while A's process is killed: B's download completes.
        p = exec_in_background(self, b, "sh", "-c",
                               "curl -sS --max-time 60 -o /tmp/big https://git.example.test/big.bin"
                               " && wc -c < /tmp/big")
        try:
            harness.wait_for(lambda: self.space("exec", b, "--", "sh", "-c",
                                                "test -s /tmp/big")[0] == 0,
                             timeout=30, interval=0.1, what="B's download under way")
            started = re.compile(r"egress: gateway process (\d+) started")
            starts = len(started.findall(self.daemon.log_text()))
            os.kill(pa, signal.SIGKILL)
            out, err = p.communicate(timeout=90)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 0, err.decode(errors="replace")[-2000:])
        self.assertEqual(out.decode().strip(), str(1 << 20))
        # A got a new process; B's and C's are the ones they had.
        harness.wait_for(lambda: len(started.findall(self.daemon.log_text())) > starts,
                         timeout=10, what="A's gateway process started again")
        pa2 = int(started.findall(self.daemon.log_text())[starts])
        self.wait_processes(3 + self.SPARES)
        pids = set(posture.gateway_pids(self.daemon.pid))
        self.assertNotIn(pa, pids)
        self.assertTrue({pb, pc, pa2} <= pids, (pids, pb, pc, pa2))
        self.sh_ok("curl -sS -o /dev/null https://git.example.test/hello.txt", sid=a)
        # C's secret injection is its own process's business and still works.
        self.sh_ok('curl -sS https://api.example.test/echo -H "Authorization: $API_TOKEN"', sid=c)
        got = [e for e in self.upstream.echoes() if e["host"] == "api.example.test"]
        self.assertEqual(got[-1]["headers"]["authorization"], SECRET)
        # Only A's audit log has the interruption.
        interrupted = {s: [e for e in self.audit_events(s) if e["kind"] == "egress.interrupted"]
                       for s in (a, b, c)}
        self.assertEqual(len(interrupted[a]), 1, interrupted)
        self.assertEqual(interrupted[b] + interrupted[c], [], interrupted)
        self.assertIn("space_egress_process_restarts_total 1",
                      self.api("GET", "/metrics").body.decode())
        # A destroyed sandbox's process ends with it; only the spares are left when all are gone.
        self.space_ok("rm", "--force", a)
        harness.wait_for(lambda: not os.path.exists("/proc/%d" % pa2), timeout=10,
                         what="A's gateway process gone after its destroy")
        for s in (b, c):
            self.space_ok("rm", "--force", s)
        self.wait_processes(self.SPARES)
        harness.wait_for(lambda: len(posture.gateway_pids(self.daemon.pid)) == self.SPARES,
                         timeout=10, what="only the spares left")
        self.assertFalse({pb, pc, pa2} & set(posture.gateway_pids(self.daemon.pid)))
        metrics = self.api("GET", "/metrics").body.decode()
        self.assertIn("space_egress_processes %d" % self.SPARES, metrics)
        # The counters of processes that ended stay in the totals.
        self.assertNotIn("space_egress_connections_total 0\n", metrics)


class GatewayConfigTest(unittest.TestCase):

    def test_bad_sandboxes_per_process_is_refused(self):
        root = tempfile.mkdtemp(prefix="space-gwconfig-")
        try:
            for bad in (-1, "1", 1.5, 2000000):
                with self.subTest(value=bad):
                    path = os.path.join(root, "c.json")
                    with open(path, "w") as f:
                        json.dump({"gateway": {"sandboxes_per_process": bad}}, f)
                    p = subprocess.run([harness.SPACED, "--config", path, "--state-dir",
                                        os.path.join(root, "state"), "--socket",
                                        os.path.join(root, "s.sock")],
                                       capture_output=True, timeout=30,
                                       stdin=subprocess.DEVNULL)
                    self.assertNotEqual(p.returncode, 0)
                    err = p.stderr.decode()
                    self.assertIn("sandboxes_per_process", err)
                    self.assertIn("1 gives each sandbox a gateway process of its own", err)
        finally:
            harness.safe_rmtree(root)


class CompromisedBase(EgressBase):
    """A daemon whose gateway process is the stand-in FAKE_GATEWAY."""

    @classmethod
    def daemon_config(cls):
        cfg = super().daemon_config()
        fake = os.path.join(cls.tmp, "fake-egress.py")
        with open(fake, "w") as f:
            f.write(FAKE_GATEWAY)
        os.chmod(fake, 0o755)
        cfg["gateway"]["binary"] = fake
        return cfg

    def results(self):
        path = os.path.join(self.tmp, "fake-results.jsonl")
        return [json.loads(l) for l in harness.read_text(path).splitlines() if l.strip()]


class CompromisedGatewayTest(CompromisedBase):

    def test_spaced_refuses_what_was_not_granted(self):
        sid = self.create("--secret", "API_TOKEN")
        harness.wait_for(lambda: len([r for r in self.results() if "secret" in r]) == 3,
                         timeout=20, what="the fake gateway's three secret requests answered")
        res = self.results()
        init = [r for r in res if "init_secrets" in r][0]
        # The definitions travel without their sources or values.
        self.assertFalse(init["init_has_values"], init)
        attach = [r for r in res if r.get("attach") == sid][0]
        self.assertEqual(attach["grants"], ["API_TOKEN"])
        answers = {r["secret"]: r for r in res if "secret" in r}
        self.assertEqual(answers["granted"]["value"], SECRET)
        for what in ("not_granted", "other_sandbox"):
            self.assertIsNone(answers[what]["value"], answers[what])
            self.assertIn("not granted", answers[what]["error"]["message"])
        self.assertNotIn("live-only-value", json.dumps(res))
        # Of the three audit events only the genuine kind for its own sandbox was recorded.
        harness.wait_for(lambda: any(e["data"].get("genuine") == 3
                                     for e in self.audit_events(sid)),
                         timeout=10, what="the genuine event in the audit log")
        events = self.audit_events(sid)
        self.assertFalse([e for e in events if "forged" in e["data"]], events)
        self.assertFalse([e for e in events if e["kind"] == "sandbox.destroy"], events)


class MalformedGatewayMessagesTest(CompromisedBase):
    """A daemon of its own: the stand-in's results file counts every attach."""

    def test_malformed_messages_are_counted(self):
        """Each malformed message of the stand-in (FAKE_GATEWAY, after its attach) is refused
        and counted in space_egress_control_refused_total, and spaced reads on: the genuine
        event sent after them is recorded, and spaced still answers."""
        sid = self.create("--secret", "API_TOKEN")
        harness.wait_for(lambda: any(e["data"].get("genuine") == 3
                                     for e in self.audit_events(sid)),
                         timeout=20, what="the genuine event after the malformed ones")
        metrics = self.api("GET", "/metrics").body.decode()
        m = re.search(r"^space_egress_control_refused_total (\d+)$", metrics, re.M)
        self.assertIsNotNone(m, metrics)
        # Per attach: the forged kind, {"op": 1}, the mistyped audit, the mistyped reply, and
        # the nine after them (the audit for a sandbox it does not serve is well-formed:
        # dropped, not counted).
        self.assertEqual(int(m.group(1)), 13, metrics)
        self.assertTrue(self.daemon.alive())
        self.assertEqual(self.api("GET", "/v1/sandboxes/" + sid).status, 200)


class CompromisedPerSandboxGatewayTest(CompromisedBase):
    """With a process per sandbox, a taken-over gateway cannot have another sandbox's secrets:
    the stand-in serving B asks spaced for A's granted secret and is refused."""

    @classmethod
    def daemon_config(cls):
        cfg = super().daemon_config()
        cfg["gateway"]["sandboxes_per_process"] = 1
        return cfg

    def test_a_neighbours_secret_is_refused(self):
        a = self.create("--secret", "API_TOKEN")
        harness.wait_for(lambda: len([r for r in self.results() if "secret" in r]) >= 3,
                         timeout=20, what="the first stand-in's secret requests answered")
        b = self.create("--secret", "API_TOKEN")
        harness.wait_for(lambda: any(r.get("secret") == "neighbour " + a
                                     for r in self.results()),
                         timeout=20, what="the second stand-in's request for A's secret")
        # Each stand-in also asks for its own secret; B's answer may land after its neighbour
        # request's (a loaded host showed it): wait for both before reading.
        harness.wait_for(lambda: len([r for r in self.results()
                                      if r.get("secret") == "granted"]) >= 2,
                         timeout=20, what="both stand-ins' own secrets answered")
        res = self.results()
        attaches = [r for r in res if "attach" in r]
        # Two processes, each handed one sandbox only.
        self.assertEqual(sorted(r["attach"] for r in attaches), sorted([a, b]), attaches)
        self.assertEqual(len({r["pid"] for r in attaches}), 2, attaches)
        answer = [r for r in res if r.get("secret") == "neighbour " + a][0]
        self.assertIsNone(answer["value"], answer)
        self.assertIn("not granted", answer["error"]["message"])
        granted = [r for r in res if r.get("secret") == "granted"]
        self.assertEqual([r["value"] for r in granted], [SECRET, SECRET], granted)


if __name__ == "__main__":
    harness.main()
