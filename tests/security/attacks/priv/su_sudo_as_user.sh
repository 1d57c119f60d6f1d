#!/bin/sh
# As an unprivileged user inside the sandbox, tries the usual ways back to root: su, sudo,
# pkexec, newgrp, and a setuid copy of sh made earlier by sandbox root.
# Blocked by: no_new_privs (setuid/setgid bits and file capabilities are ignored on exec) and
# the nosuid /usr bind.
# space-attack: sandbox=shared
set -u
cp /bin/sh /tmp/rootsh && chmod 4755 /tmp/rootsh
out=$(setpriv --reuid=1000 --regid=1000 --clear-groups sh -c '
  for c in "su -c id" "sudo -n id" "pkexec id" "/tmp/rootsh -p -c id"; do
    set -- $c
    command -v "$1" >/dev/null 2>&1 || { echo "$1: absent"; continue; }
    r=$($c 2>&1 </dev/null)
    echo "$1: $(echo "$r" | head -1)"
  done' 2>&1)
echo "$out" >&2
if echo "$out" | grep -q "uid=0"; then
  echo "ESCAPED: an unprivileged user got uid 0: $(echo "$out" | grep uid=0 | head -1)"
  exit 1
fi
echo "BLOCKED: no route back to uid 0 for uid 1000 ($(echo "$out" | tr '\n' ';' | cut -c1-200))"
