"""Egress gateway and credentials, end to end: real clients inside real sandboxes (curl,
python3 requests, git, pip, node's fetch) reach a local HTTPS "internet" (egress_upstream.py,
on 127.0.0.2 with its own test CA, found through the gateway's resolver overrides) only
through spaced's gateway; the upstream receives the real secret while no trace of it can be
found inside the sandbox; and every way around the policy is tried and refused.
"""

import json
import os
import re
import shutil
import socket
import time
import unittest

import harness
from egress_upstream import Upstream

SECRET = "s3cr3t-API-value-7f2c9e4b1d"
HDR_SECRET = "ghp_header_secret_5a8e3c"
NAMES = ["api", "git", "pypi", "npm", "paths", "other", "rebind", "hdr"]


class EgressBase(harness.SpaceTestCase):
    """A daemon whose profiles reach the local upstream (and nothing else)."""

    @classmethod
    def daemon_config(cls):
        cls.upstream = Upstream(cls.tmp).start()
        up = cls.upstream
        resolve = {"%s.example.test:443" % n: "%s:%d" % (up_host(), up.https_port) for n in NAMES}
        resolve["plain.example.test:80"] = "%s:%d" % (up_host(), up.http_port)
        resolve["rebind.example.test:443"] = "127.0.0.1:%d" % up.https_port  # loopback
        return {
            "profiles": {
                "test": {"egress": {
                    "allow": ["api.example.test", "git.example.test", "pypi.example.test",
                              "npm.example.test",
                              "rebind.example.test", "plain.example.test:80",
                              "hdr.example.test",
                              {"host": "paths.example.test", "methods": ["GET"],
                               "paths": ["/public/"]}],
                    "allow_networks": ["127.0.0.2/32"]}},
                "live": {"egress": {"allow": ["*.example.test"],
                                    "allow_networks": ["127.0.0.2/32"]}},
                "slow": {"egress": {"allow": ["git.example.test"],
                                    "allow_networks": ["127.0.0.2/32"],
                                    "max_connections": 4, "bandwidth": "256K"}},
            },
            "secrets": {
                "API_TOKEN": {"value": SECRET, "hosts": ["api.example.test"],
                              "profiles": ["test"]},
                "HDR_TOKEN": {"value": HDR_SECRET, "hosts": ["hdr.example.test"],
                              "profiles": ["test"], "header": "Authorization",
                              "format": "Bearer {}"},
                "LIVE_ONLY": {"value": "live-only-value", "hosts": ["api.example.test"],
                              "profiles": ["live"]},
            },
            # One key trusts the test upstream whether a host is tunneled (the sandbox's client
            # verifies it) or intercepted (the gateway does): "ca_files".
            "gateway": {"resolve": resolve, "ca_files": [up.certs["ca"]]},
        }

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.upstream.stop()

    # -- helpers -------------------------------------------------------------------------------

    def sh(self, script, sid=None, timeout=120):
        """Runs `sh -c script` in the sandbox: (rc, stdout, stderr)."""
        return self.space("exec", sid or self.sid, "--", "sh", "-c", script, timeout=timeout)

    def sh_ok(self, script, sid=None, timeout=120):
        rc, out, err = self.sh(script, sid, timeout)
        self.assertEqual(rc, 0, "in sandbox: %s\nrc %d\nstdout: %s\nstderr: %s" %
                         (script, rc, out[-3000:], err[-3000:]))
        return out

    def placeholder(self, name="API_TOKEN"):
        return self.inspect(self.sid)["env"][name]

    def audit_events(self, sid=None):
        out = self.space_ok("audit", sid or self.sid, "--json")
        return [json.loads(line) for line in out.splitlines() if line.strip()]


