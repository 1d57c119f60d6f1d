#!/usr/bin/env bash
# `make test-kvm`: the firecracker runtime end to end (tests/kvm/test_firecracker.py) and the
# escape suite against Firecracker microVMs (run_suite.py --runtime firecracker), on a KVM host
# with the user's firecracker and jailer (docs/firecracker-runtime.md). Each part that cannot
# run on this host says why and is skipped (its exit code 77); a failure fails the target.
#
#   scripts/test-kvm.sh BUILD_DIR
set -uo pipefail
build="$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)"
cd "$(dirname "$0")/.."
export SPACE_BUILD_DIR="$build" PYTHONUNBUFFERED=1
failed=0
run() {
  local name="$1"
  shift
  echo "== test-kvm: $name"
  "$@"
  local rc=$?
  case $rc in
    0) echo "== test-kvm: $name passed" ;;
    77) echo "== test-kvm: $name SKIPPED (the reason is printed above)" ;;
    *) echo "== test-kvm: $name FAILED (exit $rc)"; failed=1 ;;
  esac
}
run "firecracker lifecycle" python3 tests/kvm/test_firecracker.py -v
run "escape suite against firecracker" \
  python3 tests/security/run_suite.py --runtime firecracker --build-dir "$build"
exit $failed
