"""Host memory per idle sandbox, for bench/bench.py.

Creates K sandboxes over the API (default profile, nothing run in them), waits for them to
settle, and measures from the host, before and after:

  spaced       the daemon's RSS and PSS (/proc/PID/smaps_rollup): its per-sandbox bookkeeping,
               threads, buffers, the per-sandbox gateway listener
  processes    every process that is new since "before" and is a descendant of spaced or in one
               of the sandboxes' cgroups (the agent and whatever it keeps running): count, RSS,
               PSS. RSS counts shared pages (libc, the agent's text) once per process; PSS
               splits them between the processes that share them, so PSS is what they add
  cgroup       each sandbox's memory cgroup (<memory controller>/<cgroup_name>/<id>):
               usage (v1 memory.usage_in_bytes, v2 memory.current), and from memory.stat the
               anonymous and file/tmpfs pages. Kernel memory (page tables, the sandbox's mount
               and namespace objects) is in usage only where the kernel accounts it
  layer        each sandbox's writable layer (a tmpfs; statvfs of the agent's fd 6): what is
               stored there, i.e. the CA and trust store spaced writes before the sandbox starts
               (their pages are charged to spaced's memory cgroup, the writer's, and show in no
               process's RSS)
  MemAvailable /proc/meminfo before minus after: everything, host-wide; noisy on a shared host

All figures are divided by K. The headline "per idle sandbox" is spaced's PSS growth plus the
new processes' PSS plus the cgroups' file/tmpfs pages plus the writable layers' contents:
user-space memory the host gives up for each idle sandbox, counting no page twice (the cgroups'
anonymous pages are the processes' own and already in their PSS; an idle sandbox's layer holds
only what spaced wrote, which is charged to spaced's cgroup, not the sandbox's). The sandboxes are destroyed afterwards.
"""

import json
import os
import time

from bench import request

KiB = 1024
MiB = 1 << 20


def smaps(pid):
    """(rss, pss) bytes of pid, or None when it is gone."""
    rss = pss = 0
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * KiB
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * KiB
    except (OSError, ValueError):
        return None
    return rss, pss


def parents():
    """{pid: ppid} of every process."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                stat = f.read()
        except OSError:
            continue
        # The comm field may hold spaces and parentheses: ppid is the 2nd field after the last ')'.
        out[int(name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    return out


def descendants(root):
    children = {}
    for pid, ppid in parents().items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def memory_controller():
    """('v1'|'v2', mount point) of the memory controller; v1's memory hierarchy wins on a hybrid
    host (that is where the runtime sets the limits)."""
    v2 = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            fstype, opts = fields[sep + 1], fields[sep + 3]
            if fstype == "cgroup" and "memory" in opts.split(","):
                return "v1", fields[4]
            if fstype == "cgroup2" and v2 is None:
                v2 = fields[4]
    return ("v2", v2) if v2 else (None, None)


def read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


def cgroup_memory(version, mount, cgroup_name, sid):
    """{usage, anon, file} bytes and the pids of the sandbox's memory cgroup, or None."""
    d = os.path.join(mount, cgroup_name, sid)
    if not os.path.isdir(d):
        return None
    stat = {}
    with open(os.path.join(d, "memory.stat")) as f:
        for line in f:
            k, v = line.split()
            stat[k] = int(v)
    if version == "v1":
        usage = read_int(os.path.join(d, "memory.usage_in_bytes"))
        anon, file_ = stat.get("total_rss", stat.get("rss", 0)), stat.get(
            "total_cache", stat.get("cache", 0))
    else:
        usage = read_int(os.path.join(d, "memory.current"))
        anon, file_ = stat.get("anon", 0), stat.get("file", 0)
    with open(os.path.join(d, "cgroup.procs")) as f:
        pids = {int(x) for x in f.read().split()}
    return {"usage": usage, "anon": anon, "file": file_, "pids": pids}


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * KiB
    return 0


def measure(sock, daemon_pid, k, cgroup_name="space", settle_s=2.0):
    """Returns a dict of per-sandbox figures (bytes) and notes; destroys what it created."""
    version, mount = memory_controller()
    before_pids = descendants(daemon_pid)
    d0 = smaps(daemon_pid)
    avail0 = mem_available()
    ids = []
    try:
        for _ in range(k):
            status, body = request(sock, "POST", "/v1/sandboxes", {})
            if status != 201:
                raise RuntimeError("idle memory: create failed: %d %s" % (status, body[:300]))
            ids.append(json.loads(body)["id"])
        time.sleep(settle_s)
        d1 = smaps(daemon_pid)
        avail1 = mem_available()
        cgroups, missing = [], []
        for sid in ids:
            cg = cgroup_memory(version, mount, cgroup_name, sid) if mount else None
            (cgroups if cg else missing).append(cg or sid)
        new = set(descendants(daemon_pid)) - before_pids
        for cg in cgroups:
            new |= cg["pids"]
        procs = [m for m in (smaps(p) for p in sorted(new)) if m]
        layers = []
        for sid in ids:
            status, body = request(sock, "GET", "/v1/sandboxes/%s" % sid)
            pid = json.loads(body).get("host_pid") if status == 200 else None
            if pid:
                st = os.statvfs("/proc/%d/fd/6" % pid)
                layers.append((st.f_blocks - st.f_bfree) * st.f_frsize)
    finally:
        for sid in ids:
            request(sock, "DELETE", "/v1/sandboxes/%s?force=true" % sid)
    out = {
        "k": k,
        "spaced_rss": (d1[0] - d0[0]) / k,
        "spaced_pss": (d1[1] - d0[1]) / k,
        "procs": len(procs) / k,
        "procs_rss": sum(m[0] for m in procs) / k,
        "procs_pss": sum(m[1] for m in procs) / k,
        "mem_available": (avail0 - avail1) / k,
        "cgroup_version": version,
        "cgroups_found": len(cgroups),
        "layer": sum(layers) / len(layers) if layers else 0,
    }
    if cgroups:
        for key in ("usage", "anon", "file"):
            out["cgroup_" + key] = sum(cg[key] for cg in cgroups) / len(cgroups)
    if missing:
        out["note"] = "no memory cgroup found for %d of %d sandboxes under %s/%s (e.g. %s)" % (
            len(missing), k, mount, cgroup_name, missing[0])
    out["total"] = (out["spaced_pss"] + out["procs_pss"] + out.get("cgroup_file", 0) +
                    out["layer"])
    return out
