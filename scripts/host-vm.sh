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
  pkg="$(apt-cache depends linux-image-amd64 2>/dev/null |
         sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n1)"
  [[ -n "$pkg" ]] || unavailable "apt knows no linux-image-amd64 (no Debian package lists?)"
  say "downloading $pkg"
  (cd "$out/cache" && apt-get download -q "$pkg" 2>&1 |
     grep -v '^W: Download is performed unsandboxed' || true)
  deb="$(ls -1 "$out"/cache/"$pkg"_*.deb 2>/dev/null | tail -n1 || true)"
  [[ -n "$deb" ]] || unavailable "cannot download $pkg: is Debian's mirror reachable?"
fi

up_to_date() {
  local f
  for f in vmlinux initrd.img kernel-release; do
    [[ -s "$out/$f" && "$out/$f" -nt "$deb" ]] || return 1
  done
  [[ "$out/initrd.img" -nt "$0" && "$out/initrd.img" -nt "$init_script" &&
     "$out/initrd.img" -nt "$busybox" ]]
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

# --- 2. vmlinux: the first compressed stream in the bzImage that decompresses to an ELF file
# (what the kernel's scripts/extract-vmlinux does; scripts/guest-kernel.sh does the same).
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
extract '\xfd\x37\x7a\x58\x5a\x00' xz -dc ||
  extract '\x1f\x8b\x08' gzip -dc ||
  extract '\x28\xb5\x2f\xfd' zstd -dc ||
  die "no compressed ELF kernel found in vmlinuz-$release"

# --- 3. modules, dependencies first (modules.dep lists them so that right to left loads).
[[ -f "$moddir/modules.dep" ]] || depmod -b "$work/pkg" "$release"
order=()
declare -A seen=()
add_module() {
  local rel="$1" deps d
  [[ -n "${seen[$rel]:-}" ]] && return 0
  seen[$rel]=1
  deps="$(grep -m1 "^$rel:" "$moddir/modules.dep" | cut -d: -f2-)"
  local rev=()
  for d in $deps; do rev=("$d" "${rev[@]}"); done
  for d in "${rev[@]}"; do add_module "$d"; done
  order+=("$rel")
}
for m in "${WANT[@]}"; do
  rel="$(grep -m1 -E "(^|/)$m\.ko(\.xz|\.zst|\.gz)?:" "$moddir/modules.dep" | cut -d: -f1 || true)"
  if [[ -z "$rel" ]]; then
    grep -qE "(^|/)$m\.ko" "$moddir/modules.builtin" && continue
    die "module $m is neither in modules.dep nor built into $release"
  fi
  add_module "$rel"
done

# --- 4. the initramfs: busybox, modules, /init.
root="$work/root"
mkdir -p "$root/bin" "$root/lib/modules" "$root/dev" "$root/proc" "$root/sys" "$root/newroot"
cp "$busybox" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
: > "$root/modules.order"
for rel in "${order[@]}"; do
  name="$(basename "$rel")"
  case "$name" in
    *.ko.xz) xz -dc "$moddir/$rel" > "$root/lib/modules/${name%.xz}"; name="${name%.xz}" ;;
    *.ko.zst) zstd -qdc "$moddir/$rel" > "$root/lib/modules/${name%.zst}"; name="${name%.zst}" ;;
    *) cp "$moddir/$rel" "$root/lib/modules/$name" ;;
  esac
  echo "$name" >> "$root/modules.order"
done
install -m 0755 "$init_script" "$root/init"
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort |
   cpio --quiet -o -H newc -R 0:0 --reproducible 2>/dev/null) | gzip -1n > "$work/initrd.img"

mv -f "$work/vmlinux" "$out/vmlinux"
mv -f "$work/initrd.img" "$out/initrd.img"
echo "$release" > "$out/kernel-release"
say "wrote $out/vmlinux, $out/initrd.img (modules: $(tr '\n' ' ' < "$root/modules.order")), kernel $release"
