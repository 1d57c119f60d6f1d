#!/usr/bin/env python3
"""Posture check: inspects every process of a running sandbox from the host and compares it
with the profile the linux runtime promises (docs/threat-model.md, docs/linux-runtime.md):

  capabilities  CapBnd is exactly the default set of src/host/caps.cc (parsed from that
                file: the one copy of the expectation); CapPrm/CapEff within it (equal for root
                processes that did not drop them); CapInh and CapAmb empty; never a forbidden
                capability (SYS_ADMIN, NET_RAW, SYS_PTRACE, MKNOD, ...)
  NoNewPrivs    1                       Seccomp 2 (filter mode), at least one filter
  uid/gid map   "0 <uid_base> 65536" for both; every uid/gid/group inside that host range
  namespaces    user, pid, mnt, net, uts, ipc and cgroup differ from the host's and are the
                agent's; the network namespace is owned by the host's user namespace (so sandbox
                root cannot configure it), the others by the sandbox's. time is shared by design
                (the runtime does not create one; clock_settime is denied by seccomp)
  fds           the agent's launch fds 0-6 are exactly 0-2 /dev/null, 3-5 its three sockets
                (channel, spare pair) and 6 the writable layer; beyond them it holds only its
                own bookkeeping (epoll, signalfd, pipes to its execs, the sandbox root). No
                process holds a file outside the sandbox's root, a socket the daemon holds, or
                (the agent's 3-5 aside) any socket it did not make inside the sandbox
  cgroups       every process is in /<cgroup_name>/<id> of the memory, pids, cpu and unified
                hierarchies, and cgroup.procs lists exactly the sandbox's processes
  rlimits       RLIMIT_CORE 0

As a library: check_running_sandbox(socket, cli, sid, daemon_pid) starts a few processes in the
sandbox (a running exec, detached ones, a double fork) and returns (problems, summary). Run
directly, it starts its own daemon and sandbox: `python3 posture.py` (root), exit 0 when clean.

The gateway process (space-egress, docs/egress.md "The gateway process") is inspected the same
way by check_gateway_process(daemon_pid): one child of spaced, its own non-root uid and gid with
no groups, no capability in any set, NoNewPrivs 1, Seccomp 2, its own mount and IPC namespaces
(net and user are the host's by design: it dials the internet), spaced's state directory empty
in its view, no descriptor of a file under it or of a namespace, nothing of spaced's environment.

A microVM's only host process is its VMM, checked instead of the agent, with the same signature:
check_running_vm (QEMU, the qemu runtime) and check_running_firecracker (Firecracker, started by
its jailer). Both also look inside the guest for devices it should not have.
"""

import fcntl
import os
import re
import stat
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CAPS_CC = os.path.join(REPO, "src", "host", "caps.cc")
CAPABILITY_H = "/usr/include/linux/capability.h"
# Never in any set of a sandbox process: each of these reaches past the sandbox's own objects
# or is a known escape primitive (docs/threat-model.md, "Capabilities").
FORBIDDEN = ["CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_PTRACE", "CAP_MKNOD",
             "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_TIME", "CAP_SYS_BOOT",
             "CAP_DAC_READ_SEARCH", "CAP_SYSLOG", "CAP_BPF", "CAP_PERFMON",
             "CAP_CHECKPOINT_RESTORE", "CAP_SYS_RESOURCE", "CAP_IPC_LOCK", "CAP_LINUX_IMMUTABLE",
             "CAP_MAC_ADMIN", "CAP_MAC_OVERRIDE", "CAP_AUDIT_CONTROL", "CAP_SYS_PACCT"]
SANDBOX_NAMESPACES = ["user", "pid", "mnt", "net", "uts", "ipc", "cgroup"]
SHARED_BY_DESIGN = {"time", "time_for_children"}
NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1)
ID_RANGE = 65536


def capability_numbers():
    nums = {}
    with open(CAPABILITY_H) as f:
        for m in re.finditer(r"#define\s+(CAP_[A-Z_]+)\s+(\d+)\b", f.read()):
            nums[m.group(1)] = int(m.group(2))
    return nums


def expected_capabilities():
    """The default set, parsed from the table kDefaultCaps in caps.cc: (mask, names)."""
    with open(CAPS_CC) as f:
        text = f.read()
    m = re.search(r"kDefaultCaps\[\]\s*=\s*\{(.*?)\n\};", text, re.S)
    if not m:
        raise RuntimeError("cannot find kDefaultCaps in %s" % CAPS_CC)
    names = re.findall(r"\{\s*(CAP_[A-Z_]+)\s*,", m.group(1))
    nums = capability_numbers()
    mask = 0
    for n in names:
        mask |= 1 << nums[n]
    return mask, names


