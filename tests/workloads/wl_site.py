"""The workload suite's "internet": one HTTPS server on 127.0.0.2 (the integration suite's test
CA, a wildcard certificate for *.example.test) that every test host name resolves to through
the gateway's `resolve` override. It records the Host of every request, so a test can tell that
a denied host was never reached, and serves:

- `/` a page painted in one solid colour (COLOUR) that also asks a denied host for an image and
  a script and writes their onerror into the DOM (`#img`, `#script`);
- `/ws.html` a page that opens a WebSocket back to its own host, sends "hello", writes the
  echo into the DOM (`#ws`) and answers "got:<echo>"; its `/wait` image holds the page's load
  event until that answer arrived (so `--dump-dom`, which dumps at load, sees the result);
- `/ws` the WebSocket echo server (RFC 6455, text frames, standard library only);
- `/simple/...`, `/packages/...` a PEP 503 index with one wheel, and `/npmdemo` a one-package
  npm registry (test_tools.py); on a host `auth` names, every path answers 401 without that
  exact Authorization value;
- anything else under `site/` as static files.

Only the standard library and openssl (through egress_upstream.make_test_ca).
"""

import base64
import hashlib
import http.server
import json
import os
import socketserver
import ssl
import struct
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from egress_upstream import HOST, make_npm_package, make_test_ca, make_wheel  # noqa: E402

COLOUR = (0x1E, 0x90, 0xFF)  # dodger blue: the page's one colour, checked in the screenshot
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

INDEX = """<!DOCTYPE html>
<html><head><title>space workload site</title>
<style>html,body{margin:0;height:100%%;overflow:hidden;background:#%02x%02x%02x}</style></head>
<body><p id="img">img-pending</p><p id="script">script-pending</p>
<img src="https://%s/pixel.png" onload="img.textContent='img-loaded'"
     onerror="img.textContent='img-error'">
<script src="https://%s/evil.js" onload="script.textContent='script-loaded'"
        onerror="script.textContent='script-error'"></script>
</body></html>
"""

WS_PAGE = """<!DOCTYPE html>
<html><head><title>ws</title></head><body><p id="ws">ws-pending</p>
<script>
const out = document.getElementById('ws');
const tag = Math.random().toString(36).slice(2);
try {
  const ws = new WebSocket('wss://' + location.host + '/ws?tag=' + tag);
  ws.onopen = () => ws.send('hello');
  ws.onmessage = (e) => { out.textContent = 'ws:' + e.data; ws.send('got:' + e.data); };
  ws.onerror = () => { out.textContent = 'ws-error'; };
} catch (e) { out.textContent = 'ws-exception:' + e; }
const img = new Image();  // holds the load event until the server saw "got:..." (or 8 s)
img.src = '/wait?tag=' + tag;
document.body.appendChild(img);
</script></body></html>
"""


