"""spaced's TLS listener (api_tls, docs/api-auth.md "Remote access"), end to end: the class's
daemon serves https on 127.0.0.1 with its own CA (api_tls "auto"); the CLI (create, streamed
exec with stdin, cp both ways, port tunnel, rm), the Python SDK and the TypeScript SDK use it
with SPACE_CA and a token. Then the attacks and mistakes: a client without the CA, the wrong
host name, plain HTTP to the TLS port, handshakes that never come (cut after the timeout while
others are served), no token; and the startup errors: missing or bad key files, a
non-loopback address without TLS. A second daemon serves the operator's own certificate
(made here with the openssl command) on 0.0.0.0.
"""

import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request
import warnings

from harness import (REPO, SPACE, Daemon, SpaceTestCase, free_port, main, safe_rmtree,
                     wait_for)

sys.path.insert(0, os.path.join(REPO, "sdk", "python"))

ALL_OPS = ["read", "create", "exec", "files", "lifecycle"]


def read(path):
    with open(path) as f:
        return f.read()


def openssl(*args, cwd):
    p = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args), p.stderr))
    return p.stdout


def make_operator_certs(d, san):
    """An operator's CA and a server certificate for `san` (e.g. "IP:127.0.0.1") in `d`:
    ca.pem, cert.pem (leaf then CA, a full chain), key.pem (mode 0600)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "30", "-subj", "/CN=operator CA",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext",
            "keyUsage=critical,keyCertSign", cwd=d)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=spaced", cwd=d)
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=%s\nextendedKeyUsage=serverAuth\n"
                "basicConstraints=critical,CA:FALSE\n" % san)
    openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "leaf.pem", "-days", "30", "-extfile", "ext.cnf", cwd=d)
    with open(os.path.join(d, "cert.pem"), "w") as f:
        f.write(read(os.path.join(d, "leaf.pem")) + read(os.path.join(d, "ca.pem")))
    os.chmod(os.path.join(d, "key.pem"), 0o600)


class TlsTest(SpaceTestCase):
    @classmethod
    def daemon_config(cls):
        cls.port = free_port()
        return {"api_listen": "127.0.0.1:%d" % cls.port,
                "api_tls": {"auto": True, "names": ["Space-Test.example"]}}

    @classmethod
    def prepare_class(cls):
        cls.ca = os.path.join(cls.daemon.state_dir, "tls", "ca.pem")
        cls.url = "https://127.0.0.1:%d" % cls.port

    def token(self, ops=ALL_OPS):
        r = self.api("POST", "/v1/tokens", {"name": "tls", "profiles": ["test"], "ops": ops,
                                            "ttl": "1h"})
        self.assertEqual(r.status, 201, r.body)
        return r.json["token"]

    def tls_env(self, token, ca=True, url=None):
        e = {"SPACE_API": url or self.url, "SPACE_TOKEN": token}
        if ca:
            e["SPACE_CA"] = self.ca
        return e

    def https(self, method, path, token=None, host="127.0.0.1", port=None, ca=None, body=None):
        ctx = ssl.create_default_context(cafile=ca or self.ca)
        c = http.client.HTTPSConnection(host, port or self.port, context=ctx, timeout=30)
        try:
            headers = {"Authorization": "Bearer " + token} if token else {}
            if body is not None:
                headers["Content-Type"] = "application/json"
                body = json.dumps(body)
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    # -- the certificates --------------------------------------------------------------------

    def test_auto_ca_and_server_certificate(self):
        d = os.path.dirname(self.ca)
        for name, mode in (("ca.pem", 0o644), ("ca.key", 0o600), ("server.pem", 0o644),
                           ("server.key", 0o600)):
            st = os.stat(os.path.join(d, name))
            self.assertEqual(st.st_mode & 0o777, mode, name)
        cert = ssl._ssl._test_decode_cert(os.path.join(d, "server.pem"))
        names = {v for _, v in cert["subjectAltName"]}
        for n in ("localhost", "127.0.0.1", "space-test.example"):
            self.assertIn(n, names)
        self.assertTrue({"::1", "0:0:0:0:0:0:0:1"} & names, names)
        out = subprocess.run(["openssl", "verify", "-CAfile", self.ca, os.path.join(d, "server.pem")],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        # TLS 1.3 preferred, ALPN http/1.1; TLS 1.1 refused.
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                self.assertEqual(s.version(), "TLSv1.3")
                self.assertEqual(s.selected_alpn_protocol(), "http/1.1")
        tls12 = ssl.create_default_context(cafile=self.ca)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
            with tls12.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                self.assertEqual(s.version(), "TLSv1.2")
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(self.ca)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                old.minimum_version = ssl.TLSVersion.TLSv1
                old.maximum_version = ssl.TLSVersion.TLSv1_1
        except ValueError:
            old = None
        if old is not None:
            with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
                with self.assertRaises(ssl.SSLError):
                    old.wrap_socket(raw, server_hostname="127.0.0.1").close()

    def test_restart_keeps_the_ca_and_names_change_reissues(self):
        d = os.path.dirname(self.ca)
        ca_before = read(self.ca)
        server_before = read(os.path.join(d, "server.pem"))
        self.daemon.stop()
        self.daemon.start()
        self.assertEqual(read(self.ca), ca_before)
        self.assertEqual(read(os.path.join(d, "server.pem")), server_before)
        cfg = self.daemon.config
        try:
            self.daemon.config = dict(cfg, api_tls={"auto": True, "names": ["other.example"]})
            self.daemon.stop()
            self.daemon.start()
            self.assertEqual(read(self.ca), ca_before, "the CA is kept")
            cert = ssl._ssl._test_decode_cert(os.path.join(d, "server.pem"))
            names = {v for _, v in cert["subjectAltName"]}
            self.assertIn("other.example", names)
            self.assertNotIn("space-test.example", names)
        finally:
            self.daemon.config = cfg
            self.daemon.stop()
            self.daemon.start()

    # -- clients -----------------------------------------------------------------------------

    def test_cli_create_exec_cp_rm_over_https(self):
        env = self.tls_env(self.token())
        sid = self.space_ok("create", env=env).strip()
        self.known_ids.add(sid)
        self.addCleanup(self._destroy_quietly, sid)
        # Streamed output, and stdin forwarded while output flows.
        out = self.space_ok("exec", sid, "--", "sh", "-c",
                            "for i in 1 2 3; do echo line$i; sleep 0.2; done; cat | wc -c",
                            input=b"x" * 300_000, env=env)
        self.assertEqual(out.split(), ["line1", "line2", "line3", "300000"])
        rc, out, _ = self.space("exec", sid, "--", "sh", "-c", "exit 7", env=env)
        self.assertEqual(rc, 7)
        # Files both ways, larger than a TLS record and than the socket buffers.
        data = os.urandom(3 << 20)
        local = os.path.join(self.tmp, "up.bin")
        with open(local, "wb") as f:
            f.write(data)
        self.space_ok("cp", local, sid + ":/root/up.bin", env=env)
        self.assertEqual(self.space_ok("exec", sid, "--", "sh", "-c", "wc -c < /root/up.bin",
                                       env=env).strip(), str(len(data)))
        back = os.path.join(self.tmp, "down.bin")
        self.space_ok("cp", sid + ":/root/up.bin", back, env=env)
        with open(back, "rb") as f:
            self.assertEqual(f.read(), data)
        self.space_ok("rm", sid, env=env)

    def test_port_tunnel_over_https(self):
        env = self.tls_env(self.token())
        sid = self.create()
        self.space_ok("exec", sid, "--", "sh", "-c",
                      "mkdir -p /root/site && printf tls-tunnel > /root/site/index.html")
        self.space_ok("exec", sid, "--detach", "--cwd", "/root/site", "--", "python3", "-m",
                      "http.server", "8080", "--bind", "127.0.0.1")
        wait_for(lambda: self.space("exec", sid, "--", "python3", "-c",
                                    "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/')")[0] == 0,
                 timeout=20, what="the server in the sandbox")
        p = subprocess.Popen([SPACE, "port", sid, "8080", "--listen", "127.0.0.1:0"],
                             env=dict(self.env(), **env), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            m = re.match(r"forwarding 127\.0\.0\.1:(\d+)", line)
            self.assertTrue(m, "space port said %r" % line)
            for _ in range(3):
                with urllib.request.urlopen("http://127.0.0.1:%s/index.html" % m.group(1),
                                            timeout=20) as r:
                    self.assertEqual(r.read(), b"tls-tunnel")
        finally:
            p.send_signal(2)
            p.wait(10)
            p.stdout.close()
            p.stderr.close()

    def test_python_sdk_over_https(self):
        from space_sandbox import Client, Sandbox
        from space_sandbox.errors import PermissionDeniedError
        token = self.token()
        client = Client(api_url=self.url, token=token, ca_file=self.ca)
        sb = Sandbox.create(client=client)
        self.known_ids.add(sb.id)
        try:
            got = []
            r = sb.commands.run("echo out; echo err >&2; cat", stdin=b"abc",
                                on_stdout=got.append)
            self.assertEqual((r.exit_code, r.stdout, r.stderr), (0, "out\nabc", "err\n"))
            sb.files.write("/root/x.bin", b"\x00\x01" * 100_000)
            self.assertEqual(sb.files.read_bytes("/root/x.bin"), b"\x00\x01" * 100_000)
        finally:
            sb.destroy()
        # Without the CA: refused, with the way out in the message.
        old = os.environ.pop("SPACE_CA", None)
        try:
            with self.assertRaises(PermissionDeniedError) as cm:
                Client(api_url=self.url, token=token).call("GET", "/v1/sandboxes")
            self.assertIn("SPACE_CA", str(cm.exception))
            self.assertIn("ca.pem", str(cm.exception))
        finally:
            if old is not None:
                os.environ["SPACE_CA"] = old

    def test_typescript_sdk_over_https(self):
        import test_sdk_typescript as ts
        ts.build_sdk()
        script = """
