"""Uses /proc magic links through the file API, where the agent (not the sandbox's process)
opens the path: /proc/self/root, /proc/self/cwd, /proc/1/root, /proc/self/fd/6 (the agent's
handle on the writable layer: upper/ and overlayfs's work/ directory) and /proc/self/fd/3 (its
channel to the daemon), directly and through symlinks the sandbox planted.
Blocked by: the agent resolves with RESOLVE_NO_MAGICLINKS, so every path crossing a /proc
magic link fails; the sandbox cannot reach its own overlay internals through the agent.
space-attack: sandbox=host
"""
import urllib.parse

from hostside import SANDBOX, api, escaped, finish, is_client_error, note, sh_ok

sh_ok(SANDBOX, "ln -sfn /proc/self/fd/6 /tmp/layer-link; ln -sfn /proc/1/root /tmp/root-link; "
               "ln -sfn /proc/self/fd /tmp/fds-link")
paths = ["/proc/self/fd/6/upper/etc/hostname", "/proc/self/fd/6/work", "/proc/self/fd/6",
         "/proc/1/fd/6/upper", "/proc/self/root/etc/hostname", "/proc/self/cwd/etc/hostname",
         "/proc/1/root/etc/hostname", "/proc/self/fd/3", "/proc/self/fd/5",
         "/tmp/layer-link/upper/etc/hostname", "/tmp/layer-link/work/x",
         "/tmp/root-link/etc/hostname", "/tmp/fds-link/3", "/proc/thread-self/root/etc"]
statuses = {}
for p in paths:
    q = urllib.parse.quote(p)
    r = api("GET", "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, q))
    statuses[p] = r.status
    if r.status == 200:
        escaped("GET %s returned %d bytes through a magic link" % (p, len(r.body)))
    elif not is_client_error(r):
        escaped("GET %s answered %d" % (p, r.status))
    w = api("PUT", "/v1/sandboxes/%s/files?path=%s" % (SANDBOX, urllib.parse.quote(p + "/pwn")),
            b"x", {"Content-Type": "application/octet-stream"})
    if w.status < 300:
        escaped("PUT %s/pwn succeeded" % p)
note("every magic-link path refused: %s" % ",".join(sorted({str(s) for s in statuses.values()})))
finish()
