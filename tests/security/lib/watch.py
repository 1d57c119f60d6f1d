"""What the escape suite watches on the host while attacks run, and the victim sandbox.

HostWatch holds the canaries every attack is checked against from outside (the runner never
trusts an attack's own verdict alone):
  * a canary file in the suite's temp dir (outside every sandbox) with a random value;
  * a canary process (a host `sleep`) that must stay alive;
  * listeners in the host's network namespace (TCP on 127.0.0.1 and ::1, UDP, an abstract and a
    path Unix socket) that must never see a connection or a datagram from a sandbox;
  * a SysV shared-memory segment in the host's IPC namespace;
  * host-wide kernel state an escape would change: sysctls, cgroup v1 release_agent files,
    /proc/modules, the hostname, files an attack tries to create on the host;
  * the image's files in the daemon's state directory (shared by every sandbox), and (on
    request) the hashes of spaced, space-agent and /usr/bin/sleep;
  * Firecracker's templates (<state>/firecracker/templates: the saved machine every VM of an
    image and limits is restored from, its memory file mapped privately by each): a template
    may appear, but one seen before must keep its files as they were (inode, owner, mode, size,
    mtime; a write through a file or a shared mapping moves the mtime). Not hashed: a template's
    memory is the VM's RAM, too large to hash after every attempt.
Victim is the "other sandbox": planted secrets, listeners and processes that attacks from a
different sandbox must neither see nor change.
"""

import ctypes
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))

from harness import http_request, proc_cmdline, read_text  # noqa: E402

SYSCTLS = [
    "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/kernel/panic_on_oops",
    "/proc/sys/fs/suid_dumpable", "/proc/sys/net/ipv4/ip_forward",
    "/proc/sys/user/max_user_namespaces", "/proc/sys/kernel/modprobe",
    "/proc/sys/kernel/domainname",
]
# Files attacks try to create on the host; each must not appear.
PWNED_PATHS = ["/usr/space-sec-pwned", "/usr/bin/space-sec-pwned", "/tmp/pwn", "/tmp/pwned",
               "/pwned", "/root/pwned", "/etc/space-sec-pwned"]