def ws_frame(payload, opcode=1):
    """A server frame (never masked): FIN, opcode, payload."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def ws_read(rfile):
    """One client frame: (opcode, payload) or None at EOF. Clients must mask."""
    h = rfile.read(2)
    if len(h) < 2:
        return None
    opcode, n = h[0] & 0x0F, h[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", rfile.read(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", rfile.read(8))[0]
    mask = rfile.read(4) if h[1] & 0x80 else b"\0\0\0\0"
    data = rfile.read(n)
    return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(data))


class Site:
    """The server; `hosts` lists the Host header of every request, `ws` every WebSocket text
    message received. `auth` maps a host name to the Authorization value it requires."""

    def __init__(self, workdir, denied_host):
        self.workdir = workdir
        self.certs = make_test_ca(workdir)
        self.root = os.path.join(workdir, "site")
        os.makedirs(self.root, exist_ok=True)
        with open(os.path.join(self.root, "index.html"), "w") as f:
            f.write(INDEX % (COLOUR + (denied_host, denied_host)))
        with open(os.path.join(self.root, "ws.html"), "w") as f:
            f.write(WS_PAGE)
        make_npm_package(self.root)
        os.makedirs(os.path.join(self.root, "packages"))
        whl = make_wheel(os.path.join(self.root, "packages"))
        with open(os.path.join(self.root, "packages", whl), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        os.makedirs(os.path.join(self.root, "simple", "spacedemo"))
        with open(os.path.join(self.root, "simple", "spacedemo", "index.html"), "w") as f:
            f.write('<!DOCTYPE html><html><body><a href="../../packages/%s#sha256=%s">%s</a>'
                    '</body></html>\n' % (whl, digest, whl))
        self.auth = {}
        self.hosts = []
        self.ws = []
        self.requests = []
        self.lock = threading.Lock()
        self.got = {}  # WebSocket tag -> threading.Event, set on "got:..."
        self.server = None

    def event(self, tag):
        with self.lock:
            return self.got.setdefault(tag, threading.Event())

    def _handler(self):
        site = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def __init__(self, *a, **kw):
                super().__init__(*a, directory=site.root, **kw)

            def log_message(self, *a):
                pass

            def end_headers(self):
                self.send_header("Cache-Control", "no-store")
                super().end_headers()

            def do_GET(self):
                with site.lock:
                    site.hosts.append(self.headers.get("Host", ""))
                    site.requests.append({"path": self.path, "host": self.headers.get("Host"),
                                          "authorization": self.headers.get("Authorization")})
                path, _, query = self.path.partition("?")
                params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
                want = site.auth.get(self.headers.get("Host", "").split(":")[0])
                if want is not None and self.headers.get("Authorization") != want:
                    body = b"credentials required\n"
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="space"')
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if path == "/ws":
                    return self._websocket(params.get("tag", ""))
                if path == "/wait":
                    site.event(params.get("tag", "")).wait(8)
                    return self._send(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "image/gif")
                if path in ("/npmdemo", "/npmdemo/"):
                    self.path = "/npmdemo.json"
                return super().do_GET()

            def _send(self, body, ctype):
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _websocket(self, tag):
                # Answers any request carrying Sec-WebSocket-Key with 101, also one whose
                # Upgrade header a proxy dropped: a gateway that cannot carry the upgrade then
                # shows it by refusing the 101, which test_browser.py recognizes.
                key = self.headers.get("Sec-WebSocket-Key")
                if not key:
                    self.send_error(400, "not a WebSocket request")
                    return
                accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest())
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept.decode())
                self.end_headers()
                self.wfile.flush()
                self.close_connection = True
                while True:
                    frame = ws_read(self.rfile)
                    if frame is None or frame[0] == 8:  # EOF or close
                        try:
                            self.wfile.write(ws_frame(b"", 8))
                        except OSError:
                            pass
                        return
                    opcode, data = frame
                    if opcode != 1:
                        continue
                    text = data.decode("utf-8", "replace")
                    with site.lock:
                        site.ws.append(text)
                    if text.startswith("got:"):
                        site.event(tag).set()
                    else:
                        self.wfile.write(ws_frame(("echo:" + text).encode()))
                        self.wfile.flush()

        return Handler

    def start(self):
        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass  # clients cut off by the gateway or the browser are expected

        self.server = Server((HOST, 0), self._handler())
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.certs["cert"], self.certs["key"])
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def seen_hosts(self):
        with self.lock:
            return list(self.hosts)


def png_pixels(data):
    """Decodes an 8-bit RGB or RGBA PNG (what Chromium writes): (width, height, rows), each row a
    list of (r, g, b) tuples. Standard library only (zlib)."""
    import zlib
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG: %r" % data[:16]
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack("!I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            ihdr = struct.unpack("!IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        elif kind == b"IEND":
            break
    width, height, depth, ctype, _, _, interlace = ihdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, "unexpected PNG format %r" % (ihdr,)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows
