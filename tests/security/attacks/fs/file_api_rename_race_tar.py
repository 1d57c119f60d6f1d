"""Races a directory download (GET of a directory: the agent walks it, the daemon builds a
tar and reads each file again by path) with renames: a loop swaps /tmp/tree/sub with a
symlink to "/" and renames files under it, so that files read after the walk resolve somewhere
else. The archive must hold only sandbox files; no entry may carry ".." or an absolute name
or the host canary.
Blocked by: each read resolves inside the sandbox's root (RESOLVE_IN_ROOT); the header size
from the walk bounds what is copied.
space-attack: sandbox=host-fresh timeout=60
"""
import io
import tarfile

from hostside import CANARY_VALUE, SANDBOX, api, escaped, finish, note, sh, sh_ok

sh_ok(SANDBOX, "mkdir -p /tmp/tree/real && for i in $(seq 1 50); do echo file$i > "
               "/tmp/tree/real/f$i; done && ln -sfn real /tmp/tree/sub")
sh(SANDBOX, "cd /tmp/tree; i=0; while [ $i -lt 100000 ]; do ln -sfn / sub.new && "
            "mv -T sub.new sub; ln -sfn real sub.new && mv -T sub.new sub; "
            "mv real real.x 2>/dev/null; mv real.x real 2>/dev/null; i=$((i+1)); done",
   detach=True)
archives, errors = 0, 0
for i in range(40):
    r = api("GET", "/v1/sandboxes/%s/files?path=/tmp/tree" % SANDBOX, timeout=60)
    if r.status != 200:
        errors += 1
        continue
    if CANARY_VALUE.encode() in r.body:
        escaped("the archive holds the host canary")
    try:
        with tarfile.open(fileobj=io.BytesIO(r.body)) as t:
            for m in t.getmembers():
                if m.name.startswith("/") or ".." in m.name.split("/"):
                    escaped("archive entry %r" % m.name)
        archives += 1
    except tarfile.TarError as e:
        errors += 1
sh(SANDBOX, "pkill -f 'mv -T' ; true")
note("%d archives read during the race, %d errors; every entry inside the tree" % (
    archives, errors))
finish()
