"""Sandbox creation by runtime, side by side in one run (bench/run.sh, BENCH_ONLY=vm): boot vs
clone for qemu, against the linux jail, on one state directory and three private spaceds run one
after the other (the busybox image imported from the host's busybox-static and made a VM disk
with `space image build-vm`; every runtime runs the same image, 256M of RAM, a 256M disk):

  clone daemon   vm.templates on (the default): every qemu sandbox is a copy-on-write clone of
                 its image's template (docs/qemu-runtime.md, "Templates"). The first create,
                 which boots and saves the template, is timed apart; then N_CLONE creates,
                 N_CLONE `space run --runtime qemu -- true`, and the linux rows (N)
  pool daemon    the same state directory (the template is loaded from disk, timed) and a warm
                 pool of 2 qemu sandboxes: creates claimed from it (each after the pool refilled)
  boot daemon    vm.templates false: every qemu sandbox boots its kernel (N_BOOT of each)

Rows: POST /v1/sandboxes timed to its 201 answer (the agent has said hello), then to the first
output of an exec of `echo hi` (DELETE not timed); `space run ... -- true` timed end to end by
the CLI's wall clock. Host memory per idle VM: K sandboxes created and left idle for 2 s, then
each QEMU's RSS and PSS (/proc/PID/smaps_rollup: PSS splits the template RAM the clones share)
and its memory cgroup's usage. A runtime that cannot run here still gets a row, whose
"measured by" holds the reason `space doctor` gives. N = $BENCH_VM_N (default 100) for linux,
N_CLONE = $BENCH_VM_N_CLONE (default 20), N_BOOT = $BENCH_VM_N_QEMU (default 5). Reports
p50/p90/p99/mean in ms, p50 over linux's, and spaced's own time per create step (from /metrics).
Writes markdown to --out."""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clients import exec_until_first_output  # noqa: E402
from bench import (build_type, cold_steps, cpu_model, git_rev, metrics, pool_counts,  # noqa: E402
                   request, start_daemon, stop_daemon, summarize, wait_pool_full)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
APPLETS = ["sh", "echo", "cat", "true", "sleep", "hostname"]


def busybox_tar(path):
    with tarfile.open(path, "w:gz") as tar:
        for d in ("bin", "etc", "root", "tmp"):
            ti = tarfile.TarInfo(d)
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(ti)
        tar.add("/bin/busybox", arcname="bin/busybox")
        for a in APPLETS:
            ti = tarfile.TarInfo("bin/" + a)
            ti.type = tarfile.SYMTYPE
            ti.linkname = "busybox"
            tar.addfile(ti)


VM = {"memory": "256M", "disk": "256M"}


def create_one(sock, runtime, image):
    t0 = time.perf_counter()
    status, body = request(sock, "POST", "/v1/sandboxes", dict(VM, runtime=runtime, image=image))
    t1 = time.perf_counter()
    if status != 201:
        raise RuntimeError(json.loads(body).get("error", {}).get("message", body[:300]))
    return json.loads(body)["id"], t0, t1


def measure(sock, runtime, image, n, before_each=None):
    """Returns (create ms, create+first output ms, spaced's steps)."""
    before = metrics(sock)
    create, output = [], []
    for _ in range(n):
        if before_each:
            before_each()
        sid, t0, t1 = create_one(sock, runtime, image)
        t2 = exec_until_first_output(sock, sid)
        request(sock, "DELETE", "/v1/sandboxes/%s" % sid)
        create.append((t1 - t0) * 1000)
        output.append((t2 - t0) * 1000)
    return create, output, cold_steps(before, metrics(sock))


def measure_run(space, env, image, n):
    """`space run --runtime qemu ... -- true`, n times, wall clock in ms."""
    argv = [space, "run", "--runtime", "qemu", "--image", image, "--memory", VM["memory"],
            "--disk", VM["disk"], "--", "true"]
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True)
        out.append((time.perf_counter() - t0) * 1000)
        if p.returncode != 0:
            raise RuntimeError("space run: exit %d: %s" % (p.returncode, p.stderr.strip()[:300]))
    return out


