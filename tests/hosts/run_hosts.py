#!/usr/bin/env python3
"""Host matrix: boots a pure cgroup v2 Debian 12 guest under QEMU (TCG) and runs
tests/hosts/in_vm.py in it against the build's spaced, in three variants (docs/hosts.md):

  systemd    systemd 252 as PID 1, spaced started by deploy/systemd/spaced.service
  plain      busybox init as PID 1, cgroup2 mounted at /sys/fs/cgroup, spaced started directly
             in the root cgroup
  delegated  as plain, but spaced starts in a cgroup of its own (/delegated) and has to move
             itself into /delegated/supervisor

  tests/hosts/run_hosts.py --build-dir BUILD [--variants systemd,plain,delegated] [--cycles 50]
                           [--timeout 900] [--out DIR]

The guest (kernel + initramfs) comes from scripts/host-vm.sh BUILD/hosts-vm. The guest sees the
host's /usr and /etc read-only, the repository and build directory read-only at their own
paths, and one results directory read-write (BUILD/Testing/hosts/<variant>/: results.json,
console.log, the daemon's logs); it has no network device. Exit status: 0 all checks passed,
1 a check failed or a guest did not finish, 77 QEMU or the guest kernel cannot be had here
(saying why). Every QEMU it starts dies with it (PR_SET_PDEATHSIG) and is killed by pid on
timeout or signal.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SKIP = 77
QEMU = "qemu-system-x86_64"
# TCG: tsc_early_khz, lpj and no_timer_check spare the guest the TSC calibration that hangs
# ~30% of boots (DESIGN §6); reboot=t + -no-reboot make the guest's reboot end QEMU.
CMDLINE = ("console=ttyS0 reboot=t panic=-1 loglevel=4 tsc_early_khz=2000000 lpj=8000000 "
           "no_timer_check cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 rdinit=/init")

_children = []


def say(msg):
    sys.stdout.write("hosts: %s\n" % msg)
    sys.stdout.flush()


def skip(why):
    say("SKIP: " + why)
    sys.exit(SKIP)


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _kill_children(*_):
    for p in _children:
        if p.poll() is None:
            p.kill()
            p.wait()
    sys.exit(1)


def prepare_guest(build_dir):
    """vmlinux + initrd.img from scripts/host-vm.sh; skips (77) when they cannot be had."""
    if shutil.which(QEMU) is None:
        skip("%s is not installed (Debian package qemu-system-x86)" % QEMU)
    if shutil.which("mkfs.ext4") is None:
        skip("mkfs.ext4 is not installed (Debian package e2fsprogs)")
    out = os.path.join(build_dir, "hosts-vm")
    env = dict(os.environ)
    caches = [os.path.join(build_dir, "guest", "cache"), os.path.join(REPO, "build", "guest", "cache")]
    env["SPACE_KERNEL_DEB_DIRS"] = ":".join(caches)
    p = subprocess.run([os.path.join(REPO, "scripts", "host-vm.sh"), out], env=env,
                       capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    if p.returncode == 3:
        skip("the guest kernel cannot be had: %s" % p.stderr.strip().splitlines()[-1])
    if p.returncode != 0:
        raise SystemExit("hosts: scripts/host-vm.sh failed (rc %d)" % p.returncode)
    return os.path.join(out, "vmlinux"), os.path.join(out, "initrd.img")


def boot(variant, kernel, initrd, build_dir, results, timeout, cycles, gdb=False, unit=None):
    """One guest run. Returns (results dict or None, seconds, why-not)."""
    if os.path.isdir(results):
        shutil.rmtree(results)
    os.makedirs(results)
    with open(os.path.join(results, "config.json"), "w") as f:
        json.dump({"cycles": cycles, "variant": variant, "gdb": gdb}, f)
    append = "%s space.variant=%s space.repo=%s space.build=%s" % (CMDLINE, variant, REPO,
                                                                    build_dir)
    if variant == "systemd":
        # The journal also goes to the console: the one log left when a guest hangs.
        append += (" systemd.unit=space-hosts.target systemd.show_status=0"
                   " systemd.journald.forward_to_console=1")
        if unit:
            append += " space.unit=%s" % unit

    def share(tag, path, ro=True):
        return ["-fsdev", "local,id=%s,path=%s,security_model=none%s" %
                (tag, path, ",readonly=on" if ro else ""),
                "-device", "virtio-9p-device,fsdev=%s,mount_tag=%s" % (tag, tag)]

    console = os.path.join(results, "console.log")
    argv = [QEMU, "-M", "microvm,rtc=on,isa-serial=on", "-accel", "tcg", "-cpu", "max",
            "-smp", "2", "-m", "2048", "-nodefaults", "-no-user-config", "-nographic",
            "-no-reboot", "-nic", "none", "-kernel", kernel, "-initrd", initrd,
            "-append", append, "-chardev", "file,id=con,path=" + console,
            "-serial", "chardev:con"]
    argv += share("usr", "/usr") + share("etc", "/etc") + share("repo", REPO)
    argv += share("build", build_dir) + share("results", results, ro=False)
    # spaced's state dir: ext4 (see tests/hosts/vm-init.sh), a sparse image removed afterwards.
    disk = os.path.join(os.path.dirname(kernel), "state-%s-%d.img" % (variant, os.getpid()))
    with open(disk, "wb") as f:
        f.truncate(4 << 30)
    mk = subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", disk], capture_output=True, text=True)
    if mk.returncode != 0:
        os.unlink(disk)
        return None, 0, "mkfs.ext4 of the state disk failed: %s" % mk.stderr.strip()
    argv += ["-drive", "id=state,file=%s,format=raw,if=none,cache=unsafe" % disk,
             "-device", "virtio-blk-device,drive=state"]
    t0 = time.monotonic()
    with open(os.path.join(results, "qemu.log"), "wb") as qlog:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qlog, stderr=qlog,
                             preexec_fn=_die_with_parent)
    _children.append(p)
    why = ""
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        why = "the guest did not finish within %ds (killed)" % timeout
        p.kill()
        p.wait()
    finally:
        _children.remove(p)
        os.unlink(disk)
    secs = time.monotonic() - t0
    try:
        with open(os.path.join(results, "results.json")) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = None
        why = why or "the guest wrote no results (qemu exit %s)" % p.returncode
    return res, secs, why


def tail(path, n=30):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-n:])
    except OSError:
        return "(no %s)" % path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.environ.get("SPACE_BUILD_DIR",
                                                          os.path.join(REPO, "build")))
    ap.add_argument("--variants", default="systemd,plain,delegated")
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per guest")
    ap.add_argument("--retries", type=int, default=1,
                    help="boots again a guest that did not finish in time (not one that failed)")
    ap.add_argument("--out", help="results root (default BUILD/Testing/hosts)")
    ap.add_argument("--unit", help="systemd variant: install this unit file (under the "
                    "repository) as spaced.service instead of deploy/systemd/spaced.service")
    ap.add_argument("--gdb", action="store_true",
                    help="plain variant: run spaced under gdb (backtraces in spaced.out)")
    args = ap.parse_args()
    build_dir = os.path.abspath(args.build_dir)
    signal.signal(signal.SIGTERM, _kill_children)
    signal.signal(signal.SIGINT, _kill_children)

    if os.geteuid() != 0:
        skip("needs root: QEMU shares the host's /etc (with /etc/shadow) read-only")
    for b in ("spaced", "space", "space-agent", "space-egress"):
        if not os.access(os.path.join(build_dir, b), os.X_OK):
            raise SystemExit("hosts: %s/%s is not built" % (build_dir, b))
    unit = os.path.abspath(args.unit) if args.unit else None
    if unit and not unit.startswith(REPO + "/"):
        raise SystemExit("hosts: --unit must be a file in the repository (the guest sees only it)")
    kernel, initrd = prepare_guest(build_dir)
    out_root = os.path.abspath(args.out or os.path.join(build_dir, "Testing", "hosts"))
    failed = False
    t_all = time.monotonic()
    for variant in [v for v in args.variants.split(",") if v]:
        if variant == "systemd" and not os.access("/lib/systemd/systemd", os.X_OK):
            # The guest's PID 1 is the host's systemd (over the /usr share).
            say("systemd guest: not run, this host has no /lib/systemd/systemd (package systemd)")
            continue
        results = os.path.join(out_root, variant)
        say("booting the %s guest (results in %s)" % (variant, results))
        res, secs, why = boot(variant, kernel, initrd, build_dir, results, args.timeout,
                              args.cycles, args.gdb, unit)
        for attempt in range(args.retries):
            if not why.startswith("the guest did not finish"):
                break
            # A guest that hangs under TCG (rarely, and never the same place twice so far) is
            # booted once more; the hung run's console stays in the log.
            say("%s: %s; console tail:\n%s\nhosts: %s: booting it again" % (
                variant, why, tail(os.path.join(results, "console.log")), variant))
            res, more, why = boot(variant, kernel, initrd, build_dir, results, args.timeout,
                                  args.cycles, args.gdb, unit)
            secs += more
        if res:
            for c in res["checks"]:
                say("  %-8s %-12s %-4s %6.1fs  %s" % (variant, c["name"],
                                                      "ok" if c["ok"] else "FAIL", c["seconds"],
                                                      c["detail"].splitlines()[0]))
                if not c["ok"]:
                    sys.stdout.write("    " + c["detail"].replace("\n", "\n    ") + "\n")
        ok = bool(res) and res.get("ok") and not why and len(res["checks"]) >= 12
        if not ok:
            failed = True
            say("%s: FAILED %s; console tail:\n%s" % (variant, why, tail(os.path.join(results,
                                                                                    "console.log"))))
        say("%s guest: %s in %.0fs" % (variant, "passed" if ok else "FAILED", secs))
    say("total %.0fs" % (time.monotonic() - t_all))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
