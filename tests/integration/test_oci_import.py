"""Importing OCI image layouts (a directory, an oci-archive) and `docker save` archives, all built
here with tarfile/json/hashlib: the platform's manifest is chosen from a multi-platform index of
indexes, layers are applied in order (a whiteout, an opaque directory, setuid bits stripped),
and the config is honoured (Env, WorkingDir, User, Entrypoint + Cmd as `space run`'s default
command, Labels in `space image ls --json` and `space image inspect`); images that share layers
share their files on disk; and each hostile input is refused with its reason, leaving no image,
staging directory, content-store entry or mount behind (docs/images.md)."""

import gzip
import hashlib
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import tarfile
import uuid

from harness import SpaceTestCase, main, mounted_below, wait_for
from test_images import _libs

TOOLS = ["sh", "cat", "ls", "id", "env", "true", "echo", "stat"]
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"


def host_arch():
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def other_arch():
    return "arm64" if host_arch() != "arm64" else "amd64"


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --- layers --------------------------------------------------------------------------------

def d(name, mode=0o755, uid=0, gid=0):
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.uid, ti.gid = tarfile.DIRTYPE, mode, uid, gid
    return ti, None


def f(name, data, mode=0o644, uid=0, gid=0):
    if isinstance(data, str):
        data = data.encode()
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.uid, ti.gid = len(data), mode, uid, gid
    return ti, data


def link(name, target, kind=tarfile.SYMTYPE):
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname = kind, target
    return ti, None


def device(name):
    ti = tarfile.TarInfo(name)
    ti.type, ti.devmajor, ti.devminor, ti.mode = tarfile.CHRTYPE, 1, 3, 0o666
    return ti, None


def layer_tar(members):
    """The uncompressed tar of a layer."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for ti, data in members:
            tar.addfile(ti, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def base_members():
    """A small root filesystem from host binaries and their libraries, with /etc/passwd naming
    root and `app` (uid 1000)."""
    files = {}
    for tool in TOOLS:
        src = shutil.which(tool, path="/usr/bin:/bin")
        files["bin/" + tool] = os.path.realpath(src)
        for lib in _libs(src):
            files[lib.lstrip("/")] = os.path.realpath(lib)
    dirs = {"bin", "etc", "tmp", "root", "proc", "dev", "sys", "run", "var", "usr", "opt",
            "opt/dir", "home", "home/app"}
    for name in files:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    out = [d(x, 0o1777 if x == "tmp" else 0o755) for x in sorted(dirs)]
    for name, src in sorted(files.items()):
        with open(src, "rb") as fh:
            out.append(f(name, fh.read(), 0o755))
    out += [f("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"),
            f("etc/group", "root:x:0:\napp:x:1000:\n"),
            f("etc/removed-me", "gone in layer 2\n"),
            f("opt/dir/a", "a\n"), f("opt/dir/b", "b\n")]
    return out


def config_blob(diff_ids, config, arch=None):
    return json.dumps({"architecture": arch or host_arch(), "os": "linux", "config": config,
                       "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()


APP_CONFIG = {
    "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hello from the image",
            "OVERRIDE=image"],
    "WorkingDir": "/app",
    "User": "app",
    "Entrypoint": ["/bin/sh", "-c"],
    "Cmd": ["echo default: $GREETING; id -u; pwd"],
    "Labels": {"org.opencontainers.image.title": "oci-test", "team": "agents"},
}


def app_layers():
    """Three layers over the base: a whiteout, an opaque directory, a setuid file, the app."""
    l2 = [f("etc/.wh.removed-me", ""), f("opt/dir/.wh..wh..opq", ""), f("opt/dir/c", "c\n"),
          f("bin/suid-tool", "#!/bin/sh\necho suid\n", 0o4755), d("app")]
    l3 = [f("app/marker", "layer three\n")]
    return [(layer_tar(base_members()), True), (layer_tar(l2), False), (layer_tar(l3), True)]


class Layout:
    """An OCI image layout being written in a directory."""

    def __init__(self, root):
        self.root = root
        os.makedirs(os.path.join(root, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(root, "oci-layout"), "w") as fh:
            json.dump({"imageLayoutVersion": "1.0.0"}, fh)

    def blob(self, data, media_type):
        digest = sha256(data)
        with open(os.path.join(self.root, "blobs", "sha256", digest[7:]), "wb") as fh:
            fh.write(data)
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    def manifest(self, layers, config, arch=None, layer_type=None, diff_ids=None):
        """layers: [(uncompressed tar, gzip?)]. Returns the manifest's descriptor."""
        descs, ids = [], []
        for raw, gz in layers:
            data = gzip.compress(raw, mtime=0) if gz else raw
            descs.append(self.blob(data, layer_type or (OCI_LAYER_GZ if gz else OCI_LAYER)))
            ids.append(sha256(raw))
        cfg = self.blob(config_blob(diff_ids or ids, config, arch), OCI_CONFIG)
        m = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cfg, "layers": descs}
        desc = self.blob(json.dumps(m).encode(), OCI_MANIFEST)
        desc["platform"] = {"architecture": arch or host_arch(), "os": "linux"}
        return desc

    def index(self, manifests, top=True):
        doc = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
        if top:
            with open(os.path.join(self.root, "index.json"), "w") as fh:
                json.dump(doc, fh)
            return None
        return self.blob(json.dumps(doc).encode(), OCI_INDEX)


