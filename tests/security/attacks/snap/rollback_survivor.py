"""Survives a rollback: before it, the sandbox runs a streaming exec, a detached writer that
appends to a file every 50 ms, a double-forked setsid daemon, a process that ignores SIGTERM
and SIGHUP, and a process that keeps forking; then the host rolls the sandbox back while all of
them run (and while the streaming exec is still being read). Any of them alive afterwards would
be a process of "before" in a sandbox the user believes reset — or, outside the sandbox's
cgroup, on the host.
Blocked by: rollback stops every process of the sandbox (the agent is PID 1 of its pid
namespace and the cgroup is killed) before it replaces the writable layer, and starts a new
agent. Verified from the host: none of the old host pids exists, no process carries the
attempt's marker, the writer's file is the snapshot's and stops growing, the exec stream ended.
space-attack: sandbox=host-fresh timeout=90
"""
import os
import subprocess
import time

from hostside import CLI, SANDBOX, SOCKET, api, broken, escaped, finish, note, sh, sh_ok

MARK = "space-sec-marker-rb-%s" % SANDBOX[-6:]
sh_ok(SANDBOX, "echo snapshot-state > /root/log")
r = api("POST", "/v1/sandboxes/%s/snapshots" % SANDBOX, {}, timeout=60)
if r.status != 201:
    broken("snapshot failed: %r" % r)
snap = r.json["id"]

# The marker rides in each shell's $0 (its command line); "; true" keeps sh from exec'ing.
sh(SANDBOX, "sh -c 'while true; do echo tick >> /root/log; sleep 0.05; done' %s-writer" % MARK,
   detach=True)
sh(SANDBOX, "setsid sh -c '(sh -c \"sleep 1000; true\" %s-daemon &)' </dev/null >/dev/null 2>&1"
   % MARK, detach=True)
sh(SANDBOX, "sh -c 'trap \"\" TERM HUP INT; while true; do sleep 1; done' %s-stubborn" % MARK,
   detach=True)
sh(SANDBOX, "sh -c 'while true; do sleep 300 & sleep 0.2; done' %s-forker" % MARK, detach=True)
stream = subprocess.Popen([CLI, "exec", SANDBOX, "--", "sh", "-c",
                           "while true; do echo streaming; sleep 0.1; done"],
                          env=dict(os.environ, SPACE_SOCKET=SOCKET), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
time.sleep(1)
info = api("GET", "/v1/sandboxes/%s" % SANDBOX).json
old_agent = info["host_pid"]


def tree(pid):
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    pp = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(pp, []).append(int(p))
            except (OSError, ValueError, IndexError):
                pass
    out, stack = [], [pid]
    while stack:
        for c in kids.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


old = [old_agent] + tree(old_agent)
note("%d processes before the rollback" % len(old))
r = api("POST", "/v1/sandboxes/%s/rollback" % SANDBOX, {"snapshot": snap}, timeout=60)
if r.status != 200:
    broken("rollback failed: %r" % r)
try:
    stream.wait(20)
    note("the streaming exec ended with rc %d" % stream.returncode)
except subprocess.TimeoutExpired:
    stream.kill()
    stream.wait()
    escaped("the streaming exec of before the rollback still streams 20 s after it")
time.sleep(0.5)


def alive(p):
    try:
        with open("/proc/%d/stat" % p) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


survivors = [p for p in old if alive(p)]
if survivors:
    escaped("processes of before the rollback are alive: %s" % survivors)
marked = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if MARK.encode() in f.read():
                    marked.append(int(p))
        except OSError:
            pass
if marked:
    escaped("processes with the attempt's marker run after the rollback: %s" % marked)
rc, out, _ = sh(SANDBOX, "cat /root/log; sleep 1; wc -l < /root/log; ps -eo args")
text = out.decode()
if not text.startswith("snapshot-state\n"):
    escaped("the writer's file is not the snapshot's: %r" % text[:200])
lines = text.splitlines()
if len(lines) > 1 and lines[1].strip() != "1":
    escaped("the file still grows after the rollback: %r" % text[:300])
if MARK in text:
    escaped("a marked process runs inside after the rollback: %r" % text[-400:])
note("after the rollback: agent %s -> %s, nothing of before alive" % (
    old_agent, api("GET", "/v1/sandboxes/%s" % SANDBOX).json.get("host_pid")))
api("DELETE", "/v1/snapshots/%s" % snap)
finish()
