"""What test_image_build.py builds on: base images made here from host files, and a local
package "internet" that wants a token.

- busybox_base(): a gzip'd tarball for `space image import` (vm_image.busybox_tar), with
  /etc/passwd naming root and `agent` (uid 1000): the small base of the fast tests.
- pynode_layout(): an OCI image layout in the shape of a Debian image with Python and Node:
  merged /usr (bin, lib, lib64 symlinks into usr), busybox for sh and coreutils, bash, Debian's
  /usr/bin/python3.X with its standard library (tests, tkinter, lib2to3 and the like pruned,
  compiled .pyc kept) and pip, /usr/lib/python3.X/EXTERNALLY-MANAGED (so `pip install` needs
  --break-system-packages, as on Debian), the host's CA bundle, and every shared library ldd
  names for them; node and npm (wherever the host's npm command leads) in a second layer. Layers are written uncompressed, streamed
  to files (node alone is ~95 MB).
- PackageIndex: an HTTPS server on 127.0.0.2 (egress_upstream's test CA, whose certificate
  names *.example.test) serving a PEP 503 simple index of one wheel, `spacehello`, on
  pypi.example.test and an npm registry of one package, `spacehello-js`, on npm.example.test.
  Every request without `Authorization: Bearer <that host's token>` is answered 401, and every
  request is recorded with whether its token was right, so a test sees that the gateway
  injected it.

Only the standard library, ldd and the host's busybox, python3, bash, node and npm.
"""

import base64
import hashlib
import http.server
import io
import json
import os
import socketserver
import ssl
import subprocess
import tarfile
import threading
import zipfile

from egress_upstream import HOST, make_test_ca
from test_oci_import import OCI_CONFIG, OCI_LAYER, OCI_MANIFEST, Layout, config_blob, host_arch
from vm_image import BUSYBOX, busybox_tar

PASSWD = ("root:x:0:0:root:/root:/bin/sh\n"
          "agent:x:1000:1000:agent:/home/agent:/bin/sh\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
GROUP = "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n"

BUSYBOX_APPLETS = ["sh", "cat", "ls", "echo", "id", "env", "test", "mkdir", "stat", "sleep",
                   "true", "false", "grep", "wget", "chown", "chmod", "touch", "rm", "pwd",
                   "printf", "head", "wc", "ln", "cp", "sed", "tr", "sort", "find", "du"]

# Debian's python (not one a version manager put first on PATH): /usr/bin/python3 -> python3.X.
PYTHON = os.path.realpath("/usr/bin/python3")
PY_NAME = os.path.basename(PYTHON)  # python3.X
PYTHON_LIB = "/usr/lib/" + PY_NAME
PIP_DIR = "/usr/lib/python3/dist-packages"
NODE = "/usr/bin/node"
NPM_CLI = os.path.realpath("/usr/bin/npm")  # .../npm/bin/npm-cli.js
NPM_DIR = os.path.dirname(os.path.dirname(NPM_CLI))
BASH = "/usr/bin/bash"
# Parts of the standard library an agent's image does without (and which keep it small).
PYTHON_PRUNE = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
                "config-%s-x86_64-linux-gnu" % PY_NAME[len("python"):], "dist-packages",
                "site-packages",
                "sitecustomize.py", "turtle.py"}

PYNODE_CONFIG = {
    "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG=C.UTF-8", "BASE_MARKER=pynode"],
    "WorkingDir": "/srv",
    "Cmd": ["python3"],
    "Labels": {"org.opencontainers.image.title": "pynode-test-base"},
}


def pynode_available():
    """"" when this host has what pynode_layout() copies, else what is missing."""
    if not os.path.isdir(os.path.join(NPM_DIR, "node_modules")):
        return "npm with its own node_modules (%s has none: its modules are packaged apart)" % (
            NPM_DIR)
    missing = [p for p in (PYTHON, PYTHON_LIB, os.path.join(PIP_DIR, "pip"), NODE, NPM_CLI,
                           BASH, BUSYBOX, "/etc/ssl/certs/ca-certificates.crt")
               if not os.path.exists(p)]
    return ", ".join(missing)


def busybox_base(path, applets=BUSYBOX_APPLETS, files=None):
    """The small base: busybox, `applets`, /etc/passwd and /etc/group with `agent`."""
    busybox_tar(path, applets, dirs=("home", "home/agent", "srv", "usr", "usr/bin"),
                files=dict({"etc/passwd": PASSWD, "etc/group": GROUP}, **(files or {})))
    return path


# --- the python + node base ----------------------------------------------------------------

