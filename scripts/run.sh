#!/usr/bin/env bash
# `make run`: the shortest way from a fresh Debian 12 machine to a task in a sandbox. Installs
# only the run group of packages (scripts/install-deps.sh --run), builds only what the demo runs
# (space, spaced, space-agent: no tests, no microVM guest), runs scripts/demo.sh, and says how
# long each phase took. `make test` installs and builds the rest.
#
#   BUILD_DIR (build)  BUILD_TYPE (Release)  JOBS (ninja's default)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
BUILD_TYPE="${BUILD_TYPE:-Release}"
JOBS="${JOBS:-}"

summary=()
start=$(date +%s%N)
# phase NAME CMD...: runs CMD, records how long it took; a failure ends `make run` with its code.
phase() {
  local name="$1" t0 rc ms
  shift
  t0=$(date +%s%N)
  "$@"
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  summary+=("$(printf '%s %d.%d s' "$name" $((ms / 1000)) $((ms % 1000 / 100)))")
  if [[ $rc -ne 0 ]]; then
    report
    echo "make run: the $name phase failed (exit $rc)" >&2
    exit "$rc"
  fi
}
report() {
  local ms=$(( ($(date +%s%N) - start) / 1000000 )) line="" s
  for s in "${summary[@]}"; do line+="${line:+, }$s"; done
  printf 'make run: %s (total %d.%d s)\n' "$line" $((ms / 1000)) $((ms % 1000 / 100)) >&2
}
configure() {
  # An existing build directory keeps its configuration (make test's, say).
  [[ -f "$BUILD_DIR/build.ninja" ]] && return 0
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DSPACE_TESTS=OFF
}

phase packages scripts/install-deps.sh --run
phase configure configure
phase build ninja -C "$BUILD_DIR" ${JOBS:+-j"$JOBS"} space spaced space-agent
phase demo env BUILD_DIR="$BUILD_DIR" scripts/demo.sh
report