IPC_CREAT, IPC_RMID = 0o1000, 0


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_digest(root):
    """{relative path: (mode, uid, gid, size, sha256 or link target)} of a directory tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if os.path.islink(p):
                what = "-> " + os.readlink(p)
            elif os.path.isfile(p):
                what = sha256_file(p)
            else:
                what = ""
            out[rel] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, what)
    return out


class Listener:
    """Accepts (or receives) on a host socket in a thread and records every contact."""

    def __init__(self, name, family, kind, address):
        self.name = name
        self.hits = []
        self.sock = socket.socket(family, kind)
        if family != socket.AF_UNIX:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(address)
        if kind == socket.SOCK_STREAM:
            self.sock.listen(16)
        self.address = self.sock.getsockname()
        self.kind = kind
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                if self.kind == socket.SOCK_STREAM:
                    conn, peer = self.sock.accept()
                    self.hits.append("connection from %r" % (peer,))
                    conn.close()
                else:
                    data, peer = self.sock.recvfrom(4096)
                    self.hits.append("datagram %r from %r" % (data[:40], peer))
            except socket.timeout:
                continue
            except OSError:
                if self._stop:
                    return

    def close(self):
        self._stop = True
        self.thread.join(2)
        self.sock.close()


class HostWatch:
    def __init__(self, tmp, state_dir, build_dir):
        self.tmp = tmp
        self.state_dir = state_dir
        self.build_dir = build_dir
        self.canary = os.path.join(tmp, "host-canary")
        self.canary_value = "HOSTCANARY-" + secrets.token_hex(16)
        with open(self.canary, "w") as f:
            f.write(self.canary_value + "\n")
        os.chmod(self.canary, 0o644)
        self.canary_stat = os.stat(self.canary)
        self.proc = subprocess.Popen(["sleep", "100000"], stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        # Right after fork the child still shows python's command line: wait for the exec.
        for _ in range(200):
            self.proc_cmdline = proc_cmdline(self.proc.pid)
            if self.proc_cmdline[:2] == ["sleep", "100000"]:
                break
            threading.Event().wait(0.01)
        else:
            raise RuntimeError("the canary process did not start: %r" % self.proc_cmdline)
        self.abstract_name = "space-sec-host-" + secrets.token_hex(6)
        self.unix_path = os.path.join(tmp, "host.sock")
        self.listeners = [
            Listener("tcp 127.0.0.1", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0)),
            Listener("udp 127.0.0.1", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0)),
            Listener("abstract unix", socket.AF_UNIX, socket.SOCK_STREAM,
                     "\0" + self.abstract_name),
            Listener("unix " + self.unix_path, socket.AF_UNIX, socket.SOCK_STREAM,
                     self.unix_path),
        ]
        try:
            self.listeners.append(
                Listener("tcp [::1]", socket.AF_INET6, socket.SOCK_STREAM, ("::1", 0)))
        except OSError:
            pass
        os.chmod(self.unix_path, 0o777)
        # A SysV segment in the host's IPC namespace, removed in close().
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.shm_key = 0x5EC00000 | secrets.randbelow(0xFFFF)
        self.shm_id = self.libc.shmget(self.shm_key, 4096, IPC_CREAT | 0o666)
        self.pwned_before = {p for p in PWNED_PATHS if os.path.lexists(p)}
        self.baseline = self._volatile_state()
        self.image = self._image_digest()
        self.templates = self._template_stamps()
        self.binaries = None

    def env(self):
        """What attacks get to know about the host (to aim at it)."""
        tcp = {l.name: l.address for l in self.listeners}
        env = {
            "SPACE_HOST_CANARY": self.canary,
            "SPACE_HOST_CANARY_VALUE": self.canary_value,
            "SPACE_CANARY_PID": str(self.proc.pid),
            "SPACE_HOST_TCP_PORT": str(tcp["tcp 127.0.0.1"][1]),
            "SPACE_HOST_UDP_PORT": str(tcp["udp 127.0.0.1"][1]),
            "SPACE_HOST_ABSTRACT": self.abstract_name,
            "SPACE_HOST_UNIX": self.unix_path,
            "SPACE_HOST_SHM_KEY": str(self.shm_key),
            "SPACE_HOST_IPS": ",".join(host_addresses()),
        }
        if "tcp [::1]" in tcp:
            env["SPACE_HOST_TCP6_PORT"] = str(tcp["tcp [::1]"][1])
        return env

    def _volatile_state(self):
        s = {p: read_text(p, "<absent>") for p in SYSCTLS}
        s["hostname"] = socket.gethostname()
        s["/proc/modules"] = read_text("/proc/modules")
        root = "/sys/fs/cgroup"
        for ctrl in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            for f in ("release_agent", "notify_on_release"):
                p = os.path.join(root, ctrl, f)
                if os.path.exists(p):
                    s[p] = read_text(p)
        return s

    def _image_digest(self):
        images = os.path.join(self.state_dir, "images")
        return tree_digest(images) if os.path.isdir(images) else {}

    def _template_stamps(self):
        """{relative path: (inode, mode, uid, gid, size, mtime)} of the finished templates every
        VM starts from: Firecracker's (restored) and QEMU's (cloned: the RAM every clone maps,
        the device state, the disk each copies). A template being made is in a directory whose
        name starts with '.'. Not the ctime (linking a template into a jail changes it), nor
        the mtime of QEMU's machine.json (spaced sets it when it loads one: least recently used
        first out)."""
        out = {}
        for runtime in ("firecracker", "qemu"):
            root = os.path.join(self.state_dir, runtime, "templates")
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                for name in filenames:
                    p = os.path.join(dirpath, name)
                    try:
                        st = os.lstat(p)
                    except OSError:
                        continue
                    mtime = None if (runtime, name) == ("qemu", "machine.json") else st.st_mtime_ns
                    out[os.path.join(runtime, os.path.relpath(p, root))] = (
                        st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size, mtime)
        return out

    def snapshot_binaries(self):
        paths = [os.path.join(self.build_dir, "spaced"), os.path.join(self.build_dir, "space-agent"),
                 "/usr/bin/sleep", "/usr/bin/python3"]
        return {p: sha256_file(os.path.realpath(p)) for p in paths if os.path.exists(p)}

    def check(self, image=True, binaries=False):
        """Everything that differs from the baseline, as a list of problems."""
        problems = []
        try:
            with open(self.canary) as f:
                if f.read() != self.canary_value + "\n":
                    problems.append("host canary file changed")
            st = os.stat(self.canary)
            if (st.st_mtime_ns, st.st_mode, st.st_uid) != (self.canary_stat.st_mtime_ns,
                                                          self.canary_stat.st_mode,
                                                          self.canary_stat.st_uid):
                problems.append("host canary file metadata changed")
        except OSError as e:
            problems.append("host canary file: %s" % e)
        if self.proc.poll() is not None or proc_cmdline(self.proc.pid) != self.proc_cmdline:
            problems.append("host canary process %d died" % self.proc.pid)
        for l in self.listeners:
            if l.hits:
                problems.append("host listener %s was reached: %s" % (l.name, l.hits[:3]))
        now = self._volatile_state()
        for k, v in self.baseline.items():
            if now.get(k) != v:
                problems.append("host state %s changed: %r -> %r" % (k, v[:80], now.get(k, "")[:80]))
        for p in PWNED_PATHS:
            if os.path.lexists(p) and p not in self.pwned_before:
                problems.append("host file %s appeared" % p)
        if self.libc.shmget(self.shm_key, 0, 0) != self.shm_id:
            problems.append("host SysV segment %#x is gone" % self.shm_key)
        if image:
            after = self._image_digest()
            if after != self.image:
                changed = sorted(k for k in set(after) | set(self.image)
                                 if after.get(k) != self.image.get(k))
                problems.append("image files changed on the host: %s" % changed[:5])
            now = self._template_stamps()
            changed = sorted(k for k, v in self.templates.items() if now.get(k) != v)
            if changed:
                problems.append("VM template files changed or vanished: %s" % changed[:5])
            # New templates (other limits, made by this attempt's sandbox) join the baseline.
            self.templates.update({k: v for k, v in now.items() if k not in self.templates})
        if binaries:
            if self.binaries is None:
                problems.append("binaries were not snapshotted")
            elif self.snapshot_binaries() != self.binaries:
                problems.append("a host binary changed (spaced, space-agent, sleep or python3)")
        return problems

    def close(self):
        for l in self.listeners:
            l.close()
        try:
            os.unlink(self.unix_path)
        except OSError:
            pass
        if self.shm_id >= 0:
            self.libc.shmctl(self.shm_id, IPC_RMID, None)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def host_addresses():
    """The host's own non-loopback addresses (targets an attack tries to reach)."""
    out = []
    try:
        text = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True,
                              timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return out
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 4 and f[2] in ("inet", "inet6") and f[1] != "lo":
            addr = f[3].split("/")[0]
            if not addr.startswith("fe80"):
                out.append(addr)
    return out[:6]


