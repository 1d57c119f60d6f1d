"""Sandbox creation by runtime, side by side (bench/run.sh, BENCH_ONLY=vm): POST /v1/sandboxes
timed to its 201 answer (the agent has said hello), then an exec of `echo hi` to its first
output, then DELETE (not timed), N times per runtime, against one private spaced:

  linux        the namespace jail (the host image)
  qemu         a QEMU microVM booting the guest kernel (KVM where usable, else TCG: seconds);
               N_QEMU = $BENCH_VM_N_QEMU (default 5), since under TCG each is a boot
  firecracker  a Firecracker microVM restored from its image's template (KVM only); the first
               create, which boots the template, is timed apart ("template build")

Every runtime uses the same busybox image (imported from the host's busybox-static and made a
VM disk with `space image build-vm`; the linux runtime runs the same image). A runtime that
cannot run here still gets a row, whose "measured by" holds the reason `space doctor` gives.
Reports p50/p90/p99/mean in ms, p50 over linux's ("x linux"), and spaced's own time per
create step (from /metrics) for each runtime: where the time goes. Writes markdown to --out."""

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
from bench import (build_type, cold_steps, cpu_model, git_rev, metrics, request, start_daemon,  # noqa: E402
                   stop_daemon, summarize)

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


def measure(sock, runtime, image, n):
    """Returns (create ms, create+first output ms, steps, first-create ms or None) or raises."""
    spec = {"runtime": runtime, "image": image, "memory": "256M", "disk": "256M"}
    first = None
    if runtime == "firecracker":
        # The first create of an image boots and snapshots its template: timed apart.
        t0 = time.perf_counter()
        status, body = request(sock, "POST", "/v1/sandboxes", spec)
        if status != 201:
            raise RuntimeError(json.loads(body).get("error", {}).get("message", body[:300]))
        first = (time.perf_counter() - t0) * 1000
        request(sock, "DELETE", "/v1/sandboxes/%s" % json.loads(body)["id"])
    before = metrics(sock)
    create, output = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        status, body = request(sock, "POST", "/v1/sandboxes", spec)
        t1 = time.perf_counter()
        if status != 201:
            raise RuntimeError(json.loads(body).get("error", {}).get("message", body[:300]))
        sid = json.loads(body)["id"]
        t2 = exec_until_first_output(sock, sid)
        request(sock, "DELETE", "/v1/sandboxes/%s" % sid)
        create.append((t1 - t0) * 1000)
        output.append((t2 - t0) * 1000)
    return create, output, cold_steps(before, metrics(sock)), first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    build = os.environ.get("BUILD_DIR", "build-release")
    spaced = os.path.join(REPO, build, "spaced")
    space = os.path.join(REPO, build, "space")
    n = int(os.environ.get("BENCH_VM_N", os.environ.get("BENCH_N", "100")))
    n_qemu = int(os.environ.get("BENCH_VM_N_QEMU", "5"))
    os.makedirs(args.work, exist_ok=True)
    state = tempfile.mkdtemp(prefix="state-", dir=args.work)
    sock = os.path.join(args.work, "vm.sock")
    guest = os.path.join(REPO, "build", "guest")  # `make build` makes the guest kernel there
    config = os.path.join(args.work, "vm.json")
    with open(config, "w") as f:
        vm = {"boot_timeout_s": 120}
        if not os.path.exists(os.path.join(REPO, build, "guest", "vmlinux")) and \
                os.path.exists(os.path.join(guest, "vmlinux")):
            vm.update(kernel=os.path.join(guest, "vmlinux"), initrd=os.path.join(guest, "initrd.img"))
        json.dump({"vm": vm}, f)
    load0 = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    with open(os.path.join(args.work, "spaced-vm.log"), "w") as log:
        daemon = start_daemon(spaced, state, sock, log, config)
        rows, notes, steps = [], [], {}
        try:
            env = dict(os.environ, SPACE_SOCKET=sock)
            tarball = os.path.join(args.work, "bb.tar.gz")
            busybox_tar(tarball)
            for a in (("image", "import", "bb", tarball), ("image", "build-vm", "bb")):
                p = subprocess.run([space, *a], env=env, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit("bench: %s: %s" % (" ".join(a), p.stderr.strip()))
            _, body = request(sock, "GET", "/v1/doctor")
            doctor = json.loads(body).get("runtimes", {})
            for runtime, count in (("linux", n), ("qemu", n_qemu), ("firecracker", n)):
                d = doctor.get(runtime, {})
                if not d.get("available", False):
                    for what in ("create -> ready", "create -> first output"):
                        rows.append({"name": "%s: %s" % (runtime, what), "n": 0,
                                     "how": "cannot run here: %s" % d.get("reason", "unknown")})
                    continue
                print("bench: %s create x%d" % (runtime, count), file=sys.stderr)
                try:
                    create, output, st, first = measure(sock, runtime, "bb", count)
                except RuntimeError as e:
                    rows.append({"name": "%s: create" % runtime, "n": 0, "how": "failed: %s" % e})
                    continue
                how = {"linux": "namespace jail", "qemu": "boot (%s)" % d.get("accelerator", "?"),
                       "firecracker": "restore from the image's template"}[runtime]
                rows.append(summarize("%s: create -> ready" % runtime, how, create))
                rows.append(summarize("%s: create -> first output" % runtime, how, output))
                steps[runtime] = st
                if first is not None:
                    notes.append("firecracker: the first create (template boot + snapshot) took "
                                 "%.0f ms" % first)
        finally:
            stop_daemon(daemon, sock)
    load1 = os.getloadavg()
    base = next((r["p50"] for r in rows if r["name"] == "linux: create -> ready" and r["n"]), None)
    lines = ["# Sandbox creation by runtime, %s" % started.strftime("%Y-%m-%d %H:%M UTC"), "",
             "commit %s, %s build, %s, load %.2f -> %.2f, N=%d (qemu %d)"
             % (git_rev(), build_type(os.path.join(REPO, build)), cpu_model(), load0[0],
                load1[0], n, n_qemu), "",
             "Target (issue 9): firecracker create from template p50 under 30 ms.", "",
             "| row | n | p50 ms | p90 ms | p99 ms | mean ms | x linux | measured by |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["n"]:
            lines.append("| %s | 0 | | | | | | %s |" % (r["name"], r["how"]))
            continue
        ratio = "%.1f" % (r["p50"] / base) if base and "ready" in r["name"] else ""
        lines.append("| %s | %d | %.1f | %.1f | %.1f | %.1f | %s | %s |"
                     % (r["name"], r["n"], r["p50"], r["p90"], r["p99"], r["mean"], ratio, r["how"]))
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
