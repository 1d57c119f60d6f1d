#!/bin/sh
# The shell fork bomb: every shell keeps forking copies of itself in a loop, for two
# seconds, then everything is killed. Counting processes from inside is meaningless here
# (/proc changes while it is read), so the evidence is the bomb's own "can't fork" errors,
# and the runner reads the pids cgroup from the host before teardown (verify=pids_limit:
# forks were refused and pids.current never passed pids.max).
# Blocked by: the pids cgroup (64); teardown then leaves no process or cgroup behind.
# space-attack: sandbox=fresh opts=--pids=64,--memory=256M timeout=60 verify=pids_limit
# The bomb runs for two seconds of wall-clock time, read from /proc/uptime by the shell's own
# `read` (no fork: every pid is taken). A count of loop turns instead starved under QEMU's TCG,
# where this shell is one of 64 runnable processes on an emulated CPU.
# Centiseconds: "12.08" is 12 * 100 + 108 - 100 (a leading 0 would read as octal).
read -r up _ < /proc/uptime
start=$((${up%.*} * 100 + 1${up#*.} - 100))
( b() { while :; do b & done; }; b ) 2>/tmp/bomb.err &
now=$start
while [ $((now - start)) -lt 200 ]; do
  read -r up _ < /proc/uptime
  now=$((${up%.*} * 100 + 1${up#*.} - 100))
done
kill -9 -1 2>/dev/null
refused=0
while read -r line; do
  case "$line" in *fork*) refused=$((refused + 1)) ;; esac
done < /tmp/bomb.err
if [ "$refused" -eq 0 ]; then
  echo "ERROR: the bomb never saw a refused fork: inconclusive"
  exit 2
fi
echo "BLOCKED: $refused forks refused by the pids limit (64); host checks pids.events"