class Victim:
    """The other sandbox: secrets in /tmp, /root and /dev/shm, a TCP and an abstract-socket
    listener that log every connection, SysV objects, and a long-running marker process."""

    SCRIPT = os.path.join(HERE, "victim.py")

    def __init__(self, cli, sid):
        self.cli = cli  # callable(*args, timeout=) -> (rc, out, err)
        self.sid = sid
        self.marker = "VICTIMSECRET-" + secrets.token_hex(16)
        self.port = 20000 + secrets.randbelow(20000)
        self.abstract = "space-sec-victim-" + secrets.token_hex(6)
        self.shm_key = 0x7C000000 | secrets.randbelow(0xFFFF)
        self.files = ["/tmp/victim-secret", "/root/victim-secret", "/dev/shm/victim-secret"]

    def setup(self, socket_path):
        self.socket_path = socket_path
        rc, out, err = self.cli("cp", self.SCRIPT, "%s:/tmp/victim.py" % self.sid)
        if rc != 0:
            raise RuntimeError("victim: cp failed: %s" % err)
        script = "; ".join("printf '%%s\\n' %s > %s && chmod 644 %s" % (self.marker, f, f)
                           for f in self.files)
        rc, out, err = self.cli("exec", self.sid, "--", "sh", "-c", script)
        if rc != 0:
            raise RuntimeError("victim: planting secrets failed: %s" % err)
        rc, out, err = self.cli("exec", self.sid, "--detach", "--", "python3", "/tmp/victim.py",
                                str(self.port), self.abstract, str(self.shm_key))
        if rc != 0:
            raise RuntimeError("victim: listener failed: %s" % err)
        rc, out, err = self.cli("exec", self.sid, "--detach", "--", "sleep", "100000")
        if rc != 0:
            raise RuntimeError("victim: sleeper failed: %s" % err)
        # Wait for the listener to be up (it writes its ready file).
        for _ in range(100):
            r = http_request(socket_path, "GET",
                             "/v1/sandboxes/%s/files?path=/tmp/victim-ready" % self.sid)
            if r.status == 200:
                break
            threading.Event().wait(0.05)
        else:
            raise RuntimeError("victim: listener never became ready")

    def env(self):
        return {"SPACE_VICTIM_MARKER_PREFIX": "VICTIMSECRET-",
                "SPACE_VICTIM_ID": self.sid,
                "SPACE_VICTIM_TCP_PORT": str(self.port),
                "SPACE_VICTIM_ABSTRACT": self.abstract,
                "SPACE_VICTIM_SHM_KEY": str(self.shm_key)}

    def check(self):
        problems = []
        for f in self.files:
            r = http_request(self.socket_path, "GET",
                             "/v1/sandboxes/%s/files?path=%s" % (self.sid, f))
            if r.status != 200 or r.body != (self.marker + "\n").encode():
                problems.append("victim file %s changed or gone (%d)" % (f, r.status))
        r = http_request(self.socket_path, "GET", "/v1/sandboxes/%s/files?path=/tmp/victim-conn.log"
                         % self.sid)
        if r.status == 200 and r.body.strip():
            problems.append("victim listener was reached: %r" % r.body[:200])
        r = http_request(self.socket_path, "GET", "/v1/sandboxes/%s/processes" % self.sid)
        procs = r.json if isinstance(r.json, list) else (r.json or {}).get("processes", [])
        argvs = [" ".join(p.get("argv", [])) for p in procs or []]
        for want in ("sleep 100000", "/tmp/victim.py"):
            if not any(want in a for a in argvs):
                problems.append("victim process %r is gone (%s)" % (want, argvs))
        return problems
