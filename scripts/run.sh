#!/usr/bin/env bash
# `make run`: the shortest way from a fresh Debian 12 machine to a task in a sandbox. Installs
# only the run group of packages (scripts/install-deps.sh --run), builds only what the demo runs
# (space, spaced, space-agent: no tests, no microVM guest), runs scripts/demo.sh, and says how
# long each phase took. `make test` installs and builds the rest. Before the build it says how
# long the build should take here, and each step ninja finishes is shown with the progress, the
# time elapsed and the time left by that estimate.
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

# What the build of the three programs costs, measured from a fresh clone on the 2-core build VM
# (README, "Set up"; scripts/build-profile.sh): CPU seconds (user + sys) of all its steps, 331 to
# 415 s over four builds on the shared VM (the more, the busier it was), and of its critical
# path, the chain of steps that cannot overlap (what bounds it on many cores).
BUILD_CPU_S=360
BUILD_CRITICAL_S=56
TARGETS=(space spaced space-agent)

# mmss SECONDS: 75 -> 1:15
mmss() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
# minsec SECONDS: 75 -> "1 min 15 s", 40 -> "40 s"
minsec() { if [[ $1 -ge 60 ]]; then echo "$(($1 / 60)) min $(($1 % 60)) s"; else echo "$1 s"; fi; }

# The build, with an estimate: the measured CPU time, in proportion to the steps to run (all of
# them in a fresh build directory), over this machine's cores (or JOBS), and no less than the
# critical path. It assumes cores as fast as the build VM's and idle. Each step ninja finishes
# is shown with the progress, the time elapsed and what is left of the estimate.
build() {
  local cores total fresh=1
  cores=$(nproc)
  [[ -n "$JOBS" && "$JOBS" -lt "$cores" ]] && cores=$JOBS
  total=$(ninja -C "$BUILD_DIR" -t commands "${TARGETS[@]}" | wc -l)
  [[ -f "$BUILD_DIR/.ninja_log" ]] && fresh=0
  NINJA_STATUS='[%f/%t] ' ninja -C "$BUILD_DIR" ${JOBS:+-j"$JOBS"} "${TARGETS[@]}" | {
    local line el rest est="" t0=$SECONDS
    # A fresh build directory runs every step, so the estimate comes before the first; else
    # once ninja has counted the steps left ("[1/N]").
    [[ $fresh -eq 1 ]] && est=$(estimate "$total" "$total" "$cores")
    while IFS= read -r line; do
      # "[12/44] Building ..." -> "[12/44, 1:05 elapsed, ~2:10 left] Building ..." (steps
      # differ too much in cost for their count to say what is left)
      if [[ "$line" =~ ^\[[0-9]+/([0-9]+)\]\ (.*) ]]; then
        # (ninja's own steps first: "[0/2] Re-checking globbed directories...")
        [[ -n "$est" || "${BASH_REMATCH[2]}" == Re-* ]] ||
          est=$(estimate "${BASH_REMATCH[1]}" "$total" "$cores")
        el=$((SECONDS - t0))
        rest="past the estimate"
        [[ $el -lt ${est:-0} ]] && rest="~$(mmss $((est - el))) left"
        [[ -n "$est" ]] || rest="counting"
        line="${line%%\] *}, $(mmss "$el") elapsed, $rest] ${line#*\] }"
      fi
      printf '%s\n' "$line"
    done
  }
  return "${PIPESTATUS[0]}"
}

# estimate STEPS TOTAL CORES: says how long STEPS of the TOTAL steps should take on CORES cores
# (on stderr, so that it shows in the pipe above) and prints that many seconds.
estimate() {
  local steps=$1 total=$2 cores=$3 cpu est
  cpu=$((BUILD_CPU_S * steps / (total > 0 ? total : 1)))
  est=$((cpu / cores))
  local share="$steps of $total steps"
  [[ $steps -lt $total ]] && share+=", the estimate by their share"
  [[ $steps -ge $total && $est -lt $BUILD_CRITICAL_S ]] && est=$BUILD_CRITICAL_S
  echo "make run: building space, spaced and space-agent ($share): about $(minsec "$est")" \
    "on this machine's $cores cores ($(minsec "$cpu") of CPU on the 2-core build VM; a slower" \
    "or busier machine takes longer)" >&2
  echo "$est"
}

phase packages scripts/install-deps.sh --run
phase configure configure
phase build build
phase demo env BUILD_DIR="$BUILD_DIR" scripts/demo.sh
report
