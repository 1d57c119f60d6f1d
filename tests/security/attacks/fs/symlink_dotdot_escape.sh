#!/bin/sh
# Symlinks that climb out: "../../../../..", absolute links to host paths, and a chain of
# relative links, followed by ordinary tools (cat, ls, cd).
# Blocked by: the sandbox's "/" is its own root; ".." of "/" is "/", so every link resolves
# inside the sandbox and the host canary stays invisible.
# space-attack: sandbox=shared
set -u
canary="${SPACE_HOST_CANARY:?}"
value="${SPACE_HOST_CANARY_VALUE:?}"
mkdir -p /tmp/sl/a/b/c
ln -sfn ../../../../../../../.. /tmp/sl/a/b/c/up
ln -sfn / /tmp/sl/root
ln -sfn /tmp/sl/a/b/c/up /tmp/sl/chain
out=""
for p in "/tmp/sl/a/b/c/up$canary" "/tmp/sl/root$canary" "/tmp/sl/chain$canary" \
         "/tmp/sl/a/b/c/up/../../../..$canary"; do
  if cat "$p" 2>/dev/null | grep -q "$value"; then
    echo "ESCAPED: host canary read through $p"
    exit 1
  fi
  out="$out ${p%%$canary}: absent;"
done
if (cd /tmp/sl/a/b/c/up && cd ../../.. && [ -e ".$canary" ]); then
  echo "ESCAPED: host canary visible after cd through the link"
  exit 1
fi
echo "BLOCKED: every link resolves inside the sandbox;$out"
