#!/bin/sh
# /init of the host-matrix guest (scripts/host-vm.sh packs it with a static busybox). Builds the
# guest's root in a tmpfs from what QEMU shares over virtio-9p, then hands over to the variant's
# PID 1 (docs/hosts.md):
#   tag usr      the host's /usr, read-only (Debian 12 is merged-/usr: /bin, /lib, /sbin are
#                symlinks into it)
#   tag etc      the host's /etc, read-only: copied into the tmpfs root, then trimmed
#   tag repo     the repository, read-only, mounted at its own path (space.repo=)
#   tag build    the build directory, read-only, at its own path (space.build=)
#   tag results  read-write: config.json from the harness in, results and logs out
# and /dev/vda, an empty ext4 image the harness made, as /var/lib/space: spaced's state dir
# must not be on tmpfs here, since 6.1 cannot id-map tmpfs mounts (the image rootfs would show
# its files as nobody and the sandbox's "chmod /tmp" fails with EPERM) nor on overlayfs.
# Kernel arguments: space.variant=systemd|plain|delegated, space.repo=PATH, space.build=PATH,
# space.unit=PATH (systemd: the unit to install as spaced.service; default the shipped
# deploy/systemd/spaced.service).
#   systemd  PID 1 is /lib/systemd/systemd (cgroup2 only: systemd.unified_cgroup_hierarchy=1
#            cgroup_no_v1=all); the unit space-hosts.target runs tests/hosts/in_vm.py, which
#            starts spaced through deploy/systemd/spaced.service.
#   plain    PID 1 is busybox init (it reaps orphans); this script mounts cgroup2 at
#            /sys/fs/cgroup and in_vm.py starts spaced itself, in the root cgroup.
#   delegated  as plain, but spaced starts in a cgroup of its own (/delegated).
# Everything lives in guest RAM; the only host writes go to the results share.
export PATH=/bin
B=/bin/busybox
fail() {
  echo "vm-init: $*" >&2
  $B sync
  $B reboot -f
}
$B mkdir -p /proc /sys /dev
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t devtmpfs devtmpfs /dev
for m in $($B cat /modules.order); do
  $B insmod "/lib/modules/$m" || fail "insmod $m"
done

variant=plain repo= build= unit=
for arg in $($B cat /proc/cmdline); do
  case "$arg" in
    space.unit=*) unit="${arg#*=}" ;;
    space.variant=*) variant="${arg#*=}" ;;
    space.repo=*) repo="${arg#*=}" ;;
    space.build=*) build="${arg#*=}" ;;
  esac
done
[ -n "$repo" ] && [ -n "$build" ] || fail "space.repo= and space.build= are required"

R=/newroot
P9="trans=virtio,version=9p2000.L,msize=262144"
$B mount -t tmpfs -o mode=0755 root "$R" || fail "tmpfs root"
for d in usr etc proc sys dev run tmp var/lib var/log var/tmp root results mnt/etc; do
  $B mkdir -p "$R/$d"
done
$B chmod 1777 "$R/tmp" "$R/var/tmp"
for l in bin lib lib32 lib64 sbin; do $B ln -s "usr/$l" "$R/$l"; done
$B mount -t 9p -o "$P9,ro,cache=loose" usr "$R/usr" || fail "9p usr"
$B mount -t 9p -o "$P9,ro" etc "$R/mnt/etc" || fail "9p etc"
$B cp -a "$R/mnt/etc/." "$R/etc/" 2>/dev/null
$B umount "$R/mnt/etc"
$B rmdir "$R/mnt/etc"
# The host's mounts and enabled units are not the guest's.
: > "$R/etc/fstab"
$B rm -rf "$R"/etc/systemd/system/*.wants
echo space-hosts > "$R/etc/hostname"
# /usr/local is the guest's own: the build's binaries go to /usr/local/bin, where the shipped
# unit's ExecStart expects them.
$B mount -t tmpfs -o mode=0755 local "$R/usr/local" || fail "tmpfs /usr/local"
$B mkdir -p "$R/usr/local/bin"
$B mkdir -p "$R$repo"
$B mount -t 9p -o "$P9,ro" repo "$R$repo" || fail "9p repo"
[ -d "$R$build" ] || $B mkdir -p "$R$build" 2>/dev/null
$B mount -t 9p -o "$P9,ro" build "$R$build" || fail "9p build"
$B mount -t 9p -o "$P9,cache=none" results "$R/results" || fail "9p results"
$B mkdir -p "$R/var/lib/space"
$B mount -t ext4 /dev/vda "$R/var/lib/space" || fail "mount the state disk /dev/vda"
for b in spaced space space-agent space-egress; do
  $B cp "$R$build/$b" "$R/usr/local/bin/$b" || fail "copying $b"
done

$B mount --move /dev "$R/dev"
$B mount --move /proc "$R/proc"
$B mount --move /sys "$R/sys"

case "$variant" in
  systemd)
    U="$R/etc/systemd/system"
    $B cp "$R${unit:-$repo/deploy/systemd/spaced.service}" "$U/spaced.service" || fail "no unit"
    $B cat > "$U/space-hosts.target" <<EOF
[Unit]
Description=SPACE host matrix (tests/hosts)
Requires=space-hosts-test.service
After=space-hosts-test.service
EOF
    $B cat > "$U/space-hosts-test.service" <<EOF
[Unit]
Description=SPACE host matrix: tests/hosts/in_vm.py
DefaultDependencies=no
Wants=systemd-journald.socket
After=systemd-journald.socket

[Service]
Type=oneshot
Environment=PATH=/usr/local/bin:/usr/bin:/usr/sbin PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
ExecStart=/usr/bin/python3 $repo/tests/hosts/in_vm.py --variant systemd --results /results
StandardOutput=journal+console
StandardError=journal+console
ExecStopPost=/usr/bin/sync
ExecStopPost=/usr/bin/systemctl reboot --force --force
EOF
    exec $B switch_root "$R" /lib/systemd/systemd
    ;;
  plain|delegated)
    $B mkdir -p "$R/.hosts"
    $B cp $B "$R/.hosts/busybox"
    $B mount -t tmpfs -o mode=0755 run "$R/run"
    $B mount -t cgroup2 cgroup2 "$R/sys/fs/cgroup" || fail "mount cgroup2"
    $B cat > "$R/.hosts/plain.sh" <<EOF
export PATH=/usr/local/bin:/usr/bin:/usr/sbin PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
/usr/bin/python3 $repo/tests/hosts/in_vm.py --variant $variant --results /results
sync
/.hosts/busybox reboot -f
EOF
    echo "::sysinit:/.hosts/busybox sh /.hosts/plain.sh" > "$R/etc/inittab"
    exec $B switch_root "$R" /.hosts/busybox init
    ;;
  *) fail "unknown space.variant=$variant" ;;
esac
