#!/usr/bin/env python3
"""SPACE's escape suite: runs every attempt in tests/security/attacks/<class>/ against a private
daemon through the real `space` CLI, plus the posture check (posture.py) and the syscall probe
(probe/syscall_probe.c) — and fails on any escape or error.

An attempt is one file named after what it tries. C files are built by CMake as static binaries
(<build>/security/attacks/<class>/<name>); .sh and .py files run with sh or python3 inside the
sandbox, except those whose header says `sandbox=host`: they run on the host as an untrusted API
client or drive a two-sided attack (lib/hostside.py). Each prints a final `BLOCKED: ...` or
`ESCAPED: ...` line. The header line `space-attack: key=value ...` configures it:
  sandbox=shared|fresh|host|host-fresh   where it runs (default shared); fresh ones are destroyed
                                         afterwards and must leave nothing behind
  opts=--memory=64M,--pids=64            `space create` options of a fresh sandbox
  timeout=30                             seconds before the attempt is killed (an error)
  verify=binaries,daemon_rss,pids_limit  extra host-side checks (Suite.verify, run())
After every attempt the runner checks from outside that nothing changed: the host canaries
(lib/watch.py: a file, a process, listeners, SysV IPC, sysctls, release_agent, the image), the
victim sandbox (files, listeners, processes), and the daemon's health.

Usage: run_suite.py [-k PATTERN] [-v] [--build-dir DIR] [--runtime linux|qemu|firecracker]
Prints a table with a count per class; the last line is `N passed, M failed`.

With --runtime qemu or firecracker (VM_RUNTIMES) every sandbox is a microVM running an image made
from the host's busybox and python3 (lib/vmimage.py); both boot the same guest (kernel, vminit,
agent), so one set of tables serves both. An attempt whose success would only be inside the
guest's own kernel (guest root mounting, loading modules, ...) is listed in GUEST_LOCAL with why:
its in-guest verdict is reported as GUEST-LOCAL, and the host-side checks after it must still
pass. Attempts that do not apply to microVMs are listed in VM_NOT_RUN. The VMM's confinement
(QEMU's, or Firecracker's under its jailer) replaces the linux runtime's posture check; the
seccomp probe does not apply. Where the runtime's prerequisites are missing (QEMU; KVM,
firecracker and jailer; the guest kernel; busybox-static) the run is skipped with exit code 77
and a line saying what is missing and how to get it.
"""

import argparse
import fnmatch
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES = ["fs", "priv", "proc", "res", "net", "secrets", "cross", "api", "egress", "snap"]
CLASS_TITLES = {
    "fs": "filesystem escapes", "priv": "privilege", "proc": "processes", "res": "resources",
    "net": "network", "secrets": "secrets", "cross": "cross-sandbox", "api": "API abuse",
    "egress": "egress gateway", "snap": "snapshots",
    "posture": "posture check", "probe": "syscall probe",
}
# Attempts that escape today, with the report. They still fail the suite (status KNOWN-ESCAPE);
# the entry only makes the table say that the finding is known. Never weaken an attempt instead.
# (The three findings of the first run — HTTP framing, abandoned downloads, `space cp` through a
# planted symlink — were fixed in the server, the daemon and the CLI.)
KNOWN_ESCAPES: dict = {}
# (Empty: the egress class's four findings — duplicate Host headers, an unbounded chunk line,
# the header-section limit, and pre-final ECH/ESNI codepoints — were fixed in src/egress.)
# The runtimes whose sandboxes are microVMs. They boot the same guest (kernel, space-vminit, agent,
# image disk), so GUEST_LOCAL and VM_NOT_RUN below hold for each of them.
VM_RUNTIMES = ("qemu", "firecracker")
# VM runtimes: attempts whose success is the guest kernel's own business. Guest root owns its
# kernel (mounts, modules, capabilities, its clock, raw sockets on an interface-less machine);
# the boundary is the VM, checked from the host after every attempt. Each entry says why.
GUEST_LOCAL: dict = {
    "fs/agent_memfd_read":
        "the agent is a process of guest root (no other uid in the guest to hide it from); the "
        "host's agent binary is unchanged (verify=binaries)",
    "fs/cgroup_release_agent":
        "the cgroup mounted is the guest's; a release_agent runs in the guest (the host's "
        "release_agent files are checked)",
    "fs/chroot_breakout":
        "chroot inside the guest; the VM is the boundary",
    "fs/device_nodes_open":
        "/dev/vda and /dev/vdb are its own disks: the image read-only (its host file is hashed "
        "after every attempt), and its writable disk",
    "fs/leaked_fds":
        "the fds are the guest's own processes'; no host fd is in a VM",
    "fs/mount_classic":
        "mounts inside the guest kernel",
    "fs/new_mount_api":
        "mounts inside the guest kernel",
    "fs/pivot_root_breakout":
        "pivot_root/umount of the guest's own root",
    "fs/proc_kallsyms_addresses":
        "the guest kernel's addresses, not the host's",
    "fs/proc_masked_files":
        "the guest kernel's /proc (kcore is the VM's RAM)",
    "fs/proc_sys_write":
        "the guest kernel's sysctls (the host's are checked after every attempt)",
    "fs/sys_write":
        "the guest's sysfs and cgroups",
    "priv/bpf_prog_load":
        "BPF in the guest kernel",
    "priv/capset_raise":
        "guest root has every capability in its own kernel",
    "priv/clock_settime":
        "the guest's clock (spaced sets it again on a resume)",
    "priv/clone3_namespaces":
        "namespaces of the guest kernel",
    "priv/file_capabilities":
        "capabilities in the guest kernel",
    "priv/io_uring_setup":
        "io_uring of the guest kernel",
    "priv/iopl_ioperm":
        "I/O ports of the emulated machine",
    "priv/keyctl_add_key":
        "the guest kernel's keyrings",
    "priv/nested_userns_clone":
        "user namespaces of the guest kernel",
    "priv/nested_userns_unshare":
        "namespaces of the guest kernel",
    "priv/perf_event_open":
        "perf events of the guest kernel (no PMU passed through)",
    "priv/personality_flags":
        "personality in the guest kernel",
    "priv/ptrace_agent":
        "the agent is guest root's own process",
    "priv/reboot":
        "sysrq/reboot of the guest: at most its own VM ends (QEMU runs with -no-reboot; "
        "Firecracker exits on the guest's reset)",
    "priv/seccomp_disable":
        "a VM's guest processes have no seccomp filter; its VMM (QEMU, Firecracker) has one "
        "(posture)",
    "priv/setns_host":
        "the 'host' namespaces there are the guest's init namespaces",
    "priv/syscall_i386_int80":
        "the guest kernel's syscall entry points",
    "priv/syscall_x32":
        "the guest kernel's syscall entry points",
    "priv/syslog_read":
        "the guest kernel's log",
    "priv/tiocsti":
        "the guest's terminals",
    "priv/uid_map_rewrite":
        "user namespaces of the guest kernel",
    "priv/userfaultfd":
        "userfaultfd of the guest kernel",
    "proc/core_dump_enable":
        "core dumps of the guest kernel, into the guest",
    "proc/double_fork_teardown":
        "the guest's cgroups; teardown ends the whole VM (the runner checks for survivors on the "
        "host)",
    "proc/pid1_proc_files":
        "PID 1 is the agent, guest root's own process",
    "res/cpu_spin":
        "measured with the guest kernel's getrusage, which need not see its VMM throttled by the "
        "host's CPU quota (QEMU under TCG has no steal time); the quota is on the VMM's cgroup",
    "res/fd_exhaustion":
        "rlimits of the guest kernel; its fds live in the VM's RAM (--memory)",
    "res/mlock_memory":
        "rlimits of the guest kernel; locked pages are the VM's RAM (--memory)",
    "res/sysv_shm_hog":
        "SysV shm fills the VM's own RAM: the guest may panic, ending only its own VM; the VMM's "
        "memory stays within its cgroup",
    "net/interface_config":
        "the guest's own interfaces (it has only lo)",
    "net/netlink_other_families":
        "the guest kernel's audit and netlink",
    "net/netlink_route_config":
        "the guest's own routes (it has only lo)",
    "net/packet_socket":
        "raw sockets on a machine with no network device",
    "net/raw_socket":
        "raw sockets on a machine with no network device",
    "cross/hostname_change":
        "the guest's own hostname (the host's is checked after every attempt)",
    "egress/direct_sockets_and_binds":
        "binds in the guest's own network stack; the gateway is outside the VM, reached only "
        "through the agent",
}
# VM runtimes: attempts that are not run, with why (printed as NOT-RUN rows). Either they aim
# at the linux runtime's host-side machinery, which a VM does not have, or they need what the
# microVMs' guest does not offer yet (docs/qemu-runtime.md, "Not yet"; the firecracker runtime
# boots the same guest); the gateway code they exercise is the same for every runtime and runs
# against the linux runtime.
# --runtime firecracker only: what a firecracker guest has by design that a qemu guest lacks.
FIRECRACKER_GUEST_LOCAL: dict = {
    "priv/module_loading":
        "AF_VSOCK exists in a firecracker guest: it is the agent's channel (vsock and its "
        "virtio transport are loaded by vminit at boot when space.channel=vsock; qemu guests "
        "do not get them); the host's /proc/modules is compared as for every attempt",
    "net/vsock_alg_sockets":
        "AF_VSOCK exists in a firecracker guest (the agent's channel); a guest-initiated vsock "
        "connection reaches the host only where something listens on the jail's "
        "v.sock_<port>, and spaced listens on none (Firecracker refuses it)",
}

