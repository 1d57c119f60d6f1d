#!/usr/bin/env python3
"""The layering check (ctest lint.layers): every `#include "dir/..."` under src/ must point at
its own directory or at one on a lower level. A directory never includes one on a higher level,
nor a sibling on its own level. Each offending include is listed as file:line; exit 1 if any.

  scripts/check-layers.py [SRC_DIR]     (default: src/ next to this script's parent)

The levels (docs/ci.md, "Layers"); a directory under src/ that is not listed here is
an error too, so that a new one gets its place in the table first.
"""
import pathlib
import re
import sys

LAYERS = [
    ["common"],  # std + nlohmann-json only: the static agent links it; no OpenSSL
    ["proto", "tls"],
    ["runtime", "egress", "snapshot", "audit", "agent", "vminit"],
    ["cluster", "upper_reader", "egressd"],
    ["daemon"],
    ["api"],
    ["e2b"],  # E2B's protocol over the same service, beside the API it reuses
    ["spaced", "gateway", "cli"],
]
LEVEL = {d: i for i, layer in enumerate(LAYERS) for d in layer}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]*"')
SOURCE_SUFFIXES = {".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cxx", ".inc"}


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
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            if target == own or not (src / target).is_dir():
                continue  # its own directory, or not a project directory ("gtest/...")
            where = f"src/{rel}:{lineno}: {line.strip()}"
            if target not in LEVEL:
                problems.append(f"{where}: {target}/ has no level in the layer table")
            elif LEVEL[target] > LEVEL[own]:
                problems.append(f"{where}: {own}/ (level {LEVEL[own]}) includes higher "
                                f"{target}/ (level {LEVEL[target]})")
            elif LEVEL[target] == LEVEL[own]:
                problems.append(f"{where}: {own}/ includes {target}/, a sibling on its own "
                                f"level {LEVEL[own]}")
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