def tar_dir(src, dest):
    """An archive of a directory's contents (names relative to it), as skopeo/docker write."""
    with tarfile.open(dest, "w") as tar:
        for name in sorted(os.listdir(src)):
            tar.add(os.path.join(src, name), arcname=name)
    return dest


def docker_save(root, layers, config, layer_paths=None):
    """A `docker save` directory: manifest.json, the config as <hex>.json, <id>/layer.tar."""
    os.makedirs(root)
    paths, ids = [], []
    for i, (raw, _) in enumerate(layers):
        lid = hashlib.sha256(b"layer%d" % i + raw[:64]).hexdigest()
        os.makedirs(os.path.join(root, lid))
        with open(os.path.join(root, lid, "layer.tar"), "wb") as fh:
            fh.write(raw)
        with open(os.path.join(root, lid, "VERSION"), "w") as fh:
            fh.write("1.0")
        paths.append(lid + "/layer.tar")
        ids.append(sha256(raw))
    cfg = config_blob(ids, config)
    cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"
    with open(os.path.join(root, cfg_name), "wb") as fh:
        fh.write(cfg)
    with open(os.path.join(root, "manifest.json"), "w") as fh:
        json.dump([{"Config": cfg_name, "RepoTags": ["app:latest"],
                    "Layers": layer_paths or paths}], fh)
    with open(os.path.join(root, "repositories"), "w") as fh:
        json.dump({"app": {"latest": ids[-1][7:]}}, fh)
    return root