def status_fields(pid):
    return status_fields_of("/proc/%d/status" % pid)


def status_fields_of(path):
    out = {}
    for line in harness.read_text(path).splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def ns_inode(pid, ns):
    try:
        return os.stat("/proc/%s/ns/%s" % (pid, ns)).st_ino
    except OSError:
        return None


def ns_owner_inode(pid, ns):
    """Inode of the user namespace that owns /proc/PID/ns/NS."""
    fd = os.open("/proc/%d/ns/%s" % (pid, ns), os.O_RDONLY | os.O_CLOEXEC)
    try:
        owner = fcntl.ioctl(fd, NS_GET_USERNS)
        try:
            return os.fstat(owner).st_ino
        finally:
            os.close(owner)
    finally:
        os.close(fd)


def is_running(pid):
    """Exists and is not a zombie (zombies have left their cgroups)."""
    stat = harness.read_text("/proc/%d/stat" % pid)
    return bool(stat) and stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")


def cap_names(mask, nums):
    rev = {v: k for k, v in nums.items()}
    return [rev.get(b, "cap%d" % b) for b in range(64) if mask >> b & 1]


def cgroup_paths(pid):
    """{hierarchy: path} from /proc/PID/cgroup; the unified hierarchy is ''."""
    out = {}
    for line in harness.read_text("/proc/%d/cgroup" % pid).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def daemon_socket_inodes(daemon_pid):
    out = set()
    d = "/proc/%d/fd" % daemon_pid
    for fd in os.listdir(d):
        try:
            t = os.readlink(os.path.join(d, fd))
        except OSError:
            continue
        if t.startswith("socket:["):
            out.add(t)
    return out