VM_NOT_RUN: dict = {
    "fs/agent_channel_steal":
        "guest root owns its agent and the agent's port (a second open of the port is EBUSY): "
        "stealing it only blocks this VM's own agent; nothing of the host is behind it",
    "fs/overlay_xattr_redirect":
        "reaches the linux runtime's host-side overlay; a VM's is in the guest",
    "snap/setuid_root_restore": "reaches the linux runtime's writable layer from the host",
    "proc/exec_audit_evasion":
        "a VM's exec records are the guest's own report (docs/audit.md), and this image's "
        "/bin/true is busybox, which the fileless and argv[0] tricks cannot run; the guest's "
        "records are tested by tests/integration/test_qemu_exec_audit.py, the reader they share "
        "with the linux runtime (fileless execs included) by tests/unit/common/exec_notify_test.cc",
    "proc/fork_bomb":
        "counts processes in /proc, which in a VM holds the guest kernel's own threads too; "
        "fork_bomb_shell and thread_bomb hit the same guest pids limit, read from its cgroup",
    "snap/many_tiny_files":
        "measures the per-file cost of file-tree snapshots; a VM's snapshot is its disk and "
        "memory, whatever its files",
}
VM_IMAGE = "space-sec-vm"
# The daemon's environment canary: its prefix must never appear inside a sandbox.
SECRET_PREFIX = "SPCANARY"
# The egress secret's value starts with this; inside a sandbox only its placeholder may appear.
EGRESS_SECRET_PREFIX = "SPEGRESS"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-k", dest="pattern", help="run attempts whose class/name matches (glob or "
                   "substring); 'posture' and 'probe' select the checks")
    p.add_argument("-v", "--verbose", action="store_true", help="print each attempt's stderr")
    p.add_argument("--build-dir", help="build directory (default $SPACE_BUILD_DIR or ./build)")
    p.add_argument("--runtime", default="linux", choices=["linux"] + list(VM_RUNTIMES),
                   help="the runtime of every sandbox (default linux)")
    p.add_argument("--list", action="store_true", help="list the attempts and exit")
    p.add_argument("--readme", action="store_true",
                   help="print the attempt tables of README.md (from each file's header)")
    return p.parse_args()


ARGS = parse_args()
# True when every sandbox is a microVM (--runtime qemu or firecracker).
IS_VM = ARGS.runtime in VM_RUNTIMES
# An attempt's time limit inside a VM: QEMU under TCG emulates every instruction, and `make
# test` runs this suite beside the linux one, so CPU-bound attempts get three times their
# limit (attempts that must run for a while, as proc/fork_bomb_shell, count wall-clock time
# from /proc/uptime, never loop turns, which starve on an emulated CPU). A passing attempt ends as soon as it is done either way.
TIME_FACTOR = 3 if IS_VM else 1
if ARGS.build_dir:
    os.environ["SPACE_BUILD_DIR"] = os.path.abspath(ARGS.build_dir)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, HERE)

import harness  # noqa: E402
import posture  # noqa: E402
from egress_upstream import Upstream  # noqa: E402
from watch import HostWatch, Victim  # noqa: E402


