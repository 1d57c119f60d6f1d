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
download() {
  pkg="$(apt-cache depends linux-image-amd64 2>/dev/null |
         sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n1)"
  [[ -n "$pkg" ]] || return 1
  say "downloading $pkg"
  # apt-get download writes into the current directory; as root it warns that _apt cannot
  # write there, which is harmless.
  (cd "$out/cache" && apt-get download -q "$pkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  deb="$(ls -1 "$out"/cache/"$pkg"_*.deb 2>/dev/null | tail -n1 || true)"
  [[ -n "$deb" ]]
}
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
  [[ "$out/initrd.img" -nt "$0" ]]
}
if up_to_date; then
  say "up to date ($(cat "$out/kernel-release"))"
  exit 0
fi

work="$(mktemp -d "$out/.work.XXXXXX")"
trap 'rm -rf "$work"' EXIT

say "unpacking $(basename "$deb")"
dpkg-deb -x "$deb" "$work/pkg"
release="$(ls -1 "$work/pkg/lib/modules" | head -n1)"
[[ -n "$release" && -f "$work/pkg/boot/vmlinuz-$release" ]] || die "$(basename "$deb") has no vmlinuz"
moddir="$work/pkg/lib/modules/$release"

# --- 2. vmlinux: find a compressed stream in the bzImage and keep the first one that
# decompresses to an ELF file (what the kernel's scripts/extract-vmlinux does).
extract() {  # extract MAGIC_HEX DECOMPRESSOR...
  local magic="$1"; shift
  local off
  for off in $(LC_ALL=C grep -obUaP "$magic" "$work/vmlinuz" 2>/dev/null | cut -d: -f1 | head -n 8); do
    tail -c +"$((off + 1))" "$work/vmlinuz" | "$@" > "$work/vmlinux" 2>/dev/null || true
    if [[ "$(head -c 4 "$work/vmlinux" | od -An -tx1 | tr -d ' \n')" == 7f454c46 ]]; then
      return 0
    fi
  done
  return 1
}
cp "$work/pkg/boot/vmlinuz-$release" "$work/vmlinuz"
say "extracting vmlinux from vmlinuz-$release"
extract '\xfd\x37\x7a\x58\x5a\x00' xz -dc ||
  extract '\x1f\x8b\x08' gzip -dc ||
  extract '\x28\xb5\x2f\xfd' zstd -dc ||
  extract '\x42\x5a\x68' bzip2 -dc ||
  extract '\x5d\x00\x00\x00' xz -F lzma -dc ||
  die "no compressed ELF kernel found in vmlinuz-$release"

# --- 3. modules: resolve dependencies with modules.dep (depmod on the unpacked tree).
if [[ ! -f "$moddir/modules.dep" ]]; then
  depmod -b "$work/pkg" "$release"
fi
order=()
declare -A seen=()
add_module() {  # add_module RELPATH: its dependencies first, then itself
  local rel="$1" deps d
  [[ -n "${seen[$rel]:-}" ]] && return 0
  seen[$rel]=1
  deps="$(grep -m1 "^$rel:" "$moddir/modules.dep" | cut -d: -f2-)"
  # modules.dep lists a module's dependencies so that loading them right to left works.
  local rev=()
  for d in $deps; do rev=("$d" "${rev[@]}"); done
  for d in "${rev[@]}"; do add_module "$d"; done
  order+=("$rel")
}
for m in "${WANT[@]}"; do
  rel="$(grep -m1 -E "(^|/)$m\.ko(\.xz|\.zst|\.gz)?:" "$moddir/modules.dep" | cut -d: -f1 || true)"
  if [[ -z "$rel" ]]; then
    if grep -qE "(^|/)$m\.ko" "$moddir/modules.builtin"; then
      say "$m is built in"; continue
    fi
    die "module $m is neither in modules.dep nor built into $release"
  fi
  add_module "$rel"
done

# --- 4. the initramfs.
root="$work/root"
mkdir -p "$root/lib/modules" "$root/dev" "$root/proc" "$root/sys" "$root/newroot"
: > "$root/modules.order"
for rel in "${order[@]}"; do
  name="$(basename "$rel")"
  case "$name" in
    *.ko.xz) xz -dc "$moddir/$rel" > "$root/lib/modules/${name%.xz}"; name="${name%.xz}" ;;
    *.ko.zst) zstd -qdc "$moddir/$rel" > "$root/lib/modules/${name%.zst}"; name="${name%.zst}" ;;
    *.ko.gz) gzip -dc "$moddir/$rel" > "$root/lib/modules/${name%.gz}"; name="${name%.gz}" ;;
    *) cp "$moddir/$rel" "$root/lib/modules/$name" ;;
  esac
  echo "$name" >> "$root/modules.order"
done
say "modules: $(tr '\n' ' ' < "$root/modules.order")"
install -m 0755 "$vminit" "$root/init"
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort |
   cpio --quiet -o -H newc -R 0:0 --reproducible 2>/dev/null) | gzip -6n > "$work/initrd.img"

mv -f "$work/vmlinux" "$out/vmlinux"
mv -f "$work/initrd.img" "$out/initrd.img"
echo "$release" > "$out/kernel-release.tmp" && mv -f "$out/kernel-release.tmp" "$out/kernel-release"
say "wrote $out/vmlinux ($(du -h "$out/vmlinux" | cut -f1)), $out/initrd.img ($(du -h "$out/initrd.img" | cut -f1)), kernel $release"
