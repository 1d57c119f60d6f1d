"""Races the file API with symlink swaps: inside the sandbox a loop keeps flipping
/tmp/race/d between a real directory and a symlink (to "/", to "/proc/self/fd/6", to a
relative "../../.."), while the host side reads and writes /tmp/race/d/... through the API a
few hundred times. Any read of the host canary or of overlayfs internals, or a write landing
outside the sandbox's tree, is an escape.
Blocked by: every step of every lookup happens in the agent with RESOLVE_IN_ROOT |
RESOLVE_NO_MAGICLINKS, so a swapped link can only ever point somewhere inside the sandbox.
space-attack: sandbox=host-fresh timeout=60
"""
import urllib.parse

from hostside import (CANARY, CANARY_VALUE, SANDBOX, api, escaped, finish, host_canary_intact,
                      note, sh, sh_ok)

sh_ok(SANDBOX, "mkdir -p /tmp/race/real/sub && echo inside > /tmp/race/real/f")
racer = """
cd /tmp/race
i=0
while [ $i -lt 200000 ]; do
  ln -sfn real d; rm -f d
  ln -sfn / d; rm -f d
  ln -sfn /proc/self/fd/6 d; rm -f d
  ln -sfn ../../.. d; rm -f d
  i=$((i+1))
done
"""
sh(SANDBOX, racer, detach=True)
canary_rel = urllib.parse.quote(CANARY)
seen = {}
for i in range(150):
    for p in ("/tmp/race/d/f", "/tmp/race/d" + CANARY, "/tmp/race/d/upper/etc/hostname",
              "/tmp/race/d/work"):
        r = api("GET", "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, urllib.parse.quote(p)))
        seen[r.status] = seen.get(r.status, 0) + 1
        if CANARY_VALUE.encode() in r.body:
            escaped("read the host canary through %s" % p)
        if p.endswith("hostname") and r.status == 200:
            escaped("read the writable layer's upper/ through the race (%s)" % p)
    w = api("PUT", "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, urllib.parse.quote(
        "/tmp/race/d/pwned-%d" % i)), b"PWNED", {"Content-Type": "application/octet-stream"})
    seen["put %d" % w.status] = seen.get("put %d" % w.status, 0) + 1
sh(SANDBOX, "pkill -f 'ln -sfn' ; true")
if not host_canary_intact():
    escaped("the host canary changed")
rc, out, err = sh(SANDBOX, "find / -xdev -name 'pwned-*' 2>/dev/null | head -5; "
                           "ls /proc/self/fd/ >/dev/null")
note("600 racing reads and 150 writes: %s; writes landed at %s" % (
    dict(sorted(seen.items(), key=str)), out.decode().split() or "nowhere"))
finish()
