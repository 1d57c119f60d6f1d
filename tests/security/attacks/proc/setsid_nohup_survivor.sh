#!/bin/sh
# The shell way to outlive a session: nohup + setsid + disown, a process that traps every
# catchable signal, detached from the exec's stdio, with a marked command line.
# Blocked by: sandbox teardown kills the whole pid namespace; the runner checks the host for
# any process carrying the marker after `space rm`.
# space-attack: sandbox=fresh
set -u
cat > /tmp/survivor.sh <<'EOS'
trap '' HUP INT TERM QUIT USR1 USR2
while :; do sleep 1; done
EOS
setsid nohup sh /tmp/survivor.sh space-sec-marker >/dev/null 2>&1 < /dev/null &
setsid sh -c 'exec -a space-sec-marker sleep 100000' >/dev/null 2>&1 < /dev/null &
sleep 0.3
n=$(grep -l space-sec-marker /proc/[0-9]*/cmdline 2>/dev/null | wc -l)
echo "BLOCKED: $n marked survivors started; teardown must take them (checked from the host)"
