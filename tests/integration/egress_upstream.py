"""A local stand-in for "the internet" for the egress tests: an HTTPS server (its own test CA,
a wildcard certificate for *.example.test) and a plain HTTP server, both on 127.0.0.2, serving
an echo endpoint (which records what it received, so a test can see the real secret arrive)
and static files: a git repository for the dumb HTTP protocol, a PyPI-style simple index with
one wheel, and a large file for bandwidth checks; and a WebSocket echo endpoint (/ws, RFC 6455
by hand). Only the standard library, git and openssl.
"""

import base64
import hashlib
import http.server
import io
import json
import os
import socketserver
import struct
import ssl
import subprocess
import threading
import zipfile

HOST = "127.0.0.2"


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC11B85"


def ws_read_frame(rfile):
    """(fin, opcode, payload) of one frame from a client (masked), or None at EOF."""
    head = rfile.read(2)
    if len(head) < 2:
        return None
    fin, opcode, masked, n = head[0] & 0x80, head[0] & 0x0f, head[1] & 0x80, head[1] & 0x7f
    if n == 126:
        n = struct.unpack(">H", rfile.read(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", rfile.read(8))[0]
    key = rfile.read(4) if masked else b"\0\0\0\0"
    data = rfile.read(n)
    return bool(fin), opcode, bytes(b ^ key[i % 4] for i, b in enumerate(data))


def ws_frame(opcode, payload, fin=True, rsv=0, mask=None):
    """One frame; `mask` (4 bytes) for a client's frames."""
    head = bytes([(0x80 if fin else 0) | rsv | opcode])
    m = 0x80 if mask else 0
    if len(payload) < 126:
        head += bytes([m | len(payload)])
    elif len(payload) < 65536:
        head += bytes([m | 126]) + struct.pack(">H", len(payload))
    else:
        head += bytes([m | 127]) + struct.pack(">Q", len(payload))
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        head += mask
    return head + payload


def make_test_ca(d):
    """Test CA and a leaf for *.example.test (+ example.test) under `d`; returns paths."""
    def run(*args):
        subprocess.run(args, check=True, capture_output=True, cwd=d)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=SPACE egress test upstream CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=example.test")
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=DNS:*.example.test,DNS:example.test\n"
                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                "keyUsage=critical,digitalSignature\n")
    run("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "srv.crt", "-days", "2", "-extfile", "ext.cnf")
    return {k: os.path.join(d, v) for k, v in
            {"ca": "ca.crt", "cert": "srv.crt", "key": "srv.key"}.items()}


def make_wheel(dest_dir, name="spacedemo", version="1.0"):
    """A minimal pure-Python wheel; returns its file name."""
    files = {
        "%s/__init__.py" % name: b"VALUE = 42\n",
        "%s-%s.dist-info/METADATA" % (name, version):
            ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)).encode(),
        "%s-%s.dist-info/WHEEL" % (name, version):
            b"Wheel-Version: 1.0\nGenerator: space-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record_path = "%s-%s.dist-info/RECORD" % (name, version)
    record.append(record_path + ",,")
    files[record_path] = ("\n".join(record) + "\n").encode()
    whl = "%s-%s-py3-none-any.whl" % (name, version)
    with zipfile.ZipFile(os.path.join(dest_dir, whl), "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return whl


def make_npm_package(root, name="npmdemo", version="1.0.0"):
    """A one-package npm registry as static files: the packument at /<name> and the tarball."""
    import tarfile
    pkg_dir = os.path.join(root, name, "-")
    os.makedirs(pkg_dir)
    tgz = os.path.join(pkg_dir, "%s-%s.tgz" % (name, version))
    files = {"package/package.json": json.dumps({"name": name, "version": version,
                                                 "main": "index.js"}).encode(),
             "package/index.js": b"module.exports = 42;\n"}
    with tarfile.open(tgz, "w:gz") as t:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    data = open(tgz, "rb").read()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    url = "https://npm.example.test/%s/-/%s-%s.tgz" % (name, name, version)
    packument = {"name": name, "dist-tags": {"latest": version},
                 "versions": {version: {"name": name, "version": version,
                                        "dist": {"tarball": url,
                                                 "shasum": hashlib.sha1(data).hexdigest(),
                                                 "integrity": integrity}}}}
    # Served at /npmdemo (a file next to the directory of the same name would clash, so the
    # handler maps /npmdemo to npmdemo.json).
    with open(os.path.join(root, name + ".json"), "w") as f:
        json.dump(packument, f)


def make_site(root):
    """Static content: hello.txt, a git repo (dumb HTTP), a simple index, a 1 MiB file."""
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "hello.txt"), "w") as f:
        f.write("hello from upstream\n")
    with open(os.path.join(root, "big.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    src = os.path.join(root, "..", "repo-src")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.test",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.test",
               GIT_CONFIG_NOSYSTEM="1", HOME=root)
    subprocess.run(["git", "init", "-q", "-b", "main", src], check=True, env=env)
    with open(os.path.join(src, "README"), "w") as f:
        f.write("cloned through the SPACE gateway\n")
    subprocess.run(["git", "-C", src, "add", "README"], check=True, env=env)
    subprocess.run(["git", "-C", src, "commit", "-q", "-m", "first"], check=True, env=env)
    bare = os.path.join(root, "repo.git")
    subprocess.run(["git", "clone", "-q", "--bare", src, bare], check=True, env=env)
    subprocess.run(["git", "-C", bare, "update-server-info"], check=True, env=env)
    make_npm_package(root)
    os.makedirs(os.path.join(root, "packages"))
    whl = make_wheel(os.path.join(root, "packages"))
    with open(os.path.join(root, "packages", whl), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    os.makedirs(os.path.join(root, "simple", "spacedemo"))
    with open(os.path.join(root, "simple", "spacedemo", "index.html"), "w") as f:
        f.write('<!DOCTYPE html><html><body><a href="../../packages/%s#sha256=%s">%s</a>'
                '</body></html>\n' % (whl, digest, whl))


class Upstream:
    """Both servers, started on free ports of 127.0.0.2. `received` lists the echo requests."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.certs = make_test_ca(workdir)
        self.site = os.path.join(workdir, "site")
        make_site(self.site)
        self.received = []
        self.lock = threading.Lock()
        self.servers = []

    def _handler(self):
        up = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out separately

            def __init__(self, *a, **kw):
                super().__init__(*a, directory=up.site, **kw)

            def log_message(self, *a):
                pass

            def _echo(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                rec = {"method": self.command, "path": self.path,
                       "host": self.headers.get("Host"),
                       "headers": {k.lower(): v for k, v in self.headers.items()},
                       "body": body.decode("utf-8", "replace")}
                with up.lock:
                    up.received.append(rec)
                out = json.dumps(rec).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                # Echo the credential back in a header too: the gateway must redact it.
                self.send_header("X-Echo-Authorization", self.headers.get("Authorization", ""))
                self.end_headers()
                self.wfile.write(out)

            def _websocket(self):
                """Echo: the handshake's Authorization and extensions offered come first, as
                text; then each message back. "fragment:X" comes back in two frames with a ping
                between, cut in the middle of X; "rsv" gets a frame with RSV1 set."""
                rec = {"method": "GET", "path": self.path, "host": self.headers.get("Host"),
                       "headers": {k.lower(): v for k, v in self.headers.items()}, "body": ""}
                with up.lock:
                    up.received.append(rec)
                accept = base64.b64encode(hashlib.sha1(
                    (self.headers["Sec-WebSocket-Key"] + WS_GUID).encode()).digest()).decode()
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept)
                self.end_headers()
                self.wfile.flush()
                w = self.wfile
                w.write(ws_frame(1, ("auth:%s ext:%s" % (
                    self.headers.get("Authorization", ""),
                    self.headers.get("Sec-WebSocket-Extensions", ""))).encode()))
                w.flush()
                msg, op = b"", 1
                while True:
                    f = ws_read_frame(self.rfile)
                    if f is None:
                        break
                    fin, opcode, data = f
                    if opcode == 8:
                        w.write(ws_frame(8, data[:2]))
                        w.flush()
                        break
                    if opcode == 9:
                        w.write(ws_frame(10, data))
                        continue
                    if opcode in (1, 2):
                        msg, op = data, opcode
                    elif opcode == 0:
                        msg += data
                    if not fin:
                        continue
                    if msg.startswith(b"fragment:"):
                        cut = len(b"fragment:") + (len(msg) - len(b"fragment:")) // 2
                        w.write(ws_frame(op, msg[:cut], fin=False) + ws_frame(9, b"between") +
                                ws_frame(0, msg[cut:]))
                    elif msg == b"rsv":
                        w.write(ws_frame(op, b"compressed?", rsv=0x40))
                    else:
                        w.write(ws_frame(op, msg))
                    w.flush()
                self.close_connection = True

            def do_GET(self):
                if self.path.startswith("/ws") and \
                        self.headers.get("Upgrade", "").lower() == "websocket":
                    return self._websocket()
                if self.path.split("?")[0] in ("/npmdemo", "/npmdemo/"):
                    self.path = "/npmdemo.json"
                if self.path.startswith("/echo") or self.path.startswith("/public/") or \
                        self.path.startswith("/private"):
                    return self._echo()
                return super().do_GET()

            def do_POST(self):
                return self._echo()

        return Handler

    def start(self):
        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass  # clients the gateway cut off (refused requests) are expected here

        tls = Server((HOST, 0), self._handler())
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.certs["cert"], self.certs["key"])
        tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
        plain = Server((HOST, 0), self._handler())
        for s in (tls, plain):
            threading.Thread(target=s.serve_forever, daemon=True).start()
            self.servers.append(s)
        self.https_port = tls.server_address[1]
        self.http_port = plain.server_address[1]
        return self

    def stop(self):
        for s in self.servers:
            s.shutdown()
            s.server_close()

    def echoes(self):
        with self.lock:
            return list(self.received)
