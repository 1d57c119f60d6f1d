#!/bin/sh
# The shell fork bomb, :(){ :|:& };: , left running for two seconds, then counted and cleared.
# Blocked by: the pids cgroup (64); the runner destroys the sandbox while the bomb's leftovers
# may still be respawning and checks that teardown leaves no process or cgroup behind.
# space-attack: sandbox=fresh opts=--pids=64,--memory=256M timeout=60
set -u
( bomb() { bomb | bomb & }; bomb ) 2>/dev/null &
sleep 2
n=$(ls /proc | grep -c '^[0-9]')
if [ "$n" -gt 70 ]; then
  echo "ESCAPED: $n processes in the sandbox, above its pids limit of 64"
  exit 1
fi
echo "BLOCKED: the bomb plateaued at $n processes (limit 64); left running for teardown"