class SuiteUpstream(Upstream):
    """The egress integration suite's local "internet" (127.0.0.2, its own CA) plus what the
    egress attempts check through: /split-echo reflects the request's Authorization in a chunked
    body split mid-value, in headers and in a trailer; /seen?n=NONCE answers how many requests
    carrying NONCE in their request line or headers reached it (so an attempt learns whether a
    smuggled or refused request got through) and how many connections reached `trap`, a listener
    on the host's 127.0.0.1 that names resolving to loopback point at.

    A store-and-readback service, as any API that keeps what it is sent: /store?k=KEY (any
    method) keeps the request line and every header as text under KEY, /load?k=KEY gives it
    back, under every name of the upstream (one service behind several names, as
    api.example.com and gist.example.com may share storage).

    A hostile upstream that echoes the request's Authorization in every form masking could miss
    (/hostile/<form>): in the status line's reason phrase, in a header name, gzip-compressed
    although the gateway asked for identity, JSON-escaped with "\/", percent-encoded, base64 at
    three alignments, hex, byte ranges of it (honouring Range), and a 206 partial answer sent
    whether or not a range was asked for (also under /bound/hostile/). /bound/... echoes like
    /echo (for path bindings)."""

    def start(self):
        self.lines = []
        self.store = {}
        self.trap = socket.socket()
        self.trap.bind(("127.0.0.1", 0))
        self.trap.listen(64)
        self.trap_hits = 0
        threading.Thread(target=self._trap_loop, daemon=True).start()
        return super().start()

    def _trap_loop(self):
        while True:
            try:
                c, _ = self.trap.accept()
            except OSError:
                return
            self.trap_hits += 1
            c.close()

    def stop(self):
        self.trap.close()
        super().stop()

    def _handler(self):
        up, base = self, super()._handler()

        class Handler(base):
            def parse_request(self):
                ok = super().parse_request()
                if ok and not self.path.startswith("/seen"):
                    with up.lock:
                        up.lines.append(self.requestline + "\n" + str(self.headers))
                return ok

            def _query(self):
                import urllib.parse
                return dict(urllib.parse.parse_qsl(self.path.partition("?")[2]))

            def _plain(self, status, body, headers=(), reason=None):
                if reason is None:
                    self.send_response(status)
                else:  # the status line as a hostile upstream writes it
                    self.wfile.write(b"HTTP/1.1 %d %s\r\n" % (status, reason))
                    self.send_header("Server", "hostile")
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _store_or_load(self):
                key = self._query().get("k", "")
                if self.path.startswith("/store"):
                    n = int(self.headers.get("Content-Length") or 0)
                    if n:
                        self.rfile.read(n)
                    with up.lock:
                        up.store[key] = self.requestline + "\n" + str(self.headers)
                    return self._plain(201, b"stored\n")
                with up.lock:
                    text = up.store.get(key)
                if text is None:
                    return self._plain(404, b"no such key\n")
                return self._plain(200, text.encode(), [("Content-Type", "text/plain")])

            def _hostile(self):
                import base64
                import gzip
                import urllib.parse
                auth = self.headers.get("Authorization", "").encode()
                form = self.path.split("?")[0].split("/hostile/", 1)[1]
                if form == "reason":
                    return self._plain(200, b"ok\n", reason=b"OK " + auth)
                if form == "header-name":
                    name = "X-" + auth.decode().replace(" ", "-").replace("/", "-")
                    return self._plain(200, b"ok\n", [(name, "1")])
                if form == "gzip":
                    return self._plain(200, gzip.compress(b"auth=" + auth),
                                       [("Content-Encoding", "gzip")])
                if form == "json":
                    body = json.dumps({"auth": auth.decode()}).replace("/", "\\/")
                    return self._plain(200, body.encode(), [("Content-Type", "application/json")])
                if form == "pct":
                    return self._plain(200, urllib.parse.quote(auth, safe="").encode())
                if form == "b64":
                    body = b"\n".join(base64.b64encode(b"x" * k + auth) for k in range(3))
                    return self._plain(200, body)
                if form == "hex":
                    return self._plain(200, auth.hex().encode())
                whole = b"auth=" + auth
                if form == "range":
                    rng = self.headers.get("Range", "")
                    if rng.startswith("bytes="):
                        a, _, b = rng[6:].partition("-")
                        a, b = int(a), min(int(b or len(whole) - 1), len(whole) - 1)
                        return self._plain(206, whole[a:b + 1], [
                            ("Content-Range", "bytes %d-%d/%d" % (a, b, len(whole)))])
                    return self._plain(200, whole)
                if form == "partial":
                    return self._plain(206, whole[:12], [
                        ("Content-Range", "bytes 0-11/%d" % len(whole))])
                return self._plain(404, b"no such form\n")

            def do_GET(self):
                if self.path.startswith("/store") or self.path.startswith("/load"):
                    return self._store_or_load()
                if "/hostile/" in self.path.split("?")[0]:
                    return self._hostile()
                if self.path.startswith("/bound"):
                    return self._echo()
                if self.path.startswith("/seen?n="):
                    nonce = self.path[len("/seen?n="):]
                    with up.lock:
                        n = sum(nonce in line for line in up.lines)
                    return self._send(200, {}, [json.dumps({"count": n,
                                                            "trap": up.trap_hits}).encode()])
                if self.path.startswith("/split-echo"):
                    auth = self.headers.get("Authorization", "").encode()
                    body = b"auth=" + auth + b"\n" + auth * 3
                    # Chunks of 1, 2, 3 ... bytes: every occurrence straddles chunk boundaries.
                    chunks, i, k = [], 0, 1
                    while i < len(body):
                        chunks.append(body[i:i + k])
                        i, k = i + k, k % 7 + 1
                    return self._send(200, {"X-Echo-A": auth, "Set-Cookie": b"t=" + auth,
                                            "Trailer": b"X-Trailer-Echo"}, chunks,
                                      trailer=b"X-Trailer-Echo: " + auth)
                return super().do_GET()

            def do_POST(self):
                if self.path.startswith("/store"):
                    return self._store_or_load()
                return super().do_POST()

            def _send(self, status, headers, chunks, trailer=None):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v.decode() if isinstance(v, bytes) else v)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for c in chunks:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
                self.wfile.write(b"0\r\n" + (trailer + b"\r\n" if trailer else b"") + b"\r\n")

        return Handler


def mint_scripts(d):
    """Two mint commands for the credential-command attempt, each appending a line to its own
    runs file in `d` whenever spaced runs it: mint-fail writes a refresh token to stderr and
    fails; mint-ok prints a fresh token each run (its secret has ttl 0)."""
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    for name, body in (
            ("mint-fail", 'echo run >> %s/fail.runs\n'
                          'echo "refresh_token=%s_RT_%s rejected by the issuer" >&2\nexit 3\n'
             % (d, EGRESS_SECRET_PREFIX, secrets.token_hex(8))),
            ("mint-ok", 'echo run >> %s/ok.runs\necho "%s_MINT_$(head -c 8 /dev/urandom | '
                        'od -An -tx1 | tr -d \' \\n\')"\n' % (d, EGRESS_SECRET_PREFIX))):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body)
        os.chmod(path, 0o755)
    return d


def egress_config(up, secret, mint_dir):
    """spaced's config for the suite: the test profile may reach a few names of the local
    upstream (each has a resolver override, so nothing is ever looked up in real DNS), two names
    resolve to internal addresses (loopback, private), the loopback address of the upstream's trap
    is listed as an IP literal (so only the address check stands between it and a dial).
    Secrets, all valued "SPEGRESS_...": API_TOKEN bound to api.example.test; STORE_TOKEN to POST
    on store.example.test; PATH_TOKEN to api.example.test's /bound/ paths; MINT_FAIL and MINT_OK
    minted by the commands of mint_scripts() for mintfail/mintok.example.test."""
    https, http = "127.0.0.2:%d" % up.https_port, "127.0.0.2:%d" % up.http_port
    resolve = {}
    for name in ("api", "git", "plain", "paths", "store", "mintfail", "mintok"):
        resolve["%s.example.test:443" % name] = https
        resolve["%s.example.test:80" % name] = http
    trap = up.trap.getsockname()[1]
    resolve["rebind.example.test"] = "127.0.0.1:%d" % trap
    resolve["private.example.test"] = "10.0.0.1"
    test_only = {"profiles": ["test"]}
    return {
        "profiles": {"test": {"egress": {
            "allow": ["api.example.test", "git.example.test", "plain.example.test:80",
                      "store.example.test", "mintfail.example.test", "mintok.example.test",
                      "rebind.example.test", "private.example.test", "127.0.0.1:%d" % trap,
                      {"host": "paths.example.test", "methods": ["GET"], "paths": ["/public/"]}],
            "allow_networks": ["127.0.0.2/32"],
            "max_connections": 32}},
            "live": {}},
        "secrets": {
            "API_TOKEN": dict(test_only, value=secret, hosts=["api.example.test"]),
            "STORE_TOKEN": dict(test_only, value="%s_STORE_%s/s+t=u" % (
                EGRESS_SECRET_PREFIX, secrets.token_hex(12)),
                                hosts=["store.example.test"], methods=["POST"]),
            # Only field-name characters: a hostile upstream can echo it as a header name.
            "PATH_TOKEN": dict(test_only, value="%s_PATH_%s" % (
                EGRESS_SECRET_PREFIX, secrets.token_hex(12)),
                               hosts=["api.example.test"], paths=["/bound/"]),
            "MINT_FAIL": dict(test_only, command=[os.path.join(mint_dir, "mint-fail")],
                              hosts=["mintfail.example.test"]),
            "MINT_OK": dict(test_only, command=[os.path.join(mint_dir, "mint-ok")], ttl=0,
                            hosts=["mintok.example.test"]),
        },
        "gateway": {"resolve": resolve, "upstream_ca_files": [up.certs["ca"]],
                    "sandbox_ca_files": [up.certs["ca"]]},
    }


