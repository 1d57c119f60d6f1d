"""A sandbox's own ports through the E2B door (src/e2b/port_proxy.cc): what E2B's
`sandbox.getHost(port)` gives, "<port>-<sandboxId>.<domain>", or the headers E2b-Sandbox-Id and
E2b-Sandbox-Port, as an HTTP/1.1 reverse proxy (WebSocket upgrades included) to servers started
inside a sandbox made with E2B's OFFICIAL JS SDK (npm `e2b`, pinned in tests/e2b), given only
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY. Requests are raw http.client or sockets."""
import base64
import hashlib
import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import time

from e2b_support import E2B_DIR, E2bDoorTestCase
from harness import RssSampler, main, wait_for

DOMAIN = "e2b.localhost"
BIG = 24 << 20  # the large response, streamed through the door

# Servers inside the sandbox (python3 stdlib): `echo PORT` answers any request with what it got
# (method, target, headers, the body's length and SHA-256; chunked request bodies decoded) and
# serves /chunked as a chunked response and /hang as 10 bytes of 100, then silence; `ws PORT` answers a WebSocket handshake and echoes
# text and binary frames; `big PORT` serves BIG bytes of a fixed pattern at any path.
SERVERS = r'''
import base64, hashlib, json, socketserver, struct, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BIG = %d

def pattern(n):
    block = bytes(range(256)) * 4096
    out = bytearray()
    while len(out) < n:
        out += block
    return bytes(out[:n])

class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n)
    def any(self):
        body = self.body()
        if self.path == "/hang":  # a head and 10 of 100 bytes, then silence
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"0123456789")
            self.wfile.flush()
            time.sleep(600)
            return
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"one ", b"two ", b"three"):
                self.wfile.write(b"%%x\r\n%%s\r\n" %% (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        out = json.dumps({"method": self.command, "path": self.path,
                          "headers": [[k, v] for k, v in self.headers.items()],
                          "len": len(body), "sha": hashlib.sha256(body).hexdigest(),
                          "text": body[:200].decode("latin-1")}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-Echo", "yes")
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_DELETE = any

class Big(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        data = pattern(BIG)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        for i in range(0, len(data), 1 << 16):
            self.wfile.write(data[i:i + (1 << 16)])

class Ws(socketserver.StreamRequestHandler):
    def handle(self):
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            c = self.rfile.read(1)
            if not c:
                return
            head += c
        fields = {}
        for line in head.decode().split("\r\n")[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k.strip().lower()] = v.strip()
        key = fields.get("sec-websocket-key", "")
        accept = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                          "Connection: Upgrade\r\nSec-WebSocket-Accept: %%s\r\n"
                          "X-Saw-Host: %%s\r\n\r\n" %% (accept, fields.get("host", ""))).encode())
        self.wfile.flush()
        while True:
            h = self.rfile.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", self.rfile.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self.rfile.read(8))[0]
            mask = self.rfile.read(4) if h[1] & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i %% 4] for i, b in enumerate(self.rfile.read(n)))
            if op == 8:
                self.wfile.write(b"\x88\x00")
                return
            out = bytes([0x80 | op])
            out += bytes([len(data)]) if len(data) < 126 else b"\x7e" + struct.pack(">H", len(data))
            self.wfile.write(out + data)
            self.wfile.flush()

class TS(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

kind, port = sys.argv[1], int(sys.argv[2])
if kind == "ws":
    TS(("0.0.0.0", port), Ws).serve_forever()
else:
    ThreadingHTTPServer(("0.0.0.0", port), Echo if kind == "echo" else Big).serve_forever()
''' % BIG