def inspect(socket_path, sid, daemon_pid):
    """Checks every process of sandbox `sid`; returns (problems, processes inspected)."""
    problems = []
    r = harness.http_request(socket_path, "GET", "/v1/sandboxes/%s" % sid)
    if r.status != 200:
        return ["GET sandbox %s: %r" % (sid, r)], []
    info = r.json
    agent, uid_base = info.get("host_pid"), info.get("uid_base")
    if not isinstance(agent, int) or not isinstance(uid_base, int) or uid_base <= 0:
        return ["sandbox JSON lacks host_pid/uid_base: %r" % info], []
    mask, _ = expected_capabilities()
    nums = capability_numbers()
    forbidden = 0
    for n in FORBIDDEN:
        if n in nums:
            forbidden |= 1 << nums[n]
    if mask & forbidden:
        problems.append("caps.cc's default set holds forbidden capabilities: %s" %
                        cap_names(mask & forbidden, nums))

    pids = [agent] + harness.descendants(agent)
    # cgroups: where the agent is, and who else is there.
    agent_cg = cgroup_paths(agent)
    want_suffix = "/" + sid
    required = [h for h in agent_cg if h == "" or re.search(r"\b(memory|pids|cpu)\b", h)]
    for h in required:
        if not agent_cg[h].endswith(want_suffix):
            problems.append("agent is in cgroup %r of hierarchy %r, not .../%s" %
                            (agent_cg[h], h or "unified", sid))
    for h in ("memory", "pids"):
        if not any(re.search(r"\b%s\b" % h, k) for k in agent_cg) and "" not in agent_cg:
            problems.append("agent has no %s cgroup" % h)
    # The tree and cgroup.procs are read at slightly different times: retry a few times so a
    # process starting or exiting in between does not count as a difference.
    for attempt in range(5):
        members, unreadable = set(), []
        for h in required:
            ctrl = h.split(",")[0] if h else "unified"
            base = "/sys/fs/cgroup/%s" % ctrl if os.path.isdir("/sys/fs/cgroup/%s" % ctrl) \
                else "/sys/fs/cgroup"
            procs_file = base + agent_cg[h] + "/cgroup.procs"
            text = harness.read_text(procs_file, None)
            if text is None:
                unreadable.append(procs_file)
                continue
            members |= {int(x) for x in text.split()}
        live = {p for p in [agent] + harness.descendants(agent) if is_running(p)}
        if not members - live and not live - members:
            break
        time.sleep(0.2)
    problems += ["cannot read %s" % f for f in unreadable]
    if members != live:
        problems.append("cgroup members %s differ from the agent's process tree %s" %
                        (sorted(members - live), sorted(live - members)))

    host_ns = {ns: ns_inode("self", ns) for ns in SANDBOX_NAMESPACES + sorted(SHARED_BY_DESIGN)}
    host_userns = host_ns["user"]
    agent_ns = {ns: ns_inode(agent, ns) for ns in SANDBOX_NAMESPACES}
    try:
        if ns_owner_inode(agent, "net") != host_userns:
            problems.append("the network namespace is not owned by the host's user namespace")
        for ns in ("mnt", "uts", "ipc", "pid", "cgroup"):
            if ns_owner_inode(agent, ns) != agent_ns["user"]:
                problems.append("the %s namespace is not owned by the sandbox's user namespace" % ns)
    except OSError as e:
        problems.append("NS_GET_USERNS: %s" % e)
    daemon_sockets = daemon_socket_inodes(daemon_pid)
    sandbox_root = "/proc/%d/root" % agent
    want_map = "0 %d %d" % (uid_base, ID_RANGE)

    inspected = []
    for pid in pids:
        st = status_fields(pid)
        if not st or not is_running(pid):
            continue  # exited meanwhile
        name = "%d(%s)" % (pid, st.get("Name", "?"))
        inspected.append(name)
        prm, eff = int(st["CapPrm"], 16), int(st["CapEff"], 16)
        bnd, inh, amb = int(st["CapBnd"], 16), int(st["CapInh"], 16), int(st["CapAmb"], 16)
        if bnd != mask:
            problems.append("%s CapBnd %s != default %s (extra %s, missing %s)" % (
                name, hex(bnd), hex(mask), cap_names(bnd & ~mask, nums),
                cap_names(mask & ~bnd, nums)))
        if prm & ~mask or eff & ~prm:
            problems.append("%s CapPrm %s / CapEff %s outside the default set" %
                            (name, hex(prm), hex(eff)))
        uids = [int(x) for x in st.get("Uid", "").split()]
        if uids and uids[1] == uid_base and prm != mask:
            problems.append("%s is sandbox root but CapPrm is %s" % (name, hex(prm)))
        if inh or amb:
            problems.append("%s CapInh %s CapAmb %s must be empty" % (name, hex(inh), hex(amb)))
        for cap in range(64):
            if (prm | eff | bnd | inh | amb) >> cap & 1 and forbidden >> cap & 1:
                problems.append("%s holds forbidden %s" % (name, cap_names(1 << cap, nums)))
        if st.get("NoNewPrivs") != "1":
            problems.append("%s NoNewPrivs %s" % (name, st.get("NoNewPrivs")))
        if st.get("Seccomp") != "2" or int(st.get("Seccomp_filters", "1") or 0) < 1:
            problems.append("%s Seccomp %s (filters %s)" % (name, st.get("Seccomp"),
                                                             st.get("Seccomp_filters")))
        ids = uids + [int(x) for x in st.get("Gid", "").split()] + \
            [int(x) for x in st.get("Groups", "").split()]
        for i in ids:
            if not uid_base <= i < uid_base + ID_RANGE:
                problems.append("%s has host id %d outside [%d, +%d)" % (name, i, uid_base,
                                                                       ID_RANGE))
        for f in ("uid_map", "gid_map"):
            got = " ".join(harness.read_text("/proc/%d/%s" % (pid, f)).split())
            if got != want_map:
                problems.append("%s %s is %r, want %r" % (name, f, got, want_map))
        for ns in SANDBOX_NAMESPACES:
            ino = ns_inode(pid, ns)
            if ino is None:
                continue
            if ino == host_ns[ns]:
                problems.append("%s shares the host's %s namespace" % (name, ns))
            if ino != agent_ns[ns]:
                problems.append("%s is in a %s namespace other than the agent's" % (name, ns))
        for ns in SHARED_BY_DESIGN:
            ino = ns_inode(pid, ns)
            if ino is not None and host_ns.get(ns) is not None and ino != host_ns[ns]:
                problems.append("%s has its own %s namespace (unexpected)" % (name, ns))
        if cgroup_paths(pid) != agent_cg:
            problems.append("%s is in other cgroups than the agent: %s" % (name,
                                                                          cgroup_paths(pid)))
        limits = harness.read_text("/proc/%d/limits" % pid)
        m = re.search(r"Max core file size\s+(\S+)\s+(\S+)", limits)
        if m and (m.group(1), m.group(2)) != ("0", "0"):
            problems.append("%s RLIMIT_CORE is %s/%s" % (name, m.group(1), m.group(2)))
        problems += check_fds(pid, name, pid == agent, sandbox_root, daemon_sockets)
    return problems, inspected