FIRECRACKER_H = os.path.join(HERE, "..", "..", "src", "runtime", "firecracker",
                             "firecracker_runtime.h")
FIRECRACKER_RELEASES = "github.com/firecracker-microvm/firecracker/releases"


def firecracker_binaries():
    """(firecracker, jailer) as absolute paths, or None where not found: $SPACE_FIRECRACKER and
    $SPACE_JAILER if set (as tests/kvm/test_firecracker.py takes them), else PATH. spaced gets
    them as {"vm": {"firecracker": ..., "jailer": ...}}, so it runs what was checked here."""
    out = []
    for env, name in (("SPACE_FIRECRACKER", "firecracker"), ("SPACE_JAILER", "jailer")):
        given = os.environ.get(env)
        found = shutil.which(given or name)
        out.append(os.path.abspath(found) if found else None)
    return tuple(out)


def firecracker_versions():
    """(min, max) minor of the 1.x releases the runtime supports, read from kMinMinor/kMaxMinor
    in firecracker_runtime.h (the one copy of it); None if they cannot be found there."""
    m = re.search(r"kMinMinor\s*=\s*(\d+)\s*,\s*kMaxMinor\s*=\s*(\d+)",
                  harness.read_text(FIRECRACKER_H))
    return (int(m.group(1)), int(m.group(2))) if m else None


def firecracker_missing():
    """What this host lacks for --runtime firecracker, each with how to get it ([] = nothing)."""
    out = []
    versions = firecracker_versions()
    want = "1.%d to 1.%d" % versions if versions else "a supported release"
    latest = "firecracker-v1.%d.x-x86_64.tgz" % versions[1] if versions else "a release archive"
    if not os.path.exists("/dev/kvm"):
        out.append("no /dev/kvm: Firecracker runs only on KVM (a bare-metal host, or a VM with "
                   "nested virtualization enabled; then `modprobe kvm_intel` or `kvm_amd`)")
    else:
        try:
            os.close(os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC))
        except OSError as e:
            out.append("/dev/kvm cannot be opened read-write (%s): load kvm_intel or kvm_amd, "
                       "and run as root" % e.strerror)
    fc, jailer = firecracker_binaries()
    not_in_path = []
    for env, name, path in (("SPACE_FIRECRACKER", "firecracker", fc),
                            ("SPACE_JAILER", "jailer", jailer)):
        if path:
            continue
        if os.environ.get(env):
            out.append("$%s=%s is not an executable file" % (env, os.environ[env]))
        else:
            not_in_path.append("`%s`" % name)
    if not_in_path:
        out.append("no %s in PATH: download %s from %s and put its firecracker and jailer "
                   "(one release, %s) in /usr/local/bin, or set $SPACE_FIRECRACKER and "
                   "$SPACE_JAILER to them" % (" and ".join(not_in_path), latest,
                                              FIRECRACKER_RELEASES, want))
    if fc and versions:
        try:
            text = subprocess.run([fc, "--version"], capture_output=True, text=True,
                                  timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            text = str(e)
        m = re.search(r"(?:^|\s)v?(\d+)\.(\d+)", text)
        if not m or int(m.group(1)) != 1 or not versions[0] <= int(m.group(2)) <= versions[1]:
            out.append("%s --version says %r: spaced supports Firecracker %s (%s)" % (
                fc, text.strip().splitlines()[0][:80] if text.strip() else "", want,
                FIRECRACKER_RELEASES))
    kernel = os.path.join(harness.BUILD_DIR, "guest", "vmlinux")
    if not os.path.exists(kernel):
        out.append("no guest kernel at %s (`make build`, or `make guest`)" % kernel)
    if not os.path.exists("/bin/busybox"):
        out.append("no busybox-static at /bin/busybox (scripts/install-deps.sh, or "
                   "apt-get install busybox-static)")
    return out


def parse_size(text):
    """"64M" -> bytes (the CLI's suffixes K, M, G; a plain number is bytes)."""
    text = text.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * mult)


class Attack:
    def __init__(self, cls, path):
        self.cls = cls
        self.path = path
        self.file = os.path.basename(path)
        self.name, self.ext = os.path.splitext(self.file)
        self.id = "%s/%s" % (cls, self.name)
        self.meta = {"sandbox": "shared", "timeout": "30", "opts": "", "verify": ""}
        with open(path, errors="replace") as f:
            for line in f.read(4096).splitlines():
                m = re.search(r"space-attack:\s*(.*)$", line)
                if m:
                    for item in m.group(1).split():
                        k, _, v = item.partition("=")
                        self.meta[k] = v
        self.where = self.meta["sandbox"]
        self.timeout = float(self.meta["timeout"])
        self.opts = [o for o in self.meta["opts"].split(",") if o]
        self.verify = {v for v in self.meta["verify"].split(",") if v}

    def local_program(self, build_dir):
        if self.ext == ".c":
            return os.path.join(build_dir, "security", "attacks", self.cls, self.name)
        return self.path

    def command(self, remote):
        if self.ext == ".sh":
            return ["sh", remote]
        if self.ext == ".py":
            return ["python3", remote]
        return [remote]


def tail(path, size=65536):
    """The last `size` bytes of a file, as text."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - size))
        return f.read().decode("utf-8", "replace")


def host_secret_hashes(salt):
    """Salted SHA-256 (sha256(salt + content)) of host files that must never be readable inside
    a sandbox, for secrets/host_secret_files: 'path=hash;...' of those that exist here. The
    salt keeps the sandbox from learning plain hashes of the host's secrets."""
    import glob
    import hashlib
    paths = ["/etc/shadow", "/etc/gshadow", "/root/.bash_history", "/root/.python_history"]
    paths += glob.glob("/etc/ssh/ssh_host_*_key") + glob.glob("/root/.ssh/id_*")
    out = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                out.append("%s=%s" % (p, hashlib.sha256(salt.encode() + f.read()).hexdigest()))
        except OSError:
            pass
    return ";".join(out)


def discover(pattern):
    out = []
    for cls in CLASSES:
        d = os.path.join(HERE, "attacks", cls)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if os.path.splitext(f)[1] not in (".c", ".sh", ".py"):
                continue
            a = Attack(cls, os.path.join(d, f))
            if matches(a.id, pattern):
                out.append(a)
    return out


def matches(name, pattern):
    if not pattern:
        return True
    return pattern in name or fnmatch.fnmatch(name, pattern)


