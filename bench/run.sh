#!/usr/bin/env bash
# SPACE benchmarks, each against a private daemon (temp socket + state dir) from $BUILD_DIR
# (default build-release); `make bench` builds and calls this.
#   spawn   how far above the host's process-creation floor a sandboxed command is, alone and
#           with BENCH_CLIENTS (16) clients at once, beside the peers bwrap, crun, runsc and
#           unshare (needs `scripts/install-deps.sh --bench`), and the host memory per idle
#           sandbox (bench.py -> bench/results/<date>.md). BENCH_N (100) runs per row; the
#           issue's figure is BENCH_N=500 (about 6 minutes on the 2-CPU build machine)
#   egress  the egress gateway's latency and throughput against a direct connection and
#           mitmproxy (egress.py -> bench/results/egress-<date>.md; needs
#           `scripts/install-deps.sh --bench` for the mitmproxy rows)
#   snapshot  snapshot, rollback and restore time and stored bytes against workspace size
#           (BENCH_SNAPSHOT_SIZES, MiB, default 64,256,1024) and change rate
#           (snapshot.py -> bench/results/snapshot-<date>.md)
#   vm      sandbox creation by runtime, side by side: linux, qemu boot vs clone of the
#           image's template vs a warm pool of clones, `space run -- true`, host memory per idle
#           VM, and firecracker (restored from the image's template; KVM only), p50/p99 and
#           where the time goes (vm_create.py -> bench/results/vm-<date>.md); a runtime that
#           cannot run here gets a row with the reason
#   e2b     what the E2B door adds to create, get and a command, and create -> first output
#           through E2B's own SDK against SPACE's (e2b_door.py -> bench/results/e2b-door-<date>.md)
#   gateway what space-gateway adds to a call (GET, exec, create) against the same call made
#           straight to the node, alternated (gateway.py -> bench/results/gateway-<date>.md)
#   git     git clone of a 50 MB repository of random blobs from a local smart-HTTP server,
#           through the gateway (intercepted with a token, tunneled) vs direct from the host,
#           medians of BENCH_GIT_RUNS (5) runs (git_clone.py -> bench/results/git-clone-<date>.md)
#   processes  what a gateway process per sandbox (gateway.sandboxes_per_process 1) costs a
#           create, cold and from a warm pool, against the shared process, alternated, and the
#           memory per process (egress_processes.py -> bench/results/egress-processes-<date>.md)
#   page    headless Chromium's page-load time for the local site through the gateway
#           (tunneled and intercepted) against the same Chromium on the host loading it
#           directly, interleaved (page_load.py -> bench/results/page-load-<date>.md)
# BENCH_ONLY=spawn, egress, snapshot, vm, gateway, e2b, git, processes or page runs one of them.
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
only="${BENCH_ONLY:-}"
case "$only" in
  "" | spawn | egress | snapshot | vm | gateway | e2b | git | processes | page) ;;
  *) echo "bench: BENCH_ONLY must be spawn, egress, snapshot, vm, gateway, e2b, git, processes or page, not '$only'" >&2; exit 2 ;;
esac
mkdir -p bench/results
if [[ -z "$only" || "$only" == spawn ]]; then
  cc -O2 -o "$work/spawn_timer" bench/spawn_timer.c
  python3 bench/bench.py --work "$work" --timer "$work/spawn_timer" \
    --out "bench/results/$(date +%Y-%m-%d).md"
fi
if [[ -z "$only" || "$only" == egress ]]; then
  python3 bench/egress.py --work "$work/egress" --out "bench/results/egress-$(date +%Y-%m-%d).md"
fi
if [[ -z "$only" || "$only" == snapshot ]]; then
  python3 bench/snapshot.py --work "$work/snapshot" \
    --out "bench/results/snapshot-$(date +%Y-%m-%d).md"
fi
if [[ -z "$only" || "$only" == vm ]]; then
  python3 bench/vm_create.py --work "$work/vm" --out "bench/results/vm-$(date +%Y-%m-%d).md"
fi
if [[ -z "$only" || "$only" == gateway ]]; then
  python3 bench/gateway.py --work "$work/gateway" --out "bench/results/gateway-$(date +%Y-%m-%d).md"
fi
if [[ -z "$only" || "$only" == e2b ]]; then
  python3 bench/e2b_door.py --work "$work/e2b" --out "bench/results/e2b-door-$(date +%Y-%m-%d).md"
fi
if [[ -z "$only" || "$only" == git ]]; then
  python3 bench/git_clone.py --work "$work/git" --out "bench/results/git-clone-$(date +%Y-%m-%d).md"
fi
if [[ -z "$only" || "$only" == processes ]]; then
  python3 bench/egress_processes.py --work "$work/processes" \
    --out "bench/results/egress-processes-$(date +%Y-%m-%d).md"
fi
if [[ -z "$only" || "$only" == page ]]; then
  python3 bench/page_load.py --work "$work/page" --out "bench/results/page-load-$(date +%Y-%m-%d).md"
fi
