#!/usr/bin/env python3
"""The host-matrix checks, run inside the guest that tests/hosts/run_hosts.py boots (a pure
cgroup v2 Debian 12 guest; docs/hosts.md). Drives the real spaced and `space` CLI from
/usr/local/bin and looks at the cgroup tree from outside:

  layout        cgroup2 only at /sys/fs/cgroup, with memory, pids and cpu
  daemon        spaced starts (systemd: `systemctl start spaced` with the shipped unit; plain:
                directly in the root cgroup; delegated: directly in /delegated, a cgroup of its
                own) and claims its base: systemd: space-sandboxes.service's cgroup (the unit's
                $SPACE_CGROUP_BASE) with its holder moved to <base>/supervisor; plain: the root;
                delegated: /delegated, with spaced itself moved to /delegated/supervisor
  create_exec   a sandbox is created at <base>/space/<id> and execs
  memory_oom    --memory 32M: memory.max is set, an allocation of 200 MB is OOM-killed and
                reported as such (exit 137, usage.oom_kills, the API's oom_killed)
  pids          --pids 16: pids.max is set and enforced
  cpu           --cpus 0.5: cpu.max is "50000 100000" and two busy loops get < 0.75 CPU
  disk          --disk 16M: writing 64 MB fails with ENOSPC
  pause_resume  pause writes cgroup.freeze (events say frozen), resume thaws, exec works
  destroy_kill  rm --force writes cgroup.kill (seen with inotify) and leaves nothing
  restart       live sandboxes survive a daemon restart (systemctl restart / SIGKILL + start),
                exec in them and are destroyed cleanly
  cycles        N create/exec/destroy cycles leave no cgroup, mount, process or state behind
  outside       nothing of spaced's exists outside its base (systemd, delegated), and no
                sandbox cgroup is left

Writes <results>/results.json ({"variant", "ok", "checks": [{name, ok, seconds, detail}]}) and
the daemon's logs; reads <results>/config.json ({"cycles": N, "gdb": bool}). Only the Python
standard library.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import traceback

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ["SPACE_BUILD_DIR"] = "/usr/local/bin"
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from harness import ID_RE, decode_events, http_request, read_text  # noqa: E402

CG = "/sys/fs/cgroup"
SPACE = "/usr/local/bin/space"
SPACED = "/usr/local/bin/spaced"
SOCK = "/run/space/space.sock"
STATE = "/var/lib/space"
ALLOC_200MB = "b = b'x' * (200 << 20); print(len(b))"
IN_MODIFY = 0x2


class CheckFailed(Exception):
    pass


def ensure(cond, what):
    if not cond:
        raise CheckFailed(what)


def log(msg):
    sys.stdout.write("hosts[%s]: %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stdout.flush()


def run(cmd, timeout=120, input=None):
    p = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout,
                       stdin=None if input is not None else subprocess.DEVNULL)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def space(*args, timeout=120, input=None):
    return run([SPACE] + [str(a) for a in args], timeout=timeout,
               input=input.encode() if isinstance(input, str) else input)


def space_ok(*args, **kw):
    rc, out, err = space(*args, **kw)
    ensure(rc == 0, "space %s: rc %d, stdout %r, stderr %r" %
           (" ".join(map(str, args)), rc, out[-500:], err[-500:]))
    return out


def first_line(path):
    return read_text(path).splitlines()[0] if read_text(path) else ""


def keyed(path, key):
    for line in read_text(path).splitlines():
        k, _, v = line.partition(" ")
        if k == key:
            return int(v)
    return None


def own_cgroup(pid):
    for line in read_text("/proc/%d/cgroup" % pid).splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def cgroup_tree():
    out = set()
    for dirpath, _, _ in os.walk(CG):
        out.add(dirpath)
    return out


def agent_pids():
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            cmd = read_text("/proc/%s/cmdline" % p).split("\0")[0]
            if os.path.basename(cmd).startswith("space-agent"):
                out.append(int(p))
    return out


def live(pid):
    st = read_text("/proc/%d/stat" % pid)
    return bool(st) and st[st.rindex(")") + 2] != "Z"


def space_mounts():
    out = []
    for line in read_text("/proc/self/mountinfo").splitlines():
        f = line.split()
        if ID_RE.search(line) or f[4].startswith(STATE + "/"):
            out.append(f[4])
    return out


class Inotify:
    """inotify on one file through libc (ctypes): did somebody write to it?"""

    def __init__(self, path, mask=IN_MODIFY):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        ensure(self.fd >= 0, "inotify_init1: errno %d" % ctypes.get_errno())
        wd = self.libc.inotify_add_watch(self.fd, path.encode(), mask)
        ensure(wd >= 0, "inotify_add_watch %s: errno %d" % (path, ctypes.get_errno()))

    def masks(self):
        out = []
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return out
        off = 0
        while off + 16 <= len(data):
            _, mask, _, n = struct.unpack_from("iIII", data, off)
            out.append(mask)
            off += 16 + n
        return out

    def close(self):
        os.close(self.fd)


class Daemon:
    def __init__(self, variant, results, gdb=False):
        self.variant = variant
        self.results = results
        self.gdb = gdb  # plain: run spaced under gdb, which prints backtraces on a crash
        self.proc = None

    def pid(self):
        if self.variant == "systemd":
            _, out, _ = run(["systemctl", "show", "-p", "MainPID", "--value", "spaced"])
            return int(out.strip() or 0)
        return self.proc.pid if self.proc and self.proc.poll() is None else 0

    def wait_healthy(self, timeout=60):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.variant != "systemd" and self.proc.poll() is not None:
                raise CheckFailed("spaced exited with %s: %s" % (
                    self.proc.returncode, read_text("/var/log/spaced.out")[-2000:]))
            try:
                r = http_request(SOCK, "GET", "/v1/health", timeout=5)
                if r.status == 200:
                    return
                last = r
            except OSError as e:
                last = e
            time.sleep(0.1)
        raise CheckFailed("spaced not healthy after %ss (last %r)" % (timeout, last))

    def _into_cgroup(self, rel):
        """preexec_fn: the child joins cgroup `rel` (like a service manager's delegation)."""
        target = os.path.join(CG, rel.lstrip("/"), "cgroup.procs")

        def join():
            with open(target, "w") as f:
                f.write(str(os.getpid()))
        return join

    def start(self, cgroup=None):
        if self.variant == "systemd":
            rc, out, err = run(["systemctl", "start", "spaced"])
            ensure(rc == 0, "systemctl start spaced: rc %d %s %s\n%s" %
                   (rc, out, err, self.status()))
        else:
            logf = open("/var/log/spaced.out", "ab")
            argv = [SPACED, "--log-format", "text"]
            if self.gdb:
                argv = ["gdb", "-q", "-batch", "-ex", "set pagination off", "-ex", "run",
                        "-ex", "thread apply all bt", "--args"] + argv
            if self.variant == "delegated" and cgroup is None:
                # First start: in a cgroup of its own that it may use (Delegate=yes without
                # DelegateSubgroup=); spaced moves itself into <it>/supervisor.
                # The delegator's part, as systemd does for Delegate=yes: the controllers are
                # enabled down to the delegated cgroup.
                for c in ("+memory", "+pids", "+cpu"):
                    with open(os.path.join(CG, "cgroup.subtree_control"), "w") as f:
                        f.write(c)
                os.makedirs(os.path.join(CG, "delegated"), exist_ok=True)
                cgroup = "/delegated"
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                         start_new_session=True,
                                         preexec_fn=self._into_cgroup(cgroup) if cgroup else None)
            logf.close()
        self.wait_healthy()

    def restart(self):
        if self.variant == "systemd":
            rc, out, err = run(["systemctl", "restart", "spaced"])
            ensure(rc == 0, "systemctl restart spaced: rc %d %s %s\n%s" %
                   (rc, out, err, self.status()))
        else:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
            # /delegated now has controllers on, so no process may join it: the new spaced
            # starts in the leaf, as DelegateSubgroup=supervisor (systemd >= 254) would do.
            self.start("/delegated/supervisor" if self.variant == "delegated" else None)
            return
        self.wait_healthy()

    def stop(self):
        if self.variant == "systemd":
            run(["systemctl", "stop", "spaced"])
        elif self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def status(self):
        if self.variant != "systemd":
            return ""
        try:  # short: a wedged systemd must not keep the results from being written
            _, out, _ = run(["systemctl", "status", "--no-pager", "-l", "spaced"], timeout=15)
            _, j, _ = run(["journalctl", "--no-pager", "-n", "40", "-u", "spaced"], timeout=15)
            return out + "\n" + j
        except subprocess.TimeoutExpired as e:
            return "(no status: %s)" % e

    def save_logs(self):
        if self.variant == "systemd":
            _, out, _ = run(["journalctl", "--no-pager", "-o", "short-monotonic"])
            with open(os.path.join(self.results, "journal.log"), "w") as f:
                f.write(out)
        for src in (os.path.join(STATE, "spaced.log"), "/var/log/spaced.out"):
            if os.path.exists(src):
                shutil.copy(src, os.path.join(self.results, os.path.basename(src)))


