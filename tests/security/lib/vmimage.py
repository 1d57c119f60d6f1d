"""The image the escape suite's sandboxes run when it targets microVMs (run_suite.py --runtime
qemu or firecracker: both boot the same guest): a VM cannot use the `host` image, so this one
is made from the host's own files, just what the attempts need: busybox (Debian's
busybox-static) for the tools, dash as the shell, and the host's python3 with its standard
library, the shared libraries it and its extension modules load, and `requests` (the egress
attempts use it). Debian's merged /usr layout.

    tarball(path)  writes it as a .tar.gz for `space image import`
"""

import os
import re
import subprocess
import tarfile

BUSYBOX = "/bin/busybox"
PYTHON = "/usr/bin/python3"
# Parts of the standard library no attempt uses (and the test suite: 14 MB).
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
               "__pycache__", "site-packages", "dist-packages", "config-3.11-x86_64-linux-gnu"}
# Host tools that replace busybox applets: coreutils' truncate (-s 1T), and dash as sh (Debian's
# busybox ash runs its own applets before looking at PATH).
HOST_TOOLS = {"truncate": "/usr/bin/truncate", "sh": "/usr/bin/dash"}
DIST_PACKAGES = "/usr/lib/python3/dist-packages"
PACKAGES = ["requests", "urllib3", "idna", "charset_normalizer", "chardet", "certifi", "six"]


def _shared_libraries(paths):
    """Every library the ELF files in `paths` load (ldd), as host paths."""
    libs = set()
    for p in paths:
        out = subprocess.run(["ldd", p], capture_output=True, text=True).stdout
        for m in re.finditer(r"(/\S+)\s+\(0x", out):
            libs.add(m.group(1))
    return libs


def _dir(tar, name, mode=0o755):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.DIRTYPE
    ti.mode = mode
    tar.addfile(ti)


def _symlink(tar, name, target):
    ti = tarfile.TarInfo(name)
    ti.type = tarfile.SYMTYPE
    ti.linkname = target
    tar.addfile(ti)


def _file(tar, host_path, done):
    """Adds a host file at its real path (the image has the host's merged-/usr symlinks)."""
    real = os.path.realpath(host_path)
    # A library's soname is a symlink to its file (libz.so.1 -> libz.so.1.2.13): keep both.
    alias = os.path.join(os.path.realpath(os.path.dirname(host_path)),
                         os.path.basename(host_path))
    if alias != real and alias not in done and os.path.isfile(real):
        done.add(alias)
        _file(tar, real, done)
        _symlink(tar, alias.strip("/"), real)
        return
    if real in done or not os.path.isfile(real):
        return
    done.add(real)
    parts = real.strip("/").split("/")
    for i in range(1, len(parts)):
        d = "/".join(parts[:i])
        if d not in done:
            done.add(d)
            _dir(tar, d)
    tar.add(real, arcname=real.strip("/"), recursive=False)


def _tree(tar, root, done, skip=()):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip]
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                _file(tar, p, done)
            elif os.path.exists(p) and os.path.realpath(p).startswith(root):
                _file(tar, p, done)


def tarball(path):
    python = os.path.realpath(PYTHON)
    version = os.path.basename(python)  # python3.11
    stdlib = "/usr/lib/" + version
    dynload = os.path.join(stdlib, "lib-dynload")
    elf = [python] + list(HOST_TOOLS.values()) + [os.path.join(dynload, f)
                                                   for f in os.listdir(dynload)
                                                   if f.endswith(".so")]
    done = set()
    with tarfile.open(path, "w:gz") as tar:
        for d in ("usr", "usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "root", "home",
                  "var", "var/tmp", "run", "mnt"):
            done.add(d)
            _dir(tar, d)
        _dir(tar, "tmp", 0o1777)
        for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"),
                             ("lib64", "usr/lib64")):
            _symlink(tar, link, target)
        _file(tar, BUSYBOX, done)
        busybox = os.path.realpath(BUSYBOX)
        applets = subprocess.run([busybox, "--list"], capture_output=True,
                                 text=True).stdout.split()
        for a in applets:
            if a not in ("busybox", "python3") and a not in HOST_TOOLS:
                _symlink(tar, "usr/bin/" + a, busybox)
        _file(tar, python, done)
        for name, tool in HOST_TOOLS.items():
            _file(tar, tool, done)
            if os.path.basename(tool) != name:
                _symlink(tar, "usr/bin/" + name, os.path.basename(tool))
        _symlink(tar, "usr/bin/python3", version)
        for lib in sorted(_shared_libraries(elf)):
            _file(tar, lib, done)
        loader = "/lib64/ld-linux-x86-64.so.2"
        _symlink(tar, "usr/lib64/ld-linux-x86-64.so.2", os.path.realpath(loader))
        _tree(tar, stdlib, done, STDLIB_SKIP)
        for pkg in PACKAGES:
            if os.path.isdir(os.path.join(DIST_PACKAGES, pkg)):
                _tree(tar, os.path.join(DIST_PACKAGES, pkg), done, {"__pycache__"})
            elif os.path.isfile(os.path.join(DIST_PACKAGES, pkg + ".py")):
                _file(tar, os.path.join(DIST_PACKAGES, pkg + ".py"), done)
        for name, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                                          "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"),
                           ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
                           ("etc/hostname", "sandbox\n"),
                           ("etc/hosts", "127.0.0.1 localhost\n")):
            import io
            data = text.encode()
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            tar.addfile(ti, io.BytesIO(data))
    return path


if __name__ == "__main__":
    import sys
    print(tarball(sys.argv[1] if len(sys.argv) > 1 else "/tmp/space-sec-vm.tar.gz"))
