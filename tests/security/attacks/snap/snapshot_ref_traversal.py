"""Uses snapshot references as paths: copies of a real (sealed) manifest are planted outside the
store's manifests/ directory — one level up, at the top of the state directory, and in the
attempt's host scratch directory — and then referenced through the API as "../decoy",
"snap_../../decoy", percent-encoded, absolute and NUL-truncated forms, in GET, restore, DELETE,
rollback and diff --since. A daemon that builds a file name from the reference would load a
file outside the store (or delete one).
(A trailing slash is not tried: the router treats ".../snap_X/" as ".../snap_X".)
Blocked by: references are an id of the form snap_<24 hex> or a name of [A-Za-z0-9._-] looked
up in the database; anything else is 400/404. Verified: every answer is a 4xx with an error
object, no decoy was deleted, no sandbox was made, the daemon stays healthy.
space-attack: sandbox=host timeout=90
"""
import os
import shutil
import urllib.parse

from hostside import SANDBOX, WORK, api, broken, daemon_healthy, escaped, finish, is_client_error, note

STATE = os.environ["SPACE_STATE_DIR"]
r = api("POST", "/v1/sandboxes/%s/snapshots" % SANDBOX, {}, timeout=60)
if r.status != 201:
    broken("snapshot failed: %r" % r)
snap, profile = r.json["id"], r.json["profile"]
store = os.path.join(STATE, "snapshots", profile)
manifest = os.path.join(store, "manifests", snap + ".json")
if not os.path.isfile(manifest):
    broken("no manifest at %s" % manifest)
decoys = [os.path.join(store, "decoy.json"), os.path.join(STATE, "decoy.json"),
          os.path.join(WORK, "decoy.json"), os.path.join(store, "snap_decoy.json")]
for d in decoys:
    shutil.copy(manifest, d)

refs = ["../decoy", "../../../decoy", "snap_../../decoy", "..%2Fdecoy", "%2E%2E/decoy",
        WORK + "/decoy", "../snap_decoy", "snap_decoy", "/%s/decoy" % STATE.strip("/"),
        snap + "/../../decoy", snap + "\x00", snap + "%00.json", "./" + snap,
        snap.upper(), snap + ".json", "~", "*", "%", "..", "."]
sandboxes_before = sorted(s["id"] for s in api("GET", "/v1/sandboxes").json["sandboxes"])
answers = {}
for ref in refs:
    q = urllib.parse.quote(ref, safe="%/")  # some are pre-encoded, some carry raw slashes
    calls = [("GET", "/v1/snapshots/%s" % q, None),
             ("POST", "/v1/snapshots/%s/restore" % q, {}),
             ("DELETE", "/v1/snapshots/%s" % q, None),
             ("POST", "/v1/sandboxes/%s/rollback" % SANDBOX, {"snapshot": ref}),
             ("GET", "/v1/sandboxes/%s/diff?since=%s" % (SANDBOX, urllib.parse.quote(ref, safe="")),
              None)]
    for method, path, body in calls:
        try:
            r = api(method, path, body, timeout=30)
        except OSError as e:
            escaped("%s %s: no answer (%s)" % (method, path, e))
            continue
        answers[r.status] = answers.get(r.status, 0) + 1
        if not is_client_error(r):
            escaped("%s %r (%s): %d %r" % (method, ref, path, r.status, r.body[:160]))
for d in decoys:
    if not os.path.exists(d):
        escaped("the decoy %s was deleted through a reference" % d)
    else:
        os.unlink(d)
after = sorted(s["id"] for s in api("GET", "/v1/sandboxes").json["sandboxes"])
if after != sandboxes_before:
    escaped("sandboxes appeared: %s" % sorted(set(after) - set(sandboxes_before)))
r = api("GET", "/v1/snapshots/%s" % snap)
if r.status != 200:
    escaped("the real snapshot is gone: %r" % r)
api("DELETE", "/v1/snapshots/%s" % snap)
if not daemon_healthy():
    escaped("spaced is unhealthy")
note("%d references x 5 calls: %s" % (len(refs), dict(sorted(answers.items()))))
finish()
