#!/usr/bin/env python3
"""The layering check (ctest lint.layers): every `#include "dir/..."` under src/ must point at
its own directory or at one on a lower level. A directory never includes one on a higher level,
nor a sibling on its own level. Each offending include is listed as file:line; exit 1 if any.

  scripts/check-layers.py [SRC_DIR]     (default: src/ next to this script's parent)

The levels (docs/ci.md, "Layers"); a directory under src/ that is not listed here is
an error too, so that a new one gets its place in the table first.

Two finer rules hold inside that order:
- The daemon's interfaces. api/, e2b/ and gateway/ sit above the daemon but compile against its
  interfaces only (DAEMON_INTERFACES: the sandbox service and its typed views, the token
  interface, the request's caller), never its implementation: any other daemon/ header is an
  error there. CMake holds the same seam: those layers link space_service, not space_daemon.
- Inside runtime/. The files directly in src/runtime/ are the runtimes' shared level (the
  interface, the microVM runtimes' common steps); runtime/linux, runtime/qemu and
  runtime/firecracker stand above it as siblings that do not include each other (what two of them
  share goes down into runtime/ or into host/), and the registry that names them
  (RUNTIME_REGISTRY) stands above all three. A new subdirectory of runtime/ needs its place in
  RUNTIME_LEVELS.
"""
import pathlib
import re
import sys

LAYERS = [
    ["common"],  # std + nlohmann-json only: the static agent links it; no OpenSSL
    ["proto", "tls"],
    ["host"],  # the runtimes' host toolkit: namespaces, cgroups, launching, seccomp, confinement
    ["runtime", "egress", "snapshot", "image", "audit", "agent", "vminit"],
    ["cluster", "upper_reader", "egressd"],
    ["daemon"],
    ["api"],
    ["e2b"],  # E2B's protocol over the same service, beside the API it reuses
    ["spaced", "gateway", "cli"],
]
LEVEL = {d: i for i, layer in enumerate(LAYERS) for d in layer}

# The daemon headers that the layers above it may include: interfaces and plain types only.
DAEMON_INTERFACES = {
    "daemon/service.h",        # SandboxService: what the API can ask of the daemon
    "daemon/service_types.h",  # the typed structs it answers with
    "daemon/sandbox_state.h",  # a sandbox's state (service_types.h holds it)
    "daemon/tokens.h",         # the token text and record, the TokenStore interface
    "daemon/caller.h",         # who the request served on this thread acts for
}
INTERFACE_ONLY = {"api", "e2b", "gateway"}

# Levels inside src/runtime/: "" is the files directly in it.
RUNTIME_LEVELS = [[""], ["linux", "qemu", "firecracker"]]
RUNTIME_LEVEL = {d: i for i, layer in enumerate(RUNTIME_LEVELS) for d in layer}
# Files directly in runtime/ that stand above the runtimes: the table naming each runtime and
# the factory that makes it.
RUNTIME_REGISTRY = {"registry.h", "registry.cc"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"(([^"/]+)/[^"]*)"')
SOURCE_SUFFIXES = {".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cxx", ".inc"}


def runtime_place(parts: tuple[str, ...]) -> tuple[int, str] | None:
    """The level inside runtime/ of a path below it (parts after "runtime"), and its name
    there; None for a subdirectory with no level."""
    if len(parts) == 1:  # a file directly in runtime/
        if parts[0] in RUNTIME_REGISTRY:
            return len(RUNTIME_LEVELS), "runtime/ (the registry)"
        return 0, "runtime/"
    sub = parts[0]
    if sub not in RUNTIME_LEVEL:
        return None
    return RUNTIME_LEVEL[sub], f"runtime/{sub}/"


def check_runtime(rel: pathlib.PurePath, target: str, where: str) -> list[str]:
    """The rule inside runtime/ for src/`rel` (in runtime/) including "`target`"."""
    own = runtime_place(rel.parts[1:])
    if own is None:
        return [f"src/{rel}: directory runtime/{rel.parts[1]}/ has no level in RUNTIME_LEVELS"]
    tparts = pathlib.PurePosixPath(target).parts[1:]
    dest = runtime_place(tparts)
    if dest is None:
        return [f"{where}: runtime/{tparts[0]}/ has no level in RUNTIME_LEVELS"]
    if own[1] == dest[1]:
        return []
    if dest[0] > own[0]:
        return [f"{where}: {own[1]} includes higher {dest[1]} (inside runtime/, level {own[0]} "
                f"includes level {dest[0]})"]
    if dest[0] == own[0]:
        return [f"{where}: {own[1]} includes {dest[1]}, a sibling runtime (what they share "
                "belongs in runtime/ or host/)"]
    return []


def check(src: pathlib.Path) -> list[str]:
    problems = []
    for path in sorted(src.rglob("*")):
        if not path.is_file() or path.suffix not in SOURCE_SUFFIXES:
            continue
        rel = path.relative_to(src)
        if len(rel.parts) < 2:
            continue  # a file directly in src/ has no layer
        own = rel.parts[0]
        if own not in LEVEL:
            problems.append(f"src/{rel}: directory {own}/ has no level in the layer table")
            continue
        if own == "runtime" and len(rel.parts) > 2 and rel.parts[1] not in RUNTIME_LEVEL:
            problems.append(f"src/{rel}: directory runtime/{rel.parts[1]}/ has no level in "
                            "RUNTIME_LEVELS")
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            header, target = m.group(1), m.group(2)
            if not (src / target).is_dir():
                continue  # not a project directory ("gtest/...")
            where = f"src/{rel}:{lineno}: {line.strip()}"
            if target == own:
                if own == "runtime":
                    problems += check_runtime(rel, header, where)
                continue  # its own directory
            if target not in LEVEL:
                problems.append(f"{where}: {target}/ has no level in the layer table")
            elif LEVEL[target] > LEVEL[own]:
                problems.append(f"{where}: {own}/ (level {LEVEL[own]}) includes higher "
                                f"{target}/ (level {LEVEL[target]})")
            elif LEVEL[target] == LEVEL[own]:
                problems.append(f"{where}: {own}/ includes {target}/, a sibling on its own "
                                f"level {LEVEL[own]}")
            elif target == "daemon" and own in INTERFACE_ONLY and header not in DAEMON_INTERFACES:
                problems.append(f"{where}: {own}/ may include only the daemon's interfaces "
                                f"({', '.join(sorted(DAEMON_INTERFACES))}), not {header}")
    return problems


def main() -> int:
    default = pathlib.Path(__file__).resolve().parent.parent / "src"
    src = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else default
    if not src.is_dir():
        print(f"check-layers: {src}: not a directory", file=sys.stderr)
        return 2
    problems = check(src)
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} include(s) against the layer order "
              "(docs/ci.md, Layers)")
        return 1
    print(f"check-layers: {src}: every include points at its own or a lower level")
    return 0


if __name__ == "__main__":
    sys.exit(main())
