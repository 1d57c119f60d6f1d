# Sourced by scripts/guest-kernel.sh (the microVM guest) and scripts/host-vm.sh (the cgroup v2
# host-matrix guest): Debian's stock kernel package turned into what QEMU's -M microvm boots.
# Each function says what it sets; `say` and `die` come from the caller.

# kp_download_deb CACHE_DIR: downloads the linux-image package that linux-image-amd64 depends
# on (as apt sees it now) into CACHE_DIR; sets `pkg` (its name, "" if apt knows none) and `deb`.
kp_download_deb() {
  local cache="$1"
  pkg="$(apt-cache depends linux-image-amd64 2>/dev/null |
         sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n1)"
  deb=""
  [[ -n "$pkg" ]] || return 1
  say "downloading $pkg"
  # apt-get download writes into the current directory; as root it warns that _apt cannot
  # write there, which is harmless.
  (cd "$cache" && apt-get download -q "$pkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  deb="$(ls -1 "$cache"/"$pkg"_*.deb 2>/dev/null | tail -n1 || true)"
  [[ -n "$deb" ]]
}

# kp_unpack DEB WORK: unpacks the package into WORK/pkg and extracts WORK/vmlinux, the
# uncompressed ELF kernel; sets `release` and `moddir`.
kp_unpack() {
  local deb="$1" work="$2"
  say "unpacking $(basename "$deb")"
  dpkg-deb -x "$deb" "$work/pkg"
  release="$(ls -1 "$work/pkg/lib/modules" | head -n1)"
  [[ -n "$release" && -f "$work/pkg/boot/vmlinuz-$release" ]] || die "$(basename "$deb") has no vmlinuz"
  moddir="$work/pkg/lib/modules/$release"
  # The first compressed stream in the bzImage that decompresses to an ELF file (what the
  # kernel's scripts/extract-vmlinux does).
  cp "$work/pkg/boot/vmlinuz-$release" "$work/vmlinuz"
  say "extracting vmlinux from vmlinuz-$release"
  _kp_extract "$work" '\xfd\x37\x7a\x58\x5a\x00' xz -dc ||
    _kp_extract "$work" '\x1f\x8b\x08' gzip -dc ||
    _kp_extract "$work" '\x28\xb5\x2f\xfd' zstd -dc ||
    _kp_extract "$work" '\x42\x5a\x68' bzip2 -dc ||
    _kp_extract "$work" '\x5d\x00\x00\x00' xz -F lzma -dc ||
    die "no compressed ELF kernel found in vmlinuz-$release"
}
_kp_extract() {  # _kp_extract WORK MAGIC_HEX DECOMPRESSOR...
  local work="$1" magic="$2" off
  shift 2
  for off in $(LC_ALL=C grep -obUaP "$magic" "$work/vmlinuz" 2>/dev/null | cut -d: -f1 | head -n 8); do
    tail -c +"$((off + 1))" "$work/vmlinuz" | "$@" > "$work/vmlinux" 2>/dev/null || true
    if [[ "$(head -c 4 "$work/vmlinux" | od -An -tx1 | tr -d ' \n')" == 7f454c46 ]]; then
      return 0
    fi
  done
  return 1
}

# kp_add_modules ROOT MODULE...: copies the modules (decompressed) and their dependencies
# (modules.dep; depmod on the unpacked tree if it has none), dependencies first, into
# ROOT/lib/modules and lists them in that order in ROOT/modules.order. Built-in ones are skipped.
kp_add_modules() {
  local root="$1" m rel name
  shift
  [[ -f "$moddir/modules.dep" ]] || depmod -b "$(dirname "$(dirname "$(dirname "$moddir")")")" "$release"
  _kp_order=()
  declare -gA _kp_seen=()
  for m in "$@"; do
    rel="$(grep -m1 -E "(^|/)$m\.ko(\.xz|\.zst|\.gz)?:" "$moddir/modules.dep" | cut -d: -f1 || true)"
    if [[ -z "$rel" ]]; then
      if grep -qE "(^|/)$m\.ko" "$moddir/modules.builtin"; then
        say "$m is built in"; continue
      fi
      die "module $m is neither in modules.dep nor built into $release"
    fi
    _kp_add_module "$rel"
  done
  mkdir -p "$root/lib/modules"
  : > "$root/modules.order"
  for rel in "${_kp_order[@]}"; do
    name="$(basename "$rel")"
    case "$name" in
      *.ko.xz) xz -dc "$moddir/$rel" > "$root/lib/modules/${name%.xz}"; name="${name%.xz}" ;;
      *.ko.zst) zstd -qdc "$moddir/$rel" > "$root/lib/modules/${name%.zst}"; name="${name%.zst}" ;;
      *.ko.gz) gzip -dc "$moddir/$rel" > "$root/lib/modules/${name%.gz}"; name="${name%.gz}" ;;
      *) cp "$moddir/$rel" "$root/lib/modules/$name" ;;
    esac
    echo "$name" >> "$root/modules.order"
  done
}
_kp_add_module() {  # _kp_add_module RELPATH: its dependencies first, then itself
  local rel="$1" deps d
  [[ -n "${_kp_seen[$rel]:-}" ]] && return 0
  _kp_seen[$rel]=1
  deps="$(grep -m1 "^$rel:" "$moddir/modules.dep" | cut -d: -f2-)"
  # modules.dep lists a module's dependencies so that loading them right to left works.
  local rev=()
  for d in $deps; do rev=("$d" "${rev[@]}"); done
  for d in "${rev[@]}"; do _kp_add_module "$d"; done
  _kp_order+=("$rel")
}

# kp_pack ROOT OUT LEVEL: ROOT as a reproducible gzip'd newc cpio (owner 0:0) in OUT.
kp_pack() {
  (cd "$1" && find . -mindepth 1 | LC_ALL=C sort |
     cpio --quiet -o -H newc -R 0:0 --reproducible 2>/dev/null) | gzip "-$3n" > "$2"
}
