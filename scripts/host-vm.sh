#!/usr/bin/env bash
# Builds the guest that tests/hosts/ boots to try spaced on a pure cgroup v2 host
# (docs/hosts.md): Debian's stock 6.1 kernel, unpacked (never installed on the host), as an
# uncompressed ELF vmlinux for QEMU's -M microvm, plus an initramfs of busybox (static), the
# kernel modules the guest needs (virtio-mmio, 9p over virtio, overlay, virtio-blk + ext4 for
# the state disk) and tests/hosts/vm-init.sh as /init. The guest's root file system is assembled by that /init from the host's /usr
# (read-only over virtio-9p) and tmpfs; nothing here writes outside OUTDIR.
#
#   scripts/host-vm.sh OUTDIR
#
# Writes OUTDIR/vmlinux, OUTDIR/initrd.img and OUTDIR/kernel-release. The kernel package is
# taken from OUTDIR/cache/*.deb, else from $SPACE_KERNEL_DEB_DIRS (colon-separated directories,
# e.g. the main build's guest/cache), else downloaded with apt-get download (Debian's mirror).
# Idempotent: rebuilds only when the .deb, busybox, vm-init.sh or this script are newer.
# Exit status 3 means "cannot be had here" (no kernel package, no busybox): callers skip.
set -euo pipefail

say() { echo "host-vm: $*"; }
die() { echo "host-vm: error: $*" >&2; exit 1; }
unavailable() { echo "host-vm: unavailable: $*" >&2; exit 3; }
lib="$(cd "$(dirname "$0")" && pwd)/lib/kernel-package.sh"
# shellcheck source=lib/kernel-package.sh
source "$lib"

[[ $# -eq 1 ]] || die "usage: $0 OUTDIR"
here="$(cd "$(dirname "$0")" && pwd)"
init_script="$here/../tests/hosts/vm-init.sh"
[[ -f "$init_script" ]] || die "$init_script is missing"
out="$1"
mkdir -p "$out/cache"
out="$(cd "$out" && pwd)"

# The guest's modules, in this order; their dependencies (modules.dep) come first.
WANT=(virtio_mmio 9pnet_virtio 9p overlay virtio_blk crc32c_generic ext4)

busybox=""
for b in /bin/busybox /usr/bin/busybox; do
  if [[ -x "$b" ]] && ! ldd "$b" >/dev/null 2>&1; then busybox="$b"; break; fi
done
[[ -n "$busybox" ]] || unavailable "no static busybox (Debian package busybox-static)"
for tool in dpkg-deb depmod cpio gzip xz; do
  command -v "$tool" >/dev/null || unavailable "$tool not found"
done

# --- 1. the kernel package.
find_deb() {
  local dirs="$out/cache${SPACE_KERNEL_DEB_DIRS:+:$SPACE_KERNEL_DEB_DIRS}" d
  local IFS=:
  for d in $dirs; do
    ls -1 "$d"/linux-image-*-amd64_*.deb 2>/dev/null | sort -V | tail -n1
  done | grep . | head -n1 || true
}
deb="$(find_deb)"
if [[ -z "$deb" ]]; then
  if ! kp_download_deb "$out/cache"; then
    [[ -n "$pkg" ]] || unavailable "apt knows no linux-image-amd64 (no Debian package lists?)"
  fi
  [[ -n "$deb" ]] || unavailable "cannot download $pkg: is Debian's mirror reachable?"
fi

up_to_date() {
  local f
  for f in vmlinux initrd.img kernel-release; do
    [[ -s "$out/$f" && "$out/$f" -nt "$deb" ]] || return 1
  done
  [[ "$out/initrd.img" -nt "$0" && "$out/initrd.img" -nt "$lib" &&
     "$out/initrd.img" -nt "$init_script" &&
     "$out/initrd.img" -nt "$busybox" ]]
}
if up_to_date; then
  say "up to date ($(cat "$out/kernel-release"))"
  exit 0
fi

work="$(mktemp -d "$out/.work.XXXXXX")"
trap 'rm -rf "$work"' EXIT

kp_unpack "$deb" "$work"

# --- 2. the initramfs: busybox, the modules, /init.
root="$work/root"
mkdir -p "$root/bin" "$root/dev" "$root/proc" "$root/sys" "$root/newroot"
cp "$busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
kp_add_modules "$root" "${WANT[@]}"
install -m 0755 "$init_script" "$root/init"
kp_pack "$root" "$work/initrd.img" 1

mv -f "$work/vmlinux" "$out/vmlinux"
mv -f "$work/initrd.img" "$out/initrd.img"
echo "$release" > "$out/kernel-release"
say "wrote $out/vmlinux, $out/initrd.img (modules: $(tr '\n' ' ' < "$root/modules.order")), kernel $release"
