"""Abuses the commands that mint credentials. MINT_FAIL's command fails and writes a refresh
token to its stderr; MINT_OK's mints a fresh token on every run (ttl 0). From inside the
sandbox: 20 requests to mintfail.example.test, each needing MINT_FAIL (does the 502 carry the
command's stderr? does every request make spaced run the command again?), then 40 requests as
fast as they go to mintok.example.test (can the sandbox make spaced run a command at will?).
The host side counts the runs in the files the commands append to.
Blocked when: the sandbox's 502 names the secret and points to the audit log, never the
command's output; a failed command is not run again before its backoff (2 s, doubling); and a
sandbox may cause 5 runs at once and one a second after that (429 beyond), so the runs stay
within that budget.
space-attack: sandbox=host-fresh opts=--secret,MINT_FAIL,--secret,MINT_OK timeout=90
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
from hostside import SANDBOX, broken, escaped, finish, note, sh  # noqa: E402

MINT = os.environ["SPACE_EGRESS_MINT_DIR"]
PREFIX = os.environ["SPACE_EGRESS_SECRET_PREFIX"]


def runs(name):
    try:
        with open(os.path.join(MINT, name)) as f:
            return len(f.read().split())
    except FileNotFoundError:
        return 0


SCRIPT = r'''
import os, sys, requests
host, var, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = requests.Session()
for _ in range(n):
    r = s.get("https://%%s/echo" %% host, headers={"Authorization": "Bearer " + os.environ[var]},
              timeout=15)
    body = r.text.replace("\n", " ")
    print("%%d %%s" %% (r.status_code, body[:300]))
'''.replace("%%", "%")

fail_before, ok_before = runs("fail.runs"), runs("ok.runs")
start = time.monotonic()
rc, out, err = sh(SANDBOX, "cat > /tmp/mint.py <<'EOF'\n%sEOF\n"
                  "python3 /tmp/mint.py mintfail.example.test MINT_FAIL 20" % SCRIPT, timeout=60)
lines = out.decode("utf-8", "replace").splitlines()
if rc != 0 or len(lines) != 20:
    broken("the MINT_FAIL requests did not run (rc %d): %s %s" % (rc, out[-300:], err[-300:]))
codes = sorted(set(line.split()[0] for line in lines))
leaked = [line for line in lines if "refresh_token" in line or PREFIX in line]
if leaked:
    escaped("the command's stderr reached the sandbox: %s" % leaked[0][:200])
elif codes != ["502"]:
    broken("MINT_FAIL requests answered %s, not 502: %s" % (codes, lines[0][:200]))
else:
    note("20 x 502 without the command's output (%s)" % lines[0][4:120])
elapsed = time.monotonic() - start
fail_runs = runs("fail.runs") - fail_before
# Backoff 2 s, 4 s, 8 s ...: within `elapsed` seconds at most 1 + log2 of it runs.
allowed = 2 + int(elapsed).bit_length()
if fail_runs > allowed:
    escaped("the failing command ran %d times for 20 requests in %.1f s (backoff allows %d)"
            % (fail_runs, elapsed, allowed))
else:
    note("failing command ran %d time(s) in %.1f s" % (fail_runs, elapsed))

start = time.monotonic()
rc, out, err = sh(SANDBOX, "python3 /tmp/mint.py mintok.example.test MINT_OK 40", timeout=60)
elapsed = time.monotonic() - start
lines = out.decode("utf-8", "replace").splitlines()
if rc != 0 or len(lines) != 40:
    broken("the MINT_OK requests did not run (rc %d): %s %s" % (rc, out[-300:], err[-300:]))
if any(PREFIX in line for line in lines):
    escaped("a minted token reached the sandbox unmasked")
ok_runs = runs("ok.runs") - ok_before
codes = [line.split()[0] for line in lines]
budget = 5 + int(elapsed + 1)
if ok_runs > budget:
    escaped("40 requests in %.1f s made spaced run the mint command %d times (budget %d)"
            % (elapsed, ok_runs, budget))
else:
    note("40 requests in %.1f s: %d runs, %d answered 429" % (elapsed, ok_runs, codes.count("429")))
finish()