class EgressTest(EgressBase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sid = cls.create_for_class("--secret", "API_TOKEN", "--secret", "HDR_TOKEN")

    # -- allowed paths -------------------------------------------------------------------------

    def test_curl_gets_secret_injected_and_redacted(self):
        ph = self.placeholder()
        self.assertTrue(ph.startswith("space_ph_API_TOKEN_"), ph)
        self.assertNotIn(SECRET, json.dumps(self.inspect(self.sid)))
        out = self.sh_ok('curl -sS -D /tmp/h https://api.example.test/echo '
                         '-H "Authorization: Bearer $API_TOKEN"; echo; cat /tmp/h')
        # The upstream received the real secret...
        got = [e for e in self.upstream.echoes() if e["host"] == "api.example.test"]
        self.assertTrue(got, "the upstream saw no request")
        self.assertEqual(got[-1]["headers"]["authorization"], "Bearer " + SECRET)
        # ... and its echo (body and header) reached the sandbox redacted.
        self.assertNotIn(SECRET, out)
        self.assertIn("*" * len(SECRET), out)
        events = self.audit_events()
        kinds = [e["kind"] for e in events]
        self.assertIn("credential.use", kinds)
        req = [e for e in events if e["kind"] == "egress.request"
               and e["data"].get("host") == "api.example.test"]
        self.assertTrue(req and req[-1]["data"].get("secrets") == ["API_TOKEN"], req)
        self.assertNotIn(SECRET, json.dumps(events))

    def test_configured_header_is_added(self):
        out = self.sh_ok("curl -sS https://hdr.example.test/echo")
        got = [e for e in self.upstream.echoes() if e["host"] == "hdr.example.test"]
        self.assertEqual(got[-1]["headers"]["authorization"], "Bearer " + HDR_SECRET)
        self.assertNotIn(HDR_SECRET, out)

    def test_value_goes_only_where_the_definition_says(self):
        # API_TOKEN has no "header": the placeholder is replaced in Authorization only (the
        # default placeholder_in); in another header, a cookie or the query it stays as sent.
        ph = self.placeholder()
        out = self.sh_ok('curl -sS "https://api.example.test/echo?q=$API_TOKEN" '
                         '-H "Authorization: Bearer $API_TOKEN" -H "X-Token: $API_TOKEN" '
                         '-b "t=$API_TOKEN"')
        self.assertNotIn(SECRET, out)
        got = [e for e in self.upstream.echoes() if e["host"] == "api.example.test"][-1]
        self.assertEqual(got["headers"]["authorization"], "Bearer " + SECRET)
        self.assertEqual(got["headers"]["x-token"], ph)
        self.assertEqual(got["headers"]["cookie"], "t=" + ph)
        self.assertEqual(got["path"], "/echo?q=" + ph)
        # HDR_TOKEN has "header": one-way, the placeholder is replaced nowhere.
        hph = self.placeholder("HDR_TOKEN")
        self.sh_ok('curl -sS https://hdr.example.test/echo -H "X-Token: $HDR_TOKEN" '
                   '-H "Authorization: token $HDR_TOKEN"')
        got = [e for e in self.upstream.echoes() if e["host"] == "hdr.example.test"][-1]
        self.assertEqual(got["headers"]["authorization"], "Bearer " + HDR_SECRET)
        self.assertEqual(got["headers"]["x-token"], hph)

    def test_responses_masked_on_every_mode(self):
        # The secret echoed from a host it is not bound to, over plain HTTP: still masked.
        # (The value reaches that upstream here only because the test puts it there itself.)
        out = self.sh_ok('curl -sS http://plain.example.test/echo -H "X-Token: %s"' % SECRET)
        self.assertNotIn(SECRET, out)
        self.assertIn("*" * len(SECRET), out)

    def test_python_requests_tunnel(self):
        out = self.sh_ok("/usr/bin/python3 -c \"import requests; "
                         "print(requests.get('https://git.example.test/hello.txt').text)\"")
        self.assertIn("hello from upstream", out)
        tunnels = [e for e in self.audit_events() if e["kind"] == "egress.tunnel"
                   and e["data"]["host"] == "git.example.test"]
        self.assertTrue(tunnels)

    def test_git_clone_over_https(self):
        out = self.sh_ok("cd /tmp && rm -rf r && git clone -q https://git.example.test/repo.git r "
                         "&& cat r/README")
        self.assertIn("cloned through the SPACE gateway", out)

    def test_pip_install_from_local_index(self):
        out = self.sh_ok("/usr/bin/python3 -m pip install -q --disable-pip-version-check "
                         "--no-cache-dir --no-deps --target /tmp/pkgs "
                         "--index-url https://pypi.example.test/simple/ spacedemo && "
                         "PYTHONPATH=/tmp/pkgs /usr/bin/python3 -c "
                         "'import spacedemo; print(spacedemo.VALUE)'", timeout=180)
        self.assertEqual(out.strip().splitlines()[-1], "42")

    @unittest.skipUnless(shutil.which("npm"), "npm is not installed (Debian: apt install npm)")
    def test_npm_install_from_local_registry(self):
        out = self.sh_ok("mkdir -p /tmp/napp && cd /tmp/napp && "
                         "npm install --no-audit --no-fund --loglevel=error "
                         "--registry https://npm.example.test/ npmdemo >/dev/null && "
                         "node -e 'console.log(require(\"npmdemo\"))'", timeout=180)
        self.assertEqual(out.strip().splitlines()[-1], "42")

    def test_node_fetch_transparent(self):
        # node's fetch ignores proxy variables: it resolves through the DNS stub (which answers
        # with the gateway's transparent listener) and still gets the secret injected.
        out = self.sh_ok("node -e \"fetch('https://api.example.test/echo',{headers:"
                         "{authorization:'Bearer '+process.env.API_TOKEN}}).then(r=>r.text())"
                         ".then(t=>console.log(t)).catch(e=>{console.error(String(e.cause||e));"
                         "process.exit(3)})\"")
        rec = json.loads(out)
        self.assertEqual(rec["host"], "api.example.test")
        got = [e for e in self.upstream.echoes() if e["host"] == "api.example.test"]
        self.assertEqual(got[-1]["headers"]["authorization"], "Bearer " + SECRET)
        self.assertNotIn(SECRET, out)

    def test_plain_http_through_proxy(self):
        ph = self.placeholder()
        out = self.sh_ok('curl -sS http://plain.example.test/echo -H "X-Token: $API_TOKEN"')
        rec = json.loads(out)
        # A placeholder sent anywhere the secret is not bound to stays a placeholder.
        self.assertEqual(rec["headers"]["x-token"], ph)

    def test_path_and_method_rules(self):
        ph = self.placeholder()
        out = self.sh_ok('curl -sS https://paths.example.test/public/x -H "X-Token: $API_TOKEN"')
        self.assertEqual(json.loads(out)["headers"]["x-token"], ph)  # not bound: not replaced
        for cmd in ["curl -sS -o /dev/null -w '%{http_code}' https://paths.example.test/private",
                    "curl -sS -o /dev/null -w '%{http_code}' -X POST "
                    "https://paths.example.test/public/x",
                    "curl -sS -o /dev/null -w '%{http_code}' --path-as-is "
                    "https://paths.example.test/public/../private",
                    "curl -sS -o /dev/null -w '%{http_code}' --path-as-is "
                    "https://paths.example.test/public/%2e%2e/private"]:
            rc, out, err = self.sh(cmd)
            self.assertEqual(out.strip(), "403", "%s -> %s %s" % (cmd, out, err))

    # -- refused -------------------------------------------------------------------------------

    def assert_refused(self, cmd):
        """Runs a curl command with -w '%{http_code}' appended: refused means curl failed
        (CONNECT refused, connection closed) or the gateway answered 4xx itself."""
        rc, out, err = self.sh(cmd + " -w '\\n%{http_code}'")
        code = out.strip().splitlines()[-1] if out.strip() else "000"
        self.assertTrue(rc != 0 or code in ("400", "403", "421"),
                        "%s was not refused: rc %d, %s %s" % (cmd, rc, out, err))
        return out + err

    def test_hosts_off_the_list(self):
        self.assert_refused("curl -sS --max-time 20 https://other.example.test/echo")
        self.assert_refused("curl -sS --max-time 20 http://other.example.test/")
        denied = [e for e in self.audit_events() if e["kind"] == "egress.denied"]
        self.assertTrue(any(e["data"].get("host") == "other.example.test" for e in denied))

    def test_ip_literals_and_metadata(self):
        for url in ["http://169.254.169.254/latest/meta-data/",
                    "http://0xa9fea9fe/", "http://2852039166/", "http://0251.0376.0251.0376/",
                    "http://169.254.43518/", "http://[::ffff:169.254.169.254]/",
                    "http://[fd00:ec2::254]/", "http://127.0.0.1:%d/" % self.upstream.http_port,
                    "http://127.0.0.2:%d/echo" % self.upstream.http_port,
                    "https://127.0.0.2:%d/echo" % self.upstream.https_port,
                    "http://0/", "http://localhost:%d/" % self.upstream.http_port]:
            self.assert_refused("curl -sS --max-time 20 -o /dev/null '%s'" % url)

    def test_name_resolving_to_loopback(self):
        out = self.assert_refused("curl -sS --max-time 20 https://rebind.example.test/echo")
        denied = [e for e in self.audit_events() if e["kind"] == "egress.denied"
                  and e["data"].get("host") == "rebind.example.test"]
        self.assertTrue(denied and "loopback" in denied[-1]["data"]["reason"], denied)

    def test_refusal_reasons_reach_common_clients(self):
        # A refused CONNECT: the status line carries why, which is what curl -v, pip and
        # urllib print of it.
        rc, out, err = self.sh("curl -sS -v --max-time 20 https://other.example.test/echo")
        self.assertNotEqual(rc, 0)
        self.assertRegex(err, r"HTTP/1.1 403 Forbidden \(SPACE egress: [^)]*other\.example\.test",
                         err[-2000:])
        rc, out, err = self.sh(
            "python3 -c \"import urllib.request; "
            "urllib.request.urlopen('https://other.example.test/echo', timeout=20)\"")
        self.assertNotEqual(rc, 0)
        self.assertIn("SPACE egress: ", err[-2000:])
        self.assertIn("other.example.test", err[-2000:])
        # An allowed name that resolves only to a refused address (loopback), to be tunneled: the
        # CONNECT itself is refused saying so, not reset after it.
        rc, out, err = self.sh("curl -sS -v --max-time 20 https://rebind.example.test/echo")
        self.assertNotEqual(rc, 0)
        self.assertRegex(err, r"HTTP/1.1 403 Forbidden \(SPACE egress: rebind\.example\.test "
                              r"resolves only to refused addresses", err[-2000:])

    def test_sni_and_host_mismatch(self):
        # CONNECT to an allowed host, then a TLS ClientHello naming another.
        script = r'''
import socket, ssl, sys
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT git.example.test:443 HTTP/1.1\r\nHost: git.example.test:443\r\n\r\n")
assert s.recv(4096).startswith(b"HTTP/1.1 200")
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
try:
    t = ctx.wrap_socket(s, server_hostname="other.example.test")
    t.sendall(b"GET /echo HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
    print("REACHED", t.recv(100))
except (ssl.SSLError, OSError) as e:
    print("refused", e)
'''
        out = self.sh_ok("/usr/bin/python3 - <<'EOF'\n%s\nEOF" % script)
        self.assertIn("refused", out)
        self.assertNotIn("REACHED", out)
        # Inside an intercepted connection, a Host header for another host.
        rc, out, err = self.sh("curl -sS -o /dev/null -w '%{http_code}' "
                               "https://api.example.test/echo -H 'Host: other.example.test'")
        self.assertEqual(out.strip(), "421", err)

    def test_smuggling_refused(self):
        script = r'''
import socket
def send(raw):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(raw)
    s.settimeout(20)
    data = b""
    try:
        while True:
            b = s.recv(4096)
            if not b: break
            data += b
    except socket.timeout:
        pass
    return data.split(b"\r\n", 1)[0].decode()
base = b"POST http://plain.example.test/echo HTTP/1.1\r\nHost: plain.example.test\r\n"
print(send(base + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
print(send(base + b"Content-Length: 4\r\nContent-Length: 5\r\n\r\nabcde"))
print(send(base + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"))
print(send(base + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"))
print(send(b"GET http://plain.example.test/echo HTTP/1.1\r\nHost: plain.example.test\r\n\r\n"
           b"GET http://other.example.test/ HTTP/1.1\r\nHost: other.example.test\r\n\r\n"))
'''
        out = self.sh_ok("/usr/bin/python3 - <<'EOF'\n%s\nEOF" % script)
        lines = out.strip().splitlines()
        self.assertEqual(len(lines), 5, out)
        for line in lines[:3]:
            self.assertIn(" 400 ", line + " ", out)
        self.assertNotIn(" 200 ", lines[3] + " ", out)
        # A kept-alive connection's second request is authorized on its own.
        self.assertEqual(len([e for e in self.upstream.echoes()
                              if e["host"] == "other.example.test"]), 0)

    def test_kept_alive_second_request_reauthorized(self):
        script = r'''
import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"GET http://plain.example.test/echo HTTP/1.1\r\nHost: plain.example.test\r\n\r\n"
          b"GET http://other.example.test/x HTTP/1.1\r\nHost: other.example.test\r\n\r\n")
s.settimeout(20)
data = b""
try:
    while True:
        b = s.recv(65536)
        if not b: break
        data += b
except socket.timeout:
    pass
print(data.count(b"HTTP/1.1 200"), data.count(b"HTTP/1.1 403"))
'''
        out = self.sh_ok("/usr/bin/python3 - <<'EOF'\n%s\nEOF" % script)
        self.assertEqual(out.split(), ["1", "1"], out)

    def test_direct_sockets_have_no_route(self):
        script = r'''
import socket
for addr in [("127.0.0.2", %d), ("1.1.1.1", 80), ("169.254.169.254", 80), ("10.0.0.1", 80)]:
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(addr)
        print("CONNECTED", addr)
    except OSError as e:
        print("blocked", addr, e.errno)
try:
    s6 = socket.socket(socket.AF_INET6)
    s6.settimeout(5)
    s6.connect(("2606:4700::1111", 80))
    print("CONNECTED v6")
except OSError as e:
    print("blocked v6", e.errno)
''' % self.upstream.https_port
        out = self.sh_ok("/usr/bin/python3 - <<'EOF'\n%s\nEOF" % script)
        self.assertNotIn("CONNECTED", out)

    def test_dns_stub(self):
        script = r'''
import socket
for name in ["api.example.test", "other.example.test", "metadata.google.internal"]:
    try:
        print(name, sorted({a[4][0] for a in socket.getaddrinfo(name, 443)}))
    except socket.gaierror as e:
        print(name, "NXDOMAIN")
'''
        out = self.sh_ok("/usr/bin/python3 - <<'EOF'\n%s\nEOF" % script)
        # Every well-formed name leads to the gateway's own listeners, which refuse denied hosts
        # (test_denied_host_via_dns_gets_403); the denied lookups are audited.
        self.assertIn("api.example.test ['127.0.0.1']", out)
        self.assertIn("other.example.test ['127.0.0.1']", out)
        self.assertIn("metadata.google.internal ['127.0.0.1']", out)
        denied = {e["data"].get("host") for e in self.audit_events()
                  if e["kind"] == "egress.denied" and e["data"].get("via") == "dns"}
        self.assertIn("metadata.google.internal", denied)

    def test_own_hostname_resolves_without_a_denial(self):
        # The sandbox's host name is its id (sb_..., with a '_' no DNS name has): programs that
        # look themselves up (git, Chromium, getfqdn) get the loopback address, and the audit
        # log no denial for it; another sb_ name stays refused.
        sid = self.sid
        out = self.sh_ok("/usr/bin/python3 -c 'import socket; h = socket.gethostname(); "
                         "print(h, socket.gethostbyname(h))'")
        self.assertEqual(out.split(), [sid, "127.0.0.1"])
        rc, out, _ = self.sh("/usr/bin/python3 -c 'import socket; "
                             "socket.gethostbyname(\"sb_000000000000\")'")
        self.assertNotEqual(rc, 0)
        denied = {e["data"].get("host") for e in self.audit_events()
                  if e["kind"] == "egress.denied" and e["data"].get("via") == "dns"}
        self.assertNotIn(sid, denied)
        self.assertIn("sb_000000000000", denied)

    def test_denied_host_via_dns_gets_403(self):
        # A client that ignores the proxy variables resolves through the stub and reaches the
        # transparent listeners: a denied host gets the gateway's 403 with the reason, over TLS
        # (a handshake with a leaf from the sandbox CA) and over plain HTTP; nothing is dialed.
        for url in ["https://other.example.test/echo", "http://other.example.test/echo"]:
            rc, out, err = self.sh("curl -sS --noproxy '*' --max-time 20 -w '\\n%%{http_code}' %s"
                                   % url)
            self.assertEqual(rc, 0, err)
            self.assertEqual(out.strip().splitlines()[-1], "403", out)
            self.assertIn("SPACE egress gateway:", out)
            self.assertIn("other.example.test", out)
        script = r'''
import socket, ssl
ctx = ssl.create_default_context(cafile="/etc/space/ca.crt")   # the sandbox CA alone
t = ctx.wrap_socket(socket.create_connection(("127.0.0.1", 443)),
                    server_hostname="metadata.google.internal")
print("issuer", dict(x[0] for x in t.getpeercert()["issuer"])["commonName"])
t.sendall(b"GET / HTTP/1.1\r\nHost: metadata.google.internal\r\n\r\n")
out = b""
while True:
    b = t.recv(4096)
    if not b:
        break
    out += b
print(out.decode())
'''
        out = self.sh_ok("/usr/bin/python3 - <<'EOF'\n%s\nEOF" % script)
        self.assertIn("issuer SPACE sandbox %s CA" % self.sid, out)
        self.assertIn("HTTP/1.1 403", out)
        self.assertIn("host metadata.google.internal not in profile test", out)
        denied = [e["data"] for e in self.audit_events() if e["kind"] == "egress.denied"
                  and e["data"].get("via") == "transparent-tls"]
        self.assertTrue(any(d["host"] == "metadata.google.internal" for d in denied), denied)
        self.assertFalse([e for e in self.upstream.echoes()
                          if e["host"] in ("other.example.test", "metadata.google.internal")])

    def test_basic_auth_substituted_only_where_bound(self):
        # curl -u sends Authorization: Basic base64(user:password), as git does for a token in a
        # URL: on the bound host the gateway decodes it and puts the value in (and masks the
        # echo); on a tunneled host and on an intercepted host the secret is not bound to
        # (paths.example.test, a path rule) the placeholder arrives as sent.
        import base64
        ph = self.placeholder()
        for host, path, want in [("api.example.test", "/echo", "x-access-token:" + SECRET),
                                 ("git.example.test", "/echo", "x-access-token:" + ph),
                                 ("paths.example.test", "/public/x", "x-access-token:" + ph)]:
            out = self.sh_ok('curl -sS -u "x-access-token:$API_TOKEN" https://%s%s' % (host, path))
            self.assertNotIn(SECRET, out)
            got = [e for e in self.upstream.echoes() if e["host"] == host][-1]
            auth = got["headers"]["authorization"]
            self.assertTrue(auth.startswith("Basic "), auth)
            self.assertEqual(base64.b64decode(auth[6:]).decode(), want, host)

    WS_CLIENT = r'''
import base64, json, os, socket, ssl, struct, sys
host, secret = sys.argv[1], sys.argv[2]

def frame(opcode, payload, fin=True):
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))

def read_frame(f):
    h = f.read(2)
    if len(h) < 2:
        return None
    n = h[1] & 0x7f
    if n == 126:
        n = struct.unpack(">H", f.read(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", f.read(8))[0]
    return bool(h[0] & 0x80), h[0] & 0x70, h[0] & 0x0f, f.read(n)

def message(f):
    """The next data message (op, text) or close (8, code); control frames reported too."""
    data, op, frames = b"", None, 0
    while True:
        fr = read_frame(f)
        if fr is None:
            return {"eof": True}
        fin, rsv, opcode, payload = fr
        frames += 1
        if opcode == 8:
            return {"close": struct.unpack(">H", payload[:2])[0] if payload else None}
        if opcode in (9, 10):
            print(json.dumps({"control": opcode, "data": payload.decode()}))
            continue
        if opcode:
            op = opcode
        data += payload
        if fin:
            return {"op": op, "data": data.decode(), "frames": frames, "rsv": rsv}

s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host.encode(), host.encode()))
assert s.recv(4096).startswith(b"HTTP/1.1 200")
t = ssl.create_default_context(cafile="/etc/space/ca-bundle.crt").wrap_socket(
    s, server_hostname=host)
key = base64.b64encode(os.urandom(16)).decode()
t.sendall(("GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
           "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
           "Authorization: Bearer %s\r\n\r\n" % (host, key, os.environ["API_TOKEN"])).encode())
f = t.makefile("rb")
status = f.readline().decode().strip()
while f.readline() not in (b"\r\n", b""):
    pass
print(json.dumps({"status": status}))
print(json.dumps(message(f)))  # the server's report of the handshake
for text in ["hello", "echo:" + secret, "fragment:" + secret, "rsv"]:
    t.sendall(frame(1, text.encode()))
    print(json.dumps(message(f)))
'''

    def websocket_session(self, host):
        """Runs WS_CLIENT to `host` in the sandbox: its JSON lines."""
        out = self.sh_ok("/usr/bin/python3 - %s '%s' <<'EOF'\n%s\nEOF" %
                         (host, SECRET, self.WS_CLIENT), timeout=60)
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def test_websocket_intercepted_and_tunneled(self):
        stars = "*" * len(SECRET)
        ph = self.placeholder()
        # Intercepted (API_TOKEN is bound to api.example.test): the handshake gets the
        # credential, no extension reaches the upstream, every message from it is masked (also a
        # value cut in two frames with a ping between), and a frame with RSV1 set ends the
        # connection with 1002.
        got = self.websocket_session("api.example.test")
        self.assertEqual(got[0]["status"], "HTTP/1.1 101 Switching Protocols", got)
        self.assertEqual(got[1]["data"], "auth:Bearer %s ext:" % stars, got)
        self.assertEqual(got[2]["data"], "hello")
        self.assertEqual(got[3]["data"], "echo:" + stars)
        self.assertIn({"control": 9, "data": "between"}, got)
        frag = [m for m in got if m.get("data", "").startswith("fragment:")]
        self.assertEqual(frag[0]["data"], "fragment:" + stars, got)
        self.assertGreaterEqual(frag[0]["frames"], 2)
        self.assertEqual(got[-1], {"close": 1002}, got)
        self.assertNotIn(SECRET, json.dumps(got))
        rec = [e for e in self.upstream.echoes() if e["host"] == "api.example.test"
               and e["path"] == "/ws"][-1]
        self.assertEqual(rec["headers"]["authorization"], "Bearer " + SECRET)
        self.assertNotIn("sec-websocket-extensions", rec["headers"])
        events = [e["data"] for e in self.audit_events() if e["kind"] == "egress.request"
                  and e["data"].get("websocket")]
        self.assertTrue(any(e["host"] == "api.example.test" and e["status"] == 101 and
                            e.get("secrets") == ["API_TOKEN"] and e.get("redactions", 0) >= 3
                            and "reserved" in e.get("error", "")
                            for e in events), events)
        # Tunneled (git.example.test, no secret bound): the upstream's own TLS, the placeholder
        # as sent, the extension offered as the client offered it, frames untouched (so the
        # RSV1 frame arrives as the server sent it).
        got = self.websocket_session("git.example.test")
        self.assertEqual(got[0]["status"], "HTTP/1.1 101 Switching Protocols", got)
        self.assertEqual(got[1]["data"],
                         "auth:Bearer %s ext:permessage-deflate; client_max_window_bits" % ph)
        self.assertEqual(got[2]["data"], "hello")
        self.assertEqual(got[-1]["rsv"], 0x40, got)

    def test_ech_accepted_when_intercepted_refused_when_tunneled(self):
        # A ClientHello carrying encrypted_client_hello (0xfe0d, as Chromium's GREASE does):
        # api.example.test is intercepted (API_TOKEN is bound to it), so the gateway's own TLS
        # server answers; git.example.test is tunneled, where ECH could hide the real target.
        script = r'''
import socket, ssl, struct

def client_hello(sni):
    ctx = ssl.create_default_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=sni)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()

def with_ech(record):
    body = record[9:]
    i = 2 + 32
    i += 1 + body[i]
    i += 2 + struct.unpack(">H", body[i:i + 2])[0]
    i += 1 + body[i]
    n = struct.unpack(">H", body[i:i + 2])[0]
    ech = b"\x00\x00\x01\x00\x01\x42" + b"\x00\x20" + b"\x11" * 32 + b"\x00\x40" + b"\x22" * 64
    exts = body[i + 2:i + 2 + n] + struct.pack(">HH", 0xfe0d, len(ech)) + ech
    body = body[:i] + struct.pack(">H", len(exts)) + exts
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs

for host in ["api.example.test", "git.example.test"]:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host.encode(), host.encode()))
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    s.sendall(with_ech(client_hello(host)))
    try:
        got = s.recv(64)
    except OSError:
        got = b""
    print(host, "server-hello" if got[:1] == b"\x16" and got[5:6] == b"\x02" else "closed %r" % got[:8])
'''
        out = self.sh_ok("/usr/bin/python3 - <<'EOF'\n%s\nEOF" % script)
        self.assertIn("api.example.test server-hello", out)
        self.assertIn("git.example.test closed b''", out)
        denied = [e["data"] for e in self.audit_events() if e["kind"] == "egress.denied"
                  and e["data"].get("host") == "git.example.test"]
        self.assertTrue(any("ECH" in d["reason"] for d in denied), denied)
        # A real client through the intercepted host still works after it.
        self.sh_ok("curl -sS -f -o /dev/null https://api.example.test/echo")

    # -- no trace of the secret inside ---------------------------------------------------------

    def test_no_trace_of_secret_inside(self):
        # A process that used the secret (through the gateway) stays alive while we look.
        self.sh_ok("(/usr/bin/python3 -c \"import requests,time,os; "
                   "r=requests.get('https://api.example.test/echo',headers={'Authorization':"
                   "'Bearer '+os.environ['API_TOKEN']}); open('/tmp/resp','w').write(r.text); "
                   "time.sleep(60)\" >/dev/null 2>&1 &) ; sleep 3; cat /tmp/resp")
        # Environment, command lines and files of every process, and the writable layer.
        out = self.sh_ok("cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'; "
                         "grep -rIl -e '%s''%s' / --exclude-dir=proc --exclude-dir=sys "
                         "--exclude-dir=usr --exclude-dir=dev 2>/dev/null; true" %
                         (SECRET[:6], SECRET[6:12]))
        self.assertNotIn(SECRET[:12], out)
        # The memory of every process in the sandbox, read from the host.
        pids = self.sandbox_host_pids(self.sid)
        self.assertTrue(pids)
        needle = SECRET.encode()
        for pid in pids:
            try:
                with open("/proc/%d/maps" % pid) as f:
                    maps = f.read().splitlines()
                mem = open("/proc/%d/mem" % pid, "rb", 0)
            except OSError:
                continue
            with mem:
                for line in maps:
                    rng, perms = line.split()[:2]
                    if "r" not in perms:
                        continue
                    lo, hi = (int(x, 16) for x in rng.split("-"))
                    if hi - lo > 256 << 20:
                        continue
                    try:
                        mem.seek(lo)
                        data = mem.read(hi - lo)
                    except (OSError, OverflowError, ValueError):
                        continue
                    self.assertNotIn(needle, data, "secret found in pid %d at %s" % (pid, rng))

    def test_secret_grants_checked(self):
        rc, out, err = self.space("create", "--secret", "NOPE")
        self.assertEqual(rc, 125)
        self.assertIn("no such secret", err)
        rc, out, err = self.space("create", "--secret", "LIVE_ONLY")
        self.assertEqual(rc, 125)
        self.assertIn("not available to profile test", err)
        rc, out, err = self.space("create", "--allow", "evil.example.org")
        self.assertEqual(rc, 125)
        self.assertIn("does not allow", err)

    def test_allow_narrows(self):
        sid = self.create("--allow", "git.example.test")
        out = self.sh_ok("curl -sS https://git.example.test/hello.txt", sid=sid)
        self.assertIn("hello from upstream", out)
        rc, out, err = self.sh("curl -sS --max-time 20 https://api.example.test/echo", sid=sid)
        self.assertNotEqual(rc, 0)

    def test_destroy_leaves_nothing(self):
        before = self.snapshot_host()
        sid = self.create("--secret", "API_TOKEN")
        self.sh_ok("curl -sS https://api.example.test/echo >/dev/null; "
                   "curl -sS https://git.example.test/hello.txt >/dev/null", sid=sid)
        self.space_ok("rm", sid)
        self.assert_no_leaks(before)

    def test_restart_keeps_egress(self):
        # spaced restarts; the sandbox is reattached and its gateway listeners come back.
        self.daemon.stop()
        self.daemon.start()
        out = self.sh_ok('curl -sS https://api.example.test/echo -H "Authorization: $API_TOKEN"')
        got = [e for e in self.upstream.echoes() if e["host"] == "api.example.test"]
        self.assertEqual(got[-1]["headers"]["authorization"], SECRET)
        self.assertNotIn(SECRET, out)

    def test_profiles_are_separate(self):
        sid = self.create("--profile", "live")
        out = self.sh_ok("curl -sS https://other.example.test/hello.txt", sid=sid)
        self.assertIn("hello from upstream", out)


class EgressLimitsTest(EgressBase):
    """Per-sandbox connection and bandwidth limits (profile "slow": 4 connections, 256 KiB/s)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sid = cls.create_for_class("--profile", "slow")

    def test_bandwidth_limit(self):
        out = self.sh_ok("s=$(date +%s.%N); curl -sS -o /tmp/big https://git.example.test/big.bin"
                         " && e=$(date +%s.%N) && stat -c %s /tmp/big && "
                         "awk \"BEGIN{print $e - $s}\"")
        size, secs = out.split()
        self.assertEqual(int(size), 1 << 20)
        # 1 MiB at 256 KiB/s (after a small initial burst) takes about 3.6 s.
        self.assertGreater(float(secs), 3.0, out)

    def test_connection_limit(self):
        script = r'''
import socket, time
held = []
for i in range(4):
    s = socket.create_connection(("127.0.0.1", 3128))
    held.append(s)
time.sleep(0.5)
extra = socket.create_connection(("127.0.0.1", 3128))
extra.settimeout(10)
print(extra.recv(100).split(b"\\r\\n")[0].decode())
'''
        out = self.sh_ok("/usr/bin/python3 - <<'EOF'\n%s\nEOF" % script)
        self.assertIn("429", out)
        self.daemon.wait_healthy(5)
        denied = [e for e in self.audit_events() if e["kind"] == "egress.denied"
                  and e["data"].get("via") == "accept"]
        self.assertTrue(denied)


    def test_dns_flood_audit_is_bounded(self):
        script = r'''
import socket, time
for i in range(400):
    try:
        socket.getaddrinfo("n%d.denied.example.org" % i, 443)
    except socket.gaierror:
        pass
time.sleep(1.5)
print("last", sorted({a[4][0] for a in socket.getaddrinfo("last.denied.example.org", 443)}))
'''
        out = self.sh_ok("/usr/bin/python3 - <<'EOF'\n%s\nEOF" % script)
        self.assertIn("last ['127.0.0.1']", out)
        dns = [e for e in self.audit_events() if e["kind"] == "egress.denied"
               and e["data"].get("via") == "dns"]
        # 400+ refusals (each name may be asked twice: A and AAAA), at most a burst plus the
        # refill recorded, and the last one says how many were left out.
        self.assertLess(len(dns), 250, len(dns))
        self.assertTrue(any(e["data"].get("host") == "last.denied.example.org" and
                            e["data"].get("suppressed", 0) > 0 for e in dns), dns[-3:])
        self.daemon.wait_healthy(5)


def up_host():
    return "127.0.0.2"


if __name__ == "__main__":
    harness.main()
