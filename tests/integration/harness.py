"""Harness for SPACE's integration suites: drives the real `spaced` and `space` binaries.

Each test class gets a private daemon (its own state directory and Unix socket under a fresh
temporary directory), helpers to run the CLI and to call the REST API over the socket, and a
way to snapshot the host's kernel objects (mounts, cgroups, processes, the daemon's fds and the
state directory) before a test and assert afterwards that nothing leaked.

Only the Python 3 standard library is used. The binaries come from $SPACE_BUILD_DIR (set by
ctest; defaults to <repo>/build). Logs of each daemon are kept in
$SPACE_BUILD_DIR/Testing/integration-logs/ for post-mortems.

Safety: the harness only ever kills processes it started (by pid) or processes that belong to
its own sandboxes (found through the daemon it started), and it never deletes a temporary
directory that still has something mounted below it.
"""

import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.path.abspath(os.environ.get("SPACE_BUILD_DIR") or os.path.join(REPO, "build"))
SPACED = os.path.join(BUILD_DIR, "spaced")
SPACE = os.path.join(BUILD_DIR, "space")
LOG_DIR = os.path.join(BUILD_DIR, "Testing", "integration-logs")

# Sandbox ids; a cluster node's carry its name after a '-' (docs/cluster.md).
ID_RE = re.compile(r"\bsb_[0-9A-Za-z]+(?:-[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)?")
MiB = 1 << 20


# --------------------------------------------------------------------------------------------
# HTTP over a Unix socket


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client connection to a Unix-domain socket."""

    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.unix_path)
        except OSError:
            s.close()
            raise
        self.sock = s


class Response:
    """A finished HTTP response: status, headers, raw body and the body parsed as JSON."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def __repr__(self):
        return "<%d %r>" % (self.status, self.body[:300])


def http_request(sock_path, method, path, body=None, headers=None, timeout=30):
    """One request on a fresh connection. `body` may be a dict (sent as JSON), str or bytes.

    A server may answer an oversized request early and close: a send that fails with EPIPE or
    ECONNRESET is tolerated and the answer is still read.
    """
    headers = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        body = body.encode()
    conn = UnixHTTPConnection(sock_path, timeout=timeout)
    try:
        try:
            conn.request(method, path, body=body, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, dict(r.getheaders()), data)
    finally:
        conn.close()


def decode_events(body):
    """Parses an exec NDJSON stream into a list of dicts; base64 "data" fields are decoded into
    "bytes"."""
    events = []
    for line in body.splitlines():
        if not line.strip():
            continue
        ev = json.loads(line)
        if "data" in ev and isinstance(ev["data"], str):
            ev["bytes"] = base64.b64decode(ev["data"])
        events.append(ev)
    return events


# --------------------------------------------------------------------------------------------
# Host inspection (read-only)


def read_text(path, default=""):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return default


def proc_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def proc_cmdline(pid):
    return read_text("/proc/%d/cmdline" % pid).split("\0")


def proc_ppid(pid):
    stat = read_text("/proc/%d/stat" % pid)
    if not stat:
        return None
    # comm may contain spaces and parentheses: parse after the last ')'.
    try:
        return int(stat[stat.rindex(")") + 2:].split()[1])
    except (ValueError, IndexError):
        return None


def proc_status_field(pid, field):
    for line in read_text("/proc/%d/status" % pid).splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


def vm_rss_bytes(pid):
    v = proc_status_field(pid, "VmRSS")  # "12345 kB"
    return int(v.split()[0]) * 1024 if v else 0


def proc_cpu_ticks(pid):
    stat = read_text("/proc/%d/stat" % pid)
    if not stat:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def descendants(root_pid):
    """All pids below root_pid (not including it), from a single /proc scan."""
    children = {}
    for pid in proc_pids():
        pp = proc_ppid(pid)
        if pp is not None:
            children.setdefault(pp, []).append(pid)
    out, stack = [], [root_pid]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def mounted_below(path):
    """Mount points at or below `path` in this mount namespace."""
    path = os.path.realpath(path)
    out = []
    for line in read_text("/proc/self/mountinfo").splitlines():
        mp = line.split()[4].replace("\\040", " ")
        if mp == path or mp.startswith(path + "/"):
            out.append(mp)
    return out