# Makes the sandbox through the SDK and starts the servers; leaves it running.
SETUP = r"""
import { Sandbox } from "e2b";
const sbx = await Sandbox.create({ timeoutMs: 1200000 });
await sbx.files.write("/tmp/www/hello.txt", "hello through the door\n");
await sbx.files.write("/tmp/servers.py", %s);
const bg = async (cmd) => { const h = await sbx.commands.run(cmd, { background: true });
                            await h.disconnect(); };
await bg("cd /tmp/www && exec python3 -m http.server 8000");
await bg("exec python3 /tmp/servers.py echo 8001");
await bg("exec python3 /tmp/servers.py ws 8002");
await bg("exec python3 /tmp/servers.py big 8003");
console.log("RESULT " + JSON.stringify({
  id: sbx.sandboxId, envd: sbx.envdAccessToken, traffic: sbx.trafficAccessToken,
  host: sbx.getHost(8000), domain: sbx.sandboxDomain }));
"""


def pattern(n):
    block = bytes(range(256)) * 4096
    out = bytearray()
    while len(out) < n:
        out += block
    return bytes(out[:n])


class E2bPortsTest(E2bDoorTestCase):
    """HTTP and WebSockets to a sandbox's ports through the door; its auth and errors."""

    E2B_DOMAIN = DOMAIN

    @classmethod
    def prepare_class(cls):
        super().prepare_class()
        nenv = cls.e2b_env()
        p = subprocess.run(["node", "--input-type=module", "-e",
                            SETUP % json.dumps(SERVERS)], cwd=E2B_DIR, env=nenv,
                           capture_output=True, text=True, timeout=180)
        lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode != 0 or not lines:
            raise AssertionError("node failed (rc %s):\n%s\n%s" %
                                 (p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
        cls.sbx = json.loads(lines[-1][len("RESULT "):])
        cls.sid = cls.sbx["id"]
        cls.token = cls.sbx["envd"]
        # The servers take a moment to listen.
        for port in (8000, 8001, 8002, 8003):
            deadline = time.monotonic() + 30
            while True:
                st, _, body = cls.request_cls("HEAD" if port == 8003 else "GET", "/", port=port,
                                              upgrade_probe=port == 8002)
                if st != 502:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError("port %d never came up: %r" % (port, body))
                time.sleep(0.2)

    stopped = False

    def tearDown(self):
        if not self.stopped:
            self.assertTrue(self.daemon.alive(), "spaced died:\n%s" % self.daemon.log_tail())

    # -- helpers ------------------------------------------------------------------------------

    @classmethod
    def request_cls(cls, method, path, port=8000, body=None, headers=None, token=True,
                    upgrade_probe=False, chunked=False):
        h = {"E2b-Sandbox-Id": cls.sid, "E2b-Sandbox-Port": str(port)}
        if token is True:
            h["X-Access-Token"] = cls.token
        elif token:
            h["X-Access-Token"] = token
        if upgrade_probe:
            # The WebSocket server answers only upgrades; a probe is one, closed at once.
            h.update({"Connection": "Upgrade", "Upgrade": "websocket",
                      "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
                      "Sec-WebSocket-Version": "13"})
        h.update(headers or {})
        c = http.client.HTTPConnection("127.0.0.1", cls.e2b_port, timeout=60)
        try:
            c.request(method, path, body=body, headers=h, encode_chunked=chunked)
            r = c.getresponse()
            if r.status == 101:
                return 101, dict((k.lower(), v) for k, v in r.getheaders()), b""
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
        finally:
            c.close()

    def request(self, *a, **kw):
        return self.request_cls(*a, **kw)

    def echo(self, *a, **kw):
        st, hdrs, body = self.request(*a, port=8001, **kw)
        self.assertIn(st, (200, 201), body)
        j = json.loads(body)
        j["hmap"] = dict((k.lower(), v) for k, v in j["headers"])
        return st, hdrs, j

    def ws_connect(self, host_routing=False, early=b""):
        s = socket.create_connection(("127.0.0.1", self.e2b_port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        if host_routing:
            route = "Host: 8002-%s.%s\r\n" % (self.sid, DOMAIN)
        else:
            route = "Host: 127.0.0.1\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 8002\r\n" % self.sid
        req = ("GET /chat HTTP/1.1\r\n%sX-Access-Token: %s\r\nConnection: Upgrade\r\n"
               "Upgrade: websocket\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
               "\r\n" % (route, self.token, key)).encode()
        s.sendall(req + early)
        head = b""
        while b"\r\n\r\n" not in head:
            c = s.recv(1)
            self.assertTrue(c, "connection closed during the handshake: %r" % head)
            head += c
        want = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        return s, head.decode(), want

    @staticmethod
    def frame(data, op=1):
        mask = os.urandom(4)
        n = len(data)
        h = bytes([0x80 | op]) + (bytes([0x80 | n]) if n < 126 else
                                  bytes([0x80 | 126]) + struct.pack(">H", n))
        return h + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    @staticmethod
    def read_frame(s):
        def exact(n):
            out = b""
            while len(out) < n:
                c = s.recv(n - len(out))
                if not c:
                    raise AssertionError("connection closed mid-frame")
                out += c
            return out
        h = exact(2)
        n = h[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", exact(2))[0]
        return h[0] & 0x0F, exact(n)

    # -- HTTP ---------------------------------------------------------------------------------

    def test_get_file_by_headers(self):
        st, hdrs, body = self.request("GET", "/hello.txt")
        self.assertEqual(st, 200, body)
        self.assertEqual(body, b"hello through the door\n")
        self.assertEqual(hdrs.get("connection"), "close")
        self.assertIn("SimpleHTTP", hdrs.get("server", ""), "the upstream's own head")
        # The E2B traffic token header works as well as X-Access-Token.
        st, _, body = self.request("GET", "/hello.txt", token=False,
                                   headers={"E2B-Traffic-Access-Token": self.sbx["traffic"]})
        self.assertEqual((st, body), (200, b"hello through the door\n"))
        # The server's own 404 comes through as it is.
        st, _, body = self.request("GET", "/missing.txt")
        self.assertEqual(st, 404, body)
        # /health of a user's port is the user's server's, with the token like any other path.
        st, _, _ = self.request("GET", "/health", token=False)
        self.assertEqual(st, 401)
        st, _, _ = self.request("GET", "/health")
        self.assertEqual(st, 404, "python's http.server has no /health")

    def test_get_by_host(self):
        host = "8000-%s.%s" % (self.sid, DOMAIN)
        for h in (host, host + ":%d" % self.e2b_port):
            c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=30)
            try:
                c.request("GET", "/hello.txt", headers={"Host": h, "X-Access-Token": self.token})
                r = c.getresponse()
                self.assertEqual((r.status, r.read()), (200, b"hello through the door\n"))
            finally:
                c.close()
        # The upstream sees the Host the client sent.
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=30)
        try:
            c.request("GET", "/x?y=1", headers={"Host": "8001-%s.%s" % (self.sid, DOMAIN),
                                                "X-Access-Token": self.token})
            r = c.getresponse()
            j = json.loads(r.read())
            self.assertEqual(r.status, 200)
            self.assertEqual(dict(j["headers"])["Host"], "8001-%s.%s" % (self.sid, DOMAIN))
            self.assertEqual(j["path"], "/x?y=1")
        finally:
            c.close()

    def test_sdk_get_host(self):
        self.assertEqual(self.sbx["domain"], DOMAIN)
        self.assertEqual(self.sbx["host"], "8000-%s.%s" % (self.sid, DOMAIN))

    def test_post_with_content_length(self):
        data = os.urandom(300000)
        st, hdrs, j = self.echo("POST", "/upload?x=1", body=data,
                                headers={"Content-Type": "application/octet-stream",
                                         "X-Custom": "kept", "Keep-Alive": "timeout=5",
                                         "Connection": "keep-alive, X-Drop-Me",
                                         "X-Drop-Me": "hop"})
        self.assertEqual(st, 201)
        self.assertEqual(hdrs.get("x-echo"), "yes")
        self.assertEqual(j["method"], "POST")
        self.assertEqual(j["path"], "/upload?x=1")
        self.assertEqual(j["len"], len(data))
        self.assertEqual(j["sha"], hashlib.sha256(data).hexdigest())
        h = j["hmap"]
        self.assertEqual(h["content-length"], str(len(data)))
        self.assertEqual(h["x-custom"], "kept")
        self.assertEqual(h["connection"], "close")
        self.assertEqual(h["host"], "127.0.0.1:%d" % self.e2b_port)
        for gone in ("x-access-token", "e2b-sandbox-id", "e2b-sandbox-port", "keep-alive",
                     "x-drop-me", "transfer-encoding"):
            self.assertNotIn(gone, h)

    def test_post_chunked(self):
        parts = [b"first part, ", os.urandom(70000), b"", b"last"]
        st, _, j = self.echo("POST", "/chunks", body=iter(parts), chunked=True,
                             headers={"Content-Type": "application/octet-stream"})
        data = b"".join(parts)
        self.assertEqual(j["len"], len(data))
        self.assertEqual(j["sha"], hashlib.sha256(data).hexdigest())
        self.assertEqual(j["hmap"].get("transfer-encoding"), "chunked")
        self.assertNotIn("content-length", j["hmap"])
        # Expect: 100-continue: the door answers it; the upstream gets the body plainly.
        st, _, j = self.echo("PUT", "/cont", body=b"x" * 1000,
                             headers={"Expect": "100-continue"})
        self.assertEqual((j["method"], j["len"]), ("PUT", 1000))
        self.assertNotIn("expect", j["hmap"])

    def test_chunked_response(self):
        st, hdrs, body = self.request("GET", "/chunked", port=8001)
        self.assertEqual(st, 200)
        self.assertEqual(hdrs.get("transfer-encoding"), "chunked")
        self.assertEqual(body, b"one two three")

    def test_large_response_streams(self):
        sampler = RssSampler(self.daemon.pid)
        sampler.start()
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=60)
            c.request("GET", "/big", headers={"E2b-Sandbox-Id": self.sid,
                                              "E2b-Sandbox-Port": "8003",
                                              "X-Access-Token": self.token})
            r = c.getresponse()
            self.assertEqual(r.status, 200, r.read() if r.status != 200 else "")
            self.assertEqual(r.getheader("Content-Length"), str(BIG))
            h = hashlib.sha256()
            got = 0
            first = True
            while True:
                piece = r.read(1 << 16)
                if not piece:
                    break
                if first:
                    time.sleep(1)  # a slow reader: the door must not buffer the rest
                    first = False
                h.update(piece)
                got += len(piece)
            c.close()
        finally:
            grew = sampler.stop()
        self.assertEqual(got, BIG)
        self.assertEqual(h.hexdigest(), hashlib.sha256(pattern(BIG)).hexdigest())
        self.assertLess(grew, BIG // 2, "spaced buffered the response (RSS grew %d)" % grew)

    # -- WebSockets ---------------------------------------------------------------------------

    def test_websocket_echo(self):
        for host_routing in (False, True):
            # A first frame sent with the handshake (before the 101) must not be lost.
            s, head, want = self.ws_connect(host_routing, early=self.frame(b"early bird"))
            try:
                self.assertTrue(head.startswith("HTTP/1.1 101"), head)
                self.assertIn("Sec-WebSocket-Accept: " + want, head)
                if host_routing:
                    self.assertIn("X-Saw-Host: 8002-%s.%s" % (self.sid, DOMAIN), head)
                self.assertEqual(self.read_frame(s), (1, b"early bird"))
                for msg in (b"hello", os.urandom(5000), b"x" * 125):
                    s.sendall(self.frame(msg, op=2))
                    self.assertEqual(self.read_frame(s), (2, msg))
                s.sendall(self.frame(b"", op=8))
                self.assertEqual(self.read_frame(s), (8, b""))
                s.settimeout(10)
                self.assertEqual(s.recv(10), b"", "the door closes once the upstream has")
            finally:
                s.close()

    def test_websocket_ends_when_its_token_is_revoked(self):
        """A relay re-checks the API token behind its envd token about once a second: revoked,
        the open WebSocket is cut (new requests were refused already)."""
        from harness import SPACE
        env = dict(os.environ, SPACE_SOCKET=self.daemon.socket)
        p = subprocess.run([SPACE, "token", "create", "--name", "e2b-ports-revoked", "--ttl",
                            "1h", "--profile", "test", "--op", "read", "--op", "exec", "--op",
                            "lifecycle"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        tok = p.stdout.strip()
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=60)
        try:
            c.request("POST", "/v2/sandboxes/%s/connect" % self.sid, body=json.dumps({}),
                      headers={"X-API-KEY": "e2b_" + tok[4:16] + tok[17:],
                               "Content-Type": "application/json"})
            r = c.getresponse()
            j = json.loads(r.read())
            self.assertIn(r.status, (200, 201), j)
        finally:
            c.close()
        saved, self.token = self.token, j["envdAccessToken"]
        try:
            s, head, _ = self.ws_connect()
        finally:
            self.token = saved
        try:
            self.assertTrue(head.startswith("HTTP/1.1 101"), head)
            s.sendall(self.frame(b"before"))
            self.assertEqual(self.read_frame(s), (1, b"before"))
            p = subprocess.run([SPACE, "token", "rm", tok[4:16]], env=env, capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            s.settimeout(10)
            t0 = time.monotonic()
            self.assertEqual(s.recv(10), b"", "the relay is cut")
            self.assertLess(time.monotonic() - t0, 5)
        finally:
            s.close()

    # -- auth and errors ----------------------------------------------------------------------

    def test_token_required(self):
        st, _, body = self.request("GET", "/hello.txt", token=False)
        self.assertEqual(st, 401, body)
        self.assertEqual(json.loads(body)["code"], 401)
        st, _, body = self.request("GET", "/hello.txt", token="nope")
        self.assertEqual(st, 401, body)
        # The right API token's id with a wrong HMAC.
        tid = self.token.split(".")[0]
        st, _, body = self.request("GET", "/hello.txt", token=tid + "." + "0" * 64)
        self.assertEqual(st, 401, body)
        # By Host, without a token.
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=30)
        try:
            c.request("GET", "/hello.txt", headers={"Host": "8000-%s.%s" % (self.sid, DOMAIN)})
            r = c.getresponse()
            self.assertEqual(r.status, 401, r.read())
        finally:
            c.close()
        # No upgrade either.
        s = socket.create_connection(("127.0.0.1", self.e2b_port), timeout=30)
        try:
            s.sendall(("GET / HTTP/1.1\r\nHost: 8002-%s.%s\r\nConnection: Upgrade\r\n"
                       "Upgrade: websocket\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n"
                       "Sec-WebSocket-Version: 13\r\n\r\n" % (self.sid, DOMAIN)).encode())
            self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 401"))
        finally:
            s.close()

    def test_closed_port_is_502(self):
        st, hdrs, body = self.request("GET", "/", port=8009)
        self.assertEqual(st, 502, body)
        j = json.loads(body)
        self.assertEqual(j["code"], 502)
        self.assertIn("port 8009", j["message"])
        self.assertIn("nothing listens", j["message"])
        self.assertEqual((j["sandboxId"], j["port"]), (self.sid, 8009))

    def test_bad_port_is_400(self):
        for bad in ("0", "65536", "99999", "http"):
            st, _, body = self.request("GET", "/", headers={"E2b-Sandbox-Port": bad})
            self.assertEqual(st, 400, (bad, body))
            self.assertIn("1-65535", json.loads(body)["message"])

    def test_sandbox_gone_is_502(self):
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=60)
        try:
            c.request("POST", "/sandboxes", body=json.dumps({"templateID": "base"}),
                      headers={"X-API-KEY": self.key, "Content-Type": "application/json"})
            r = c.getresponse()
            j = json.loads(r.read())
            self.assertEqual(r.status, 201, j)
        finally:
            c.close()
        sid, token = j["sandboxID"], j["envdAccessToken"]
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=60)
        try:
            c.request("DELETE", "/sandboxes/" + sid, headers={"X-API-KEY": self.key})
            r = c.getresponse()
            r.read()
            self.assertIn(r.status, (200, 204))
        finally:
            c.close()
        c = http.client.HTTPConnection("127.0.0.1", self.e2b_port, timeout=60)
        try:
            c.request("GET", "/", headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "8000",
                                           "X-Access-Token": token})
            r = c.getresponse()
            body = r.read()
            self.assertEqual(r.status, 502, body)
            self.assertEqual(json.loads(body)["code"], 502)
        finally:
            c.close()

    def hang(self):
        """A connection through the door to /hang, its head and first bytes read."""
        s = socket.create_connection(("127.0.0.1", self.e2b_port), timeout=120)
        s.sendall(("GET /hang HTTP/1.1\r\nHost: 8001-%s.%s\r\nX-Access-Token: %s\r\n\r\n" %
                   (self.sid, DOMAIN, self.token)).encode())
        got = b""
        while not got.endswith(b"0123456789"):
            c = s.recv(100)
            self.assertTrue(c, got)
            got += c
        self.assertTrue(got.startswith(b"HTTP/1.1 200"), got)
        return s

    @staticmethod
    def until_closed(s):
        """Reads `s` to its end; the seconds that took."""
        t0 = time.monotonic()
        while True:
            try:
                if not s.recv(4096):
                    break
            except ConnectionResetError:
                break
        return time.monotonic() - t0

    def test_idle_relays_end(self):
        """Nothing moving either way for the listener's body timeout (60 s) ends a relayed
        response and a WebSocket."""
        http_sock = self.hang()
        ws, head, _ = self.ws_connect()
        self.assertTrue(head.startswith("HTTP/1.1 101"), head)
        try:
            waited = self.until_closed(http_sock)
            self.assertGreater(waited, 45)
            self.assertLess(waited, 80)
            ws.settimeout(30)
            self.assertLess(self.until_closed(ws), 20, "the WebSocket ends about as soon")
        finally:
            http_sock.close()
            ws.close()

    def settled_fd_count(self):
        """spaced's fd count once it has held still for half a second (an earlier test's
        connections may still be closing when this one starts)."""
        last, since = self.daemon.fd_count(), time.monotonic()
        deadline = since + 10
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.daemon.fd_count()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= 0.5:
                break
        return last

    def test_client_leaving_ends_relay(self):
        """A client that hangs up on a silent upstream frees the door's connection to it."""
        base = self.settled_fd_count()
        s = self.hang()
        self.assertGreaterEqual(self.daemon.fd_count(), base + 2, "client and upstream")
        s.close()
        wait_for(lambda: self.daemon.fd_count() <= base, timeout=10,
                 what="spaced to close both connections")

    def test_zy_log_has_no_error(self):
        errors = [l for l in self.daemon.log_text().splitlines()
                  if '"level":"error"' in l or '"level":"critical"' in l]
        self.assertEqual(errors, [])

    def test_zz_stop_ends_relays(self):
        """spaced's stop cuts open relays at once (runs last: it stops the class's daemon)."""
        http_sock = self.hang()
        ws, head, _ = self.ws_connect()
        self.assertTrue(head.startswith("HTTP/1.1 101"), head)
        try:
            t0 = time.monotonic()
            self.daemon.proc.send_signal(signal.SIGTERM)
            http_sock.settimeout(30)
            ws.settimeout(30)
            self.until_closed(http_sock)
            self.until_closed(ws)
            self.assertLess(time.monotonic() - t0, 10)
            self.assertEqual(self.daemon.proc.wait(30), 0)
        finally:
            http_sock.close()
            ws.close()
        errors = [l for l in self.daemon.log_text().splitlines()
                  if '"level":"error"' in l or '"level":"critical"' in l]
        self.assertEqual(errors, [])
        self.stopped = True


if __name__ == "__main__":
    main()