def check_fds(pid, name, is_agent, sandbox_root, daemon_sockets):
    problems = []
    d = "/proc/%d/fd" % pid
    try:
        fds = sorted(int(x) for x in os.listdir(d))
    except OSError as e:
        return ["%s: cannot list fds: %s" % (name, e)]
    if is_agent and fds[:7] != list(range(7)):
        problems.append("agent holds fds %s, want 0-6 as launched" % fds)
    for fd in fds:
        link = os.path.join(d, str(fd))
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if target.startswith("socket:[") and target in daemon_sockets:
            problems.append("%s fd %d is a socket the daemon holds (%s)" % (name, fd, target))
        if is_agent and fd <= 6:
            if fd <= 2 and target != "/dev/null":
                problems.append("agent fd %d -> %s, want /dev/null" % (fd, target))
            if 3 <= fd <= 5 and not target.startswith("socket:["):
                problems.append("agent fd %d -> %s, want a socket" % (fd, target))
            if fd == 6:
                try:
                    ok = os.path.isdir(link)
                except OSError:
                    ok = False
                if not ok:
                    problems.append("agent fd 6 -> %s, want the writable layer directory" % target)
            continue
        if is_agent and target.startswith("socket:["):
            problems.append("agent fd %d -> %s: a socket beyond its channel" % (fd, target))
        if not target.startswith("/"):
            continue  # pipe:, socket:, anon_inode: — checked above for the daemon's sockets
        # A path: the same file must be reachable at that path inside the sandbox's root.
        try:
            st_fd = os.stat(link)
            st_in = os.stat(sandbox_root + target)
            same = (st_fd.st_dev, st_fd.st_ino) == (st_in.st_dev, st_in.st_ino)
        except OSError:
            same = False
        if not same and "(deleted)" not in target:
            problems.append("%s fd %d -> %s is not a file of the sandbox" % (name, fd, target))
    return problems


