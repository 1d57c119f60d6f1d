#!/usr/bin/env bash
# Builds what the qemu runtime boots (docs/vm-guest.md): Debian's stock 6.1 kernel, unpacked
# (never installed on the host), as an uncompressed ELF vmlinux that QEMU's -M microvm boots
# through its PVH note, plus an initramfs whose /init is the static space-vminit and which
# carries the kernel modules the guest needs (virtio-mmio, virtio-blk, virtio-console, ext4,
# overlay, virtio vsock, virtio-rng, virtio-balloon and their dependencies).
#
#   scripts/guest-kernel.sh OUTDIR [VMINIT]
#
# VMINIT defaults to OUTDIR/../space-vminit (the build directory's). Writes:
#   OUTDIR/vmlinux          the kernel, uncompressed ELF
#   OUTDIR/initrd.img       gzip'd newc cpio: /init, /lib/modules/*.ko, /modules.order
#   OUTDIR/kernel-release   e.g. 6.1.0-57-amd64
#   OUTDIR/cache/*.deb      the downloaded package (kept, so a rebuild needs no network)
# Idempotent: when vmlinux, initrd.img and kernel-release are newer than the .deb and VMINIT, it
# only checks that and exits. It picks the version linux-image-amd64 depends on, as apt sees it
# now; once a .deb is cached it sticks to it (delete OUTDIR/cache to move to a newer kernel).
set -euo pipefail

say() { echo "guest-kernel: $*"; }
die() { echo "guest-kernel: error: $*" >&2; exit 1; }
lib="$(cd "$(dirname "$0")" && pwd)/lib/kernel-package.sh"
# shellcheck source=lib/kernel-package.sh
source "$lib"

[[ $# -ge 1 && $# -le 2 ]] || die "usage: $0 OUTDIR [VMINIT]"
out="$1"
mkdir -p "$out/cache"
out="$(cd "$out" && pwd)"
vminit="${2:-$out/../space-vminit}"
[[ -x "$vminit" ]] || die "$vminit is missing: build it first (ninja -C BUILD_DIR space-vminit)"

# The modules the guest loads, in this order; their dependencies (modules.dep) come first.
# crc32c_generic: ext4 and jbd2 checksum metadata with crc32c, which the kernel would otherwise
# request through modprobe (absent in the initramfs).
# vmw_vsock_virtio_transport (with vsock and vmw_vsock_virtio_transport_common): the agent's
# channel on firecracker, which has no virtio-serial (space.channel=vsock:PORT). Never
# vsock_loopback: without it guest processes cannot connect to the agent's vsock port.
# virtio-rng (the file's name has a hyphen; rng-core is built in): firecracker's entropy device.
# virtio_balloon: firecracker's memory balloon, when a profile asks for one.
WANT=(virtio_mmio virtio_blk virtio_console crc32c_generic ext4 overlay
      vmw_vsock_virtio_transport virtio-rng virtio_balloon)

for tool in apt-get dpkg-deb depmod cpio gzip xz; do
  command -v "$tool" >/dev/null || die "$tool not found: run scripts/install-deps.sh"
done

# --- 1. the kernel package: cached .deb, else the version linux-image-amd64 depends on.
deb="$(ls -1 "$out"/cache/linux-image-*-amd64_*.deb 2>/dev/null | sort -V | tail -n1 || true)"
download() { kp_download_deb "$out/cache"; }
if [[ -z "$deb" ]] && ! download; then
  # Stale package lists name a kernel the mirror no longer has: refresh them once (root only).
  if [[ $(id -u) -eq 0 ]]; then
    say "refreshing the package lists (apt-get update)"
    apt-get update -q >/dev/null 2>&1 || true
    download || die "cannot download Debian's kernel package (linux-image-amd64's dependency${pkg:+, $pkg}): is the Debian mirror reachable? A kernel can also be supplied by hand, see docs/vm-guest.md"
  else
    die "cannot download Debian's kernel package${pkg:+ $pkg}; run 'sudo apt-get update' and retry"
  fi
fi

up_to_date() {
  local f
  for f in vmlinux initrd.img kernel-release; do
    [[ -s "$out/$f" && "$out/$f" -nt "$deb" && "$out/$f" -nt "$vminit" ]] || return 1
  done
  [[ "$out/initrd.img" -nt "$0" && "$out/initrd.img" -nt "$lib" ]]
}
if up_to_date; then
  say "up to date ($(cat "$out/kernel-release"))"
  exit 0
fi

work="$(mktemp -d "$out/.work.XXXXXX")"
trap 'rm -rf "$work"' EXIT

kp_unpack "$deb" "$work"
root="$work/root"
mkdir -p "$root/dev" "$root/proc" "$root/sys" "$root/newroot"
kp_add_modules "$root" "${WANT[@]}"
say "modules: $(tr '\n' ' ' < "$root/modules.order")"
install -m 0755 "$vminit" "$root/init"
kp_pack "$root" "$work/initrd.img" 6

mv -f "$work/vmlinux" "$out/vmlinux"
mv -f "$work/initrd.img" "$out/initrd.img"
echo "$release" > "$out/kernel-release.tmp" && mv -f "$out/kernel-release.tmp" "$out/kernel-release"
say "wrote $out/vmlinux ($(du -h "$out/vmlinux" | cut -f1)), $out/initrd.img ($(du -h "$out/initrd.img" | cut -f1)), kernel $release"
