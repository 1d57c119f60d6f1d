"""Uploads hostile tar archives through the file API (PUT with application/x-tar, as
`space cp DIR SB:/path` does): entries named "../../x" and "/abs", a symlink to "/" followed by
a file written through it, a symlink to a host path followed by a file through it, a hard link
to /etc/shadow, device nodes and a setuid file. Nothing may land on the host or outside the
sandbox's root (the host canary, and a host path an entry names, must be untouched), no device
node may appear, names with ".." must be refused and a leading "/" must not make an entry
land at that absolute path.
Blocked by: the daemon cleans every entry name before writing (".." refused, a leading "/"
stripped: src/daemon/archive_names.cc),
writes through the agent inside the sandbox's root, and skips device nodes. (Entries written
through a symlink the same archive created do land outside the target directory, inside the
sandbox: reported as a contract deviation, not an escape; see the note.)
space-attack: sandbox=host-fresh
"""
import io
import os
import tarfile

from hostside import (CANARY, SANDBOX, api, escaped, finish, host_canary_intact, note, sh)


def tar_of(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for m, data in members:
            t.addfile(m, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name, kind=tarfile.REGTYPE, data=b"PWNED\n", link="", mode=0o644):
    m = tarfile.TarInfo(name)
    m.type = kind
    m.mode = mode
    m.linkname = link
    m.size = len(data) if kind == tarfile.REGTYPE else 0
    return m, data if kind == tarfile.REGTYPE else None


archives = {
    "dotdot": [member("../../../../tmp/dotdot-pwned")],
    "absolute": [member("/tmp/abs-pwned")],
    "symlink to / then file": [member("root-link", tarfile.SYMTYPE, link="/"),
                               member("root-link/tmp/through-link-pwned")],
    "symlink to host then file": [member("host-link", tarfile.SYMTYPE, link=CANARY),
                                  member("host-link")],
    "dir symlink up then file": [member("up", tarfile.SYMTYPE, link="../../../.."),
                                 member("up/tmp/up-pwned")],
    "hardlink to shadow": [member("shadow-link", tarfile.LNKTYPE, link="/etc/shadow")],
    "hardlink dotdot": [member("hl", tarfile.LNKTYPE, link="../../etc/passwd")],
    "device nodes": [member("sda", tarfile.BLKTYPE), member("mem", tarfile.CHRTYPE)],
    "setuid": [member("suid", mode=0o4755)],
}
for name, members in archives.items():
    r = api("PUT", "/v1/sandboxes/%s/files?path=/tmp/up/load" % SANDBOX, tar_of(members),
            {"Content-Type": "application/x-tar"})
    note("%s: %d" % (name, r.status))
if not host_canary_intact():
    escaped("the host canary changed")
rc, out, err = sh(SANDBOX, "find / -xdev \\( -name '*-pwned' -o -name sda -o -name mem \\) "
                           "-print 2>/dev/null; ls -l /tmp/up/load 2>/dev/null; "
                           "find /tmp/up -perm -4000 2>/dev/null")
found = out.decode().split("\n")
for l in found:
    # ".." entries are refused; a leading "/" is stripped (the entry lands below the target).
    if l.endswith("dotdot-pwned") or l == "/tmp/abs-pwned":
        escaped("an entry named with '..' or '/' was written at %s" % l)
outside = [l for l in found if l.endswith("-pwned") and not l.startswith("/tmp/up/load/")]
if outside:
    note("CONTRACT: entries written through an archive's own symlink landed outside the target "
         "directory (still inside the sandbox): %s" % outside)
if any(l.startswith("b") or l.startswith("c") for l in found):
    escaped("a device node was created: %s" % [l for l in found if l[:1] in "bc"])
for p in ("/tmp/through-link-pwned", "/tmp/up-pwned", "/tmp/dotdot-pwned", "/tmp/abs-pwned"):
    if os.path.exists(p):
        escaped("an archive entry landed on the host: %s" % p)
finish()