def check_running_sandbox(socket_path, cli, sid, daemon_pid):
    """Starts processes in `sid` (a streaming exec, detached ones, a double fork, a non-root
    process), inspects them, and stops the streaming exec. Returns (problems, summary)."""
    env = dict(os.environ, SPACE_SOCKET=socket_path)
    running = subprocess.Popen([harness.SPACE, "exec", sid, "--", "sh", "-c",
                                "sleep 60 & exec sleep 60"], env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        setup = [
            ("--detach", "--", "sleep", "1000"),
            ("--detach", "--", "sh", "-c", "(setsid sleep 1000 &) ; sleep 1000"),
            ("--detach", "--", "python3", "-c",
             "import os, time; os.setgid(1000); os.setuid(1000); f = open('/etc/passwd'); "
             "time.sleep(1000)"),
        ]
        for args in setup:
            rc, out, err = cli("exec", sid, *args)
            if rc != 0:
                return ["starting %s failed: %s" % (args, err)], ""
        # Wait until all of them run: 1 agent + shims and workers.
        deadline = time.monotonic() + 10
        r = harness.http_request(socket_path, "GET", "/v1/sandboxes/%s" % sid)
        agent = (r.json or {}).get("host_pid")
        while time.monotonic() < deadline:
            names = [harness.proc_cmdline(p)[0] for p in harness.descendants(agent)]
            if sum(n.endswith("sleep") for n in names) >= 5 and any("python3" in n for n in names):
                break
            time.sleep(0.1)
        names = [" ".join(harness.proc_cmdline(p)) for p in harness.descendants(agent)]
        if not any("python3" in n for n in names):
            return ["the non-root python3 process did not start: %s" % names], ""
        problems, inspected = inspect(socket_path, sid, daemon_pid)
        if len(inspected) < 8:
            problems.append("only %d processes found: %s" % (len(inspected), inspected))
        return problems, "%d processes match the profile: %s" % (len(inspected),
                                                                 " ".join(inspected))
    finally:
        running.kill()
        running.wait()


def check_running_vm(socket_path, cli, sid, daemon_pid):
    """The posture of a qemu sandbox, from the host: QEMU (its only host process) runs as the
    sandbox's unprivileged uid with no capabilities, no_new_privs and seccomp, in pid, mount,
    network, ipc, uts and cgroup namespaces of its own, with no network device, no shared
    directory and QEMU's own sandbox on its command line, a root that shows nothing of the host's
    state, no fd of spaced's sockets, and its own cgroup. Returns (problems, summary)."""
    r = harness.http_request(socket_path, "GET", "/v1/sandboxes/%s" % sid)
    info = r.json or {}
    pid, uid_base = info.get("host_pid"), info.get("uid_base")
    if not isinstance(pid, int) or not is_running(pid):
        return ["no running QEMU for %s: %s" % (sid, info)], ""
    problems = []
    argv = harness.proc_cmdline(pid)
    joined = " ".join(argv)
    if "qemu-system" not in (argv[0] if argv else ""):
        problems.append("host_pid %d is not QEMU: %s" % (pid, joined[:200]))
    for needle in ("-netdev", "virtio-net", "virtfs", "-fsdev", "vhost-user", "9p", "vfio",
                   "-device usb", "gdb"):
        if needle in joined:
            problems.append("QEMU's command line has %s" % needle)
    if "-nic none" not in joined or "spawn=deny" not in joined or "-nodefaults" not in joined:
        problems.append("QEMU lacks -nic none, -nodefaults or -sandbox spawn=deny")
    st = status_fields(pid)
    uids = st.get("Uid", "").split()
    if not uids or any(int(u) != uid_base for u in uids) or uid_base in (None, 0):
        problems.append("QEMU runs as uids %s, not the sandbox's %s" % (uids, uid_base))
    if st.get("NoNewPrivs") != "1":
        problems.append("QEMU without no_new_privs")
    if st.get("Seccomp") != "2":
        problems.append("QEMU without a seccomp filter")
    for field in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        if field != "CapBnd" and int(st.get(field, "0"), 16):
            problems.append("QEMU has capabilities in %s: %s" % (field, st.get(field)))
    for ns in ("pid", "mnt", "net", "ipc", "uts", "cgroup"):
        if ns_inode(pid, ns) == ns_inode(1, ns):
            problems.append("QEMU shares the host's %s namespace" % ns)
    root = "/proc/%d/root" % pid
    for host_path in ("/etc/shadow", "/root", "/home", "/var/lib", "/run"):
        if os.path.exists(root + host_path):
            problems.append("QEMU's root shows the host's %s" % host_path)
    for fd, target in held_daemon_sockets(pid, daemon_pid):
        problems.append("QEMU holds spaced's socket %s at fd %s" % (target, fd))
    if not any(sid in p for p in cgroup_paths(pid).values()):
        problems.append("QEMU is not in the sandbox's cgroup: %s" % cgroup_paths(pid))
    # Inside: only lo, only the two disks, only the agent's port.
    problems += check_guest_devices(cli, sid, ports=1)
    summary = ("QEMU pid %d as uid %s, no_new_privs, seccomp, no capabilities, own namespaces "
               "and cgroup, no network device or shared directory; the guest has lo, vda, vdb "
               "and one port" % (pid, uid_base))
    return problems, summary


def held_daemon_sockets(pid, daemon_pid):
    """[(fd, "socket:[inode]")] of the sockets that both `pid` and spaced hold."""
    sockets = daemon_socket_inodes(daemon_pid)
    out = []
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        fds = []
    for fd in fds:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target in sockets:
            out.append((fd, target))
    return out


def check_guest_devices(cli, sid, ports):
    """Inside a microVM: only lo, only its two disks (the image and its writable disk), and
    exactly `ports` virtio serial ports (QEMU's agent channel; Firecracker's is vsock)."""
    rc, out, err = cli("exec", sid, "--", "sh", "-c",
                       "ls /sys/class/net; echo --; ls /sys/block; echo --; "
                       "ls /dev | grep vport; true")
    parts = out.split("--")
    if rc != 0 or len(parts) != 3:
        return ["the guest's devices could not be listed: %s" % err.strip()[:200]]
    problems = []
    if parts[0].split() != ["lo"]:
        problems.append("the guest has network interfaces %s" % parts[0].split())
    disks = sorted(b for b in parts[1].split() if not b.startswith(("loop", "ram")))
    if disks != ["vda", "vdb"]:
        problems.append("the guest has block devices %s" % parts[1].split())
    if len(parts[2].split()) != ports:
        problems.append("the guest has virtio ports %s, want %d" % (parts[2].split(), ports))
    return problems


def gateway_pids(daemon_pid):
    return [p for p in harness.proc_pids()
            if harness.proc_ppid(p) == daemon_pid and
            harness.read_text("/proc/%d/comm" % p).strip() == "space-egress"]


def check_gateway_process(daemon_pid, want=1):
    """The gateway processes' posture from the host: (problems, summary). `want` is how many
    space-egress children spaced should have (one by default; one per sandbox with
    gateway.sandboxes_per_process 1); each is checked the same way."""
    pids = gateway_pids(daemon_pid)
    if len(pids) != want:
        return ["spaced %d has %d space-egress children, want %d" %
                (daemon_pid, len(pids), want)], ""
    problems, summaries = [], []
    for pid in pids:
        p, summary = check_one_gateway(daemon_pid, pid)
        problems += p
        summaries.append(summary)
    return problems, "; ".join(summaries)


def check_one_gateway(daemon_pid, pid):
    problems = []
    st = status_fields(pid)
    uids, gids = st.get("Uid", "").split(), st.get("Gid", "").split()
    if len(set(uids)) != 1 or uids[0] == "0":
        problems.append("space-egress uids %s: want one non-root uid" % uids)
    if len(set(gids)) != 1 or gids[0] == "0":
        problems.append("space-egress gids %s: want one non-root gid" % gids)
    if st.get("Groups", ""):
        problems.append("space-egress has supplementary groups %s" % st["Groups"])
    for f in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        if int(st.get(f, "1"), 16) != 0:
            problems.append("space-egress %s is %s, want 0" % (f, st.get(f)))
    if st.get("NoNewPrivs") != "1":
        problems.append("space-egress NoNewPrivs %s" % st.get("NoNewPrivs"))
    if st.get("Seccomp") != "2":
        problems.append("space-egress Seccomp %s, want 2 (filter)" % st.get("Seccomp"))
    for ns in ("mnt", "ipc"):
        if ns_inode(pid, ns) == ns_inode(daemon_pid, ns):
            problems.append("space-egress shares spaced's %s namespace" % ns)
    state = daemon_state_dir(daemon_pid) or "/var/lib/space"
    try:
        seen = os.listdir("/proc/%d/root%s" % (pid, state))
    except FileNotFoundError:
        seen = []  # a directory above it is covered (the API socket's)
    except OSError as e:
        seen = ["(cannot list: %s)" % e]
    if seen:
        problems.append("space-egress sees spaced's state dir %s: %s" % (state, seen[:5]))
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith(state) or target.startswith("mnt:[") or \
                target.startswith("net:[") or target.startswith("user:["):
            problems.append("space-egress holds fd %s -> %s" % (fd, target))
    env = [e.split("=", 1)[0] for e in
           harness.read_text("/proc/%d/environ" % pid).split("\0") if e]
    if set(env) - {"PATH", "LANG"}:
        problems.append("space-egress environment has %s" % sorted(set(env) - {"PATH", "LANG"}))
    summary = ("space-egress pid %d: uid %s gid %s, caps 0 (all sets), NoNewPrivs 1, Seccomp 2, "
               "own mnt+ipc namespaces (net, user: the host's), state dir hidden, env %s"
               % (pid, uids[0] if uids else "?", gids[0] if gids else "?", sorted(env)))
    return problems, summary


def daemon_state_dir(daemon_pid):
    """spaced's --state-dir, from its command line (None if it has none there)."""
    argv = harness.proc_cmdline(daemon_pid)
    for i, a in enumerate(argv):
        if a == "--state-dir" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--state-dir="):
            return a.split("=", 1)[1]
    return None


def netns_interfaces(pid):
    """The interfaces of `pid`'s network namespace, from /proc/PID/net/dev."""
    lines = harness.read_text("/proc/%d/net/dev" % pid).splitlines()[2:]
    return sorted(l.split(":", 1)[0].strip() for l in lines if ":" in l)


def cgroup_procs_file(hierarchy, path):
    """cgroup.procs of `path` in a hierarchy named as in /proc/PID/cgroup ('' is unified)."""
    if hierarchy == "":
        roots = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
    else:
        ctrl = hierarchy.split(",")[0].replace("name=", "")
        roots = ["/sys/fs/cgroup/%s" % ctrl, "/sys/fs/cgroup/%s" % hierarchy]
    for r in roots:
        f = r + path + "/cgroup.procs"
        if os.path.exists(f):
            return f
    return None


# Flags that would turn Firecracker's own seccomp filters off or replace them with the caller's.
FIRECRACKER_SECCOMP_FLAGS = ("--no-seccomp", "--seccomp-filter")
# Host paths that must not show in a VMM's root. The jailer makes /run (empty: the default place
# of the API socket, which spaced moves to /api.sock) and /dev (kvm, net/tun, urandom,
# userfaultfd) in every jail, so an empty directory of its own there is the jailer's.
HOST_PATHS = ("/etc/shadow", "/root", "/home", "/var/lib", "/run")


def check_running_firecracker(socket_path, cli, sid, daemon_pid):
    """The posture of a firecracker sandbox, from the host. Its one host process is Firecracker,
    which the jailer (cloned by spaced into new pid, net, ipc, uts and cgroup namespaces and the
    sandbox's cgroup) execs in place after its own mount namespace, pivot_root into the jail and
    the drop to the sandbox's uid; so host_pid is Firecracker. Checked:

      identity     /proc/PID/comm or argv[0]'s basename is firecracker (the jailer execs its copy
                   as "/firecracker" in the chroot), `--id <jail id>` (sb_x -> sb-x), neither
                   --no-seccomp nor --seccomp-filter (Firecracker's own default filters)
      every thread all uids and gids == uid_base (not 0), no supplementary group but it,
                   Seccomp 2 with a filter, NoNewPrivs 1, CapEff/CapPrm/CapAmb empty
      namespaces   pid, mnt, net, ipc, uts and cgroup differ from the host's (/proc/1/ns)
      root         its jail (<state>/firecracker/jails/firecracker/<jail id>/root), which shows
                   none of the host's /etc/shadow, /root, /home, /var/lib, /run
      fds          none of spaced's sockets
      network      its namespace has only lo (no tap: the guest's link is vsock through spaced)
      cgroup       the sandbox's own, holding Firecracker alone (the jailer exec'd in place)
      guest        only lo, vda and vdb, no virtio serial port

    Seccomp and NoNewPrivs are per thread in Firecracker: it installs one filter per thread role
    (API thread before its HTTP server starts, each vCPU thread and the main VMM thread before
    guest code runs; docs/seccomp.md) with SECCOMP_SET_MODE_FILTER and no TSYNC, each preceded by
    prctl(PR_SET_NO_NEW_PRIVS) on that thread (src/vmm/src/seccomp.rs, apply_filter). So every
    thread of a running VM has both, and every thread is checked. Returns (problems, summary)."""
    r = harness.http_request(socket_path, "GET", "/v1/sandboxes/%s" % sid)
    info = r.json or {}
    pid, uid_base = info.get("host_pid"), info.get("uid_base")
    if not isinstance(pid, int) or not is_running(pid):
        return ["no running Firecracker for %s: %s" % (sid, info)], ""
    if not isinstance(uid_base, int) or uid_base <= 0:
        return ["sandbox JSON has no unprivileged uid_base: %s" % info], ""
    problems = []
    jail_id = sid.replace("_", "-")
    argv = harness.proc_cmdline(pid)
    comm = harness.read_text("/proc/%d/comm" % pid).strip()
    exe = os.path.basename(argv[0]) if argv else ""
    if not (exe.startswith("firecracker") or comm.startswith("firecracker")):
        problems.append("host_pid %d is not Firecracker (comm %r): %s" %
                        (pid, comm, " ".join(argv)[:200]))
    has_id = any(a == "--id=" + jail_id for a in argv) or any(
        a == "--id" and argv[i + 1:i + 2] == [jail_id] for i, a in enumerate(argv))
    if not has_id:
        problems.append("Firecracker's command line lacks --id %s: %s" %
                        (jail_id, " ".join(argv)[:200]))
    for flag in FIRECRACKER_SECCOMP_FLAGS:
        if any(a == flag or a.startswith(flag + "=") for a in argv):
            problems.append("Firecracker runs with %s" % flag)

    try:
        tids = sorted(int(t) for t in os.listdir("/proc/%d/task" % pid))
    except OSError:
        tids = [pid]
    threads = []
    for tid in tids:
        st = status_fields_of("/proc/%d/task/%d/status" % (pid, tid))
        if not st:
            continue  # exited meanwhile
        name = "thread %d(%s)" % (tid, st.get("Name", "?"))
        threads.append(name)
        ids = st.get("Uid", "").split() + st.get("Gid", "").split()
        if len(ids) != 8 or any(int(i) != uid_base for i in ids):
            problems.append("%s runs as uids %s gids %s, not the sandbox's %d" %
                            (name, st.get("Uid"), st.get("Gid"), uid_base))
        if any(int(g) != uid_base for g in st.get("Groups", "").split()):
            problems.append("%s has supplementary groups %s" % (name, st.get("Groups")))
        if st.get("NoNewPrivs") != "1":
            problems.append("%s NoNewPrivs %s" % (name, st.get("NoNewPrivs")))
        if st.get("Seccomp") != "2" or int(st.get("Seccomp_filters", "1") or 0) < 1:
            problems.append("%s Seccomp %s (filters %s)" % (name, st.get("Seccomp"),
                                                             st.get("Seccomp_filters")))
        for field in ("CapEff", "CapPrm", "CapAmb"):
            if int(st.get(field, "0"), 16):
                problems.append("%s has capabilities in %s: %s" % (name, field, st.get(field)))
    if not threads:
        problems.append("Firecracker's threads could not be read")

    for ns in ("pid", "mnt", "net", "ipc", "uts", "cgroup"):
        if ns_inode(pid, ns) == ns_inode(1, ns):
            problems.append("Firecracker shares the host's %s namespace" % ns)

    root = "/proc/%d/root" % pid
    state_dir = daemon_state_dir(daemon_pid)
    if state_dir:
        jail_root = os.path.join(state_dir, "firecracker", "jails", "firecracker", jail_id, "root")
        try:
            a, b = os.stat(root), os.stat(jail_root)
            if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
                problems.append("Firecracker's root is not its jail %s" % jail_root)
        except OSError as e:
            problems.append("Firecracker's root or jail cannot be read: %s" % e)
    for host_path in HOST_PATHS:
        try:
            st = os.lstat(root + host_path)
        except OSError:
            continue
        try:
            host = os.lstat(host_path)
            same = (st.st_dev, st.st_ino) == (host.st_dev, host.st_ino)
        except OSError:
            same = False
        if same:
            problems.append("Firecracker's root shows the host's %s" % host_path)
        elif not stat.S_ISDIR(st.st_mode):
            problems.append("Firecracker's root has a %s" % host_path)
        else:
            try:
                entries = os.listdir(root + host_path)
            except OSError as e:
                entries = ["<unreadable: %s>" % e]
            if entries:
                problems.append("Firecracker's root has %s holding %s" % (host_path,
                                                                        sorted(entries)[:8]))

    for fd, target in held_daemon_sockets(pid, daemon_pid):
        problems.append("Firecracker holds spaced's socket %s at fd %s" % (target, fd))

    links = netns_interfaces(pid)
    if links != ["lo"]:
        problems.append("Firecracker's network namespace has interfaces %s, want only lo" % links)

    cgroups = cgroup_paths(pid)
    own = {h: p for h, p in cgroups.items() if sid in p.split("/")}
    if not own:
        problems.append("Firecracker is not in the sandbox's cgroup: %s" % cgroups)
    for h, path in own.items():
        f = cgroup_procs_file(h, path)
        members = {int(x) for x in harness.read_text(f).split()} if f else None
        if members is None:
            problems.append("cannot read cgroup.procs of %s" % path)
        elif members != {pid}:
            problems.append("the sandbox's cgroup %s holds %s, not Firecracker (%d) alone" %
                            (path, sorted(members), pid))

    problems += check_guest_devices(cli, sid, ports=0)
    summary = ("Firecracker pid %d (%d threads) as uid %d, no_new_privs and seccomp on every "
               "thread, no capabilities, --id %s, own namespaces, %s, only lo, alone in the "
               "sandbox's cgroup, none of spaced's sockets; the guest has lo, vda and vdb"
               % (pid, len(threads), uid_base, jail_id,
                  "root its jail" if state_dir else "no host files in its root"))
    return problems, summary


def main():
    if os.geteuid() != 0:
        print("posture.py must run as root")
        return 2
    import tempfile
    tmp = tempfile.mkdtemp(prefix="space-posture-")
    os.chmod(tmp, 0o755)
    daemon = harness.Daemon(tmp, default_pool=True)  # a pooled sandbox, as users get
    daemon.start()

    def cli(*args, timeout=60):
        p = subprocess.run([harness.SPACE] + list(args), capture_output=True, timeout=timeout,
                           stdin=subprocess.DEVNULL,
                           env=dict(os.environ, SPACE_SOCKET=daemon.socket))
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    try:
        rc, out, err = cli("create")
        sid = out.strip()
        problems, summary = check_running_sandbox(daemon.socket, cli, sid, daemon.pid)
        gw_problems, gw_summary = check_gateway_process(daemon.pid)
        problems += gw_problems
        summary += "\n" + gw_summary
        cli("rm", "--force", sid)
    finally:
        daemon.stop()
        harness.safe_rmtree(tmp)
    for p in problems:
        print("POSTURE: %s" % p)
    print(summary)
    print("posture: %s" % ("clean" if not problems else "%d problems" % len(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
