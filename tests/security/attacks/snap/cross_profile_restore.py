"""Moves a test-profile snapshot into the live profile through the API, as root and with
profile-scoped tokens: restore it with "profile": "live", roll a live sandbox back to it (by id
and by name), read or list it with a live-only token, restore it with a live-only token (which
would make a sandbox in a profile the token may not use), roll a live sandbox back with a
test-only token, and snapshot, roll back or restore with tokens that lack the operation.
Blocked by: a snapshot never restores into another profile (403 permission_denied), tokens see
only snapshots and sandboxes of their profiles, snapshot/rollback need `lifecycle` and restore
needs `create`. Verified: no sandbox appears, the live sandbox's files are unchanged.
space-attack: sandbox=host timeout=90
"""
import re

from hostside import SANDBOX, api, broken, escaped, finish, is_client_error, note, sh_ok, space

SNAP_NAME = "xprof-%s" % SANDBOX[-8:]


def token(profile, ops):
    rc, out, err = space("token", "create", "--name", "snap-attack", "--profile", profile,
                         "--op", ",".join(ops), "--ttl", "1h")
    text = out.decode().strip()
    if rc != 0 or not re.fullmatch(r"spt_[0-9a-f]{12}_[0-9a-f]{64}", text):
        broken("token create failed (rc %d): %s" % (rc, err.decode()[-300:]))
    return text


def as_(tok, method, path, body=None):
    h = {"Authorization": "Bearer " + tok} if tok else None
    return api(method, path, body, headers=h, timeout=60)


def sandboxes():
    r = api("GET", "/v1/sandboxes")
    return {s["id"]: s.get("profile") for s in r.json.get("sandboxes", [])}


ALL = ["read", "create", "exec", "files", "lifecycle"]
tokens = {"test": token("test", ALL), "live": token("live", ALL),
          "test-read": token("test", ["read", "exec", "files"]),
          "test-lifecycle": token("test", ["read", "lifecycle"])}
sh_ok(SANDBOX, "echo test-profile-data > /root/xprof-test")
r = api("POST", "/v1/sandboxes/%s/snapshots" % SANDBOX, {"name": SNAP_NAME}, timeout=60)
if r.status != 201 or r.json.get("profile") != "test":
    broken("snapshot failed: %r" % r)
snap = r.json["id"]
rc, out, err = space("create", "--profile", "live")
live = out.decode().strip().splitlines()[-1] if rc == 0 else broken("live create: %r" % err)
made = []
try:
    sh_ok(live, "echo live-data > /root/live-marker")
    before = sandboxes()

    def refused(what, r, allowed=(403, 404)):
        if r.status in allowed and is_client_error(r):
            note("%s: %d" % (what, r.status))
            return
        if r.status in (200, 201) and isinstance(r.json, dict) and r.json.get("id", "") \
                .startswith("sb_"):
            made.append(r.json["id"])
        escaped("%s: answered %d %r" % (what, r.status, r.body[:200]))

    refused("root restore into live", as_(None, "POST", "/v1/snapshots/%s/restore" % snap,
                                          {"profile": "live"}), (403,))
    refused("test token restore into live", as_(tokens["test"], "POST",
                                                "/v1/snapshots/%s/restore" % snap,
                                                {"profile": "live"}))
    refused("live token restore of a test snapshot", as_(tokens["live"], "POST",
                                                         "/v1/snapshots/%s/restore" % snap, {}))
    refused("live token restore by name", as_(tokens["live"], "POST",
                                              "/v1/snapshots/%s/restore" % SNAP_NAME, {}))
    refused("root rollback of a live sandbox", as_(None, "POST",
                                                   "/v1/sandboxes/%s/rollback" % live,
                                                   {"snapshot": snap}), (403,))
    refused("root rollback of a live sandbox by name",
            as_(None, "POST", "/v1/sandboxes/%s/rollback" % live, {"snapshot": SNAP_NAME}))
    refused("live token rollback to a test snapshot",
            as_(tokens["live"], "POST", "/v1/sandboxes/%s/rollback" % live, {"snapshot": snap}))
    refused("test token rollback of a live sandbox",
            as_(tokens["test"], "POST", "/v1/sandboxes/%s/rollback" % live, {"snapshot": snap}))
    refused("test token snapshot of a live sandbox",
            as_(tokens["test"], "POST", "/v1/sandboxes/%s/snapshots" % live, {}))
    refused("live token reads a test snapshot",
            as_(tokens["live"], "GET", "/v1/snapshots/%s" % snap), (403, 404))
    refused("live token deletes a test snapshot",
            as_(tokens["live"], "DELETE", "/v1/snapshots/%s" % snap), (403, 404))
    refused("live token diffs against a test snapshot",
            as_(tokens["live"], "GET", "/v1/sandboxes/%s/diff?since=%s" % (live, snap)))
    r = as_(tokens["live"], "GET", "/v1/snapshots")
    if r.status == 200 and snap in r.body.decode():
        escaped("a live token lists the test snapshot")
    r = as_(tokens["live"], "GET", "/v1/sandboxes/%s/snapshots" % SANDBOX)
    if r.status == 200 and snap in r.body.decode():
        escaped("a live token lists a test sandbox's snapshots")
    refused("read-only token snapshot", as_(tokens["test-read"], "POST",
                                            "/v1/sandboxes/%s/snapshots" % SANDBOX, {}), (403,))
    refused("read-only token rollback", as_(tokens["test-read"], "POST",
                                            "/v1/sandboxes/%s/rollback" % SANDBOX,
                                            {"snapshot": snap}), (403,))
    refused("lifecycle token restore (needs create)", as_(tokens["test-lifecycle"], "POST",
                                                          "/v1/snapshots/%s/restore" % snap, {}),
            (403,))
    refused("read-only token delete", as_(tokens["test-read"], "DELETE",
                                          "/v1/snapshots/%s" % snap), (403,))

    after = sandboxes()
    if after != before:
        escaped("sandboxes changed: %r -> %r" % (before, after))
    rc, out, _ = space("exec", live, "--", "sh", "-c",
                       "cat /root/live-marker; test -e /root/xprof-test && echo LEAKED")
    if out.decode() != "live-data\n":
        escaped("the live sandbox's files changed: %r" % out.decode())
    r = api("GET", "/v1/snapshots/%s" % snap)
    if r.status != 200:
        escaped("the test snapshot is gone after the refused calls: %r" % r)
finally:
    for sid in [live] + made:
        space("rm", "--force", sid, timeout=60)
    api("DELETE", "/v1/snapshots/%s" % snap)
    for t in tokens.values():
        space("token", "rm", t[4:16])
finish()
