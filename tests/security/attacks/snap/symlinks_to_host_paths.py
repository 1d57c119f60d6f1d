"""Aims symlinks in the workspace at host paths — /etc/shadow, the host canary, the daemon's
state directory and its snapshot store, a host directory (the attempt's scratch dir) and a
relative climb out of the layer — while a racer inside keeps swapping a directory with a
symlink to the host directory, then snapshots several times, restores into a new sandbox and
rolls the sandbox back, hoping the daemon (which walks and fills writable layers on the host, as
host root) follows a link: reading a host file into the store, or writing through one.
Blocked by: the store walks the layer with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS while the
sandbox is frozen, stores symlinks as symlinks, and creates restored entries beneath the new
layer only. Verified from the host: no chunk in the store has the SHA-256 of a host file, the
host directory and the canary are unchanged, the restored links keep their targets.
space-attack: sandbox=host-fresh timeout=120
"""
import hashlib
import json
import os

from hostside import (CANARY, SANDBOX, WORK, api, broken, escaped, finish, note, sh, sh_ok,
                      space)

STATE = os.environ["SPACE_STATE_DIR"]
hostdir = os.path.join(WORK, "hostdir")
os.makedirs(hostdir)
os.chmod(WORK, 0o755)
bait = "host-only bait %s\n" % os.urandom(8).hex()
with open(os.path.join(hostdir, "bait"), "w") as f:
    f.write(bait)


def tree(d):
    out = {}
    for dp, dns, fns in os.walk(d):
        for n in dns + fns:
            p = os.path.join(dp, n)
            st = os.lstat(p)
            out[os.path.relpath(p, d)] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns)
    return out


host_before = tree(hostdir)
# SHA-256 of host files: a chunk with one of these names means the daemon read the file.
secrets = {}
for p in (CANARY, "/etc/shadow", os.path.join(hostdir, "bait"),
          os.path.join(STATE, "space.db")):
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError:
        continue
    if data and len(data) < (256 << 10):  # one chunk: its name is the file's hash
        secrets[hashlib.sha256(data).hexdigest()] = p

links = {
    "/root/s/shadow": "/etc/shadow",
    "/root/s/canary": CANARY,
    "/root/s/state": STATE,
    "/root/s/store": os.path.join(STATE, "snapshots"),
    "/root/s/db": os.path.join(STATE, "space.db"),
    "/root/s/hostdir": hostdir,
    "/root/s/climb": "../../../../../../../../.." + CANARY,
    "/root/s/proc-root": "/proc/1/root" + CANARY,
}
script = "set -e; mkdir -p /root/s /root/race\n" + "".join(
    "ln -s '%s' '%s'\n" % (t, l) for l, t in links.items())
sh_ok(SANDBOX, script)
# The racer: /root/race/d flips between a directory holding "bait" and a link to the host dir.
sh(SANDBOX, "cd /root/race; echo $$ > /root/race.pid; i=0; while [ $i -lt 200000 ]; do mkdir d 2>/dev/null; "
            "echo sandbox-bait > d/bait; rm -rf d; ln -s '%s' d; rm -f d; i=$((i+1)); done"
            % hostdir, detach=True)

snaps = []
for i in range(5):
    r = api("POST", "/v1/sandboxes/%s/snapshots" % SANDBOX, {}, timeout=60)
    if r.status != 201:
        broken("snapshot %d failed: %r" % (i, r))
    snaps.append(r.json["id"])
note("%d snapshots taken while racing" % len(snaps))
sh(SANDBOX, "kill $(cat /root/race.pid); sleep 0.2; rm -rf /root/race/d; true")


def manifest(snap):
    for prof in os.listdir(os.path.join(STATE, "snapshots")):
        p = os.path.join(STATE, "snapshots", prof, "manifests", snap + ".json")
        if os.path.exists(p):
            with open(p) as f:
                return json.load(f)["manifest"]
    broken("manifest of %s not found under %s" % (snap, STATE))


for snap in snaps:
    m = manifest(snap)
    for e in m["entries"]:
        path = e["path"] if isinstance(e["path"], str) else "<hex>"
        if path.startswith("root/s/") or path.startswith("root/race/d/"):
            if e["type"] != "symlink" and path.startswith("root/s/"):
                escaped("%s: root/s/%s stored as %s, not a symlink" % (snap, path, e["type"]))
            if path.startswith("root/race/d/") and e["type"] == "file":
                # The racer's `echo > d/bait` truncates, then writes: a snapshot that freezes it
                # in between holds the sandbox's own empty file. Anything else is not its bait
                # (the chunks are checked against the host's files below, too).
                data_ok = e.get("size") in (0, len("sandbox-bait\n"))
                if not data_ok:
                    escaped("%s: %s holds %d bytes, not the sandbox's bait" %
                            (snap, path, e.get("size", -1)))
        for c in e.get("chunks", []):
            if c in secrets:
                escaped("%s: %s has the content of host file %s" % (snap, path, secrets[c]))
    if any(e["path"].startswith("root/s/hostdir/") for e in m["entries"]
           if isinstance(e["path"], str)):
        escaped("%s: entries below the symlink root/s/hostdir (the walk followed it)" % snap)
for prof in os.listdir(os.path.join(STATE, "snapshots")):
    for h, p in secrets.items():
        if os.path.exists(os.path.join(STATE, "snapshots", prof, "chunks", h[:2], h[2:])):
            escaped("the store of %s holds a chunk with the content of %s" % (prof, p))

# Restore into a new sandbox and roll the sandbox back: links are recreated as links.
rc, out, err = space("restore", snaps[-1], timeout=120)
if rc != 0:
    broken("restore failed (rc %d): %s" % (rc, err.decode()[-300:]))
new = out.decode().strip().splitlines()[-1]
try:
    for sid in (new, SANDBOX):
        if sid == SANDBOX:
            rc, out, err = space("rollback", SANDBOX, snaps[0], timeout=120)
            if rc != 0:
                broken("rollback failed (rc %d): %s" % (rc, err.decode()[-300:]))
        rc, out, err = sh(sid, "for l in %s; do printf '%%s=%%s\\n' $l \"$(readlink $l)\"; "
                               "done; cat /root/s/canary /root/s/hostdir/bait 2>&1 | head -c 300"
                          % " ".join(links))
        text = out.decode()
        for l, t in links.items():
            if "%s=%s\n" % (l, t) not in text:
                escaped("%s: %s does not point at %s any more: %r" % (sid, l, t, text[:400]))
        if bait.strip() in text or (CANARY and os.environ.get("SPACE_HOST_CANARY_VALUE", "@")
                                    in text):
            escaped("%s reads host files through the restored links" % sid)
        note("%s: %d links restored as links, unreadable" % (sid, len(links)))
finally:
    space("rm", "--force", new, timeout=60)
    for snap in snaps:
        api("DELETE", "/v1/snapshots/%s" % snap)

if tree(hostdir) != host_before:
    escaped("the host directory changed: %r -> %r" % (host_before, tree(hostdir)))
with open(os.path.join(hostdir, "bait")) as f:
    if f.read() != bait:
        escaped("the host bait file was written")
note("no host file's hash among the chunks (%d checked)" % len(secrets))
finish()