def kib(path, field):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def idle_memory(sock, runtime, image, k):
    """K idle sandboxes: per VM, mean MiB of the VMM's RSS, PSS and its cgroup's usage."""
    ids = []
    try:
        for _ in range(k):
            ids.append(create_one(sock, runtime, image)[0])
        time.sleep(2)
        rss = pss = cg = 0
        for sid in ids:
            _, body = request(sock, "GET", "/v1/sandboxes/%s" % sid)
            pid = json.loads(body).get("host_pid")
            rss += kib("/proc/%d/status" % pid, "VmRSS")
            pss += kib("/proc/%d/smaps_rollup" % pid, "Pss")
            cg += cgroup_usage(pid)
        return rss / k / 1024, pss / k / 1024, cg / k / 2**20
    finally:
        for sid in ids:
            request(sock, "DELETE", "/v1/sandboxes/%s" % sid)


def cgroup_usage(pid):
    """Bytes charged to the memory cgroup holding `pid` (v2 memory.current or v1 usage)."""
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            base = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
            name = os.path.join(base + path, "memory.current")
        elif "memory" in ctrls.split(","):
            name = os.path.join("/sys/fs/cgroup/memory" + path, "memory.usage_in_bytes")
        else:
            continue
        try:
            with open(name) as f:
                return int(f.read())
        except OSError:
            continue
    return 0