class Checks:
    def __init__(self, variant, results, cycles, gdb=False):
        self.variant = variant
        self.results = results
        self.cycles = cycles
        self.daemon = Daemon(variant, results, gdb)
        self.records = []
        self.base = None  # where spaced's sandbox cgroups live: <base>/space/<id>
        self.expect_cgroup = None  # spaced's own cgroup
        self.created = set()
        self.tree_before = set()

    # -- helpers ---------------------------------------------------------------------------

    def create(self, *opts):
        out = space_ok("create", *opts).strip()
        sid = out.splitlines()[-1].strip() if out else ""
        ensure(ID_RE.fullmatch(sid), "space create printed %r" % out)
        self.created.add(sid)
        return sid

    def rm(self, sid):
        space_ok("rm", "--force", sid, timeout=120)
        self.created.discard(sid)

    def sandbox_dir(self, sid):
        d = os.path.join(self.base, "space", sid)
        ensure(os.path.isdir(d), "no cgroup %s (base %s; under it: %s)" %
               (d, self.base, sorted(os.listdir(self.base))[:20]))
        return d

    def pids_of(self, sid):
        return [p for p in (int(x) for x in os.listdir("/proc") if x.isdigit())
                if ("/space/%s" % sid) in read_text("/proc/%d/cgroup" % p)]

    def agent_of(self, sid):
        for pid in agent_pids():
            if sid in read_text("/proc/%d/cgroup" % pid):
                return pid
        raise CheckFailed("no agent process for %s" % sid)

    def gone(self, sid, d, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not os.path.exists(d) and not self.pids_of(sid):
                return
            time.sleep(0.1)
        raise CheckFailed("after rm of %s: cgroup exists %s, processes %r" %
                          (sid, os.path.exists(d), self.pids_of(sid)))

    # -- the checks ------------------------------------------------------------------------

    def check_layout(self):
        mounts = [l.split() for l in read_text("/proc/self/mounts").splitlines()]
        v1 = [m[1] for m in mounts if m[2] == "cgroup"]
        v2 = [m[1] for m in mounts if m[2] == "cgroup2"]
        ensure(not v1, "cgroup v1 hierarchies mounted: %r" % v1)
        ensure(CG in v2, "no cgroup2 at %s: %r" % (CG, v2))
        ctrls = read_text(os.path.join(CG, "cgroup.controllers")).split()
        for c in ("memory", "pids", "cpu"):
            ensure(c in ctrls, "controller %s missing at the root: %r" % (c, ctrls))
        self.tree_before = cgroup_tree()
        return "controllers: %s; kernel %s" % (" ".join(ctrls), os.uname().release)

    def check_daemon(self):
        self.daemon.start()
        pid = self.daemon.pid()
        ensure(pid > 0, "no spaced pid")
        cg = own_cgroup(pid)
        if self.variant == "systemd":
            _, unit, _ = run(["systemctl", "show", "-p", "ControlGroup", "--value", "spaced"])
            _, env, _ = run(["systemctl", "show", "-p", "Environment", "--value", "spaced"])
            unit = unit.strip()
            base = [e.split("=", 1)[1] for e in env.split() if e.startswith("SPACE_CGROUP_BASE=")]
            if base:  # the shipped unit: sandboxes in the holder unit's delegated cgroup
                self.base = CG + base[0]
                self.expect_cgroup = unit
            else:  # spaced's own delegated cgroup, itself in <unit>/supervisor
                self.base = CG + unit
                self.expect_cgroup = unit + "/supervisor"
        elif self.variant == "delegated":
            self.base = CG + "/delegated"
            self.expect_cgroup = "/delegated/supervisor"
        else:
            self.base = CG
            self.expect_cgroup = "/"
        # The first sandbox makes spaced claim its base.
        sid = self.create()
        self.rm(sid)
        ensure(cg == self.expect_cgroup or own_cgroup(pid) == self.expect_cgroup,
               "spaced runs in %r, expected %r" % (own_cgroup(pid), self.expect_cgroup))
        if self.base != CG:
            procs = read_text(os.path.join(self.base, "cgroup.procs")).split()
            ensure(not procs, "processes left in %s itself: %r" % (self.base, procs))
            sup = read_text(os.path.join(self.base, "supervisor", "cgroup.procs")).split()
            ensure(sup, "nothing in %s/supervisor" % self.base)
        return "spaced pid %d in %s; sandboxes under %s" % (pid, own_cgroup(pid), self.base)

    def check_create_exec(self):
        sid = self.create()
        out = space_ok("exec", sid, "--", "sh", "-c", "echo hello; cat /proc/self/cgroup")
        ensure(out.startswith("hello\n"), "exec printed %r" % out)
        d = self.sandbox_dir(sid)
        agent = self.agent_of(sid)
        want = d[len(CG):]
        ensure(own_cgroup(agent) == want, "agent in %r, expected %r" % (own_cgroup(agent), want))
        sub = read_text(os.path.join(self.base, "cgroup.subtree_control")).split()
        for c in ("memory", "pids"):
            ensure(c in sub, "%s not enabled in %s/cgroup.subtree_control: %r" % (c, self.base, sub))
        self.rm(sid)
        self.gone(sid, d)
        return "sandbox cgroup %s; inside: %s" % (want, out.splitlines()[-1])

    def check_memory_oom(self):
        sid = self.create("--memory", "32M")
        d = self.sandbox_dir(sid)
        ensure(first_line(os.path.join(d, "memory.max")) == str(32 << 20),
               "memory.max is %r" % first_line(os.path.join(d, "memory.max")))
        rc, out, err = space("exec", sid, "--", "python3", "-c", ALLOC_200MB, timeout=300)
        ensure(rc == 137, "exec of a 200 MB allocation: rc %d, %r %r" % (rc, out, err[-300:]))
        _, info, _ = space("inspect", sid, "--json")
        oom = json.loads(info)["usage"].get("oom_kills", 0)
        ensure(oom >= 1, "inspect usage.oom_kills = %r" % oom)
        ensure((keyed(os.path.join(d, "memory.events"), "oom_kill") or 0) >= 1,
               "memory.events: %r" % read_text(os.path.join(d, "memory.events")))
        r = http_request(SOCK, "POST", "/v1/sandboxes/%s/exec" % sid,
                         {"cmd": ["python3", "-c", ALLOC_200MB]}, timeout=300)
        ensure(r.status == 200, "API exec: %r" % r)
        events = decode_events(r.body)
        last = events[-1] if events else {}
        ensure(last.get("type") == "exit" and last.get("oom_killed") and last.get("signal") == 9,
               "API exit event %r" % last)
        ensure(space_ok("exec", sid, "--", "echo", "alive") == "alive\n", "sandbox died")
        self.rm(sid)
        self.gone(sid, d)
        return "exit 137, oom_kills %d, API oom_killed" % oom

    def check_pids(self):
        sid = self.create("--pids", "16")
        d = self.sandbox_dir(sid)
        ensure(first_line(os.path.join(d, "pids.max")) == "16",
               "pids.max is %r" % first_line(os.path.join(d, "pids.max")))
        out = space_ok("exec", sid, "--", "python3", "-c",
                       "import subprocess\n"
                       "ok = 0\n"
                       "ps = []\n"
                       "for i in range(40):\n"
                       "    try:\n"
                       "        ps.append(subprocess.Popen(['sleep', '30'])); ok += 1\n"
                       "    except OSError:\n"
                       "        pass\n"
                       "print(ok)\n"
                       "for p in ps: p.kill()\n", timeout=180)
        procs = int(out.split()[-1])
        ensure(procs < 16, "%d of 40 sleeps started in a --pids 16 sandbox" % procs)
        refused = keyed(os.path.join(d, "pids.events"), "max") or 0
        ensure(refused > 0, "pids.events max = 0: no fork was refused")
        self.rm(sid)
        self.gone(sid, d)
        return "%d of 40 sleeps started, %d forks refused" % (procs, refused)

    def check_cpu(self):
        sid = self.create("--cpus", "0.5")
        d = self.sandbox_dir(sid)
        ensure(first_line(os.path.join(d, "cpu.max")) == "50000 100000",
               "cpu.max is %r" % first_line(os.path.join(d, "cpu.max")))
        u0 = keyed(os.path.join(d, "cpu.stat"), "usage_usec")
        t0 = time.monotonic()
        space_ok("exec", sid, "--", "sh", "-c",
                 "timeout 3 sh -c 'while :; do :; done' & "
                 "timeout 3 sh -c 'while :; do :; done'; wait", timeout=120)
        wall = time.monotonic() - t0
        used = (keyed(os.path.join(d, "cpu.stat"), "usage_usec") - u0) / 1e6
        throttled = keyed(os.path.join(d, "cpu.stat"), "nr_throttled") or 0
        ensure(used / wall < 0.75, "--cpus 0.5: %.2fs CPU in %.2fs" % (used, wall))
        ensure(throttled > 0, "cpu.stat nr_throttled = 0")
        self.rm(sid)
        self.gone(sid, d)
        return "%.2fs CPU in %.2fs wall, throttled %d times" % (used, wall, throttled)

    def check_disk(self):
        sid = self.create("--disk", "16M")
        rc, _, err = space("exec", sid, "--", "dd", "if=/dev/zero", "of=/root/big", "bs=1M",
                           "count=64")
        ensure(rc != 0 and "No space left on device" in err, "dd of 64M: rc %d %r" % (rc, err))
        space_ok("exec", sid, "--", "rm", "/root/big")
        self.rm(sid)
        return "64 MB write: ENOSPC"

    def check_pause_resume(self):
        sid = self.create()
        d = self.sandbox_dir(sid)
        space_ok("exec", sid, "--detach", "--", "sleep", "1000")
        watch = Inotify(os.path.join(d, "cgroup.freeze"))
        try:
            space_ok("pause", sid)
            ensure(first_line(os.path.join(d, "cgroup.freeze")) == "1", "cgroup.freeze not 1")
            ensure(keyed(os.path.join(d, "cgroup.events"), "frozen") == 1, "events: not frozen")
            ensure(IN_MODIFY in [m & IN_MODIFY for m in watch.masks()],
                   "nobody wrote cgroup.freeze")
            _, info, _ = space("inspect", sid, "--json")
            ensure(json.loads(info)["state"] == "paused", "state %r" % json.loads(info)["state"])
            space_ok("resume", sid)
            ensure(first_line(os.path.join(d, "cgroup.freeze")) == "0", "cgroup.freeze not 0")
            ensure(keyed(os.path.join(d, "cgroup.events"), "frozen") == 0, "events: frozen")
        finally:
            watch.close()
        ensure(space_ok("exec", sid, "--", "echo", "ok") == "ok\n", "exec after resume")
        self.rm(sid)
        self.gone(sid, d)
        return "cgroup.freeze 1 -> 0"

    def check_destroy_kill(self):
        sid = self.create()
        d = self.sandbox_dir(sid)
        space_ok("exec", sid, "--detach", "--", "sh", "-c", "trap '' TERM HUP; sleep 1000")
        before = self.pids_of(sid)
        ensure(len(before) >= 2, "sandbox processes: %r" % before)
        watch = Inotify(os.path.join(d, "cgroup.kill"))
        try:
            self.rm(sid)
            masks = watch.masks()
        finally:
            watch.close()
        ensure(any(m & IN_MODIFY for m in masks), "cgroup.kill was not written (events %r)" % masks)
        self.gone(sid, d)
        ensure(not any(live(p) for p in before), "processes survived: %r" % before)
        return "%d processes killed through cgroup.kill" % len(before)

    def check_restart(self):
        sid = self.create("--memory", "64M")
        d = self.sandbox_dir(sid)
        space_ok("exec", sid, "--", "sh", "-c", "echo persisted > /root/keep")
        space_ok("exec", sid, "--detach", "--", "sleep", "1000")
        agent = self.agent_of(sid)
        old = self.daemon.pid()
        t0 = time.monotonic()
        self.daemon.restart()
        took = time.monotonic() - t0
        new = self.daemon.pid()
        ensure(new > 0 and new != old, "spaced pid %d -> %d" % (old, new))
        ensure(live(agent), "the agent died with the daemon")
        ensure(own_cgroup(new) == self.expect_cgroup,
               "restarted spaced runs in %r, expected %r" % (own_cgroup(new), self.expect_cgroup))
        ensure(sid in space_ok("ls"), "sandbox not listed after the restart")
        ensure(space_ok("exec", sid, "--", "cat", "/root/keep") == "persisted\n", "file lost")
        ensure("sleep" in space_ok("ps", sid), "the detached sleep is gone")
        ensure(first_line(os.path.join(d, "memory.max")) == str(64 << 20), "memory.max changed")
        self.rm(sid)
        self.gone(sid, d)
        return "restart took %.1fs; spaced %d -> %d" % (took, old, new)

    def pooled_ids(self):
        """The sandboxes spaced's default warm pool keeps ready (docs/pools.md): they exist
        before the cycles and after, and are not leaks. Their count must be what `space doctor`
        says is ready, and none may be visible to `space ls`."""
        deadline = time.monotonic() + 15
        while True:  # a refill may be under way: wait until the pool is full and still
            ids = {ID_RE.search(p).group(0) for p in cgroup_tree() if ID_RE.search(p)}
            doctor = json.loads(space_ok("doctor", "--json"))
            pools = doctor.get("pools", [])
            ready = sum(p.get("ready", 0) for p in pools)
            if (ready == sum(p.get("size", 0) for p in pools) and len(ids) == ready) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.2)
        listed = json.loads(space_ok("ls", "--json"))
        listed = {sb["id"] for sb in (listed.get("sandboxes", []) if isinstance(listed, dict)
                                      else listed)}
        ensure(len(ids) == ready and not ids & listed,
               "sandbox cgroups before the cycles %r; the pools hold %d ready; listed %r" %
               (sorted(ids), ready, sorted(listed)))
        return ids

    def check_cycles(self):
        agents0 = set(agent_pids())
        mounts0 = set(space_mounts())
        self.pool_ids = self.pooled_ids()
        t0 = time.monotonic()
        for i in range(self.cycles):
            sid = self.create("--memory", "64M", "--pids", "32")
            ensure(space_ok("exec", sid, "--", "echo", str(i)) == "%d\n" % i, "exec in cycle %d" % i)
            self.rm(sid)
        took = time.monotonic() - t0
        deadline = time.monotonic() + 20
        while True:
            left = {
                "cgroups": sorted(p for p in cgroup_tree() if ID_RE.search(p) and
                                  ID_RE.search(p).group(0) not in self.pool_ids),
                "parent": not self.pool_ids and os.path.exists(os.path.join(self.base, "space")),
                "agents": sorted(set(agent_pids()) - agents0),
                "mounts": sorted(set(space_mounts()) - mounts0),
                "state": sorted(x for x in os.listdir(os.path.join(STATE, "sandboxes"))
                                if ID_RE.match(x) and x not in self.pool_ids) if os.path.isdir(
                                    os.path.join(STATE, "sandboxes")) else [],
            }
            if not any(left.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        ensure(not any(left.values()), "left behind: %r" % left)
        return "%d cycles in %.1fs (%.2fs each)" % (self.cycles, took, took / max(self.cycles, 1))

    def check_outside(self):
        new = cgroup_tree() - self.tree_before
        base = self.base
        outside = sorted(p for p in new if not (p == base or p.startswith(base + "/")))
        if self.variant != "plain":
            # What spaced may create lives below its base; systemd's units are systemd's.
            ours = [p for p in outside if os.path.basename(p) in ("space", "supervisor") or
                    ID_RE.search(p)]
            ensure(not ours, "cgroups of spaced outside %s: %r" % (base, ours))
            ensure(not os.path.exists(os.path.join(CG, "space")), "%s/space exists" % CG)
        pool = getattr(self, "pool_ids", set())
        left = sorted(p for p in cgroup_tree() if ID_RE.search(p) and
                      ID_RE.search(p).group(0) not in pool)
        ensure(not left, "sandbox cgroups left: %r" % left)
        return "new cgroups outside the base (systemd's own): %r" % outside[:10]

    # -- driver ----------------------------------------------------------------------------

    def run_all(self):
        names = ["layout", "daemon", "create_exec", "memory_oom", "pids", "cpu", "disk",
                 "pause_resume", "destroy_kill", "restart", "cycles", "outside"]
        needs_daemon = False
        for name in names:
            if needs_daemon:
                self.records.append({"name": name, "ok": False, "seconds": 0,
                                     "detail": "skipped: spaced did not start"})
                continue
            t0 = time.monotonic()
            log("%-12s ..." % name)
            try:
                detail = getattr(self, "check_" + name)()
                ok = True
            except Exception as e:  # noqa: BLE001 - every failure is recorded, the run goes on
                ok = False
                detail = "%s: %s" % (type(e).__name__, e)
                if not isinstance(e, CheckFailed):
                    detail += "\n" + traceback.format_exc()
                if name == "daemon":
                    needs_daemon = True
                    detail += "\n" + self.daemon.status()
            secs = time.monotonic() - t0
            self.records.append({"name": name, "ok": ok, "seconds": round(secs, 2),
                                 "detail": detail})
            log("%-12s %s %6.1fs  %s" % (name, "ok  " if ok else "FAIL", secs,
                                        detail.splitlines()[0] if detail else ""))
            self.write()
        self.cleanup()
        self.write()

    def cleanup(self):
        for sid in list(self.created):
            space("rm", "--force", sid, timeout=60)
        self.daemon.stop()
        self.daemon.save_logs()

    def write(self):
        doc = {"variant": self.variant, "ok": bool(self.records) and all(
            r["ok"] for r in self.records), "checks": self.records,
            "kernel": os.uname().release, "cycles": self.cycles}
        tmp = os.path.join(self.results, "results.json.tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, os.path.join(self.results, "results.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=["systemd", "plain", "delegated"], required=True)
    ap.add_argument("--results", required=True)
    args = ap.parse_args()
    cfg = {}
    try:
        with open(os.path.join(args.results, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        pass
    log("variant %s, kernel %s, cycles %d" % (args.variant, os.uname().release,
                                              cfg.get("cycles", 50)))
    checks = Checks(args.variant, args.results, int(cfg.get("cycles", 50)), bool(cfg.get("gdb")))
    checks.run_all()
    os.sync()
    log("done: %s" % ("passed" if all(r["ok"] for r in checks.records) else "FAILED"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
