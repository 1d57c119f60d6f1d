"""Tries to run programs without them showing up in the sandbox's audit log (docs/audit.md):
a fileless exec (memfd_create + execveat(AT_EMPTY_PATH), and memfd through /proc/self/fd), the
dynamic loader running a binary (`ld.so /bin/true`), argv[0] spoofing (`exec -a`), a burst of
500 processes that each live about a millisecond, and argv with a newline and a terminal escape
meant to forge or wipe lines of `space audit`. Then edits the log's database row of one exec
and checks `space audit --verify` notices.
Blocked by: execve/execveat are seccomp user notifications answered by the daemon only after the
event is in the log (the exec waits); the CLI escapes control characters; the log is an HMAC
chain.
space-attack: sandbox=host-fresh timeout=180
"""
import json
import os
import sqlite3

from hostside import SANDBOX, api, escaped, finish, note, sh_ok, space

MARK = "evasion-%d" % os.getpid()
sh_ok(SANDBOX, "python3 -c \"import os\n"
               "fd = os.memfd_create('x', 0)\n"
               "os.write(fd, open('/bin/true', 'rb').read())\n"
               "os.execve('/proc/self/fd/%d' % fd, ['" + MARK + "-memfd'], {})\"")
sh_ok(SANDBOX, "python3 -c \"import ctypes, os\n"
               "fd = os.memfd_create('y', 0)\n"
               "os.write(fd, open('/bin/true', 'rb').read())\n"
               "libc = ctypes.CDLL(None)\n"
               "argv = (ctypes.c_char_p * 2)(b'" + MARK + "-execveat', None)\n"
               "envp = (ctypes.c_char_p * 1)(None)\n"
               "libc.syscall(322, fd, b'', argv, envp, 0x1000)\n"
               "raise SystemExit(1)\"")
sh_ok(SANDBOX, "/lib64/ld-linux-x86-64.so.2 /bin/echo " + MARK + "-ldso >/dev/null")
sh_ok(SANDBOX, "bash -c 'exec -a " + MARK + "-spoofed /bin/true'")
sh_ok(SANDBOX, "i=0; while [ $i -lt 500 ]; do /bin/true " + MARK + "-burst; i=$((i+1)); done")
sh_ok(SANDBOX, "/bin/true '" + MARK + "-ctl\n2026-01-01 forged line' '\x1b[2J\x1b[H'")

r = api("GET", "/v1/sandboxes/%s/audit" % SANDBOX)
if r.status != 200:
    escaped("GET audit answered %d" % r.status)
    finish()
execs = [e["data"] for e in r.json["events"] if e["kind"] == "proc.exec"]


def count(pred):
    return sum(1 for e in execs if pred(e.get("argv") or []))


checks = {
    "memfd via /proc/self/fd": count(lambda a: a == [MARK + "-memfd"]),
    "memfd via execveat": count(lambda a: a == [MARK + "-execveat"]),
    "ld.so": count(lambda a: a[:1] == ["/lib64/ld-linux-x86-64.so.2"] and MARK + "-ldso" in a),
    "exec -a": count(lambda a: a == [MARK + "-spoofed"]),
    "control characters": count(lambda a: len(a) == 3 and a[1].startswith(MARK + "-ctl\n")),
}
for what, n in checks.items():
    if n < 1:
        escaped("%s not in the audit log" % what)
burst = count(lambda a: a == ["/bin/true", MARK + "-burst"])
if burst != 500:
    escaped("only %d of 500 short-lived execs logged" % burst)
else:
    note("all 500 short-lived execs logged")
rc, out, _ = space("audit", SANDBOX)
if b"\x1b" in out or b"\n2026-01-01 forged line" in out:
    escaped("`space audit` printed a raw control character from argv")
rc, out, _ = space("audit", SANDBOX, "--verify")
if rc != 0:
    escaped("--verify failed on an untouched log: %r" % out[-300:])

db = os.path.join(os.environ.get("SPACE_STATE_DIR", ""), "space.db")
if os.path.exists(db):
    con = sqlite3.connect(db, timeout=10)
    con.execute("UPDATE audit_events SET data=? WHERE sandbox_id=? AND seq=("
                "SELECT MAX(seq) FROM audit_events WHERE sandbox_id=? AND kind='proc.exec')",
                (json.dumps({"argv": ["/bin/true"]}), SANDBOX, SANDBOX))
    con.commit()
    con.close()
    rc, out, _ = space("audit", SANDBOX, "--verify")
    if rc != 1:
        escaped("an edited audit row passed --verify (rc %d)" % rc)
    else:
        note("edited row caught by --verify")
else:
    note("state dir not known to the attempt; tamper check left to tests/integration")
note("fileless, ld.so, argv[0] spoofing, bursts and control characters all logged")
finish()
