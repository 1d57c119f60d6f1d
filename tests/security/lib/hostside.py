"""Helpers for the escape attempts that run on the host (tests/security/attacks/*/*.py whose
header says `sandbox=host`): API abuse as an untrusted client, and attacks in two halves where a
process inside a sandbox races or plants something while the host side drives the real CLI or
the API against it.

The runner passes the context in the environment:
  SPACE_SOCKET      the daemon's API socket        SPACE_CLI      the `space` binary
  SPACE_SANDBOX     a sandbox to attack from        SPACE_VICTIM   the other sandbox's id
  SPACE_HOST_CANARY / SPACE_HOST_CANARY_VALUE      a host file no sandbox may reach
  SPACE_WORK        a host scratch directory for this attempt (removed afterwards)
Verdicts work like attack.h: note() collects evidence, escaped() records a finding, finish()
prints `BLOCKED: ...` (exit 0) or `ESCAPED: ...` (exit 1).
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))

from harness import decode_events, http_request  # noqa: E402  (path set up above)

SOCKET = os.environ.get("SPACE_SOCKET", "")
CLI = os.environ.get("SPACE_CLI", "space")
SANDBOX = os.environ.get("SPACE_SANDBOX", "")
VICTIM = os.environ.get("SPACE_VICTIM", "")
CANARY = os.environ.get("SPACE_HOST_CANARY", "")
CANARY_VALUE = os.environ.get("SPACE_HOST_CANARY_VALUE", "")
WORK = os.environ.get("SPACE_WORK", "")

_notes = []
_escapes = []


def note(msg):
    _notes.append(msg)
    sys.stderr.write("  %s\n" % msg)


def escaped(msg):
    _escapes.append(msg)
    sys.stderr.write("  ESCAPE: %s\n" % msg)


def broken(msg):
    """The attempt could not run (not a verdict): exit 2."""
    print("ERROR: %s" % msg)
    sys.exit(2)


def finish():
    sys.stdout.flush()
    if _escapes:
        print("ESCAPED: %s" % "; ".join(_escapes)[:800])
        sys.exit(1)
    print("BLOCKED: %s" % ("; ".join(_notes)[:800] or "every step failed"))
    sys.exit(0)


def space(*args, input=None, timeout=60):
    """Runs the real CLI against the suite's daemon: (rc, stdout bytes, stderr bytes)."""
    env = dict(os.environ, SPACE_SOCKET=SOCKET)
    p = subprocess.run([CLI] + [str(a) for a in args], input=input,
                       stdin=None if input is not None else subprocess.DEVNULL,
                       capture_output=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def sh(sid, script, timeout=60, detach=False):
    """`space exec SID -- sh -c SCRIPT`; with detach the command keeps running."""
    extra = ["--detach"] if detach else []
    return space("exec", sid, *extra, "--", "sh", "-c", script, timeout=timeout)


def sh_ok(sid, script, timeout=60):
    rc, out, err = sh(sid, script, timeout)
    if rc != 0:
        broken("setup in %s failed (rc %d): %s %s" % (sid, rc, out[-300:], err[-300:]))
    return out


def api(method, path, body=None, headers=None, timeout=30):
    return http_request(SOCKET, method, path, body, headers, timeout)


def exec_events(sid, cmd, timeout=60, **fields):
    body = {"cmd": list(cmd)}
    body.update(fields)
    r = api("POST", "/v1/sandboxes/%s/exec" % sid, body, timeout=timeout)
    return r, (decode_events(r.body) if r.status == 200 else [])


def host_canary_intact():
    try:
        with open(CANARY) as f:
            return CANARY_VALUE in f.read()
    except OSError:
        return False


def is_client_error(r):
    """A well-formed 4xx answer with the API's error object."""
    if not (400 <= r.status <= 499) or not isinstance(r.json, dict):
        return False
    err = r.json.get("error")
    return isinstance(err, dict) and isinstance(err.get("code"), str)


def daemon_healthy():
    try:
        return api("GET", "/v1/health", timeout=10).status == 200
    except OSError:
        return False