def header_text(path):
    """The attempt's opening comment as one string (C // lines, shell # lines, a docstring)."""
    lines = []
    with open(path, errors="replace") as f:
        text = f.read(6000)
    if path.endswith(".py"):
        m = re.search(r'"""(.*?)"""', text, re.S)
        lines = m.group(1).splitlines() if m else []
    else:
        marker = "//" if path.endswith(".c") else "#"
        for line in text.splitlines():
            if line.startswith("#!"):
                continue
            if not line.startswith(marker):
                break
            lines.append(line[len(marker):].strip())
    lines = [l for l in lines if "space-attack:" not in l]
    return " ".join(" ".join(lines).split())


def readme_tables(attacks):
    out = []
    for cls in CLASSES:
        rows = [a for a in attacks if a.cls == cls]
        if not rows:
            continue
        out.append("### %s — %s (%d)\n" % (cls, CLASS_TITLES[cls], len(rows)))
        out.append("| attempt | runs | tries | asserts (blocked by) |")
        out.append("|---|---|---|---|")
        for a in rows:
            text = header_text(a.path)
            tries, _, blocked = text.partition("Blocked by:")
            if not blocked:
                tries, _, blocked = text.partition("Blocked when:")
            where = {"shared": "shared sandbox", "fresh": "fresh sandbox (%s)" % (
                " ".join(a.opts) or "defaults"), "host": "host, vs shared sandbox",
                "host-fresh": "host, vs fresh sandbox"}[a.where]
            out.append("| `%s` | %s | %s | %s |" % (a.id + a.ext, where,
                                                     tries.strip().replace("|", "\\|"),
                                                     blocked.strip().replace("|", "\\|")))
        out.append("")
    return "\n".join(out)


class Result:
    def __init__(self, cls, name, status, detail, seconds):
        self.cls, self.name, self.status, self.detail, self.seconds = (cls, name, status, detail,
                                                                       seconds)

    @property
    def passed(self):
        return self.status in ("BLOCKED", "OK", "GUEST-LOCAL", "NOT-RUN")


