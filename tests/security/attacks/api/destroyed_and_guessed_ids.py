"""Uses sandbox ids it should not: a destroyed sandbox's id (exec, files, processes, delete
again), ids guessed by incrementing or mutating a real one, and the other sandbox's id from a
client that only "owns" this one (no per-client ownership exists yet: the socket is root-only,
so this records what a root client can do and checks nothing reaches a sandbox that is gone).
Blocked by: unknown and destroyed ids are 404/409; ids are random (96 bits); a destroyed
sandbox has no process left to exec in.
space-attack: sandbox=host
"""
import re

from hostside import api, escaped, finish, is_client_error, note, space

rc, out, err = space("create")
sid = out.decode().strip()
if rc != 0 or not re.fullmatch(r"sb_[0-9a-f]+", sid):
    escaped("create failed: %r" % err)
    finish()
rc, out, err = space("rm", "--force", sid)
calls = [("POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["id"]}),
         ("GET", "/v1/sandboxes/%s/files?path=/etc/hostname" % sid, None),
         ("PUT", "/v1/sandboxes/%s/files?path=/tmp/x" % sid, b"x"),
         ("GET", "/v1/sandboxes/%s/processes" % sid, None),
         ("POST", "/v1/sandboxes/%s/pause" % sid, None),
         ("GET", "/v1/sandboxes/%s/diff" % sid, None),
         ("DELETE", "/v1/sandboxes/%s/processes/1" % sid, None)]
for method, path, body in calls:
    hdr = {"Content-Type": "application/octet-stream"} if isinstance(body, bytes) else None
    r = api(method, path, body, hdr)
    if not is_client_error(r):
        escaped("%s on a destroyed sandbox answered %d" % (path, r.status))
n = int(sid[3:], 16)
guesses = ["sb_%0*x" % (len(sid) - 3, (n + d) % (16 ** (len(sid) - 3))) for d in (1, -1, 2, 256)]
guesses += ["sb_" + "0" * (len(sid) - 3), "sb_" + "f" * (len(sid) - 3), sid.upper()]
for g in guesses:
    r = api("POST", "/v1/sandboxes/%s/exec" % g, {"cmd": ["id"]})
    if r.status == 200:
        escaped("guessed id %s accepted an exec" % g)
rc, out, err = space("exec", sid, "--", "id")
if rc == 0:
    escaped("the CLI ran a command in a destroyed sandbox")
note("destroyed id %s: every route 4xx; %d guessed ids refused; CLI exec rc %d" % (
    sid, len(guesses), rc))
finish()