def daemon_config(path, vm, pools=None):
    vm = dict(vm, boot_timeout_s=120)
    guest = os.path.join(REPO, "build", "guest")  # `make build` makes the guest kernel there
    if os.path.exists(os.path.join(guest, "vmlinux")):
        vm.update(kernel=os.path.join(guest, "vmlinux"), initrd=os.path.join(guest, "initrd.img"))
    cfg = {"vm": vm}
    if pools:
        cfg["pools"] = pools
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    build = os.environ.get("BUILD_DIR", "build-release")
    spaced = os.path.join(REPO, build, "spaced")
    space = os.path.join(REPO, build, "space")
    n = int(os.environ.get("BENCH_VM_N", os.environ.get("BENCH_N", "100")))
    n_clone = int(os.environ.get("BENCH_VM_N_CLONE", "20"))
    n_boot = int(os.environ.get("BENCH_VM_N_QEMU", "5"))
    k_idle = int(os.environ.get("BENCH_VM_IDLE", "4"))
    os.makedirs(args.work, exist_ok=True)
    state = tempfile.mkdtemp(prefix="state-", dir=args.work)
    sock = os.path.join(args.work, "vm.sock")
    env = dict(os.environ, SPACE_SOCKET=sock)
    load0 = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    rows, notes, steps, memory = [], [], {}, []

    def run_daemon(label, config, body):
        with open(os.path.join(args.work, "spaced-%s.log" % label), "w") as log:
            daemon = start_daemon(spaced, state, sock, log, config)
            try:
                body()
            finally:
                stop_daemon(daemon, sock)

    def unavailable(runtime, reason):
        for what in ("create -> ready", "create -> first output"):
            rows.append({"name": "%s: %s" % (runtime, what), "n": 0,
                         "how": "cannot run here: %s" % reason})

    doctor = {}

    def qemu_rows(label, how, count, idle):
        """create -> ready, -> first output, `space run -- true` and idle memory."""
        create, output, st = measure(sock, "qemu", "bb", count)
        rows.append(summarize("%s: create -> ready" % label, how, create))
        rows.append(summarize("%s: create -> first output" % label, how, output))
        steps[label] = st
        rows.append(summarize("%s: `space run -- true`" % label, how,
                              measure_run(space, env, "bb", count)))
        memory.append((label, idle_memory(sock, "qemu", "bb", idle)))

    def clone_phase():
        tarball = os.path.join(args.work, "bb.tar.gz")
        busybox_tar(tarball)
        for a in (("image", "import", "bb", tarball), ("image", "build-vm", "bb")):
            p = subprocess.run([space, *a], env=env, capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit("bench: %s: %s" % (" ".join(a), p.stderr.strip()))
        _, body = request(sock, "GET", "/v1/doctor")
        doctor.update(json.loads(body).get("runtimes", {}))
        print("bench: linux create x%d" % n, file=sys.stderr)
        create, output, st = measure(sock, "linux", "bb", n)
        rows.append(summarize("linux: create -> ready", "namespace jail", create))
        rows.append(summarize("linux: create -> first output", "namespace jail", output))
        steps["linux"] = st
        q = doctor.get("qemu", {})
        if not q.get("available", False):
            unavailable("qemu", q.get("reason", "unknown"))
        else:
            accel = q.get("accelerator", "?")
            print("bench: qemu template + clone x%d" % n_clone, file=sys.stderr)
            sid, t0, t1 = create_one(sock, "qemu", "bb")
            request(sock, "DELETE", "/v1/sandboxes/%s" % sid)
            notes.append("qemu: the first create (template boot + save + clone) took %.0f ms"
                         % ((t1 - t0) * 1000))
            qemu_rows("qemu clone", "clone of the template (%s)" % accel, n_clone, k_idle)
        f = doctor.get("firecracker", {})
        if not f.get("available", False):
            unavailable("firecracker", f.get("reason", "unknown"))
        else:
            print("bench: firecracker create x%d" % n, file=sys.stderr)
            sid, t0, t1 = create_one(sock, "firecracker", "bb")
            request(sock, "DELETE", "/v1/sandboxes/%s" % sid)
            notes.append("firecracker: the first create (template boot + snapshot) took %.0f ms"
                         % ((t1 - t0) * 1000))
            create, output, st = measure(sock, "firecracker", "bb", n)
            how = "restore from the image's template"
            rows.append(summarize("firecracker: create -> ready", how, create))
            rows.append(summarize("firecracker: create -> first output", how, output))
            steps["firecracker"] = st

    def pool_phase():
        print("bench: qemu pool x%d" % n_clone, file=sys.stderr)
        t0 = time.perf_counter()
        wait_pool_full(sock, 2, timeout=300)
        notes.append("qemu pool: the first fill of 2 (template loaded from disk, 2 clones) took "
                     "%.0f ms" % ((time.perf_counter() - t0) * 1000))
        hits0, _ = pool_counts(sock)
        create, output, st = measure(sock, "qemu", "bb", n_clone,
                                     before_each=lambda: wait_pool_full(sock, 2, timeout=120))
        hits1, _ = pool_counts(sock)
        how = "warm pool of clones, %d of %d claimed from it" % (hits1 - hits0, n_clone)
        rows.append(summarize("qemu pool: create -> ready", how, create))
        rows.append(summarize("qemu pool: create -> first output", how, output))

    def boot_phase():
        print("bench: qemu boot x%d" % n_boot, file=sys.stderr)
        qemu_rows("qemu boot", "boot (%s)" % doctor["qemu"].get("accelerator", "?"), n_boot,
                  min(k_idle, 2))

    run_daemon("clone", daemon_config(os.path.join(args.work, "clone.json"), {}), clone_phase)
    if doctor.get("qemu", {}).get("available", False):
        pools = [dict(VM, runtime="qemu", image="bb", size=2)]
        run_daemon("pool", daemon_config(os.path.join(args.work, "pool.json"), {}, pools),
                   pool_phase)
        run_daemon("boot", daemon_config(os.path.join(args.work, "boot.json"),
                                         {"templates": False}), boot_phase)
    load1 = os.getloadavg()
    base = next((r["p50"] for r in rows if r["name"] == "linux: create -> ready" and r["n"]), None)
    lines = ["# Sandbox creation by runtime, %s" % started.strftime("%Y-%m-%d %H:%M UTC"), "",
             "commit %s, %s build, %s, load %.2f -> %.2f, N=%d (qemu clone %d, boot %d)"
             % (git_rev(), build_type(os.path.join(REPO, build)), cpu_model(), load0[0],
                load1[0], n, n_clone, n_boot), "",
             "Targets: qemu (issue 19, under TCG here) `space create` p50 under 150 ms, "
             "`space run -- true` p50 under 400 ms; firecracker (issue 9) create from template "
             "p50 under 30 ms.", "",
             "| row | n | p50 ms | p90 ms | p99 ms | mean ms | x linux | measured by |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["n"]:
            lines.append("| %s | 0 | | | | | | %s |" % (r["name"], r["how"]))
            continue
        ratio = "%.1f" % (r["p50"] / base) if base and "ready" in r["name"] else ""
        lines.append("| %s | %d | %.1f | %.1f | %.1f | %.1f | %s | %s |"
                     % (r["name"], r["n"], r["p50"], r["p90"], r["p99"], r["mean"], ratio, r["how"]))
    if memory:
        lines += ["", "Host memory per idle VM (mean of K idle sandboxes, MiB):", "",
                  "| | QEMU RSS | QEMU PSS | memory cgroup |", "|---|---|---|---|"]
        lines += ["| %s | %.1f | %.1f | %.1f |" % (label, *m) for label, m in memory]
    for runtime, st in steps.items():
        lines += ["", "spaced's time per create step, %s (mean ms):" % runtime, ""]
        lines += ["- %s: %.2f (%d)" % (s, ms, c) for s, ms, c in st]
    if notes:
        lines += [""] + ["- " + x for x in notes]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