class Suite:
    def __init__(self):
        self.build = harness.BUILD_DIR
        self.tmp = tempfile.mkdtemp(prefix="space-sec-")
        os.chmod(self.tmp, 0o755)
        self.daemon = harness.Daemon(self.tmp, default_pool=True)  # as users run it
        self.results = []
        self.known_ids = set()
        self.watch = None
        self.victim = None
        self.shared = None
        self.secret = SECRET_PREFIX + "_" + secrets.token_hex(12)
        self.secret_salt = secrets.token_hex(16)
        self.secret_hashes = host_secret_hashes(self.secret_salt)
        # '/', '+' and '=' make its JSON-escaped and percent-encoded forms differ from it.
        self.egress_secret = EGRESS_SECRET_PREFIX + "_" + secrets.token_hex(12) + "/a+b=c"
        self.upstream = None

    # -- CLI --------------------------------------------------------------------------------------

    def cli(self, *args, timeout=60, input=None):
        env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
        env.pop("SPACE_TEST_SECRET", None)
        try:
            p = subprocess.run([harness.SPACE] + [str(a) for a in args], input=input,
                               stdin=None if input is not None else subprocess.DEVNULL,
                               capture_output=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired as e:
            return 124, (e.stdout or b"").decode("utf-8", "replace"), "CLI timed out"
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        self.known_ids.update(harness.ID_RE.findall(out[:4096] + err[:4096]))
        return p.returncode, out, err

    def create(self, opts=()):
        opts = list(opts)
        if IS_VM:
            # A VM needs at least 128M of RAM and a 16M disk; smaller limits are raised.
            def raised(value, floor):
                return value if parse_size(value) >= floor else str(floor)
            for i, o in enumerate(opts):
                for flag, floor in (("--memory", 128 << 20), ("--disk", 16 << 20)):
                    if o.startswith(flag + "="):
                        opts[i] = flag + "=" + raised(o.split("=", 1)[1], floor)
                    elif o == flag and i + 1 < len(opts):
                        opts[i + 1] = raised(opts[i + 1], floor)
            opts = ["--runtime", ARGS.runtime, "--image", VM_IMAGE] + opts
        rc, out, err = self.cli("create", *opts, timeout=240)
        sid = out.strip().splitlines()[-1] if out.strip() else ""
        if rc != 0 or not harness.ID_RE.fullmatch(sid):
            raise RuntimeError("space create %s failed (rc %d): %s %s" % (" ".join(opts), rc,
                                                                          out, err))
        self.known_ids.add(sid)
        return sid

    def make_vm_image(self):
        import vmimage
        tarball = vmimage.tarball(os.path.join(self.tmp, "vm-image.tar.gz"))
        for args in (("image", "import", VM_IMAGE, tarball), ("image", "build-vm", VM_IMAGE)):
            rc, out, err = self.cli(*args, timeout=300)
            if rc != 0:
                raise RuntimeError("space %s failed (rc %d): %s" % (" ".join(args[:2]), rc, err))
        os.unlink(tarball)

    def api(self, method, path, body=None, timeout=30):
        return harness.http_request(self.daemon.socket, method, path, body, timeout=timeout)

    # -- set-up and tear-down ---------------------------------------------------------------------

    def start(self):
        for b in (harness.SPACED, harness.SPACE):
            if not os.access(b, os.X_OK):
                raise RuntimeError("%s is not built" % b)
        up_dir = os.path.join(self.tmp, "upstream")
        os.makedirs(up_dir)
        self.upstream = SuiteUpstream(up_dir).start()
        self.mint_dir = mint_scripts(os.path.join(self.tmp, "mint"))
        self.daemon.config = egress_config(self.upstream, self.egress_secret, self.mint_dir)
        if IS_VM:
            # QEMU under TCG boots slowly; Firecracker's first VM of a template boots and saves it.
            # SPACE_SUITE_TEMPLATES=0: every VM boots instead of cloning its image's template.
            self.daemon.config["vm"] = {
                "boot_timeout_s": 180,
                "templates": os.environ.get("SPACE_SUITE_TEMPLATES", "1") == "1"}
        if ARGS.runtime == "firecracker":
            # The binaries the prerequisite check found (PATH, or $SPACE_FIRECRACKER/JAILER).
            fc, jailer = firecracker_binaries()
            self.daemon.config["vm"].update({"firecracker": fc, "jailer": jailer})
        # The daemon's environment holds a canary secret; no sandbox may ever see it.
        os.environ["SPACE_TEST_SECRET"] = self.secret
        try:
            self.daemon.start()
        finally:
            os.environ.pop("SPACE_TEST_SECRET", None)
        self.watch = HostWatch(self.tmp, self.daemon.state_dir, self.build)
        if IS_VM:
            self.make_vm_image()
        self.shared = self.create()
        vid = self.create()
        self.victim = Victim(self.cli, vid)
        self.victim.setup(self.daemon.socket)
        self.watch.image = self.watch._image_digest()  # the image exists now
        self.watch.templates = self.watch._template_stamps()  # and the VM templates
        self.watch.binaries = self.watch.snapshot_binaries()

    def stop(self):
        try:
            if self.daemon.alive():
                r = self.api("GET", "/v1/sandboxes")
                items = r.json if isinstance(r.json, list) else (r.json or {}).get("sandboxes", [])
                for sb in items or []:
                    if isinstance(sb, dict) and sb.get("id"):
                        self.known_ids.add(sb["id"])
                        self.api("DELETE", "/v1/sandboxes/%s?force=true" % sb["id"], timeout=60)
                self.daemon.stop()
        finally:
            if self.upstream:
                self.upstream.stop()
            if self.watch:
                self.watch.close()
            self._save_log()
            self._kill_strays()
            harness.safe_rmtree(self.tmp)

    def _save_log(self):
        try:
            os.makedirs(harness.LOG_DIR, exist_ok=True)
            shutil.copy(self.daemon.log_path, os.path.join(harness.LOG_DIR, "security.spaced.log"))
        except OSError:
            pass

    def _kill_strays(self):
        """Last resort after the daemon is gone: processes of our own sandboxes only."""
        import signal
        for pid in harness.host_agent_pids() + self._vmm_pids():
            ids = set(harness.ID_RE.findall(harness.read_text("/proc/%d/cgroup" % pid)))
            if ids & self.known_ids:
                for p in [pid] + harness.descendants(pid):
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass

    def _vmm_pids(self):
        """QEMUs (the guest's command line is on theirs), Firecrackers and jailers; the caller
        keeps those in cgroups of our own sandboxes."""
        out = []
        for p in harness.proc_pids():
            argv = harness.proc_cmdline(p)
            exe = os.path.basename(argv[0]) if argv else ""
            if (exe.startswith("firecracker") or exe == "jailer"
                    or any(a.startswith("space.hostname=") for a in " ".join(argv).split())):
                out.append(p)
        return out

    # -- running attempts -------------------------------------------------------------------------

    def attack_env(self, sid):
        env = dict(self.watch.env())
        env.update(self.victim.env())
        env["SPACE_DAEMON_PID"] = str(self.daemon.pid)
        env["SPACE_DAEMON_SOCKET"] = self.daemon.socket
        env["SPACE_STATE_DIR"] = self.daemon.state_dir
        env["SPACE_SANDBOX"] = sid
        env["SPACE_HOST_SECRET_HASHES"] = self.secret_hashes
        env["SPACE_HOST_SECRET_SALT"] = self.secret_salt
        if self.upstream:
            env["SPACE_EGRESS_SECRET_PREFIX"] = EGRESS_SECRET_PREFIX
            env["SPACE_EGRESS_SECRET_LEN"] = str(len(self.egress_secret))
            env["SPACE_EGRESS_HTTPS_PORT"] = str(self.upstream.https_port)
            env["SPACE_EGRESS_HTTP_PORT"] = str(self.upstream.http_port)
            env["SPACE_EGRESS_TRAP_PORT"] = str(self.upstream.trap.getsockname()[1])
            env["SPACE_EGRESS_MINT_DIR"] = self.mint_dir
        return env

    def run_inside(self, a, sid, work):
        local = a.local_program(self.build)
        if not os.path.exists(local):
            return None, "", "%s is not built" % local
        remote = "/tmp/" + a.file.replace(".c", "")
        rc, out, err = self.cli("cp", local, "%s:%s" % (sid, remote))
        if rc != 0:
            return None, out, "space cp failed (rc %d): %s" % (rc, err)
        env = self.attack_env(sid)
        env["SPACE_ATTACK_ENV_NAMES"] = ",".join(sorted(env) + ["SPACE_ATTACK_ENV_NAMES"])
        envs = []
        for k, v in env.items():
            envs += ["--env", "%s=%s" % (k, v)]
        # Output goes to files, not memory: some attempts flood hundreds of MiB.
        limit = a.timeout * TIME_FACTOR
        return self.cli_to_files(work, "exec", sid, *envs, "--timeout", "%ds" % limit, "--",
                                 *a.command(remote), timeout=limit + 30)

    def cli_to_files(self, work, *args, timeout=60):
        env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
        out_path, err_path = os.path.join(work, "stdout"), os.path.join(work, "stderr")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            try:
                rc = subprocess.run([harness.SPACE] + [str(x) for x in args], stdout=out,
                                    stderr=err, stdin=subprocess.DEVNULL, timeout=timeout,
                                    env=env).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        return rc, tail(out_path), tail(err_path)

    def run_on_host(self, a, sid, work):
        env = dict(os.environ)
        env.update(self.attack_env(sid))
        env.update({"SPACE_SOCKET": self.daemon.socket, "SPACE_CLI": harness.SPACE,
                    "SPACE_VICTIM": self.victim.sid, "SPACE_WORK": work,
                    "SPACE_BUILD_DIR": self.build, "PYTHONUNBUFFERED": "1",
                    "SPACE_DAEMON_CONFIG": self.daemon.config_path,
                    "PYTHONPATH": os.path.join(HERE, "lib")})
        env.pop("SPACE_TEST_SECRET", None)
        try:
            p = subprocess.run([sys.executable, a.path], cwd=work, env=env, capture_output=True,
                               timeout=a.timeout + 30, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            return 124, (e.stdout or b"").decode("utf-8", "replace"), "timed out"
        return (p.returncode, p.stdout.decode("utf-8", "replace"),
                p.stderr.decode("utf-8", "replace"))

    def sandbox_processes(self, sid):
        """Host pids of a sandbox: its agent and everything below it."""
        r = self.api("GET", "/v1/sandboxes/%s" % sid)
        pid = (r.json or {}).get("host_pid") if r.status == 200 else None
        if not isinstance(pid, int):
            return []
        return [pid] + harness.descendants(pid)

    def check_pids_limit(self, sid):
        """verify=pids_limit: the sandbox's pids cgroup refused forks (pids.events "max" > 0)
        and never held more tasks than pids.max. Read from the host, before teardown."""
        if IS_VM:
            return self.check_guest_pids_limit(sid)
        r = self.api("GET", "/v1/sandboxes/%s" % sid)
        agent = (r.json or {}).get("host_pid") if r.status == 200 else None
        if not isinstance(agent, int):
            return ["pids_limit: the sandbox is gone before it could be checked"]
        base = None
        for line in harness.read_text("/proc/%d/cgroup" % agent).splitlines():
            _, hier, path = line.split(":", 2)
            if "pids" in hier.split(","):
                base = "/sys/fs/cgroup/pids" + path
        if base is None:  # pure cgroup v2 (or hybrid with pids in v2)
            for line in harness.read_text("/proc/%d/cgroup" % agent).splitlines():
                if line.startswith("0::"):
                    path = line[3:]
                    root = "/sys/fs/cgroup/unified" if os.path.isdir(
                        "/sys/fs/cgroup/unified" + path) else "/sys/fs/cgroup"
                    base = root + path
        limit = harness.read_text(os.path.join(base or "/nonexistent", "pids.max")).strip()
        current = harness.read_text(os.path.join(base or "/nonexistent", "pids.current")).strip()
        events = harness.read_text(os.path.join(base or "/nonexistent", "pids.events"))
        m = re.search(r"max (\d+)", events)
        if not limit or not current or not m:
            return ["pids_limit: cannot read the pids cgroup at %s" % base]
        problems = []
        if limit != "max" and int(current) > int(limit):
            problems.append("pids.current %s above pids.max %s" % (current, limit))
        if int(m.group(1)) == 0:
            problems.append("pids.events shows no refused fork: the limit was never hit")
        return problems

    def shared_usable(self):
        rc, out, err = self.cli("exec", self.shared, "--timeout", "20s", "--", "echo", "alive",
                                timeout=40)
        if rc == 0 and out.strip() == "alive":
            return True
        self.cli("rm", "--force", self.shared, timeout=60)
        return False

    def check_guest_pids_limit(self, sid):
        """verify=pids_limit in a VM: the limit is the guest's own pids cgroup (space-vminit's
        `sandbox`, holding the agent and every process under it), read through the agent."""
        rc, out, err = self.cli("exec", sid, "--", "sh", "-c",
                                "d=/sys/fs/cgroup$(cut -d: -f3 /proc/1/cgroup); "
                                "cat $d/pids.max $d/pids.current; grep max $d/pids.events",
                                timeout=60)
        lines = out.split()
        if rc != 0 or len(lines) < 4:
            return ["pids_limit: cannot read the guest's pids cgroup (rc %d): %s %s"
                    % (rc, out.strip()[:200], err.strip()[:200])]
        limit, current, events = lines[0], lines[1], int(lines[3])
        problems = []
        if limit != "max" and int(current) > int(limit):
            problems.append("pids.current %s above pids.max %s" % (current, limit))
        if events == 0:
            problems.append("pids.events shows no refused fork: the limit was never hit")
        return problems

    def destroy_and_check(self, sid):
        """Destroys a fresh sandbox and verifies nothing of it is left on the host."""
        pids = self.sandbox_processes(sid)
        rc, out, err = self.cli("rm", "--force", sid, timeout=60)
        problems = []
        # A sandbox may have died of its own doing (its agent OOM-killed): gone is fine, as long
        # as nothing of it is left on the host (checked below).
        if rc != 0 and "was destroyed" not in err:
            problems.append("space rm failed (rc %d): %s" % (rc, err.strip()[-200:]))
        # A Firecracker VM's jail (its chroot: device nodes, links of the kernel, image disk and
        # template, its writable disk) goes with it.
        jail = (os.path.join(self.daemon.state_dir, "firecracker", "jails", "firecracker",
                             sid.replace("_", "-")) if ARGS.runtime == "firecracker" else None)
        deadline = time.monotonic() + 10
        while True:
            alive = [p for p in pids if os.path.exists("/proc/%d" % p)
                     and harness.read_text("/proc/%d/stat" % p).split(") ")[-1][:1] != "Z"]
            in_cgroup = [p for p in harness.proc_pids()
                         if sid in harness.read_text("/proc/%d/cgroup" % p)]
            cgroups = [d for d in harness.cgroup_dirs() if sid in d]
            marked = [p for p in harness.proc_pids()
                      if "space-sec-marker" in " ".join(harness.proc_cmdline(p))]
            jail_left = bool(jail) and os.path.lexists(jail)
            if (not (alive or in_cgroup or cgroups or marked or jail_left)
                    or time.monotonic() > deadline):
                break
            time.sleep(0.1)
        if alive or in_cgroup:
            problems.append("processes outlived the sandbox: %s" % sorted(set(alive + in_cgroup)))
        if marked:
            problems.append("marked processes survived teardown: %s" % marked)
        if cgroups:
            problems.append("cgroups left: %s" % cgroups)
        if jail_left:
            problems.append("the VM's jail is left: %s" % jail)
        return problems

    def verify(self, a):
        problems = []
        if not self.daemon.alive():
            return ["spaced died"]
        try:
            if self.api("GET", "/v1/health", timeout=10).status != 200:
                problems.append("spaced is unhealthy")
        except OSError as e:
            problems.append("spaced does not answer: %s" % e)
        problems += self.watch.check(image=True, binaries="binaries" in a.verify)
        problems += self.victim.check()
        return problems

    def run(self, a):
        t0 = time.monotonic()
        sid = self.shared
        fresh = a.where in ("fresh", "host-fresh")
        work = tempfile.mkdtemp(prefix="work-", dir=self.tmp)
        os.chmod(work, 0o755)
        sampler = None
        try:
            if fresh:
                sid = self.create(a.opts)
            if "daemon_rss" in a.verify:
                sampler = harness.RssSampler(self.daemon.pid, 0.05)
                sampler.start()
            if a.where.startswith("host"):
                rc, out, err = self.run_on_host(a, sid, work)
            else:
                rc, out, err = self.run_inside(a, sid, work)
        except Exception as e:  # noqa: BLE001 - an attempt's set-up failing is an error row
            rc, out, err = None, "", "runner: %s" % e
        growth = sampler.stop() if sampler else 0
        problems = []
        if "pids_limit" in a.verify and sid != self.shared:
            problems += self.check_pids_limit(sid)
        if fresh and sid != self.shared:
            problems += self.destroy_and_check(sid)
        problems += self.verify(a)
        if IS_VM and not fresh and not self.shared_usable():
            # Guest root can always wreck its own guest; the suite goes on in a new shared VM.
            problems.append("the shared VM's agent no longer answers after this attempt")
            self.shared = self.create()
        if growth > 64 << 20:
            problems.append("spaced grew by %d MiB during the attempt" % (growth >> 20))
        harness.safe_rmtree(work)
        lines = [l for l in (out or "").splitlines() if l.strip()]
        last = lines[-1] if lines else ""
        if ARGS.verbose and err:
            sys.stderr.write("--- %s stderr:\n%s\n" % (a.id, err.rstrip()))
        if problems:
            status, detail = "ESCAPED", "host-side check: " + "; ".join(problems)
        elif last.startswith("ESCAPED:") or rc == 1:
            status, detail = "ESCAPED", last or (
                "exit 1 without a verdict; stderr: %s" % (err or "").strip()[-400:])
        elif last.startswith("BLOCKED:") and rc == 0:
            status, detail = "BLOCKED", last[len("BLOCKED:"):].strip()
        else:
            status = "ERROR"
            detail = "rc %s, last line %r; stderr: %s" % (rc, last[:200], (err or "").strip()[-400:])
        # rc None: the runner could not run the attempt (a fresh VM that did not start, say),
        # which is an error of its own, not an outcome in the guest.
        guest_local = dict(GUEST_LOCAL, **(FIRECRACKER_GUEST_LOCAL
                                           if ARGS.runtime == "firecracker" else {}))
        if (status in ("ESCAPED", "ERROR") and not problems and IS_VM and rc is not None
                and a.id in guest_local):
            status, detail = "GUEST-LOCAL", guest_local[a.id] + " | in the guest: " + detail
        if status == "ESCAPED" and a.id in KNOWN_ESCAPES:
            status, detail = "KNOWN-ESCAPE", KNOWN_ESCAPES[a.id] + " | " + detail
        return Result(a.cls, a.name, status, detail, time.monotonic() - t0)

    # -- the two checks that are not attempts -------------------------------------------------------

    def run_posture(self):
        t0 = time.monotonic()
        sid = self.create(["--pids", "64"])
        try:
            check = {"qemu": posture.check_running_vm,
                     "firecracker": posture.check_running_firecracker}.get(
                         ARGS.runtime, posture.check_running_sandbox)
            problems, summary = check(self.daemon.socket, self.cli, sid, self.daemon.pid)
        except Exception as e:  # noqa: BLE001
            problems, summary = ["posture check failed to run: %s" % e], ""
        problems += self.destroy_and_check(sid)
        status = "OK" if not problems else "FAILED"
        return Result("posture", "running_sandbox_profile", status,
                      summary if not problems else "; ".join(problems)[:1500],
                      time.monotonic() - t0)

    def run_gateway_posture(self):
        t0 = time.monotonic()
        try:
            problems, summary = posture.check_gateway_process(self.daemon.pid)
        except Exception as e:  # noqa: BLE001
            problems, summary = ["gateway posture check failed to run: %s" % e], ""
        return Result("posture", "gateway_process", "OK" if not problems else "FAILED",
                      summary if not problems else "; ".join(problems)[:1500],
                      time.monotonic() - t0)

    def run_probe(self):
        t0 = time.monotonic()
        out_rows = []
        dump = os.path.join(self.build, "security", "space_seccomp_dump")
        probe = os.path.join(self.build, "security", "syscall_probe")
        for p in (dump, probe):
            if not os.path.exists(p):
                return [Result("probe", "syscall_probe", "ERROR", "%s is not built" % p, 0)]
        table = os.path.join(self.tmp, "seccomp-policy.txt")
        with open(table, "w") as f:
            subprocess.run([dump], stdout=f, check=True)
        # Inside a sandbox: every row as the table says.
        rc, out, err = self.cli("cp", probe, "%s:/tmp/syscall_probe" % self.shared)
        rc2, _, err2 = self.cli("cp", table, "%s:/tmp/seccomp-policy.txt" % self.shared)
        if rc or rc2:
            return [Result("probe", "syscall_probe", "ERROR", "cp failed: %s %s" % (err, err2),
                           time.monotonic() - t0)]
        rc, out, err = self.cli("exec", self.shared, "--", "/tmp/syscall_probe",
                                "/tmp/seccomp-policy.txt", timeout=120)
        out_rows.append(self._probe_result("in_sandbox_matches_policy", rc, out, err, t0))
        # On the host, outside any sandbox: the oracle alone must never produce a policy errno.
        t1 = time.monotonic()
        p = subprocess.run([probe, "--host-control", table], capture_output=True, text=True,
                           timeout=120)
        out_rows.append(self._probe_result("host_control_all_allowed", p.returncode, p.stdout,
                                           p.stderr, t1))
        return out_rows

    @staticmethod
    def _probe_result(name, rc, out, err, t0):
        lines = out.splitlines()
        summary = next((l for l in reversed(lines) if l.startswith("PROBE:")), "")
        fails = [l for l in lines if l.startswith("FAIL")]
        ok = rc == 0 and summary and not fails
        detail = summary if ok else "rc %s; %s %s" % (rc, " | ".join(fails[:8]),
                                                      err.strip()[-300:])
        return Result("probe", name, "OK" if ok else "FAILED", detail, time.monotonic() - t0)


def print_table(results):
    order = CLASSES + ["posture", "probe"]
    print()
    print("%-9s %-20s %8s %8s %8s %8s %8s %8s" % ("class", "", "total", "blocked", "escaped",
                                                  "errors", "guest", "not-run"))
    for cls in order:
        rows = [r for r in results if r.cls == cls]
        if not rows:
            continue
        guest = sum(r.status == "GUEST-LOCAL" for r in rows)
        not_run = sum(r.status == "NOT-RUN" for r in rows)
        blocked = sum(r.passed for r in rows) - guest - not_run
        esc = sum(r.status in ("ESCAPED", "KNOWN-ESCAPE", "FAILED") for r in rows)
        errors = sum(r.status == "ERROR" for r in rows)
        print("%-9s %-20s %8d %8d %8d %8d %8d %8d" % (cls, CLASS_TITLES.get(cls, ""), len(rows),
                                                      blocked, esc, errors, guest, not_run))
    attempts = [r for r in results if r.cls in CLASSES]
    print("%-9s %-20s %8d" % ("attempts", "(escape attempts)", len(attempts)))


def main():
    if os.geteuid() != 0:
        print("run_suite.py: must run as root (it starts spaced)")
        print("0 passed, 1 failed")
        return 1
    attacks = discover(ARGS.pattern)
    want_posture = matches("posture/running_sandbox_profile", ARGS.pattern)
    want_gateway_posture = matches("posture/gateway_process", ARGS.pattern)
    want_probe = matches("probe/syscall_probe", ARGS.pattern) and ARGS.runtime == "linux"
    if ARGS.list:
        for a in attacks:
            print("%-45s sandbox=%s" % (a.id, a.where))
        return 0
    if ARGS.readme:
        print(readme_tables(attacks))
        return 0
    if ARGS.runtime == "qemu":
        missing = [what for what, ok in (
            ("qemu-system-x86_64", shutil.which("qemu-system-x86_64")),
            ("the guest kernel (make build)",
             os.path.exists(os.path.join(harness.BUILD_DIR, "guest", "vmlinux"))),
            ("busybox-static", os.path.exists("/bin/busybox"))) if not ok]
        if missing:
            print("run_suite.py --runtime qemu: skipped, missing %s (scripts/install-deps.sh)"
                  % ", ".join(missing))
            return 77
    if ARGS.runtime == "firecracker":
        missing = firecracker_missing()
        if missing:
            print("run_suite.py --runtime firecracker: skipped, %s" % "; ".join(missing))
            return 77
    suite = Suite()
    results = []
    readme = harness.read_text(os.path.join(HERE, "README.md"))
    for a in attacks:
        if "`%s%s`" % (a.id, a.ext) not in readme:
            results.append(Result(a.cls, a.name, "ERROR",
                                  "not listed in tests/security/README.md (run_suite.py "
                                  "--readme prints the tables)", 0))
    t0 = time.monotonic()
    try:
        suite.start()
        for a in attacks:
            if IS_VM and a.id in VM_NOT_RUN:
                r = Result(a.cls, a.name, "NOT-RUN", VM_NOT_RUN[a.id], 0)
            else:
                r = suite.run(a)
            results.append(r)
            print("%-12s %-42s %5.1fs  %s" % (r.status, a.id, r.seconds, r.detail[:160]),
                  flush=True)
        if want_posture:
            r = suite.run_posture()
            results.append(r)
            print("%-12s %-42s %5.1fs  %s" % (r.status, "posture/" + r.name, r.seconds,
                                               r.detail[:300]), flush=True)
        if want_gateway_posture:
            r = suite.run_gateway_posture()
            results.append(r)
            print("%-12s %-42s %5.1fs  %s" % (r.status, "posture/" + r.name, r.seconds,
                                               r.detail[:300]), flush=True)
        if want_probe:
            for r in suite.run_probe():
                results.append(r)
                print("%-12s %-42s %5.1fs  %s" % (r.status, "probe/" + r.name, r.seconds,
                                                   r.detail[:300]), flush=True)
    except Exception as e:  # noqa: BLE001 - set-up failure: one error row, then clean up
        results.append(Result("setup", "suite", "ERROR", str(e), 0))
        print("ERROR suite set-up: %s" % e, flush=True)
        print(suite.daemon.log_tail() if suite.daemon.proc else "")
    finally:
        suite.stop()
    print_table(results)
    failed = [r for r in results if not r.passed]
    for r in failed:
        print("FAILED %s/%s [%s]: %s" % (r.cls, r.name, r.status, r.detail[:600]))
    print("suite took %.1fs" % (time.monotonic() - t0))
    print("%d passed, %d failed" % (len(results) - len(failed), len(failed)))
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