def ldd_libs(paths):
    """The shared libraries (and loader) that the ELF files `paths` need, as host paths."""
    libs = set()
    for p in paths:
        out = subprocess.run(["ldd", p], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts:
                i = parts.index("=>")
                if i + 1 < len(parts) and parts[i + 1].startswith("/"):
                    libs.add(parts[i + 1])
            elif parts and parts[0].startswith("/"):
                libs.add(parts[0])
    return libs


def usr_path(host_path):
    """Where a library goes in a merged-/usr image: /lib/... and /lib64/... under usr/."""
    p = host_path.lstrip("/")
    if p.startswith(("lib/", "lib64/", "bin/", "sbin/")):
        p = "usr/" + p
    return p


class _HashingFile:
    """A write-only file that hashes what passes through it."""

    def __init__(self, fh):
        self.fh, self.h, self.size = fh, hashlib.sha256(), 0

    def write(self, b):
        self.h.update(b)
        self.size += len(b)
        return self.fh.write(b)

    def tell(self):
        return self.size


class LayerWriter:
    """An uncompressed layer tar streamed to a blob file of a Layout; names are added once
    (parents first), owned by root unless said otherwise."""

    def __init__(self, layout):
        self.layout = layout
        self.tmp = os.path.join(layout.root, "layer-%d.partial" % len(os.listdir(layout.root)))
        self.fh = open(self.tmp, "wb")
        self.hf = _HashingFile(self.fh)
        self.tar = tarfile.open(fileobj=self.hf, mode="w", format=tarfile.GNU_FORMAT)
        self.names = set()

    def _info(self, name, kind, mode=0o755, uid=0, gid=0):
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.uid, ti.gid, ti.mtime = kind, mode, uid, gid, 1700000000
        ti.uname = ti.gname = ""
        return ti

    def dir(self, name, mode=0o755, uid=0, gid=0):
        name = name.strip("/")
        if not name or name in self.names:
            return
        self.parents(name)
        self.names.add(name)
        self.tar.addfile(self._info(name, tarfile.DIRTYPE, mode, uid, gid))

    def parents(self, name):
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.dir("/".join(parts[:i]))

    def symlink(self, name, target):
        if name in self.names:
            return
        self.parents(name)
        self.names.add(name)
        ti = self._info(name, tarfile.SYMTYPE, 0o777)
        ti.linkname = target
        self.tar.addfile(ti)

    def data(self, name, data, mode=0o644):
        if isinstance(data, str):
            data = data.encode()
        self.parents(name)
        self.names.add(name)
        ti = self._info(name, tarfile.REGTYPE, mode)
        ti.size = len(data)
        self.tar.addfile(ti, io.BytesIO(data))

    def host_file(self, name, src):
        """The host file `src` (symlinks followed) as the regular file `name`."""
        if name in self.names:
            return
        self.parents(name)
        self.names.add(name)
        st = os.stat(src)
        ti = self._info(name, tarfile.REGTYPE, st.st_mode & 0o755)
        ti.size = st.st_size
        ti.mtime = int(st.st_mtime)  # .pyc files name their source's mtime
        with open(src, "rb") as fh:
            self.tar.addfile(ti, fh)

    def host_tree(self, dest, src, prune=(), keep=None):
        """The host directory `src` as `dest`: directories, regular files and symlinks as they
        are (a symlink is kept as a symlink); names in `prune` left out at every level, and
        `keep(relpath)` deciding on the rest when given."""
        self.dir(dest)
        for dirpath, dirnames, filenames in os.walk(src):
            rel = os.path.relpath(dirpath, src)
            dirnames[:] = sorted(n for n in dirnames if n not in prune)
            base = dest if rel == "." else dest + "/" + rel
            for n in list(dirnames):
                p = os.path.join(dirpath, n)
                if os.path.islink(p):
                    self.symlink(base + "/" + n, os.readlink(p))
                    dirnames.remove(n)
                else:
                    self.dir(base + "/" + n)
            for n in sorted(filenames):
                if n in prune:
                    continue
                p = os.path.join(dirpath, n)
                relp = os.path.relpath(p, src)
                if keep is not None and not keep(relp):
                    continue
                if os.path.islink(p):
                    self.symlink(base + "/" + n, os.readlink(p))
                elif os.path.isfile(p):
                    self.host_file(base + "/" + n, p)

    def close(self):
        """Finishes the tar and moves it to its blob: (descriptor, diff_id)."""
        self.tar.close()
        self.fh.close()
        digest = "sha256:" + self.hf.h.hexdigest()
        os.rename(self.tmp, os.path.join(self.layout.root, "blobs", "sha256", digest[7:]))
        return {"mediaType": OCI_LAYER, "digest": digest, "size": self.hf.size}, digest


def _python_layer(w):
    """Layer 1: the Debian-like system with Python, pip and bash."""
    for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "usr/local/bin", "etc", "var/tmp",
              "proc", "dev", "sys", "run", "srv", "home", "opt"):
        w.dir(d)
    w.dir("tmp", 0o1777)
    w.dir("var/tmp", 0o1777)
    w.dir("root", 0o700)
    w.dir("home/agent", 0o755, 1000, 1000)
    for top in ("bin", "sbin", "lib", "lib64"):
        w.symlink(top, "usr/" + top)
    # busybox first, then its applets where nothing else takes the name.
    w.host_file("usr/bin/busybox", BUSYBOX)
    w.host_file("usr/bin/bash", BASH)
    w.host_file("usr/bin/" + PY_NAME, PYTHON)
    w.symlink("usr/bin/python3", PY_NAME)
    w.symlink("usr/bin/python", "python3")
    w.host_file("usr/bin/pip3", "/usr/bin/pip3")
    w.symlink("usr/bin/pip", "pip3")
    w.host_tree(PYTHON_LIB.lstrip("/"), PYTHON_LIB, prune=PYTHON_PRUNE)
    w.host_tree("usr/lib/python3/dist-packages/pip", os.path.join(PIP_DIR, "pip"))
    for n in sorted(os.listdir(PIP_DIR)):
        if n.startswith("pip-") and n.endswith(".dist-info"):
            w.host_tree("usr/lib/python3/dist-packages/" + n, os.path.join(PIP_DIR, n))
    dynload = os.path.join(PYTHON_LIB, "lib-dynload")
    elves = [PYTHON, BASH] + [os.path.join(dynload, n) for n in sorted(os.listdir(dynload))
                              if n.endswith(".so") and not n.startswith("_tkinter")]
    for lib in sorted(ldd_libs(elves)):
        w.host_file(usr_path(lib), lib)
    for a in BUSYBOX_APPLETS + ["whoami", "tee", "xargs", "basename", "dirname", "uname"]:
        if "usr/bin/" + a not in w.names:
            w.symlink("usr/bin/" + a, "busybox")
    w.data("etc/passwd", PASSWD)
    w.data("etc/group", GROUP)
    w.data("etc/os-release", 'PRETTY_NAME="SPACE test base (Debian-like)"\nID=debian\n')
    w.host_file("etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt")
    w.dir("usr/local/lib/%s/dist-packages" % PY_NAME)


