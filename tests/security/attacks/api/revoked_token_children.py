"""Keeps the API after an admin token is revoked, through the tokens it minted: root makes an
admin token A, A mints an admin token B, B mints a read token C, then root revokes A (the
leaked or retired credential). B and C were made with A's authority and are what an attacker
who held A would have minted for later; if they still work, revoking A revoked nothing.
A second chain (P mints Q) is revoked only at its root while Q is about to mint R, to check
that a token is never minted for a parent that is being revoked.
Blocked by: revocation cascades (src/daemon/tokens.cc revoke(): every token records the
token that issued it, and revoking one revokes everything below it; create() refuses to
mint for a parent that is revoked or expired): B and C get 401 "was revoked".
space-attack: sandbox=host
"""
import threading

from hostside import api, daemon_healthy, escaped, finish, note


def mint(name, ops, ttl, as_token=None):
    headers = {"Authorization": "Bearer " + as_token} if as_token else None
    r = api("POST", "/v1/tokens", {"name": name, "profiles": ["*"], "ops": ops, "ttl": ttl},
            headers)
    if r.status != 201 or not isinstance(r.json, dict) or "token" not in r.json:
        return None, r
    return r.json["token"], r


def status_with(token, method="GET", path="/v1/sandboxes"):
    return api(method, path, headers={"Authorization": "Bearer " + token}).status


made = []  # every token id this attempt made, revoked at the end whatever happened
a, r = mint("sec-parent", ["read", "admin"], "10m")
if not a:
    print("ERROR: root could not mint a token (%d %s)" % (r.status, r.body[:200]))
    raise SystemExit(2)
made.append(a[4:16])
b, r = mint("sec-child", ["read", "admin"], "5m", as_token=a)
c = None
if b:
    made.append(b[4:16])
    c, r = mint("sec-grandchild", ["read"], "4m", as_token=b)
    if c:
        made.append(c[4:16])
if not (b and c):
    print("ERROR: the admin tokens could not mint (%d %s)" % (r.status, r.body[:200]))
    raise SystemExit(2)
sibling, _ = mint("sec-sibling", ["read"], "5m")  # made by root, unrelated to A
if sibling:
    made.append(sibling[4:16])

for who, tok in (("A", a), ("B", b), ("C", c)):
    if status_with(tok) != 200:
        print("ERROR: token %s does not work before the revocation" % who)
        raise SystemExit(2)

rv = api("DELETE", "/v1/tokens/" + a[4:16])
note("root revoked A: %d" % rv.status)
if rv.status != 204:
    print("ERROR: revoking A answered %d %s" % (rv.status, rv.body[:200]))
    raise SystemExit(2)

for who, tok in (("A", a), ("B (minted by A)", b), ("C (minted by B)", c)):
    st = status_with(tok)
    note("%s after revoking A: %d" % (who, st))
    if st != 401:
        escaped("token %s still answers %d after its issuer A was revoked" % (who, st))
# A revoked child can no longer mint either.
d, r = mint("sec-after", ["read"], "1m", as_token=b)
if d:
    made.append(d[4:16])
    escaped("B minted a new token after A was revoked")
else:
    note("B minting after the revocation: %d" % r.status)
if sibling and status_with(sibling) != 200:
    note("the unrelated root-minted token stopped working too (over-revocation, not an escape)")

# The race: P's child Q mints while root revokes P. Whichever wins, no working token may come
# out of it.
p, _ = mint("sec-race-parent", ["read", "admin"], "10m")
q, _ = mint("sec-race-child", ["read", "admin"], "5m", as_token=p) if p else (None, None)
if p and q:
    made += [p[4:16], q[4:16]]
    minted = []

    def mint_loop():
        for i in range(40):
            t, _ = mint("sec-race-%d" % i, ["read"], "1m", as_token=q)
            if t:
                minted.append(t)

    th = threading.Thread(target=mint_loop)
    th.start()
    api("DELETE", "/v1/tokens/" + p[4:16])
    th.join()
    made += [t[4:16] for t in minted]
    alive = [t[4:16] for t in minted if status_with(t) == 200]
    note("race: Q minted %d tokens around P's revocation, %d work now" % (len(minted),
                                                                           len(alive)))
    if alive:
        escaped("tokens %s minted by Q while P was revoked still work" % ",".join(alive[:5]))

for tid in made:
    api("DELETE", "/v1/tokens/" + tid)
if not daemon_healthy():
    escaped("spaced is unhealthy afterwards")
finish()