import { Client, Sandbox } from "%s";
const client = new Client({ apiUrl: process.env.URL, token: process.env.TOKEN, caFile: process.env.CA });
const sb = await Sandbox.create({ client });
try {
  await sb.files.write("/root/t.txt", "over tls\\n");
  const r = await sb.commands.run("cat /root/t.txt; echo more");
  console.log(JSON.stringify({ id: sb.id, out: r.stdout }));
} finally {
  await sb.destroy();
}
try {
  await new Client({ apiUrl: process.env.URL, token: process.env.TOKEN }).call("GET", "/v1/sandboxes");
  console.log("UNTRUSTED-ACCEPTED");
} catch (e) {
  console.log("refused: " + e.code + ": " + e.message);
}
""" % os.path.join(ts.SDK, "dist", "index.js")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tls.mjs")
            with open(path, "w") as f:
                f.write(script)
            env = dict(os.environ, URL=self.url, TOKEN=self.token(), CA=self.ca)
            env.pop("SPACE_CA", None)
            p = subprocess.run(["node", path], env=env, capture_output=True, text=True,
                               timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        res = json.loads(lines[0])
        self.known_ids.add(res["id"])
        self.assertEqual(res["out"], "over tls\nmore\n")
        self.assertRegex(lines[1], r"^refused: permission_denied: .*SPACE_CA")

    def test_sdk_ports_and_terminals_over_https(self):
        # The SDKs' upgraded connections (a port's tunnel, a terminal) over TLS: the Python
        # SDK's stream is read by one thread while others write (test_sdk_python.py has the rest).
        from space_sandbox import Client, Sandbox
        sb = Sandbox.create(client=Client(api_url=self.url, token=self.token(), ca_file=self.ca))
        self.known_ids.add(sb.id)
        try:
            big = os.urandom(1 << 20)
            sb.files.write("/root/site/big", big)
            sb.commands.run("cd /root/site && exec python3 -m http.server 8000 --bind 127.0.0.1",
                            background=True)
            sb.wait_for_port(8000, timeout=30)
            for _ in range(3):
                with urllib.request.urlopen(sb.get_url(8000) + "/big", timeout=30) as r:
                    self.assertEqual(r.read(), big)
            term = sb.pty.create("bash")
            term.send_input("echo hi $((1+2))\n")
            wait_for(lambda: b"hi 3" in term.output, timeout=20, what="hi 3 over tls")
            term.resize(40, 100)
            term.send_input("stty size; exit 3\n")
            self.assertEqual(term.wait(timeout=20), 3)
            self.assertIn(b"40 100", term.output)
        finally:
            sb.destroy()
        import test_sdk_typescript as ts
        ts.build_sdk()
        script = """