def _node_layer(w, below):
    """Layer 2: node and npm (and the libraries node needs that layer 1, `below`, lacks)."""
    w.host_file("usr/bin/node", NODE)
    w.host_tree(usr_path(NPM_DIR), NPM_DIR)
    w.symlink("usr/bin/npm", "/" + usr_path(NPM_CLI))
    w.symlink("usr/bin/npx", "/" + usr_path(os.path.join(NPM_DIR, "bin", "npx-cli.js")))
    for lib in sorted(ldd_libs([NODE])):
        if usr_path(lib) not in below:
            w.host_file(usr_path(lib), lib)


def pynode_layout(root, config=None):
    """An OCI layout at `root` with the python (+pip, bash, busybox) layer and the node (+npm)
    layer; returns (root, total layer bytes)."""
    lay = Layout(root)
    py = LayerWriter(lay)
    _python_layer(py)
    node = LayerWriter(lay)
    _node_layer(node, py.names)
    (d1, id1), (d2, id2) = py.close(), node.close()
    descs, ids = [d1, d2], [id1, id2]
    cfg = lay.blob(config_blob(ids, config or PYNODE_CONFIG), OCI_CONFIG)
    m = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cfg, "layers": descs}
    desc = lay.blob(json.dumps(m).encode(), OCI_MANIFEST)
    desc["platform"] = {"architecture": host_arch(), "os": "linux"}
    lay.index([desc])
    return root, sum(d["size"] for d in descs)


# --- the package "internet" ----------------------------------------------------------------

PY_PACKAGE, PY_VERSION = "spacehello", "1.0"
NPM_PACKAGE, NPM_VERSION = "spacehello-js", "1.0.0"


