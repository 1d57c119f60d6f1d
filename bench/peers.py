"""Peer sandboxes for bench/bench.py: each runs `true` in a fresh sandbox the way issue 7 asks, so
that its latency can be set beside `space run -- true` and the fork+exec floor.

  bwrap    bwrap --unshare-all, read-only binds of /usr and /etc (the /bin, /lib*, /sbin of a
           merged-/usr host as the same symlinks, real directories as read-only binds), a new
           /proc and /dev
  crun     crun run of an OCI bundle made under the work dir: an empty read-only rootfs with the
           same read-only binds, pid/net/ipc/uts/mount/cgroup namespaces. On a hybrid cgroup
           host crun refuses to start while /sys/fs/cgroup/unified is mounted ("cgroups in
           hybrid mode not supported, drop all controllers from cgroupv2"), so the timer itself
           runs in a private mount namespace (`unshare -m --propagation private`) in which
           that mount is detached; the host's namespace is never changed. crun's state goes to
           <work>/crun-state, not /run/crun.
  runsc    gVisor's runsc run of the same bundle, --platform=ptrace --network=none (--rootless
           when not root), state in <work>/runsc-state
  unshare  util-linux unshare -Urpfnui --mount-proc: user (mapped root), pid, net, uts, ipc and
           mount namespaces with a new /proc, no filesystem isolation beyond that

prepare() returns one Peer per name. A peer that cannot run here carries `error`, the exact
message its one trial run (or the missing binary) gave, and bench.py prints that in its row
instead of leaving the peer out.
"""

import json
import os
import shutil
import subprocess

# Debian 12 packages (scripts/install-deps.sh --bench): bubblewrap, crun, runsc; unshare is in
# util-linux.
PACKAGE = {"bwrap": "bubblewrap", "crun": "crun", "runsc": "runsc", "unshare": "util-linux"}

# Top-level host paths a peer's root shows, read-only; symlinks (merged /usr) stay symlinks.
HOST_PATHS = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"]

CONTAINER_ID = "space-bench-peer"


class Peer:
    def __init__(self, name, how, argv=None, wrap=None, error=None):
        self.name = name          # the row's name
        self.how = how            # the row's "measured by"
        self.argv = argv or []    # the command spawn_timer times
        self.wrap = wrap or []    # prefix that runs spawn_timer itself (crun: private mount ns)
        self.error = error        # why it cannot run here, or None


def host_entries():
    """(name, symlink target or None) for each HOST_PATHS entry present on the host."""
    out = []
    for name in HOST_PATHS:
        path = "/" + name
        if os.path.islink(path):
            out.append((name, os.readlink(path)))
        elif os.path.isdir(path):
            out.append((name, None))
    return out


def bwrap_argv(bwrap):
    argv = [bwrap, "--unshare-all", "--die-with-parent"]
    for name, target in host_entries():
        if target is None:
            argv += ["--ro-bind", "/" + name, "/" + name]
        else:
            argv += ["--symlink", target, "/" + name]
    return argv + ["--proc", "/proc", "--dev", "/dev", "--", "true"]


def make_bundle(work):
    """An OCI bundle under work: empty rootfs (read-only) + read-only binds of the host's /usr,
    /etc (and any real /lib* directories); merged-/usr symlinks recreated in the rootfs."""
    bundle = os.path.join(work, "oci-bundle")
    rootfs = os.path.join(bundle, "rootfs")
    shutil.rmtree(bundle, ignore_errors=True)
    os.makedirs(rootfs)
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "mode=755", "size=1024k"]},
    ]
    for d in ("proc", "dev"):
        os.mkdir(os.path.join(rootfs, d))
    for name, target in host_entries():
        if target is None:
            os.mkdir(os.path.join(rootfs, name))
            mounts.append({"destination": "/" + name, "type": "bind", "source": "/" + name,
                           "options": ["rbind", "ro", "nosuid", "nodev"]})
        else:
            os.symlink(target, os.path.join(rootfs, name))
    config = {
        "ociVersion": "1.0.0",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": ["true"],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "peer",
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in
                                 ("pid", "network", "ipc", "uts", "mount", "cgroup")]},
    }
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return bundle


def hybrid_cgroups():
    """True when /sys/fs/cgroup/unified is a cgroup2 mount beside v1 controllers."""
    try:
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == "/sys/fs/cgroup/unified" for line in f)
    except OSError:
        return False


# Runs spawn_timer in a private mount namespace with the hybrid layout's cgroup2 mount detached
# there only (crun refuses hybrid hosts otherwise). MS_PRIVATE first, so nothing propagates back.
CRUN_WRAP = ["unshare", "-m", "--propagation", "private", "sh", "-c",
             "if mountpoint -q /sys/fs/cgroup/unified; then umount -l /sys/fs/cgroup/unified || "
             "exit 125; fi; exec \"$@\"", "sh"]


def trial(argv, wrap):
    """Runs argv once (under wrap); returns None or the exact error it gave."""
    try:
        p = subprocess.run(wrap + argv, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode == 0:
        return None
    msg = (p.stderr.strip() or p.stdout.strip() or "no output").splitlines()
    return "exit %d: %s" % (p.returncode, " / ".join(msg[-3:])[-400:])


def missing(binary):
    return "`%s` not installed (Debian package %s; `scripts/install-deps.sh --bench`)" % (
        binary, PACKAGE[binary])


def prepare(work):
    root = os.geteuid() == 0
    peers = []

    bwrap = shutil.which("bwrap")
    p = Peer("bwrap --unshare-all, read-only binds", "C timer")
    if not bwrap:
        p.error = missing("bwrap")
    else:
        p.argv = bwrap_argv(bwrap)
        p.error = trial(p.argv, [])
    peers.append(p)

    bundle = None
    crun = shutil.which("crun")
    p = Peer("crun run (OCI bundle, read-only binds)", "C timer in a private mount ns")
    if not crun:
        p.error = missing("crun")
    else:
        bundle = make_bundle(work)
        state = os.path.join(work, "crun-state")
        p.argv = [crun, "--root", state, "run", "--bundle", bundle, CONTAINER_ID]
        if not root:
            p.argv[1:1] = ["--rootless=true"]
        if hybrid_cgroups():
            if root:
                p.wrap = CRUN_WRAP
            else:
                p.how = "C timer"
        p.error = trial(p.argv, p.wrap)
    peers.append(p)

    runsc = shutil.which("runsc")
    p = Peer("runsc run (gVisor, ptrace, same bundle)", "C timer")
    if not runsc:
        p.error = missing("runsc")
    else:
        bundle = bundle or make_bundle(work)
        state = os.path.join(work, "runsc-state")
        p.argv = [runsc, "--root", state, "--platform=ptrace", "--network=none"]
        if not root:
            p.argv.append("--rootless")
        p.argv += ["run", "-bundle", bundle, CONTAINER_ID]
        p.error = trial(p.argv, [])
    peers.append(p)

    unshare = shutil.which("unshare")
    p = Peer("unshare -Urpfnui --mount-proc", "C timer")
    if not unshare:
        p.error = missing("unshare")
    else:
        p.argv = [unshare, "-Urpfnui", "--mount-proc", "true"]
        p.error = trial(p.argv, [])
    peers.append(p)
    return peers
