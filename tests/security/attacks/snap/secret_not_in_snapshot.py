"""Gets the real value of a secret into a snapshot: the sandbox (granted API_TOKEN) makes a
request that the gateway injects the secret into, keeps the (redacted) echo of it, its
environment and the gateway's files in the workspace, and asks for a snapshot and a restore —
so that whatever the daemon adds to a snapshot of a sandbox with secrets (its settings, grants,
gateway state) would put the value in the store, in the API's view of the snapshot, or in the
restored sandbox, where the sandbox could read it.
Blocked by: the secret never enters the sandbox or its writable layer, and a snapshot holds the
layer plus ids and names only. Verified from the host: no manifest, no decompressed chunk of the
store, no snapshot JSON and no file of the restored sandbox holds the secret's value (read from
the daemon's config).
space-attack: sandbox=host-fresh opts=--secret,API_TOKEN timeout=90
"""
import json
import os
import subprocess

from hostside import SANDBOX, api, broken, escaped, finish, note, sh, space

with open(os.environ["SPACE_DAEMON_CONFIG"]) as f:
    SECRET = json.load(f)["secrets"]["API_TOKEN"]["value"].encode()
STATE = os.environ["SPACE_STATE_DIR"]
USE = r"""python3 - <<'EOF'
import os, requests
ph = os.environ["API_TOKEN"]
r = requests.get("https://api.example.test/echo?x=" + ph, headers={"Authorization": "Bearer " + ph},
                 proxies={"https": "http://127.0.0.1:3128"}, verify="/etc/space/ca-bundle.crt",
                 timeout=20)
open("/root/echo.txt", "w").write(r.text + str(r.headers))
open("/root/env.txt", "w").write("\n".join("%s=%s" % kv for kv in sorted(os.environ.items())))
print(r.status_code, r.text.count("*" * 12), ph)
EOF"""
rc, out, err = sh(SANDBOX, USE)
words = out.decode().split()
if rc != 0 or len(words) < 3 or words[0] != "200" or words[1] == "0":
    broken("the secret was not injected and masked (rc %d): %r %r" % (rc, out[-300:], err[-300:]))
placeholder = words[2]
note("secret injected and masked %s times in the echo" % words[1])
r = api("POST", "/v1/sandboxes/%s/snapshots" % SANDBOX, {"name": "secret-%s" % SANDBOX[-8:]},
        timeout=60)
if r.status != 201:
    broken("snapshot failed: %r" % r)
snap = r.json["id"]
if SECRET in r.body or SECRET in api("GET", "/v1/snapshots").body:
    escaped("the snapshot's JSON holds the secret")

store = os.path.join(STATE, "snapshots")
n_chunks = n_manifests = 0
for dp, _, fns in os.walk(store):
    for name in fns:
        p = os.path.join(dp, name)
        with open(p, "rb") as f:
            data = f.read()
        if "/chunks/" in p and not name.startswith("."):
            n_chunks += 1
            z = subprocess.run(["zstd", "-dcq"], input=data, capture_output=True)
            if z.returncode != 0:
                broken("zstd cannot read chunk %s: %s" % (p, z.stderr[-200:]))
            data = z.stdout
        elif p.endswith(".json"):
            n_manifests += 1
        if SECRET in data:
            escaped("%s holds the secret's value" % os.path.relpath(p, STATE))
note("%d manifests and %d chunks searched" % (n_manifests, n_chunks))

rc, out, err = space("restore", snap, timeout=120)
if rc != 0:
    broken("restore failed (rc %d): %s" % (rc, err.decode()[-300:]))
new = out.decode().strip().splitlines()[-1]
try:
    rc, out, _ = space("exec", new, "--", "sh", "-c",
                       "printenv API_TOKEN; cat /root/env.txt /root/echo.txt /etc/space/* "
                       "/proc/1/environ 2>/dev/null; grep -rl '%s' /root /etc /tmp 2>/dev/null; "
                       "true" % SECRET.decode()[:12])
    if SECRET in out:
        escaped("the restored sandbox reads the secret's value")
    new_ph = out.decode().split("\n", 1)[0]
    note("restored sandbox: %s placeholder, no secret in its files" % (
        "its own" if new_ph and new_ph != placeholder else "the SAME (contract: new ones)"))
finally:
    space("rm", "--force", new, timeout=60)
    api("DELETE", "/v1/snapshots/%s" % snap)
finish()
