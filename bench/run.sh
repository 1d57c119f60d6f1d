#!/usr/bin/env bash
# First SPACE benchmark: how far above the host's process-creation floor a sandboxed command is.
# Starts a private daemon (temp socket + state dir) from $BUILD_DIR (default build-release),
# measures, writes bench/results/<date>.md and prints it. `make bench` builds and calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR="${BUILD_DIR:-build-release}"
export BENCH_N="${BENCH_N:-100}"
work="$(mktemp -d /tmp/space-bench.XXXXXX)"
cleanup() {
  # Never remove through something the daemon may have left mounted below the work dir.
  if grep -q " $work" /proc/self/mountinfo; then
    echo "bench: leaving $work in place: something is still mounted below it" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
cc -O2 -o "$work/spawn_timer" bench/spawn_timer.c
mkdir -p bench/results
python3 bench/bench.py --work "$work" --timer "$work/spawn_timer" \
  --out "bench/results/$(date +%Y-%m-%d).md"