import { Client, Sandbox } from "%s";
const client = new Client({ apiUrl: process.env.URL, token: process.env.TOKEN, caFile: process.env.CA });
const sb = await Sandbox.create({ client });
try {
  await sb.files.write("/root/site/index.html", "tls-port\\n");
  await sb.commands.run("cd /root/site && exec python3 -m http.server 8000", { background: true });
  await sb.waitForPort(8000, { timeoutMs: 30_000 });
  const page = await (await fetch(await sb.getUrl(8000))).text();
  const term = await sb.pty.create({ cmd: "bash" });
  await term.sendInput("echo hi $((1+2)); exit 3\\n");
  const code = await term.wait({ timeoutMs: 20_000 });
  console.log(JSON.stringify({ id: sb.id, page, code, hi: term.output.includes("hi 3") }));
} finally {
  await sb.destroy();
}
""" % os.path.join(ts.SDK, "dist", "index.js")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tls-ports.mjs")
            with open(path, "w") as f:
                f.write(script)
            env = dict(os.environ, URL=self.url, TOKEN=self.token(), CA=self.ca)
            env.pop("SPACE_CA", None)
            p = subprocess.run(["node", path], env=env, capture_output=True, text=True,
                               timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        res = json.loads(p.stdout.splitlines()[0])
        self.known_ids.add(res["id"])
        self.assertEqual((res["page"], res["code"], res["hi"]), ("tls-port\n", 3, True))

    # -- refusals ----------------------------------------------------------------------------

    def test_client_without_the_ca_is_refused_clearly(self):
        rc, out, err = self.space("ls", env=self.tls_env(self.token(), ca=False))
        self.assertEqual(rc, 125, out + err)
        self.assertIn("not trusted", err)
        self.assertIn("SPACE_CA", err)
        self.assertIn("tls/ca.pem", err)
        # A CA file that is not the daemon's.
        other = os.path.join(self.tmp, "other-ca")
        os.makedirs(other, exist_ok=True)
        make_operator_certs(other, "IP:127.0.0.1")
        env = dict(self.tls_env(self.token()), SPACE_CA=os.path.join(other, "ca.pem"))
        rc, out, err = self.space("ls", env=env)
        self.assertEqual(rc, 125)
        self.assertIn("does not hold the CA", err)
        # A SPACE_CA that does not exist.
        env["SPACE_CA"] = os.path.join(self.tmp, "nope.pem")
        rc, out, err = self.space("ls", env=env)
        self.assertEqual(rc, 125)
        self.assertIn("nope.pem", err)

    def test_wrong_host_name_is_refused(self):
        ctx = ssl.create_default_context(cafile=self.ca)
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw:
            with self.assertRaises(ssl.SSLCertVerificationError):
                ctx.wrap_socket(raw, server_hostname="evil.example")

    def test_no_token_is_401_over_tls(self):
        status, body = self.https("GET", "/v1/sandboxes")
        self.assertEqual(status, 401, body)
        status, body = self.https("GET", "/v1/sandboxes", token="spt_bogus")
        self.assertEqual(status, 401, body)
        self.assertEqual(self.https("GET", "/v1/health", token=self.token())[0], 200)

    def test_plain_http_to_the_tls_port_fails_cleanly(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        try:
            c.request("GET", "/v1/health")
            r = c.getresponse()
            self.assertEqual(r.status, 400)
            self.assertIn(b"https://", r.read())
        finally:
            c.close()
        # Garbage that is neither: closed, nothing else.
        with socket.create_connection(("127.0.0.1", self.port), timeout=15) as s:
            s.sendall(b"\x00" * 4096)
            try:
                self.assertEqual(s.recv(100), b"")
            except ConnectionResetError:
                pass
        rc, out, err = self.space("ls", env=self.tls_env(self.token(),
                                                         url="http://127.0.0.1:%d" % self.port))
        self.assertEqual(rc, 125)
        self.assertIn("https://", err)
        # The server is fine.
        self.assertEqual(self.https("GET", "/v1/health", token=self.token())[0], 200)

    def test_stalled_handshakes_are_cut_and_block_nobody(self):
        token = self.token()
        stalled = [socket.create_connection(("127.0.0.1", self.port), timeout=30)
                   for _ in range(40)]
        half = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        half.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then nothing
        stalled.append(half)
        try:
            t0 = time.monotonic()
            self.assertEqual(self.https("GET", "/v1/health", token=token)[0], 200)
            rc, _, err = self.space("ls", env=self.tls_env(token))
            self.assertEqual(rc, 0, err)
            self.assertLess(time.monotonic() - t0, 5, "others are served meanwhile")
            # Cut after the handshake timeout (10 s): each socket sees EOF (or a reset).
            for s in stalled:
                try:
                    self.assertEqual(s.recv(100), b"")
                except ConnectionResetError:
                    pass
            self.assertLess(time.monotonic() - t0, 25)
        finally:
            for s in stalled:
                s.close()
        self.assertEqual(self.https("GET", "/v1/health", token=token)[0], 200)

    # -- other daemons: the operator's certificate, startup errors ---------------------------

    def other_daemon(self, name, config):
        root = os.path.join(self.tmp, name)
        os.makedirs(root, exist_ok=True)
        d = Daemon(root, name=name, config=config)
        self.addCleanup(safe_rmtree, root)
        self.addCleanup(d.stop)
        return d

    def assert_startup_fails(self, config, *needles, name="bad"):
        d = self.other_daemon(name, config)
        with self.assertRaises(RuntimeError):
            d.start(timeout=20)
        self.assertNotEqual(d.proc.wait(10), 0)
        log = d.log_text()
        for n in needles:
            self.assertIn(n, log)
        self.assertFalse(os.path.exists(d.socket), "no socket left behind")
        return log

    def test_operator_certificate_on_any_address(self):
        certs = os.path.join(self.tmp, "operator")
        os.makedirs(certs, exist_ok=True)
        make_operator_certs(certs, "IP:127.0.0.1")
        port = free_port()
        d = self.other_daemon("given", {
            "api_listen": "0.0.0.0:%d" % port,
            "api_tls": {"cert": os.path.join(certs, "cert.pem"),
                        "key": os.path.join(certs, "key.pem")}})
        d.start()
        self.assertFalse(os.path.exists(os.path.join(d.state_dir, "tls")), "no CA of its own")
        r = self.api("POST", "/v1/tokens", {"name": "op", "profiles": ["test"], "ops": ["read"],
                                            "ttl": "1h"}, daemon=d)
        token = r.json["token"]
        env = {"SPACE_API": "https://127.0.0.1:%d" % port, "SPACE_TOKEN": token,
               "SPACE_CA": os.path.join(certs, "ca.pem")}
        rc, out, err = self.space("ls", env=env, daemon=d)
        self.assertEqual(rc, 0, err)
        # localhost is not a name of this certificate.
        env["SPACE_API"] = "https://localhost:%d" % port
        rc, out, err = self.space("ls", env=env, daemon=d)
        self.assertEqual(rc, 125)
        self.assertIn("not valid for \"localhost\"", err)
        self.assertIn("api_tls.names", err)

    def test_startup_errors(self):
        certs = os.path.join(self.tmp, "startup")
        os.makedirs(certs, exist_ok=True)
        make_operator_certs(certs, "IP:127.0.0.1")
        cert, key = os.path.join(certs, "cert.pem"), os.path.join(certs, "key.pem")
        missing = os.path.join(certs, "missing.key")
        tls = lambda k: {"api_listen": "127.0.0.1:%d" % free_port(),
                         "api_tls": {"cert": cert, "key": k}}
        self.assert_startup_fails(tls(missing), "missing.key", "No such file", "api_tls")
        garbage = os.path.join(certs, "garbage.key")
        with open(garbage, "w") as f:
            f.write("not a key\n")
        os.chmod(garbage, 0o600)
        self.assert_startup_fails(tls(garbage), "garbage.key", "private key")
        loose = os.path.join(certs, "loose.key")
        shutil.copy(key, loose)
        os.chmod(loose, 0o644)
        self.assert_startup_fails(tls(loose), "loose.key", "chmod 600")
        other = os.path.join(self.tmp, "other-key")
        os.makedirs(other, exist_ok=True)
        make_operator_certs(other, "IP:127.0.0.1")
        self.assert_startup_fails(tls(os.path.join(other, "key.pem")), "is not the key of")
        # Config mistakes.
        self.assert_startup_fails({"api_listen": "127.0.0.1:1", "api_tls": {"cert": cert}},
                                  "\"cert\" and \"key\" go together")
        self.assert_startup_fails({"api_listen": "127.0.0.1:1", "api_tls": {"auto": True,
                                                                            "nmes": []}},
                                  "unknown or mistyped key \"nmes\"")
        self.assert_startup_fails({"api_tls": "auto"}, "api_tls needs api_listen")
        self.assert_startup_fails({"api_listen": "127.0.0.1:1",
                                   "api_tls": {"auto": True, "names": ["*.example"]}},
                                  "is not a DNS name or an IP address")
        self.assert_startup_fails({"api_listen": "myhost:7443", "api_tls": "auto"},
                                  "numeric address")

    def test_non_loopback_without_tls_is_refused(self):
        log = self.assert_startup_fails({"api_listen": "0.0.0.0:%d" % free_port()},
                                        "is not a loopback address", "api_tls")
        self.assertIn("Remote access", log)


if __name__ == "__main__":
    main()