def cgroup_dirs():
    """Every cgroup directory of a SPACE sandbox: named like a sandbox or below one, or below a
    `space` parent (the daemon's default cgroup_name), in any v1 hierarchy, the v2 `unified`
    mount, or a pure v2 root. The shared `space` parents themselves are left out: they come and
    go with any daemon's sandboxes."""
    found = set()
    root = "/sys/fs/cgroup"
    for dirpath, dirnames, _ in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        depth = 0 if rel == "." else rel.count("/") + 1
        if depth >= 8:
            dirnames[:] = []
            continue
        parts = rel.split("/")
        if any(ID_RE.match(p) or (p == "space" and i < len(parts) - 1)
               for i, p in enumerate(parts)):
            found.add(dirpath)
    return found


def host_agent_pids():
    return [pid for pid in proc_pids()
            if os.path.basename(proc_cmdline(pid)[0]).startswith("space-agent")]


# --------------------------------------------------------------------------------------------
# The daemon


class Daemon:
    """A private spaced: started with --state-dir/--socket under `root`."""

    def __init__(self, root, name="spaced", config=None, default_pool=False):
        self.root = root
        self.state_dir = os.path.join(root, "state")
        self.socket = os.path.join(root, "space.sock")
        self.log_path = os.path.join(root, name + ".log")
        self.config = config  # dict written to <root>/<name>.json and passed as --config
        # spaced keeps a warm pool of the default template where the config names no pools
        # (docs/pools.md). Most suites count the host's sandboxes, cgroups and processes before
        # and after, which a refilling pool would disturb: they run without it ("pools": [])
        # unless they ask for it; test_pools.py and the security suite run with it.
        self.default_pool = default_pool
        self.config_path = os.path.join(root, name + ".json")
        self.proc = None
        self.extra_env = {}  # added to spaced's environment at each start (SPACE_FAILPOINTS)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self, timeout=30, wait=True):
        """Starts spaced; with `wait`, returns once it answers /v1/health."""
        os.makedirs(self.state_dir, exist_ok=True)
        log = open(self.log_path, "ab")
        log.write(b"\n===== spaced start %s =====\n" % time.ctime().encode())
        log.flush()
        args = [SPACED, "--state-dir", self.state_dir, "--socket", self.socket]
        config = self.config
        if not self.default_pool and "pools" not in (config or {}):
            config = dict(config or {}, pools=[])
        if config is not None:
            with open(self.config_path, "w") as f:
                json.dump(config, f, indent=2)
            args += ["--config", self.config_path]
        self.proc = subprocess.Popen(
            args, env=dict(os.environ, **self.extra_env),
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        if wait:
            self.wait_healthy(timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self, timeout=30):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("spaced exited with %s during start-up; log:\n%s" %
                                   (self.proc.returncode, self.log_tail()))
            try:
                r = http_request(self.socket, "GET", "/v1/health", timeout=5)
                if r.status == 200:
                    return r.json
                last = r
            except OSError as e:
                last = e
            time.sleep(0.05)
        raise RuntimeError("spaced not healthy after %ss (last: %r); log:\n%s" %
                           (timeout, last, self.log_tail()))

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Sends `sig` and waits; escalates to SIGKILL after `timeout`. Returns the exit code."""
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def rss(self):
        return vm_rss_bytes(self.pid)

    def fd_count(self):
        try:
            return len(os.listdir("/proc/%d/fd" % self.pid))
        except OSError:
            return -1

    def namespace_fds(self):
        """The daemon's fds that hold a namespace (a network namespace it kept, say)."""
        out = []
        try:
            for fd in os.listdir("/proc/%d/fd" % self.pid):
                try:
                    target = os.readlink("/proc/%d/fd/%s" % (self.pid, fd))
                except OSError:
                    continue
                if re.match(r"^(net|mnt|pid|user|uts|ipc|cgroup|time):\[", target):
                    out.append(target)
        except OSError:
            pass
        return sorted(out)

    def log_text(self):
        return read_text(self.log_path)

    def log_tail(self, n=40):
        return "\n".join(self.log_text().splitlines()[-n:])


# --------------------------------------------------------------------------------------------
# Test case base


def free_port():
    """A TCP port on 127.0.0.1 nothing listens on now (for a daemon's api_listen)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def npm_ci(where):
    """`npm ci` in `where` when its node_modules is missing or older than package-lock.json
    (the SDK and MCP suites' npm packages, pinned by their lock files)."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise AssertionError("node and npm are needed (scripts/install-deps.sh installs them)")
    lock = os.path.join(where, "package-lock.json")
    stamp = os.path.join(where, "node_modules", ".package-lock.json")
    if not os.path.exists(stamp) or os.path.getmtime(stamp) < os.path.getmtime(lock):
        p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                           cwd=where, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise AssertionError("npm ci in %s failed:\n%s" % (where, p.stderr[-3000:]))


def safe_rmtree(path):
    """Removes a temporary tree unless something is still mounted below it (removing through a
    leaked bind mount could delete host files)."""
    if not os.path.exists(path):
        return
    mounts = mounted_below(path)
    if mounts:
        sys.stderr.write("harness: NOT removing %s, still mounted below it: %s\n" % (path, mounts))
        return
    shutil.rmtree(path, ignore_errors=True)


def wait_for(cond, timeout=10, interval=0.1, what="condition"):
    """Polls cond() until it returns something truthy; returns it, or raises AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(interval)


class SpaceTestCase(unittest.TestCase):
    """Base class: one private daemon per test class (self.daemon), CLI and API helpers, and
    leak checks. Subclasses that manage daemons themselves set START_DAEMON = False."""

    START_DAEMON = True
    DEFAULT_POOL = False  # True: the daemon keeps the default warm pool, as a user's does
    API_LISTEN = False    # True: the daemon also listens on 127.0.0.1:cls.port (api_listen)
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        for b in (SPACED, SPACE):
            if not os.access(b, os.X_OK):
                raise unittest.SkipTest("%s is not built" % b)
        cls.tmp = tempfile.mkdtemp(prefix="space-it-%s-" % cls.__name__.lower())
        os.chmod(cls.tmp, 0o755)
        cls.known_ids = set()
        cls.daemon = Daemon(cls.tmp, config=cls.daemon_config(), default_pool=cls.DEFAULT_POOL)
        if cls.START_DAEMON:
            try:
                cls.daemon.start()
            except Exception:
                cls._save_log()
                safe_rmtree(cls.tmp)
                raise
        try:
            cls.prepare_class()
        except BaseException:
            cls.tearDownClass()  # unittest does not call it when setUpClass fails
            raise

    @classmethod
    def prepare_class(cls):
        """What the class needs once its daemon runs (an image, a second daemon, a sandbox);
        when it fails the class is torn down before the error goes on."""

    @classmethod
    def daemon_config(cls):
        """The JSON config (a dict) of the class's daemon; None = none. Runs in setUpClass with
        cls.tmp already made. With API_LISTEN, the TCP listener on a free port (cls.port)."""
        if cls.API_LISTEN:
            cls.port = free_port()
            return {"api_listen": "127.0.0.1:%d" % cls.port}
        return None

    @classmethod
    def tearDownClass(cls):
        try:
            cls.cleanup_daemon(cls.daemon)
        finally:
            cls._save_log()
            cls._kill_strays()
            cls.release_class()
            safe_rmtree(cls.tmp)

    @classmethod
    def release_class(cls):
        """Undoes what prepare_class set up besides the daemon (a mount under cls.tmp), once the
        daemon and its sandboxes are gone."""

    # -- cleanup ------------------------------------------------------------------------------

    @classmethod
    def cleanup_daemon(cls, daemon):
        """Destroys every sandbox the daemon still has, then stops it. What a failing daemon
        leaves behind is reported, and its sandboxes' processes are killed."""
        if not daemon.alive() and daemon.proc is not None:
            try:
                daemon.start()  # a test stopped it: start it again to clean up
            except Exception as e:  # noqa: BLE001 - best effort
                sys.stderr.write("harness: could not restart spaced for cleanup: %s\n" % e)
        if daemon.alive():
            try:
                r = http_request(daemon.socket, "GET", "/v1/sandboxes", timeout=10)
                items = r.json if isinstance(r.json, list) else (r.json or {}).get("sandboxes", [])
                for sb in items or []:
                    sid = sb.get("id") if isinstance(sb, dict) else None
                    if sid:
                        cls.known_ids.add(sid)
                        http_request(daemon.socket, "DELETE", "/v1/sandboxes/%s?force=true" % sid,
                                     timeout=30)
            except OSError:
                pass
            daemon.stop(signal.SIGTERM)

    @classmethod
    def _kill_strays(cls):
        """Last resort after the daemons are gone: kill processes that are provably ours — those
        whose command line names our temp dir (a daemon the CLI may have started on our socket)
        and the agents of our own sandboxes with their process trees."""
        ours = []
        for pid in proc_pids():
            cmd = "\0".join(proc_cmdline(pid))
            if cls.tmp in cmd and pid != os.getpid():
                ours.append(pid)
        for pid in host_agent_pids():
            ids = set(ID_RE.findall(read_text("/proc/%d/cgroup" % pid)))
            if ids & cls.known_ids:
                ours.append(pid)
                ours.extend(descendants(pid))
        for pid in ours:
            sys.stderr.write("harness: killing leftover process %d %r\n" %
                             (pid, proc_cmdline(pid)[:4]))
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    @classmethod
    def _save_log(cls):
        try:
            os.makedirs(LOG_DIR, exist_ok=True)
            for name in os.listdir(cls.tmp):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(cls.tmp, name),
                                os.path.join(LOG_DIR, "%s.%s" % (cls.__name__, name)))
        except OSError:
            pass

    # -- CLI ----------------------------------------------------------------------------------

    def env(self, daemon=None):
        e = dict(os.environ)
        e["SPACE_SOCKET"] = (daemon or self.daemon).socket
        return e

    def _learn_ids(self, *texts):
        for t in texts:
            if isinstance(t, bytes):
                t = t.decode("utf-8", "replace")
            if t:
                type(self).known_ids.update(ID_RE.findall(t))

    def space(self, *args, input=None, timeout=60, binary=False, env=None, daemon=None):
        """Runs `space ARGS...` against the class's daemon. Returns (rc, stdout, stderr); text
        unless binary=True."""
        if isinstance(input, str):
            input = input.encode()
        full_env = self.env(daemon)
        if env:
            full_env.update(env)
        try:
            p = subprocess.run([SPACE] + [str(a) for a in args], input=input,
                               stdin=None if input is not None else subprocess.DEVNULL,
                               capture_output=True, timeout=timeout, env=full_env)
        except subprocess.TimeoutExpired as e:
            raise AssertionError("space %s: no answer after %ss (stdout %r, stderr %r)" %
                                 (" ".join(map(str, args)), timeout, (e.stdout or b"")[-500:],
                                  (e.stderr or b"")[-500:]))
        self._learn_ids(p.stdout[:4096], p.stderr[:4096])
        if binary:
            return p.returncode, p.stdout, p.stderr
        return (p.returncode, p.stdout.decode("utf-8", "replace"),
                p.stderr.decode("utf-8", "replace"))

    def space_ok(self, *args, **kw):
        """Like space() but asserts exit code 0; returns stdout."""
        rc, out, err = self.space(*args, **kw)
        self.assertEqual(rc, 0, "space %s failed (rc %d)\nstdout: %s\nstderr: %s" %
                         (" ".join(map(str, args)), rc, out[-2000:], err[-2000:]))
        return out

    def create(self, *opts):
        """`space create OPTS` -> sandbox id; destroyed at the end of the test unless it is gone
        by then."""
        out = self.space_ok("create", *opts).strip()
        sid = out.splitlines()[-1].strip() if out else ""
        self.assertRegex(sid, r"^sb_[0-9A-Za-z]+$", "space create printed %r" % out)
        self.known_ids.add(sid)
        self.addCleanup(self._destroy_quietly, sid)
        return sid

    @classmethod
    def create_for_class(cls, *opts):
        """A sandbox shared by the tests of a class (destroyed with the class's daemon)."""
        p = subprocess.run([SPACE, "create"] + list(opts), capture_output=True, timeout=60,
                           stdin=subprocess.DEVNULL,
                           env=dict(os.environ, SPACE_SOCKET=cls.daemon.socket))
        sid = p.stdout.decode().strip()
        if p.returncode != 0 or not ID_RE.fullmatch(sid):
            cls.tearDownClass()
            raise AssertionError("space create failed (rc %d): %r %r" %
                                 (p.returncode, p.stdout, p.stderr))
        cls.known_ids.add(sid)
        return sid

    def _destroy_quietly(self, sid):
        if self.daemon.alive():
            self.space("rm", "--force", sid, timeout=60)

    def exec_ok(self, sid, *cmd, **kw):
        return self.space_ok("exec", sid, "--", *cmd, **kw)

    def api_list(self, path, key):
        """GET a collection: the API wraps arrays in an object ({"sandboxes": [...]})."""
        r = self.api("GET", path)
        self.assertEqual(r.status, 200, r)
        return r.json[key] if isinstance(r.json, dict) else r.json

    def inspect(self, sid):
        rc, out, err = self.space("inspect", sid, "--json")
        self.assertEqual(rc, 0, "inspect %s: %s" % (sid, err))
        return json.loads(out)

    def list_ids(self):
        out = self.space_ok("ls", "--json")
        data = json.loads(out)
        if isinstance(data, dict):
            data = data.get("sandboxes", [])
        return [sb["id"] for sb in data]

    # -- API ----------------------------------------------------------------------------------

    def api(self, method, path, body=None, headers=None, timeout=60, daemon=None):
        r = http_request((daemon or self.daemon).socket, method, path, body, headers, timeout)
        self._learn_ids(r.body[:4096])
        return r

    def api_exec(self, sid, cmd, http_timeout=120, **fields):
        """POST /v1/sandboxes/{id}/exec {"cmd": cmd, **fields}; returns (response, events)."""
        body = {"cmd": list(cmd)}
        body.update(fields)
        r = self.api("POST", "/v1/sandboxes/%s/exec" % sid, body, timeout=http_timeout)
        events = decode_events(r.body) if r.status == 200 else []
        return r, events

    def assert_api_error(self, r, lo=400, hi=499, code=None):
        self.assertTrue(lo <= r.status <= hi, "expected HTTP %d..%d, got %r" % (lo, hi, r))
        self.assertIsInstance(r.json, dict, "error body is not JSON: %r" % r.body[:300])
        err = r.json.get("error")
        self.assertIsInstance(err, dict, "no error object: %r" % r.json)
        self.assertIsInstance(err.get("code"), str)
        self.assertIsInstance(err.get("message"), str)
        self.assertTrue(err["message"], "empty error message")
        if code:
            self.assertEqual(err["code"], code, r.json)
        return err

    # -- sandbox processes as the host sees them ------------------------------------------------

    def agent_pid(self, sid):
        """Host pid of the sandbox's agent: from inspect if the daemon reports it, else the
        space-agent whose cgroup names the sandbox."""
        info = self.inspect(sid)
        for key in ("host_pid", "agent_pid", "pid"):
            v = info.get(key) or (info.get("runtime_info") or {}).get(key)
            if isinstance(v, int) and v > 0:
                return v
        for pid in host_agent_pids():
            if sid in read_text("/proc/%d/cgroup" % pid):
                return pid
        raise AssertionError("cannot find the agent of %s on the host (inspect: %r)" %
                             (sid, info))

    def sandbox_host_pids(self, sid):
        agent = self.agent_pid(sid)
        return [agent] + descendants(agent)

    # -- leak checks --------------------------------------------------------------------------

    def snapshot_host(self, daemon=None):
        """What SPACE could leak on the host: mounts, cgroup dirs, sandbox processes, the
        daemon's fds and the state dir's sandbox entries."""
        daemon = daemon or self.daemon
        snap = {}
        mounts = set()
        for line in read_text("/proc/self/mountinfo").splitlines():
            f = line.split()
            mp, src = f[4], f[-2]
            fstype = f[f.index("-") + 1] if "-" in f else ""
            text = " ".join((mp, fstype, src))
            if (self.tmp in text or "space" in text or ID_RE.search(text)):
                mounts.add(text)
        snap["mounts"] = mounts
        snap["cgroups"] = cgroup_dirs()
        procs = set()
        for pid in proc_pids():
            cmd = proc_cmdline(pid)
            cg = read_text("/proc/%d/cgroup" % pid)
            in_space_cgroup = any("/space" in l.split(":", 2)[-1] for l in cg.splitlines()
                                  if ":" in l)
            if os.path.basename(cmd[0]).startswith("space-agent") or in_space_cgroup:
                ids = sorted(set(ID_RE.findall(cg)))
                procs.add("%d %s [%s]" % (pid, " ".join(cmd)[:80], ",".join(ids)))
        snap["processes"] = procs
        entries = set()
        if os.path.isdir(daemon.state_dir):
            for dirpath, dirnames, filenames in os.walk(daemon.state_dir):
                rel = os.path.relpath(dirpath, daemon.state_dir)
                depth = 0 if rel == "." else rel.count("/") + 1
                for n in dirnames + filenames:
                    if ID_RE.match(n):
                        entries.add(os.path.join(rel, n))
                if depth >= 2:
                    dirnames[:] = []
        snap["state"] = entries
        snap["daemon_fds"] = daemon.fd_count() if daemon.alive() else None
        snap["daemon_namespaces"] = daemon.namespace_fds() if daemon.alive() else None
        self._learn_ids(" ".join(entries))
        return snap

    def _foreign(self, item):
        """True if `item` names only sandbox ids that are not ours (another daemon's sandbox,
        e.g. a suite running in parallel)."""
        ids = set(ID_RE.findall(item))
        return bool(ids) and not (ids & self.known_ids)

    def leaks(self, before, daemon=None):
        self._learn_ids((daemon or self.daemon).log_text())
        after = self.snapshot_host(daemon)
        out = {}
        for key in ("mounts", "cgroups", "processes", "state"):
            new = sorted(x for x in after[key] - before[key] if not self._foreign(x))
            if new:
                out[key] = new
        b, a = before.get("daemon_fds"), after.get("daemon_fds")
        if b is not None and a is not None and a > b + 2:
            out["daemon_fds"] = "%d -> %d" % (b, a)
        b, a = before.get("daemon_namespaces"), after.get("daemon_namespaces")
        if b is not None and a is not None and len(a) > len(b):
            out["daemon_namespaces"] = sorted(set(a) - set(b))
        return out

    def assert_no_leaks(self, before, timeout=15, daemon=None):
        """Waits up to `timeout` for the host to return to `before`; fails listing what is
        left."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.leaks(before, daemon)
            if not found:
                return
            if time.monotonic() >= deadline:
                self.fail("leaked host objects:\n%s" % json.dumps(found, indent=1)[:6000])
            time.sleep(0.25)


class RssSampler(threading.Thread):
    """Samples a process's VmRSS every `interval` seconds until stopped; keeps the maximum."""

    def __init__(self, pid, interval=0.1):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.start_rss = vm_rss_bytes(pid)
        self.max_rss = self.start_rss
        self._stop_ev = threading.Event()

    def run(self):
        while not self._stop_ev.wait(self.interval):
            self.max_rss = max(self.max_rss, vm_rss_bytes(self.pid))

    def stop(self):
        self._stop_ev.set()
        self.join()
        self.max_rss = max(self.max_rss, vm_rss_bytes(self.pid))
        return self.max_rss - self.start_rss


def main():
    unittest.main(verbosity=2)
