"""Plants overlayfs's private xattrs (user.overlay.redirect / origin / opaque / metacopy) from
inside the sandbox, hoping overlayfs (or the daemon's diff, which reads user.overlay.opaque in
the writable layer from the host) will trust them: a redirect to a path outside the lower
layer, a forged origin file handle, a fake opaque directory.
Blocked by: overlayfs stores such names escaped (user.overlay.overlay.*) in the upper layer,
so they mean nothing to the sandbox's own overlay. Verified from the host by reading the
upper layer's xattrs through the agent's fd 6, and through the diff API.
space-attack: sandbox=host-fresh
"""
import os

from hostside import SANDBOX, api, broken, escaped, finish, note, sh

PRIVATE = ["user.overlay.redirect", "user.overlay.origin", "user.overlay.opaque",
           "user.overlay.metacopy"]
script = """
import os
os.makedirs('/tmp/redir', exist_ok=True)
open('/tmp/redir-file', 'w').close()
os.makedirs('/etc/opaque-probe', exist_ok=True)
ok = 0
for path in ('/tmp/redir', '/tmp/redir-file', '/etc'):
    for name in %r:
        try:
            os.setxattr(path, name, b'y' if name.endswith('opaque') else b'/../../../etc')
            ok += 1
        except OSError as e:
            print('refused', path, name, e.errno)
print('set', ok)
""" % PRIVATE
r = api("PUT", "/v1/sandboxes/%s/files?path=/tmp/plant.py" % SANDBOX, script.encode(),
        headers={"Content-Type": "application/octet-stream"})
if r.status >= 300:
    broken("upload failed: %r" % r)
rc, out, err = sh(SANDBOX, "python3 /tmp/plant.py")
if rc != 0:
    broken("planting failed: %r %r" % (out, err))
note("inside: %s" % out.decode().strip().splitlines()[-1])

info = api("GET", "/v1/sandboxes/%s" % SANDBOX).json
upper = "/proc/%d/fd/6/upper" % info["host_pid"]
if not os.path.isdir(upper):
    broken("cannot reach the upper layer at %s" % upper)
planted = {b"y", b"/../../../etc"}
for rel in ("tmp/redir", "tmp/redir-file", "etc"):
    path = os.path.join(upper, rel)
    names = os.listxattr(path, follow_symlinks=False)
    ours = []
    for n in names:
        if n not in PRIVATE:
            continue
        # overlayfs sets some of its own (origin on copied-up directories): only a value the
        # sandbox planted is an escape.
        if os.getxattr(path, n, follow_symlinks=False) in planted:
            ours.append(n)
    if ours:
        escaped("upper/%s carries overlay's own xattrs %s with planted values" % (rel, ours))
    else:
        note("upper/%s: %s" % (rel, ",".join(n for n in names if "overlay" in n) or "none"))
diff = api("GET", "/v1/sandboxes/%s/diff" % SANDBOX)
if diff.status == 200 and "/etc" in diff.json.get("changed", []) and \
        "/etc/opaque-probe" not in diff.json.get("added", []):
    escaped("diff was fooled by a planted opaque xattr on /etc")
else:
    note("diff unaffected (%d)" % diff.status)
finish()
