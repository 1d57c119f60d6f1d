#!/usr/bin/env bash
# The `make run` demo: one command in a fresh sandbox that shows where it runs. The CLI starts
# a daemon by itself when none answers on the socket ($SPACE_SOCKET or /run/space/space.sock).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"

TASK='
echo "hostname:  $(hostname)   (the sandbox id)"
echo "id:        $(id)"
echo "processes: $(ps -e --no-headers | wc -l) visible, pid 1 is $(tr "\\0" " " < /proc/1/cmdline | cut -d" " -f1)"
echo "network:   $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" " ")"
echo "uname:     $(uname -srm)"
python3 -c "import sys; print(\"python:    hello from Python\", sys.version.split()[0])"
if touch /usr/space-demo 2>/dev/null; then echo "/usr:      WRITABLE (unexpected)"; exit 1;
else echo "/usr:      read-only"; fi
echo "egress:    $(curl -sS -o /dev/null https://example.com 2>&1 | sed "s/^curl: ([0-9]*) //") (only the gateway leads out; this profile allows nothing)"
'

echo "+ $BUILD_DIR/space run -- sh -c '...'"
exec "$BUILD_DIR/space" run -- sh -c "$TASK"
