#!/bin/bash
# A smoke test of spaced's linux runtime on another host, from a bundle of this build's programs:
# what /dev/kvm does (ioctls, not the file's existence), the host's cgroup layout, `space doctor`,
# a run, memory and pids limits, snapshot/rollback/pause, 20 creates, kill -9 of spaced with 22
# sandboxes, restart, everything destroyed, and what is left (cgroups, processes, mounts).
# docs/hosts.md, "Other hosts" has its result on a pure cgroup v2 Ubuntu 24.04.
#
#   mkdir -p build-device/lib && cp build/{spaced,space,space-agent,space-egress,space-upper-reader,space-https} build-device/
#   (the shared libraries ldd lists, but glibc's and libstdc++, into build-device/lib)
#   cp scripts/host-smoke.sh build-device/smoke.sh; then on the host, as root: bash build-device/smoke.sh
#
# For a disposable host only: libraries the host lacks are copied into /usr/local/lib.
D=$(cd "$(dirname "$0")" && pwd)
export PATH=$D:$PATH
# Debian 12's libraries this Ubuntu lacks, where every program finds them (space-egress starts
# with a cleared environment, so LD_LIBRARY_PATH would not reach it).
for l in $D/lib/*; do ldconfig -p | grep -q " $(basename $l) " || { cp $l /usr/local/lib/; echo "added $(basename $l)"; }; done; ldconfig
S=$(mktemp -d /tmp/space-dev.XXXX); export SPACE_SOCKET=$S/space.sock
echo "== host"; uname -r; grep -c -E 'vmx|svm' /proc/cpuinfo; ls -l /dev/kvm
python3 - <<'PY'
import fcntl, os
try:
    fd = os.open("/dev/kvm", os.O_RDWR)
    print("KVM_GET_API_VERSION", fcntl.ioctl(fd, 0xAE00))
    vm = fcntl.ioctl(fd, 0xAE01, 0); print("KVM_CREATE_VM fd", vm)
    print("KVM_CHECK_EXTENSION(USER_MEMORY)", fcntl.ioctl(fd, 0xAE03, 3))
except OSError as e: print("kvm:", e)
PY
cat /sys/fs/cgroup/cgroup.subtree_control; cat /proc/self/cgroup
cat > $S/config.json <<J
{"state_dir": "$S/state", "socket": "$S/space.sock", "cgroup_name": "space-devsmoke"}
J
ldd $D/spaced | grep "not found"
$D/spaced --config $S/config.json > $S/spaced.log 2>&1 & SP=$!
for i in $(seq 50); do [ -S $S/space.sock ] && break; sleep 0.2; done
echo "== doctor"; space doctor --all 2>&1 | head -60
echo "== run"; time space run -- sh -c 'id; cat /proc/self/cgroup; hostname; python3 -c "print(6*7)"'
echo "== memory 64M"; space run --memory 64M -- python3 -c 'b=bytearray(300<<20); print("allocated?!")'; echo "exit $?"
echo "== pids 32"; space run --pids 32 -- sh -c 'for i in $(seq 100); do sleep 5 & done 2>&1 | tail -1; echo spawned'; echo "exit $?"
echo "== lifecycle"; ID=$(space create --memory 256M); echo $ID
space exec $ID -- sh -c 'echo hi > /root/a'; space snapshot $ID --name s1
space exec $ID -- rm /root/a; space rollback $ID s1; space exec $ID -- cat /root/a
space pause $ID && space resume $ID && space exec $ID -- echo resumed
space inspect $ID | head -30
echo "== 20 creates"; time (for i in $(seq 20); do space create >/dev/null; done)
space ls | wc -l
echo "== kill -9 spaced, restart, destroy all"; kill -9 $SP; sleep 1
$D/spaced --config $S/config.json >> $S/spaced.log 2>&1 & SP=$!
for i in $(seq 50); do space ls >/dev/null 2>&1 && break; sleep 0.2; done
space ls | wc -l; for x in $(space ls --json | python3 -c "import json,sys; j=json.load(sys.stdin); j=j.get(\"sandboxes\", j) if isinstance(j, dict) else j; print(\" \".join(s[\"id\"] for s in j))"); do space rm $x >/dev/null; done
space ls | wc -l
kill $SP; wait $SP
echo "== leftovers"; find /sys/fs/cgroup -name '*space*' -maxdepth 3; pgrep -a space- ; grep -c " $S" /proc/mounts
echo "== spaced log (warn/error)"; grep -i -E "warn|error" $S/spaced.log | head -30
