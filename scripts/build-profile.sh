#!/usr/bin/env bash
# Where a build's CPU time goes: configures a fresh build directory as `make run` does (or with
# the cmake flags given), builds the targets with every compile and link run under
# /usr/bin/time, and prints the total CPU time (user + sys), the costliest steps and the
# critical path (the longest chain of steps that must run one after another, which bounds the
# build however many cores it gets). The numbers scripts/run.sh's estimate and the README's
# "Set up" figure come from. CPU time rather than wall time, since the build machines are shared:
# on N idle cores a build takes about CPU / N (while there are more steps ready than cores).
#
#   scripts/build-profile.sh [-o DIR] [-t "TARGETS"] [-n TOP] [-- CMAKE_ARGS...]
#     DIR      the build directory, made afresh (default build-profile)
#     TARGETS  what to build (default "space spaced space-agent", as `make run`)
#     TOP      how many of the costliest steps to list (default 15)
#
# The per-step log is DIR/cpu.log: "user sys maxrss_kb output" per step.
set -euo pipefail

# Launcher mode: CMake runs "build-profile.sh --wrap COMPILER ARGS..." for each step.
if [[ "${1:-}" == "--wrap" ]]; then
  shift
  out="" prev=""
  for a in "$@"; do
    [[ "$prev" == "-o" ]] && out="$a"
    prev="$a"
  done
  exec /usr/bin/time -a -o "$SPACE_PROFILE_LOG" -f "%U %S %M ${out:-?}" "$@"
fi

cd "$(dirname "$0")/.."
dir=build-profile targets="space spaced space-agent" top=15
while [[ $# -gt 0 ]]; do
  case "$1" in
    -o) dir="$2"; shift 2 ;;
    -t) targets="$2"; shift 2 ;;
    -n) top="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "build-profile: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ -x /usr/bin/time ]] || { echo "build-profile: needs /usr/bin/time (Debian: time)" >&2; exit 1; }

self="$(pwd)/scripts/build-profile.sh"
rm -rf "$dir"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
export SPACE_PROFILE_LOG="$dir/cpu.log"
cmake -G Ninja -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DSPACE_TESTS=OFF \
  "-DCMAKE_CXX_COMPILER_LAUNCHER=$self;--wrap" "-DCMAKE_C_COMPILER_LAUNCHER=$self;--wrap" \
  "-DCMAKE_CXX_LINKER_LAUNCHER=$self;--wrap" "-DCMAKE_C_LINKER_LAUNCHER=$self;--wrap" \
  "$@" >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 1; }
: >"$SPACE_PROFILE_LOG"
t0=$(date +%s)
# shellcheck disable=SC2086  # the targets are words
ninja -C "$dir" $targets
wall=$(($(date +%s) - t0))

python3 - "$dir" "$SPACE_PROFILE_LOG" "$top" "$wall" "$(nproc)" <<'EOF'
import functools, subprocess, sys
build, log = sys.argv[1], sys.argv[2]
top, wall, cores = (int(a) for a in sys.argv[3:6])
cost = {}
for line in open(log):
    user, sys_, _rss, out = line.split(maxsplit=3)
    cost[out.strip()] = cost.get(out.strip(), 0.0) + float(user) + float(sys_)
total = sum(cost.values())

@functools.cache
def inputs(node):
    """What ninja builds `node` from: explicit, implicit (|) and order-only (||) inputs."""
    q = subprocess.run(["ninja", "-C", build, "-t", "query", node], capture_output=True, text=True)
    found, section = [], False
    for l in q.stdout.splitlines()[1:]:
        s = l.strip()
        if s.startswith("input:"): section = True; continue
        if s.startswith("outputs:"): break
        if section and s: found.append(s.lstrip("|").strip())
    return tuple(found)

@functools.cache
def chain(node):
    """The costliest chain of profiled steps that ends at node: (CPU s, [steps])."""
    best = (0.0, [])
    for d in inputs(node):
        c = chain(d)
        if c[0] > best[0]: best = c
    own = cost.get(node)
    return (best[0] + own, best[1] + [node]) if own is not None else best

sys.setrecursionlimit(10000)
crit = max((chain(o) for o in cost), key=lambda c: c[0])
name = lambda p: p.replace("CMakeFiles/", "")
print(f"\n{len(cost)} steps, {total:.0f} s of CPU (user+sys) = {total/60:.1f} min; "
      f"{wall} s wall on {cores} cores here (a shared machine's wall time is noisy)")
print(f"critical path {crit[0]:.0f} s of CPU: " + " -> ".join(name(p) for p in crit[1]))
print(f"on {cores} idle cores: about {max(total / cores, crit[0]):.0f} s "
      f"(CPU / cores, at least the critical path)")
print(f"\nthe {top} costliest steps (CPU s):")
for out, c in sorted(cost.items(), key=lambda kv: -kv[1])[:top]:
    print(f"  {c:6.1f}  {name(out)}")
EOF