def du_bytes(path):
    """Disk use of a tree, each inode counted once (du's own rule for hard links)."""
    out = subprocess.run(["du", "-s", "-B1", path], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


class ImportChecks:
    """What the test classes below share: names, and a refusal that must leave nothing."""

    def setUp(self):
        super().setUp()
        self.images_dir = os.path.join(self.daemon.state_dir, "images")

    def name(self, what):
        return "oci-%s-%s" % (what, uuid.uuid4().hex[:6])

    def content_entries(self):
        store = os.path.join(self.images_dir, ".content")
        out = set()
        for dirpath, _, files in os.walk(store):
            out.update(os.path.join(dirpath, x) for x in files)
        return out

    def content_entries_of_images(self):
        """The store entries some image still links (those with a link count over 1)."""
        return {p for p in self.content_entries() if os.lstat(p).st_nlink > 1}

    def state(self):
        return (sorted(os.listdir(self.images_dir)), sorted(self.content_entries()),
                [i.get("name") for i in self.api_list("/v1/images", "images")],
                mounted_below(self.images_dir))

    def assert_refused(self, path, *reasons):
        """Importing `path` fails with one of `reasons` in its message, and leaves nothing."""
        name = self.name("hostile")
        before = self.state()
        rc, out, err = self.space("image", "import", name, path, timeout=120)
        if rc == 0:
            self.space("image", "rm", name)
        self.assertEqual(rc, 125, (out, err))
        self.assertTrue(any(r.lower() in err.lower() for r in reasons),
                        "expected one of %r in: %s" % (reasons, err))
        self.assertEqual(self.state(), before, "an import that failed left something")
        print("\n  refused: " + err.strip(), end="")
        return err


class OciImportTest(ImportChecks, SpaceTestCase):

    @classmethod
    def daemon_config(cls):
        # Small limits, so that the size bombs below need only a few MiB.
        return {"images": {"max_layer": "6M", "max_total": "10M"}}

    def import_ok(self, name, path):
        rc, out, err = self.space("image", "import", name, path, timeout=180)
        self.assertEqual(rc, 0, (out, err))
        # Retried: `space run` removes its sandbox in the background, and the image is in use
        # until it is gone.
        self.addCleanup(wait_for, lambda: self.space("image", "rm", name)[0] == 0, timeout=30,
                        what="image %s removed" % name)
        return err

    def app_layout(self, root):
        """The app image in an OCI layout whose index.json is an index of indexes: another
        platform's manifest first (its layer would leave /etc/wrong-platform), then this host's."""
        lay = Layout(root)
        wrong = lay.manifest([(layer_tar(base_members() + [f("etc/wrong-platform", "x")]), True)],
                             APP_CONFIG, arch=other_arch())
        right = lay.manifest(app_layers(), APP_CONFIG)
        inner = lay.index([wrong, right], top=False)
        lay.index([inner])
        return root

    def check_app(self, name):
        """The app image's tree and config, as a sandbox sees them."""
        # No command: Entrypoint + Cmd, as User in WorkingDir with the image's Env.
        rc, out, err = self.space("run", "--image", name, timeout=120)
        self.assertEqual((rc, out), (0, "default: hello from the image\n1000\n/app\n"), err)
        # A command replaces Entrypoint + Cmd; --env wins over the image's Env per key.
        rc, out, err = self.space("run", "--image", name, "--env", "OVERRIDE=request", "--",
                                  "sh", "-c", "echo $GREETING/$OVERRIDE; pwd; id -u; "
                                  "cat /app/marker; ls /opt/dir; test -e /etc/removed-me || "
                                  "echo removed; test -e /etc/wrong-platform || echo right")
        self.assertEqual(rc, 0, (out, err))
        self.assertEqual(out.splitlines(),
                         ["hello from the image/request", "/app", "1000", "layer three", "c",
                          "removed", "right"])
        # --workdir wins over WorkingDir; --user over User.
        sid = self.create("--image", name, "--workdir", "/tmp")
        self.assertEqual(self.exec_ok(sid, "sh", "-c", "pwd; id -u"), "/tmp\n1000\n")
        rc, out, err = self.space("exec", sid, "--user", "0", "--cwd", "/", "--", "id", "-u")
        self.assertEqual((rc, out), (0, "0\n"), err)
        self.space_ok("rm", "--force", sid)
        # setuid bits are stripped (images.keep_setuid is off).
        mode = os.stat(os.path.join(self.images_dir, name, "rootfs", "bin", "suid-tool")).st_mode
        self.assertEqual(mode & 0o7777, 0o755)
        # Labels and the rest of the config in the image's view.
        images = {i["name"]: i for i in json.loads(self.space_ok("image", "ls", "--json"))}
        self.assertEqual(images[name]["config"]["labels"], APP_CONFIG["Labels"])
        view = json.loads(self.space_ok("image", "inspect", name))
        self.assertEqual(view["config"]["working_dir"], "/app")
        self.assertEqual(view["config"]["user"], "app")
        self.assertEqual(view["config"]["entrypoint"], APP_CONFIG["Entrypoint"])
        self.assertEqual(view["config"]["cmd"], APP_CONFIG["Cmd"])
        self.assertIn("GREETING=hello from the image", view["config"]["env"])
        self.assertRegex(view.get("digest", ""), r"^sha256:[0-9a-f]{64}$")
        return view

    def test_oci_layout_directory(self):
        name = self.name("dir")
        layout = self.app_layout(os.path.join(self.tmp, name))
        self.import_ok(name, layout)
        self.assertEqual(self.check_app(name)["format"], "oci")

    def test_oci_archive(self):
        name = self.name("archive")
        layout = self.app_layout(os.path.join(self.tmp, name))
        self.import_ok(name, tar_dir(layout, layout + ".tar"))
        self.assertEqual(self.check_app(name)["format"], "oci")

    def test_docker_save(self):
        name = self.name("docker")
        root = docker_save(os.path.join(self.tmp, name), app_layers(), APP_CONFIG)
        self.import_ok(name, tar_dir(root, root + ".tar"))
        self.assertEqual(self.check_app(name)["format"], "docker")

    def test_host_image_has_no_default_command(self):
        rc, out, err = self.space("run")
        self.assertEqual(rc, 125, (out, err))
        self.assertIn("no default command", err)

    def test_images_sharing_layers_share_disk(self):
        big = os.urandom(2 << 20)
        base = (layer_tar(base_members()), True)
        lay_a = Layout(os.path.join(self.tmp, "share-a"))
        lay_a.index([lay_a.manifest([base, (layer_tar([f("big", big)]), True)], {})])
        lay_b = Layout(os.path.join(self.tmp, "share-b"))
        lay_b.index([lay_b.manifest([base, (layer_tar([f("big", big)]), True),
                                     (layer_tar([f("small", "b only\n")]), False)], {})])
        a, b = self.name("share-a"), self.name("share-b")
        before = du_bytes(self.images_dir)
        rc, out, err = self.space("image", "import", a, lay_a.root, timeout=180)
        self.assertEqual(rc, 0, (out, err))
        after_a = du_bytes(self.images_dir)
        rc, out, err = self.space("image", "import", b, lay_b.root, timeout=180)
        self.assertEqual(rc, 0, (out, err))
        after_b = du_bytes(self.images_dir)
        print("\ndisk use: first image %.1f MiB, second image sharing its layers %.2f MiB"
              % ((after_a - before) / 2**20, (after_b - after_a) / 2**20))
        self.assertGreater(after_a - before, 2 << 20)  # the base (~3.5 MiB) and the 2 MiB file
        self.assertLess(after_b - after_a, 1 << 20)    # b's own layer, directories, no copies
        # Removing one keeps the other whole; removing both leaves no store entry behind.
        self.space_ok("image", "rm", a)
        rc, out, err = self.space("run", "--image", b, "--", "sh", "-c", "cat /small; ls -l /big")
        self.assertEqual(rc, 0, (out, err))
        self.assertIn("b only", out)
        self.assertIn(str(len(big)), out)
        # `space run` removes its sandbox in the background: the image is free once it is gone.
        wait_for(lambda: self.space("image", "rm", b)[0] == 0, timeout=30,
                 what="image %s removed" % b)
        self.assertEqual(self.content_entries(), self.content_entries_of_images())

    def test_import_killed_leaves_nothing(self):
        """spaced killed in an import that already shared files with the content store (after
        the tree is built, and after it is installed but not recorded): its next start removes
        the staging directory or the unrecorded image and the store entries only it linked,
        and the image it shared them with still works."""
        keep = self.name("keep")
        self.import_ok(keep, self.app_layout(os.path.join(self.tmp, keep)))
        lay = Layout(os.path.join(self.tmp, "killed-" + uuid.uuid4().hex[:6]))
        lay.index([lay.manifest([(layer_tar(base_members()), True),
                                 (layer_tar([f("new-file", os.urandom(100000))]), False)], {})])
        for failpoint in ("image.after_unpack", "image.after_install"):
            with self.subTest(failpoint=failpoint):
                before = self.state()
                self.daemon.stop(signal.SIGTERM)
                self.daemon.extra_env = {"SPACE_FAILPOINTS": failpoint}
                self.daemon.start()
                rc, out, err = self.space("image", "import", self.name("killed"), lay.root,
                                          timeout=120)
                self.assertNotEqual(rc, 0, (out, err))
                self.assertEqual(self.daemon.proc.wait(60), -signal.SIGKILL)
                self.daemon.extra_env = {}
                self.daemon.start()
                self.assertEqual(self.state(), before)
                rc, out, err = self.space("run", "--image", keep, "--", "cat", "/app/marker")
                self.assertEqual((rc, out), (0, "layer three\n"), err)

    # --- hostile inputs ---------------------------------------------------------------------

    def hostile_layout(self, what, layers, config=None, **kw):
        lay = Layout(os.path.join(self.tmp, "hostile-%s-%s" % (what, uuid.uuid4().hex[:6])))
        lay.index([lay.manifest(layers, config or {}, **kw)])
        return lay

    def test_hostile_layers_refused(self):
        tag = uuid.uuid4().hex[:8]
        landing = os.path.join(self.tmp, "landing-" + tag)
        os.mkdir(landing)
        shadow = os.stat("/etc/shadow") if os.path.exists("/etc/shadow") else None
        base = [d("etc"), d("tmp")]
        cases = {
            "dotdot": ([base + [f("../../../../../../tmp/oci-evil-" + tag, "x")]],
                       ("..", "leaves", "outside")),
            "hardlink-outside": ([base + [link("etc/shadow-link", "/etc/shadow",
                                               tarfile.LNKTYPE)]],
                                 ("link", "not found", "missing", "no such")),
            "hardlink-dotdot": ([base + [link("etc/pw", "../../../../etc/passwd",
                                              tarfile.LNKTYPE)]],
                                ("..", "leaves", "outside", "link")),
            "device-node": ([base + [device("dev-null")]], ("device",)),
        }
        for what, (layers, reasons) in cases.items():
            with self.subTest(attack=what):
                lay = self.hostile_layout(what, [(layer_tar(m), False) for m in layers])
                self.assert_refused(lay.root, *reasons)
        self.assertFalse(os.path.exists("/tmp/oci-evil-" + tag))
        if shadow is not None:
            self.assertEqual(os.stat("/etc/shadow").st_nlink, shadow.st_nlink)

        # An absolute symlink, then a layer writing through it: it resolves inside the image
        # (or is refused); the host directory it names stays empty either way.
        lay = self.hostile_layout("symlink", [
            (layer_tar(base + [link("etc/escape", landing)]), False),
            (layer_tar([f("etc/escape/pwned", "x")]), False)])
        name = self.name("symlink")
        rc, out, err = self.space("image", "import", name, lay.root, timeout=120)
        if rc == 0:
            self.space_ok("image", "rm", name)
        else:
            self.assertEqual(rc, 125, (out, err))
        self.assertEqual(os.listdir(landing), [])

    def test_digests_and_media_types_checked(self):
        raw = layer_tar([d("etc"), f("etc/x", "x\n")])
        # A layer blob whose bytes are not those its digest names.
        lay = self.hostile_layout("digest", [(raw, False)])
        blob = os.path.join(lay.root, "blobs", "sha256", sha256(raw)[7:])
        with open(blob, "r+b") as fh:
            fh.seek(1024)  # etc/x's data: the tar stays valid, its bytes change
            fh.write(b"Y")
        self.assert_refused(lay.root, "digest", "sha256", "mismatch")
        # A config whose diff_id does not match the layer.
        lay = self.hostile_layout("diffid", [(raw, False)], diff_ids=[sha256(b"other")])
        self.assert_refused(lay.root, "diff_id", "diffid", "uncompressed")
        # A layer of a media type no reader here knows.
        lay = self.hostile_layout("mediatype", [(raw, False)],
                                  layer_type="application/vnd.example.layer.v1.squashfs")
        self.assert_refused(lay.root, "media type", "mediatype")

    def test_malformed_documents_refused(self):
        raw = layer_tar([d("etc"), f("etc/x", "x\n")])
        # index.json that is not JSON.
        lay = self.hostile_layout("index", [(raw, False)])
        with open(os.path.join(lay.root, "index.json"), "w") as fh:
            fh.write('{"schemaVersion": 2, "manifests": [')
        self.assert_refused(lay.root, "index.json")
        # A manifest whose layers are not a list.
        lay = Layout(os.path.join(self.tmp, "hostile-manifest-" + uuid.uuid4().hex[:6]))
        cfg = lay.blob(config_blob([], {}), OCI_CONFIG)
        m = lay.blob(json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cfg,
                                 "layers": "all of them"}).encode(), OCI_MANIFEST)
        m["platform"] = {"architecture": host_arch(), "os": "linux"}
        lay.index([m])
        self.assert_refused(lay.root, "layers")
        # A config whose Env is not a list of strings.
        lay = self.hostile_layout("config", [(raw, False)], config={"Env": "A=1"})
        self.assert_refused(lay.root, "env")
        # An index nested deeper than any image needs (a chain of indexes: content addressing
        # makes a true cycle impossible, the depth bound is what stops a loop).
        lay = Layout(os.path.join(self.tmp, "hostile-deep-" + uuid.uuid4().hex[:6]))
        desc = lay.manifest([(raw, False)], {})
        for _ in range(8):
            desc = lay.index([desc], top=False)
        lay.index([desc])
        self.assert_refused(lay.root, "deep", "nest", "depth")
        # No manifest for this host's platform.
        lay = self.hostile_layout("platform", [(raw, False)], arch=other_arch())
        self.assert_refused(lay.root, "platform", host_arch())
        # docker save: manifest.json naming a layer outside the archive.
        root = docker_save(os.path.join(self.tmp, "hostile-docker-" + uuid.uuid4().hex[:6]),
                           [(raw, False)], {}, layer_paths=["../../../etc/passwd"])
        self.assert_refused(tar_dir(root, root + ".tar"), "..", "path", "outside")

    def test_size_bombs_refused(self):
        # The daemon's limits here: 6 MiB a layer, 10 MiB an image (daemon_config). Hex text
        # compresses about 2:1, so each upload stays under the limits and the layers do not.
        def text(n):
            return os.urandom(n // 2).hex().encode()
        lay = self.hostile_layout("layer-bomb", [(layer_tar([f("big", text(7 << 20))]), True)])
        self.assert_refused(lay.root, "layer", "limit", "large")
        lay = self.hostile_layout("total-bomb", [
            (layer_tar([f("one", text(5 << 20))]), True),
            (layer_tar([f("two", text(5 << 20))]), True),
            (layer_tar([f("three", text(1 << 20))]), True)])
        self.assert_refused(lay.root, "total", "limit", "large")
        # A gzip bomb: here the 6 MiB layer limit stops it (GzipBombTest: the ratio, by default).
        zeros = layer_tar([f("zeros", b"\0" * (16 << 20))])
        lay = self.hostile_layout("gzip-bomb", [(zeros, True)])
        self.assert_refused(lay.root, "larger than", "decompression bomb")


class Zeros(io.RawIOBase):
    """`n` zero bytes, read in chunks (a bomb's content, never held whole)."""

    def __init__(self, n):
        self.left = n

    def readable(self):
        return True

    def readinto(self, b):
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


class GzipBombTest(ImportChecks, SpaceTestCase):
    """With spaced's default limits (16 GiB a layer), a gzip bomb is stopped by the ratio of
    uncompressed to compressed bytes, a few MiB in, not by the size limits."""

    @classmethod
    def daemon_config(cls):
        return None

    def test_gzip_bomb_stopped_by_ratio(self):
        size = 512 << 20
        raw = io.BytesIO()
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode="w|", format=tarfile.GNU_FORMAT) as tar:
                ti = tarfile.TarInfo("zeros")
                ti.size = size
                tar.addfile(ti, Zeros(size))
        lay = Layout(os.path.join(self.tmp, "bomb-" + uuid.uuid4().hex[:6]))
        blob = lay.blob(raw.getvalue(), OCI_LAYER_GZ)
        cfg = lay.blob(config_blob([sha256(b"never computed")], {}), OCI_CONFIG)
        m = lay.blob(json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cfg,
                                 "layers": [blob]}).encode(), OCI_MANIFEST)
        lay.index([m])
        self.assertLess(blob["size"], 1 << 20)
        self.assert_refused(lay.root, "decompression bomb", "times its compressed size")


if __name__ == "__main__":
    main()
