"""A local smart-HTTP git server for the workload suite and bench/git_clone.py: `git
http-backend` (CGI) behind a small HTTPS server on 127.0.0.2, with a certificate from the test
CA of tests/integration/egress_upstream.py. With a `token`, every request must carry it: as the
user or the password of a Basic credential, or as a Bearer token; anything else gets 401 with
`WWW-Authenticate: Basic` (so git asks its credential helper). Every Authorization it received is
kept (`seen_auth`), so a test can tell what reached it: the real token, or a placeholder.
Only the standard library and git.
"""

import base64
import http.server
import os
import socketserver
import ssl
import subprocess
import threading

HOST = "127.0.0.2"


def git(*args, cwd=None, env=None):
    e = dict(os.environ, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t",
             GIT_AUTHOR_EMAIL="t@example.test", GIT_COMMITTER_NAME="t",
             GIT_COMMITTER_EMAIL="t@example.test")
    e.update(env or {})
    return subprocess.run(["git"] + list(args), cwd=cwd, env=e, check=True,
                          capture_output=True).stdout


def make_repo(root, name="repo.git", files=None):
    """A bare repository `root`/`name` (pushes allowed) with one commit of `files`
    ({path: bytes}); returns its path."""
    src = os.path.join(root, name + ".src")
    git("init", "-q", "-b", "main", src)
    for path, data in (files or {"README": b"served by git http-backend\n"}).items():
        with open(os.path.join(src, path), "wb") as f:
            f.write(data)
    git("add", "-A", cwd=src)
    git("commit", "-q", "-m", "first", cwd=src)
    bare = os.path.join(root, name)
    git("clone", "-q", "--bare", src, bare)
    git("config", "http.receivepack", "true", cwd=bare)
    subprocess.run(["rm", "-rf", src], check=True)
    return bare


class GitServer:
    """git http-backend over HTTPS on a free port of 127.0.0.2, serving the repositories under
    `root`."""

    def __init__(self, root, cert, key, token=None):
        self.root, self.cert, self.key, self.token = root, cert, key, token
        self.seen_auth = []  # (host, Authorization or None) per request
        self.lock = threading.Lock()
        self.server = None

    def authorized(self, auth):
        if self.token is None:
            return True
        if not auth:
            return False
        scheme, _, cred = auth.partition(" ")
        cred = cred.strip()
        if scheme.lower() == "bearer":
            return cred == self.token
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(cred, validate=True).decode().partition(":")
            except ValueError:
                return False
            return self.token in (user, password)
        return False

    def _handler(self):
        srv = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

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
                return self.rfile.read(n) if n else b""

            def reply(self, status, headers, data):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def serve(self):
                data = self.body()
                auth = self.headers.get("Authorization")
                with srv.lock:
                    srv.seen_auth.append((self.headers.get("Host"), auth))
                if not srv.authorized(auth):
                    return self.reply(401, [("WWW-Authenticate", 'Basic realm="git"'),
                                            ("Content-Type", "text/plain")],
                                      b"a token is required\n")
                path, _, query = self.path.partition("?")
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                       "GIT_PROJECT_ROOT": srv.root, "GIT_HTTP_EXPORT_ALL": "1",
                       "GIT_CONFIG_NOSYSTEM": "1", "HOME": srv.root,
                       "REQUEST_METHOD": self.command, "PATH_INFO": path,
                       "QUERY_STRING": query, "REMOTE_USER": "token", "REMOTE_ADDR": "127.0.0.1",
                       "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                       "CONTENT_LENGTH": str(len(data))}
                for h in ("Content-Encoding", "Git-Protocol"):
                    if self.headers.get(h):
                        env["HTTP_" + h.upper().replace("-", "_")] = self.headers[h]
                p = subprocess.run(["git", "http-backend"], input=data, env=env,
                                   capture_output=True)
                head, _, out = p.stdout.partition(b"\r\n\r\n")
                status, headers = 200, []
                for line in head.decode("latin-1").split("\r\n"):
                    k, _, v = line.partition(":")
                    if k.lower() == "status":
                        status = int(v.strip().split()[0])
                    elif k:
                        headers.append((k, v.strip()))
                self.reply(status, headers, out)

            do_GET = serve
            do_POST = serve

        return Handler

    def start(self):
        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass

        self.server = Server((HOST, 0), self._handler())
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def auth_seen(self):
        with self.lock:
            return list(self.seen_auth)
