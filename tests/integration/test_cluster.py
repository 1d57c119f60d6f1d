"""The cluster form end to end (docs/cluster.md): three spaced nodes on 127.0.0.2-4 with mutual
TLS, a shared key and a shared snapshot store (a POSIX directory), registered in a real etcd
(Debian's etcd-server), and two space-gateways in front of them.

One class, its tests in order (they build on each other, as a day of a cluster does):
placement of 60 sandboxes, exec/files/snapshots through either gateway, scopes enforced at the
gateway and again at the node, mutual TLS refusing strangers, a node killed with SIGKILL
mid-work (its sandboxes answer 410 with a snapshot that restores elsewhere), a drained node
(nothing left running, its sandboxes restorable), and a gateway restarted under load without a
request lost.
"""

import base64
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import (BUILD_DIR, LOG_DIR, SPACE, SPACED, Daemon, SpaceTestCase, decode_events,  # noqa: E402
                     free_port, host_agent_pids, http_request, proc_cmdline, read_text,
                     safe_rmtree, wait_for)

GATEWAY = os.path.join(BUILD_DIR, "space-gateway")
ETCD = shutil.which("etcd")
NODES = [("n1", "127.0.0.2"), ("n2", "127.0.0.3"), ("n3", "127.0.0.4")]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d):
    """A cluster CA; one certificate for the nodes (their addresses and space-nodes, server and
    client use); the gateway's client certificate; the gateway's public (server-only) one."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=space-test-ca",
            cwd=d)

    def issue(name, cn, ext):
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext)
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn, cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", name + ".pem", "-extfile",
                name + ".ext", cwd=d)
        os.chmod(os.path.join(d, name + ".key"), 0o600)

    ips = ",".join("IP:" + ip for _, ip in NODES)
    issue("node", "space-node",
          "subjectAltName=DNS:space-nodes,%s\nextendedKeyUsage=serverAuth,clientAuth\n" % ips)
    issue("client", "space-gateway", "extendedKeyUsage=clientAuth\n")
    issue("public", "space-gateway-public",
          "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")


class Etcd:
    def __init__(self, root):
        self.dir = os.path.join(root, "etcd")
        self.port, self.peer = free_port(), free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = open(os.path.join(root, "etcd.log"), "ab")
        self.proc = subprocess.Popen(
            [ETCD, "--name", "default", "--data-dir", self.dir,
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", "http://127.0.0.1:%d" % self.peer,
             "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % self.peer,
             "--initial-cluster", "default=http://127.0.0.1:%d" % self.peer],
            stdout=self.log, stderr=self.log, start_new_session=True)

        def up():
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                return c.getresponse().status == 200
            except OSError:
                return False
        wait_for(up, timeout=30, what="etcd to answer")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class Gateway:
    def __init__(self, root, name, config):
        self.root, self.name = root, name
        self.config_path = os.path.join(root, name + ".json")
        self.log_path = os.path.join(root, name + ".log")
        self.port = free_port()
        config = dict(config, listen="127.0.0.1:%d" % self.port)
        with open(self.config_path, "w") as f:
            json.dump(config, f, indent=2)
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([GATEWAY, "--config", self.config_path],
                                     stdout=log, stderr=log, start_new_session=True)
        log.close()

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("space-gateway exited: %s" % read_text(self.log_path)[-3000:])
            try:
                s = ssl.create_default_context(cafile=os.path.join(self.root, "pki", "ca.pem"))
                c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=2, context=s)
                c.request("GET", "/v1/health")
                r = c.getresponse()
                return r.status == 200 and json.loads(r.read())["nodes"] >= 1
            except OSError:
                return False
        wait_for(up, timeout=30, what="%s to see a node" % self.name)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(5)
        return self.proc.returncode if self.proc else None


class ClusterTest(SpaceTestCase):
    START_DAEMON = False

    @classmethod
    def prepare_class(cls):
        for b in (GATEWAY,):
            if not os.access(b, os.X_OK):
                raise unittest.SkipTest("%s is not built" % b)
        if ETCD is None:
            raise AssertionError("etcd is needed (Debian etcd-server; scripts/install-deps.sh)")
        pki = os.path.join(cls.tmp, "pki")
        os.makedirs(pki)
        make_pki(pki)
        cls.pki = pki
        key = os.path.join(cls.tmp, "snapshot.key")
        with open(key, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(key, 0o600)
        cls.store_dir = os.path.join(cls.tmp, "store")
        os.makedirs(cls.store_dir)
        cls.etcd = Etcd(cls.tmp)
        cls.nodes = {}
        for name, ip in NODES:
            port = free_port()
            cfg = {
                "node": {"name": name, "url": "https://%s:%d" % (ip, port),
                         "labels": {"zone": "a" if name != "n3" else "b"}},
                "api_listen": "%s:%d" % (ip, port),
                "api_tls": {"cert": os.path.join(pki, "node.pem"),
                            "key": os.path.join(pki, "node.key"),
                            "client_ca": os.path.join(pki, "ca.pem")},
                "cluster": {"snapshot_key_file": key,
                            "store": "file://" + cls.store_dir,
                            "etcd": {"endpoints": [cls.etcd.url], "prefix": "/space/nodes/",
                                     "ttl_s": 3}},
            }
            d = Daemon(os.path.join(cls.tmp, name), name="spaced-" + name, config=cfg)
            os.makedirs(d.root)
            d.start()
            d.url, d.ip, d.port = cfg["node"]["url"], ip, port
            cls.nodes[name] = d
        cls.daemon = cls.nodes["n1"]
        tokens = os.path.join(cls.tmp, "tokens.json")
        cls.token_all = cls.make_token(tokens, "all", "*")
        cls.token_test = cls.make_token(tokens, "test-only", "test")
        gw_config = {
            "tls": {"cert": os.path.join(pki, "public.pem"), "key": os.path.join(pki, "public.key")},
            "node_tls": {"cert": os.path.join(pki, "client.pem"),
                         "key": os.path.join(pki, "client.key"),
                         "ca": os.path.join(pki, "ca.pem")},
            "discovery": {"etcd": {"endpoints": [cls.etcd.url], "prefix": "/space/nodes/"}},
            "tokens_file": tokens,
            "store": "file://" + cls.store_dir,
            "node_lost_after_s": 5,
            "poll_interval_s": 0.3,
            "shutdown_grace_s": 20,
        }
        # The second gateway checks every node's certificate for one shared name (as on
        # Kubernetes, where pod addresses are not known when the certificate is made).
        gw2_config = json.loads(json.dumps(gw_config))
        gw2_config["node_tls"]["server_name"] = "space-nodes"
        cls.gateways = [Gateway(cls.tmp, "gw1", gw_config), Gateway(cls.tmp, "gw2", gw2_config)]
        for g in cls.gateways:
            g.start()
        # Every gateway sees all three nodes, polled.
        for g in cls.gateways:
            wait_for(lambda: len([n for n in cls.gw_json(g, "GET", "/v1/nodes")[1]
                                  if n["status"] == "active" and n["info"]]) == 3,
                     timeout=30, what="%s to see three active nodes" % g.name)

    @classmethod
    def make_token(cls, tokens_file, name, profile):
        out = subprocess.run([GATEWAY, "token", "create", "--name", name, "--profile", profile,
                              "--op", "read,create,exec,files,lifecycle", "--ttl", "1d"],
                             capture_output=True, text=True, check=True, timeout=30).stdout
        lines = [l.strip() for l in out.splitlines()]
        text = next(l for l in lines if l.startswith("spt_"))
        entry = json.loads(next(l for l in lines if l.startswith("{")))
        data = {"tokens": []}
        if os.path.exists(tokens_file):
            with open(tokens_file) as f:
                data = json.load(f)
        data["tokens"].append(entry)
        with open(tokens_file, "w") as f:
            json.dump(data, f)
        return text

    @classmethod
    def tearDownClass(cls):
        try:
            for g in getattr(cls, "gateways", []):
                g.stop()
            for d in getattr(cls, "nodes", {}).values():
                cls.cleanup_daemon(d)
            if getattr(cls, "etcd", None):
                cls.etcd.stop()
        finally:
            cls._save_log()
            for name, _ in NODES:  # the nodes' logs are in their own directories
                log = os.path.join(cls.tmp, name, "spaced-%s.log" % name)
                if os.path.exists(log):
                    os.makedirs(LOG_DIR, exist_ok=True)
                    shutil.copy(log, os.path.join(LOG_DIR, "ClusterTest.spaced-%s.log" % name))
            cls._kill_strays()
            safe_rmtree(cls.tmp)

    # -- clients ------------------------------------------------------------------------------

    @classmethod
    def gw_request(cls, g, method, path, body=None, token=None, timeout=60, headers=None):
        ctx = ssl.create_default_context(cafile=os.path.join(cls.pki, "ca.pem"))
        c = http.client.HTTPSConnection("127.0.0.1", g.port, timeout=timeout, context=ctx)
        h = {"Authorization": "Bearer " + (token or cls.token_all)}
        h.update(headers or {})
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, raw

    @classmethod
    def gw_json(cls, g, method, path, body=None, **kw):
        status, raw = cls.gw_request(g, method, path, body, **kw)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw

    def gw_exec(self, g, sid, cmd, **kw):
        status, raw = self.gw_request(g, "POST", "/v1/sandboxes/%s/exec" % sid,
                                      {"cmd": cmd}, **kw)
        self.assertEqual(status, 200, raw[:500])
        events = decode_events(raw)
        out = b"".join(base64.b64decode(e.get("data", "")) for e in events
                       if e.get("type") == "stdout").decode()
        code = [e for e in events if e.get("type") == "exit"]
        return out, code[0].get("exit_code") if code else None

    def cli(self, g, *args, token=None, timeout=60):
        env = dict(os.environ, SPACE_API="https://127.0.0.1:%d" % g.port,
                   SPACE_TOKEN=token or self.token_all, SPACE_CA=os.path.join(self.pki, "ca.pem"))
        env.pop("SPACE_SOCKET", None)
        return subprocess.run([SPACE, *args], env=env, capture_output=True, text=True,
                              timeout=timeout)

    @staticmethod
    def node_of(sid):
        return sid.split("-", 1)[1]

    # -- the tests, in order -------------------------------------------------------------------

    def test_1_placement_spreads_sixty_sandboxes(self):
        created, errors = [], []
        lock = threading.Lock()

        def worker(i):
            for j in range(10):
                g = self.gateways[(i + j) % 2]
                status, body = self.gw_json(g, "POST", "/v1/sandboxes",
                                            {"profile": "test", "cpus": 0.5, "memory": "256M"})
                with lock:
                    (created if status == 201 else errors).append(
                        body["id"] if status == 201 else (status, body))
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(created), 60)
        type(self).sixty = created
        self.known_ids.update(created)
        by_node = {}
        for sid in created:
            self.assertRegex(sid, r"^sb_[0-9a-f]{12}-n[123]$")
            by_node.setdefault(self.node_of(sid), []).append(sid)
        counts = {n: len(by_node.get(n, [])) for n, _ in NODES}
        sys.stderr.write("placement: %s\n" % counts)
        for n, c in counts.items():
            self.assertGreaterEqual(c, 12, "node %s got %d of 60: %s" % (n, c, counts))
        # The list through either gateway is the union of the nodes'.
        for g in self.gateways:
            status, items = self.gw_json(g, "GET", "/v1/sandboxes")
            self.assertEqual(status, 200)
            self.assertEqual({s["id"] for s in items["sandboxes"]} & set(created), set(created))
        # Each node reports them in GET /v1/node.
        status, nodes = self.gw_json(self.gateways[0], "GET", "/v1/nodes")
        for n in nodes:
            wait_for(lambda: next(x for x in self.gw_json(self.gateways[0], "GET", "/v1/nodes")[1]
                                  if x["name"] == n["name"])["info"]["sandboxes"]["running"]
                     >= counts[n["name"]], timeout=10, what="node info to count sandboxes")

    def test_2_exec_files_snapshots_through_either_gateway(self):
        picks = {}
        for sid in self.sixty:
            picks.setdefault(self.node_of(sid), sid)
        type(self).picks = picks
        for i, (node, sid) in enumerate(sorted(picks.items())):
            g, other = self.gateways[i % 2], self.gateways[(i + 1) % 2]
            out, code = self.gw_exec(g, sid, ["sh", "-c", "echo from-$(hostname) && exit 3"])
            self.assertEqual(code, 3)
            self.assertIn("from-", out)
            content = ("file on %s\n" % node).encode()
            status, raw = self.gw_request(g, "PUT", "/v1/sandboxes/%s/files?path=/root/note.txt" % sid,
                                          content, headers={"Content-Type": "application/octet-stream"})
            self.assertIn(status, (200, 201, 204), raw[:300])
            status, raw = self.gw_request(other, "GET", "/v1/sandboxes/%s/files?path=/root/note.txt" % sid)
            self.assertEqual((status, raw), (200, content))
            if node == "n1":
                # A file larger than any JSON body streams through both ways.
                big = os.urandom(3 << 20)
                status, raw = self.gw_request(g, "PUT", "/v1/sandboxes/%s/files?path=/root/big" % sid,
                                              big, headers={"Content-Type": "application/octet-stream"})
                self.assertIn(status, (200, 201, 204), raw[:300])
                status, raw = self.gw_request(other, "GET", "/v1/sandboxes/%s/files?path=/root/big" % sid)
                self.assertEqual(status, 200)
                self.assertTrue(raw == big, "3 MiB file changed on its way (%d bytes back)" % len(raw))
            status, snap = self.gw_json(other, "POST", "/v1/sandboxes/%s/snapshots" % sid, {})
            self.assertEqual(status, 201, snap)
            self.assertTrue(snap["id"].endswith("-" + node), snap["id"])
            status, snaps = self.gw_json(g, "GET", "/v1/sandboxes/%s/snapshots" % sid)
            self.assertIn(snap["id"], [s["id"] for s in snaps["snapshots"]])
        # The CLI streams an exec through a gateway (its own node connection) and exits with
        # the command's code.
        sid = picks["n1"]
        p = self.cli(self.gateways[1], "exec", sid, "--", "sh", "-c", "cat /root/note.txt; exit 5")
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertEqual(p.stdout, "file on n1\n")
        # Stdin streamed up through the tunnel.
        p = subprocess.run([SPACE, "exec", "-i", sid, "--", "wc", "-c"], input="x" * 100000,
                           env=dict(os.environ, SPACE_API="https://127.0.0.1:%d" % self.gateways[0].port,
                                    SPACE_TOKEN=self.token_all,
                                    SPACE_CA=os.path.join(self.pki, "ca.pem")),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, "100000"), p.stderr)
        # A client that hangs up on a silent exec: the gateway notices and closes its node
        # connection, and the node kills the command, as it does for its own clients.
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.pem"))
        c = http.client.HTTPSConnection("127.0.0.1", self.gateways[0].port, timeout=30, context=ctx)
        c.request("POST", "/v1/sandboxes/%s/exec" % sid, body=json.dumps({"cmd": ["sleep", "321"]}),
                  headers={"Authorization": "Bearer " + self.token_all,
                           "Content-Type": "application/json"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)

        def sleeping():
            st, procs = self.gw_json(self.gateways[1], "GET", "/v1/sandboxes/%s/processes" % sid)
            return "321" in json.dumps(procs)
        wait_for(sleeping, timeout=10, what="the exec to run")
        c.sock.shutdown(2)
        c.close()
        wait_for(lambda: not sleeping(), timeout=15, what="the node to kill the abandoned exec")

    def test_2b_terminal_through_a_gateway(self):
        # The upgraded exec (space exec -it) goes through: 101, JSON lines both ways.
        sid = self.picks["n2"]
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.pem"))
        raw = socket.create_connection(("127.0.0.1", self.gateways[1].port), timeout=30)
        sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        body = json.dumps({"cmd": ["sh", "-c", "stty size; read l; echo got:$l; exit 5"],
                           "rows": 12, "cols": 70}).encode()
        sock.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer %s\r\nConnection: Upgrade\r\n"
                     b"Upgrade: space-terminal\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % (sid.encode(), self.token_all.encode(),
                                                        len(body)) + body)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            self.assertTrue(chunk, buf)
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 101"), head)
        self.assertIn(b"upgrade: space-terminal", head.lower())
        while b"12 70" not in b"".join(
                base64.b64decode(json.loads(l).get("data", "")) for l in rest.split(b"\n")[:-1]
                if l.strip()):
            chunk = sock.recv(65536)
            self.assertTrue(chunk, rest)
            rest += chunk
        sock.sendall(json.dumps({"type": "stdin",
                                 "data": base64.b64encode(b"hi\n").decode()}).encode() + b"\n")
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        sock.close()
        events = [json.loads(l) for l in rest.splitlines() if l.strip()]
        out = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stdout")
        self.assertIn(b"got:hi", out)
        self.assertEqual((events[-1]["type"], events[-1]["exit_code"]), ("exit", 5))

    def test_3_scopes_at_gateway_and_node(self):
        g = self.gateways[0]
        status, live = self.gw_json(g, "POST", "/v1/sandboxes", {"profile": "live"})
        self.assertEqual(status, 201, live)
        self.known_ids.add(live["id"])
        # A token for profile test: the live sandbox does not exist for it, through the gateway.
        status, body = self.gw_json(g, "GET", "/v1/sandboxes/%s" % live["id"], token=self.token_test)
        self.assertEqual(status, 404, body)
        status, body = self.gw_json(g, "POST", "/v1/sandboxes", {"profile": "live"},
                                    token=self.token_test)
        self.assertEqual(status, 403, body)
        status, items = self.gw_json(g, "GET", "/v1/sandboxes", token=self.token_test)
        self.assertNotIn(live["id"], [s["id"] for s in items["sandboxes"]])
        # Bodies: a create of 200 kB (more than a request head's buffer) is read whole and
        # placed; over 1 MiB is refused at the gateway.
        status, body = self.gw_json(g, "POST", "/v1/sandboxes",
                                    {"profile": "test", "env": {"BIG": "x" * 200000}})
        self.assertIn(status, (201, 400), body)
        if status == 201:
            self.known_ids.add(body["id"])
            self.gw_request(g, "DELETE", "/v1/sandboxes/%s?force=true" % body["id"])
        try:  # refused before the body is read: the client may see the close before the 413
            status, body = self.gw_json(g, "POST", "/v1/sandboxes",
                                        {"env": {"BIG": "x" * (2 << 20)}})
            self.assertEqual(status, 413, body)
        except (ConnectionError, ssl.SSLError):
            pass
        self.assertEqual(self.gw_json(g, "GET", "/v1/health")[0], 200)
        # A bad token: 401 at the gateway, before any node is asked.
        status, body = self.gw_json(g, "GET", "/v1/sandboxes", token="spt_" + "0" * 12 + "_" + "1" * 64)
        self.assertEqual(status, 401, body)
        # A revoked token (its entry removed) stops working within a few seconds.
        # (Checked last in test_7, which rewrites the file.)
        # The node enforces the forwarded scope itself: a gateway-signed request that claims
        # profile test cannot read the live sandbox on its node.
        node = self.nodes[self.node_of(live["id"])]
        status, body = self.node_request(node, "GET", "/v1/sandboxes/%s" % live["id"],
                                         principal={"id": "aaaaaaaaaaaa", "name": "x",
                                                    "profiles": ["test"], "ops": ["read"],
                                                    "expires_at": time.time() + 60})
        self.assertEqual(status, 404, body)
        status, body = self.node_request(node, "DELETE", "/v1/sandboxes/%s" % live["id"],
                                         principal={"id": "aaaaaaaaaaaa", "name": "x",
                                                    "profiles": ["*"], "ops": ["read"],
                                                    "expires_at": time.time() + 60})
        self.assertEqual(status, 403, body)
        # An expired forwarded principal is refused.
        status, body = self.node_request(node, "GET", "/v1/sandboxes",
                                         principal={"id": "aaaaaaaaaaaa", "name": "x",
                                                    "profiles": ["*"], "ops": ["read"],
                                                    "expires_at": time.time() - 1})
        self.assertEqual(status, 401, body)
        # Space-Principal on the Unix socket (not mutual TLS) is refused, not trusted.
        r = http_request(node.socket, "GET", "/v1/sandboxes",
                         headers={"Space-Principal": json.dumps({"id": "aaaaaaaaaaaa",
                                                                 "profiles": ["*"], "ops": ["read"],
                                                                 "expires_at": time.time() + 60})})
        self.assertEqual(r.status, 403)

    def node_request(self, node, method, path, principal=None, cert="client"):
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.pem"))
        if cert:
            ctx.load_cert_chain(os.path.join(self.pki, cert + ".pem"),
                                os.path.join(self.pki, cert + ".key"))
        c = http.client.HTTPSConnection(node.ip, node.port, timeout=30, context=ctx)
        h = {}
        if principal is not None:
            h["Space-Principal"] = json.dumps(principal)
        c.request(method, path, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw

    def test_4_mutual_tls_refuses_strangers(self):
        node = self.nodes["n1"]
        # The cluster's client certificate: the node answers (as the cluster).
        status, info = self.node_request(node, "GET", "/v1/node")
        self.assertEqual(status, 200)
        self.assertEqual(info["name"], "n1")
        self.assertEqual(info["labels"], {"zone": "a"})
        # No client certificate: the handshake fails, nothing is served.
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            self.node_request(node, "GET", "/v1/node", cert=None)
        # A certificate of the same CA but for servers only (the gateway's public one) is not a
        # client certificate.
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            self.node_request(node, "GET", "/v1/node", cert="public")
        # A client certificate from another CA.
        other = os.path.join(self.tmp, "other-ca")
        os.makedirs(other)
        make_pki(other)
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.pem"))
            ctx.load_cert_chain(os.path.join(other, "client.pem"), os.path.join(other, "client.key"))
            c = http.client.HTTPSConnection(node.ip, node.port, timeout=10, context=ctx)
            c.request("GET", "/v1/node")
            c.getresponse().read()

    def test_5_node_killed_mid_work(self):
        g = self.gateways[0]
        victims = [s for s in self.sixty if self.node_of(s) == "n2"][:3]
        for sid in victims:
            out, code = self.gw_exec(g, sid, ["sh", "-c", "echo %s > /root/mine.txt" % sid])
            self.assertEqual(code, 0)
            status, snap = self.gw_json(g, "POST", "/v1/sandboxes/%s/snapshots" % sid, {})
            self.assertEqual(status, 201, snap)
        # Pushed in the background: each sandbox's pointer names its newest snapshot.
        for sid in victims:
            wait_for(lambda: os.path.exists(os.path.join(self.store_dir, "sandboxes", sid + ".json")),
                     timeout=30, what="the push of %s's snapshot" % sid)
        # Mid-work: an exec streaming through the gateway when the node dies.
        ended = threading.Event()
        result = {}

        def long_exec():
            try:
                result["r"] = self.gw_request(g, "POST", "/v1/sandboxes/%s/exec" % victims[0],
                                              {"cmd": ["sleep", "60"]}, timeout=90)
            except Exception as e:  # noqa: BLE001 - any end is fine, a hang is not
                result["e"] = e
            ended.set()
        t = threading.Thread(target=long_exec)
        t.start()
        time.sleep(1.0)
        n2 = self.nodes["n2"]
        n2.stop(signal.SIGKILL)
        self.assertTrue(ended.wait(30), "the exec through the gateway did not end with its node")
        t.join()
        # Within the lease's TTL (3 s) plus the watch, its ids answer 410 with the snapshot.
        for sid in victims:
            def lost():
                s, body = self.gw_json(self.gateways[1], "GET", "/v1/sandboxes/%s" % sid)
                return body if s == 410 else None
            body = wait_for(lost, timeout=30, what="410 for %s" % sid)
            self.assertEqual(body["error"]["code"], "node_lost")
            self.assertEqual(body["error"]["node"], "n2")
            snap = body["error"]["snapshot"]
            self.assertTrue(snap.endswith("-n2"), body)
            self.assertIn("space restore", body["error"]["message"])
            # Restored on another node, with its files.
            status, sb = self.gw_json(self.gateways[1], "POST", "/v1/snapshots/%s/restore" % snap, {})
            self.assertEqual(status, 201, sb)
            self.known_ids.add(sb["id"])
            self.assertIn(self.node_of(sb["id"]), ("n1", "n3"))
            out, code = self.gw_exec(self.gateways[0], sb["id"], ["cat", "/root/mine.txt"])
            self.assertEqual((code, out), (0, sid + "\n"))
        # New work goes to the nodes alive.
        for _ in range(4):
            status, sb = self.gw_json(g, "POST", "/v1/sandboxes", {})
            self.assertEqual(status, 201, sb)
            self.known_ids.add(sb["id"])
            self.assertNotEqual(self.node_of(sb["id"]), "n2")
        # (n2's sandboxes still run on its host: tearDownClass restarts n2 to remove them.)

    def test_6_drained_node_leaves_nothing_running(self):
        n3 = self.nodes["n3"]
        ids = [s for s in self.sixty if self.node_of(s) == "n3"]
        self.assertGreater(len(ids), 0)
        out, code = self.gw_exec(self.gateways[1], ids[0], ["sh", "-c", "echo drained > /root/d.txt"])
        self.assertEqual(code, 0)
        p = subprocess.run([SPACED, "drain", "--socket", n3.socket], capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        report = json.loads(p.stdout)
        self.assertEqual(report["left_running"], 0, report)
        self.assertTrue(report["exiting"])
        drained = {s["id"]: s for s in report["sandboxes"]}
        for sid in ids:
            self.assertTrue(drained[sid]["destroyed"] and drained[sid]["pushed"], drained[sid])
        self.assertEqual(n3.proc.wait(60), 0, "spaced did not exit after the drain")
        # Nothing of n3's sandboxes runs on the host any more.
        live = []
        for pid in host_agent_pids():
            cg = read_text("/proc/%d/cgroup" % pid)
            live += [sid for sid in ids if sid in cg]
        self.assertEqual(live, [])
        # Through the gateway: 410 with the drain's snapshot, which restores on another node.
        def lost():
            s, body = self.gw_json(self.gateways[0], "GET", "/v1/sandboxes/%s" % ids[0])
            return body if s == 410 else None
        body = wait_for(lost, timeout=30, what="410 for a drained sandbox")
        self.assertEqual(body["error"]["snapshot"], drained[ids[0]]["snapshot"])
        status, sb = self.gw_json(self.gateways[0], "POST",
                                  "/v1/snapshots/%s/restore" % body["error"]["snapshot"], {})
        self.assertEqual(status, 201, sb)
        self.known_ids.add(sb["id"])
        self.assertEqual(self.node_of(sb["id"]), "n1")  # the only node left
        out, code = self.gw_exec(self.gateways[0], sb["id"], ["cat", "/root/d.txt"])
        self.assertEqual((code, out), (0, "drained\n"))
        # A create now lands on n1, the one node left; a create that needs zone b finds none.
        status, body = self.gw_json(self.gateways[0], "POST", "/v1/sandboxes",
                                    {"node_selector": {"zone": "b"}})
        self.assertEqual(status, 503, body)
        self.assertIn("no node can take", body["error"]["message"])

    def test_7_gateway_restart_loses_no_request(self):
        sid = next(s for s in self.sixty if self.node_of(s) == "n1")
        results, stop = [], threading.Event()

        def client(k):
            # A client as a Service gives it: connection refused on one replica, try the other.
            i = k
            while not stop.is_set():
                g = self.gateways[i % 2]
                i += 1
                try:
                    if i % 3 == 0:
                        status, raw = self.gw_request(g, "POST", "/v1/sandboxes/%s/exec" % sid,
                                                      {"cmd": ["echo", "ok"]})
                        ok = status == 200 and b'"exit"' in raw
                    else:
                        status, raw = self.gw_request(g, "GET", "/v1/sandboxes/%s" % sid)
                        ok = status == 200
                    results.append((ok, status, raw[:200]))
                except ConnectionRefusedError:
                    continue  # never reached a gateway: not a request lost, retried
                except Exception as e:  # noqa: BLE001 - any other end is a request lost
                    results.append((False, type(e).__name__, str(e)[:200]))
        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        time.sleep(2)
        g1 = self.gateways[0]
        self.assertEqual(g1.stop(signal.SIGTERM), 0)
        time.sleep(1)
        g1.start()
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join(60)
        bad = [r for r in results if not r[0]]
        self.assertGreater(len(results), 20)
        self.assertEqual(bad, [], "requests failed across the gateway restart")
        # Revoking a token: its entry removed from the file, refused within a few seconds.
        tokens = json.load(open(os.path.join(self.tmp, "tokens.json")))
        tid = self.token_test.split("_")[1]
        tokens["tokens"] = [t for t in tokens["tokens"] if t["id"] != tid]
        with open(os.path.join(self.tmp, "tokens.json"), "w") as f:
            json.dump(tokens, f)
        wait_for(lambda: self.gw_json(self.gateways[1], "GET", "/v1/sandboxes",
                                      token=self.token_test)[0] == 401,
                 timeout=10, what="the revoked token to be refused")


if __name__ == "__main__":
    unittest.main()
