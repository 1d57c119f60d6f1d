"""Writes host files through `space cp` downloads: the sandbox plants symlinks to host paths in
a directory the user copies out (the CLI recreates them on the host, which is fine by
itself), then offers a file and a directory with the same names, which a later, ordinary
`space cp SB:/path host_dir/` would write through those symlinks — onto a host file
(work/victim.txt) and into a host directory (work/victim-dir/). Also checks the one-shot
cases: entries with "..", absolute names, and writing through a symlink inside one archive.
Blocked when: the CLI never follows a symlink at the destination it did not create for this
copy (O_NOFOLLOW, or replacing it), and libarchive's secure-extract flags hold.
space-attack: sandbox=host-fresh
"""
import os

from hostside import SANDBOX, WORK, escaped, finish, note, sh_ok, space

victim = os.path.join(WORK, "victim.txt")
victim_dir = os.path.join(WORK, "victim-dir")
with open(victim, "w") as f:
    f.write("ORIGINAL\n")
os.mkdir(victim_dir)
out = os.path.join(WORK, "out")

sh_ok(SANDBOX, """
set -e
mkdir -p /tmp/d /tmp/x /tmp/b
ln -sfn %(victim)s /tmp/d/evil
ln -sfn %(victim_dir)s /tmp/d/b
ln -sfn ../../../../../../../.. /tmp/d/up
echo PWNED > /tmp/x/evil
echo PWNED > /tmp/b/pwned
""" % {"victim": victim, "victim_dir": victim_dir})

rc, o, e = space("cp", "%s:/tmp/d" % SANDBOX, out)
note("cp of the directory with planted symlinks: rc %d, host has %s" % (
    rc, sorted(os.listdir(out)) if os.path.isdir(out) else "nothing"))
# The ordinary follow-up copies a user would make into the same directory.
rc1, o, e1 = space("cp", "%s:/tmp/x/evil" % SANDBOX, out + "/")
rc2, o, e2 = space("cp", "%s:/tmp/b" % SANDBOX, out + "/")
with open(victim) as f:
    content = f.read()
if content != "ORIGINAL\n":
    escaped("`space cp SB:/tmp/x/evil out/` wrote %r into host file %s through a symlink the "
            "sandbox planted" % (content.strip(), victim))
else:
    note("file copy onto the planted symlink: rc %d, host file intact (%s)" % (
        rc1, e1.decode().strip()[:80]))
if os.listdir(victim_dir):
    escaped("`space cp SB:/tmp/b out/` extracted %s into host directory %s through a planted "
            "symlink" % (os.listdir(victim_dir), victim_dir))
else:
    note("directory copy onto the planted symlink: rc %d, host directory empty" % rc2)
for dirpath, dirnames, filenames in os.walk(WORK):
    for n in filenames:
        p = os.path.join(dirpath, n)
        if not os.path.realpath(p).startswith(WORK):
            escaped("a file outside the work dir was reached: %s" % p)
finish()