def make_wheel(name=PY_PACKAGE, version=PY_VERSION):
    """A pure-Python wheel of one module `name` (GREETING, __version__): (file name, bytes)."""
    files = {
        "%s.py" % name: ('__version__ = "%s"\nGREETING = "hello from %s"\n'
                         % (version, name)).encode(),
        "%s-%s.dist-info/METADATA" % (name, version):
            ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: SPACE build test\n"
             % (name, version)).encode(),
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
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, data in files.items():
            z.writestr(zipfile.ZipInfo(path, (2024, 1, 1, 0, 0, 0)), data)
    return "%s-%s-py3-none-any.whl" % (name, version), buf.getvalue()


def make_npm_tarball(name=NPM_PACKAGE, version=NPM_VERSION):
    """An npm package tarball: package/package.json and package/index.js."""
    files = {"package/package.json": json.dumps({"name": name, "version": version,
                                                 "main": "index.js"}).encode(),
             "package/index.js": ('module.exports = { greeting: "hello from %s", version: "%s" };\n'
                                  % (name, version)).encode()}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for path, data in files.items():
            ti = tarfile.TarInfo(path)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class PackageIndex:
    """pypi.example.test and npm.example.test, both on one HTTPS server of 127.0.0.2 (its CA
    at self.certs["ca"]), each wanting its own bearer token. `requests` records
    (host, path, authorized) for every request; `seen_tokens` the Authorization values."""

    def __init__(self, workdir, pypi_token, npm_token):
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.certs = make_test_ca(workdir)
        self.tokens = {"pypi.example.test": pypi_token, "npm.example.test": npm_token}
        self.requests = []
        self.lock = threading.Lock()
        self.server = None
        whl, data = make_wheel()
        sha = hashlib.sha256(data).hexdigest()
        tgz = make_npm_tarball()
        tgz_url = "https://npm.example.test/%s/-/%s-%s.tgz" % (NPM_PACKAGE, NPM_PACKAGE,
                                                               NPM_VERSION)
        packument = {"name": NPM_PACKAGE, "dist-tags": {"latest": NPM_VERSION},
                     "versions": {NPM_VERSION: {
                         "name": NPM_PACKAGE, "version": NPM_VERSION,
                         "dist": {"tarball": tgz_url,
                                  "shasum": hashlib.sha1(tgz).hexdigest(),
                                  "integrity": "sha512-" + base64.b64encode(
                                      hashlib.sha512(tgz).digest()).decode()}}}}
        self.routes = {
            ("pypi.example.test", "/simple/"):
                ("text/html", b'<!DOCTYPE html><html><body><a href="/simple/%s/">%s</a>'
                              b'</body></html>\n' % (PY_PACKAGE.encode(), PY_PACKAGE.encode())),
            ("pypi.example.test", "/simple/%s/" % PY_PACKAGE):
                ("text/html", ('<!DOCTYPE html><html><body><a href="/packages/%s#sha256=%s">%s'
                               '</a></body></html>\n' % (whl, sha, whl)).encode()),
            ("pypi.example.test", "/packages/" + whl): ("application/octet-stream", data),
            ("npm.example.test", "/" + NPM_PACKAGE):
                ("application/json", json.dumps(packument).encode()),
            ("npm.example.test", "/%s/-/%s-%s.tgz" % (NPM_PACKAGE, NPM_PACKAGE, NPM_VERSION)):
                ("application/octet-stream", tgz),
        }

    def _handler(self):
        idx = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, status, ctype, body):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self):
                host = (self.headers.get("Host") or "").split(":")[0].lower()
                path = self.path.split("?")[0]
                if path.startswith("/simple/") and not path.endswith("/"):
                    path += "/"
                auth = self.headers.get("Authorization") or ""
                want = idx.tokens.get(host)
                ok = want is not None and auth == "Bearer " + want
                with idx.lock:
                    idx.requests.append((host, path, ok, auth))
                if not ok:
                    return self._send(401, "text/plain", b"a bearer token is needed\n")
                route = idx.routes.get((host, path))
                if route is None:
                    return self._send(404, "text/plain", b"not here\n")
                self._send(200, *route)

            do_HEAD = do_GET

        return Handler

    def start(self):
        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass

        srv = Server((HOST, 0), self._handler())
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.certs["cert"], self.certs["key"])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.server = srv
        self.port = srv.server_address[1]
        return self

    def stop(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def seen(self, host):
        """(path, authorized) of the requests to `host` so far."""
        with self.lock:
            return [(p, ok) for h, p, ok, _ in self.requests if h == host]

    def resolve(self):
        """The gateway's resolver overrides for both names."""
        return {"%s:443" % h: "%s:%d" % (HOST, self.port) for h in self.tokens}

