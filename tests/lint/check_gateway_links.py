#!/usr/bin/env python3
"""What space-gateway links (ctest lint.gateway_links): the gateway is the API's side of the
cluster (src/gateway) and links the API, the daemon's interfaces, the cluster's discovery and
sandbox pointers and TLS; no code of a runtime, of the egress gateway, of the snapshot store, of
the audit log or of the daemon's implementation, and no SQLite. This reads every symbol of the
built binary (`nm -C`, defined and undefined) and fails naming each one of those it finds.

  tests/lint/check_gateway_links.py BINARY
  tests/lint/check_gateway_links.py --expect-forbidden BINARY   (exit 0 only if it finds some)

ctest runs it on space-gateway (must pass) and, as lint.gateway_links_checker, on spaced with
--expect-forbidden: spaced links all of it, so the check must find it there (proof that it can
fail, and that it fails for that reason, not for a missing binary)."""
import re
import subprocess
import sys

# What the gateway must not hold, and why it would be there.
FORBIDDEN = [
    (re.compile(r"\bspace::runtime::"), "runtime code (src/runtime)"),
    (re.compile(r"\bspace::host::"), "the runtimes' host toolkit (src/host)"),
    (re.compile(r"\bspace::egress::"), "egress gateway code (src/egress)"),
    (re.compile(r"\bspace::snapshot::"), "snapshot store code (src/snapshot)"),
    (re.compile(r"\bspace::audit::"), "audit log code (src/audit)"),
    (re.compile(r"\bspace::daemon::(Daemon|Store|Registry|Images|Config)\b"),
     "the daemon's implementation (src/daemon)"),
    (re.compile(r"\bsqlite3_"), "SQLite (the daemon's store)"),
]


def offending(symbols: list[str]) -> list[str]:
    out = []
    for line in symbols:
        for pattern, what in FORBIDDEN:
            if pattern.search(line):
                out.append(f"{what}: {line.strip()}")
                break
    return out


def main() -> int:
    args = sys.argv[1:]
    expect_forbidden = bool(args) and args[0] == "--expect-forbidden"
    if expect_forbidden:
        args = args[1:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    binary = args[0]
    nm = subprocess.run(["nm", "-C", binary], capture_output=True, text=True, timeout=120)
    if nm.returncode != 0 or not nm.stdout:
        print(f"check_gateway_links: nm {binary} failed: {nm.stderr.strip()}", file=sys.stderr)
        return 2
    lines = nm.stdout.splitlines()
    # A binary without the API's code (a wrong path, a stripped file) would pass for the wrong
    # reason: both space-gateway and spaced hold it.
    if not any("space::api::" in l for l in lines):
        print(f"check_gateway_links: {binary} holds no space::api:: symbol: not a binary of the "
              "API's side", file=sys.stderr)
        return 2
    bad = offending(lines)
    if expect_forbidden:
        kinds = sorted({b.split(": ", 1)[0] for b in bad})
        print(f"check_gateway_links: {binary}: {len(bad)} forbidden symbol(s) found, as expected: "
              + "; ".join(kinds))
        return 0 if bad else 1
    for l in bad[:40]:
        print(l)
    if bad:
        print(f"check_gateway_links: {binary}: {len(bad)} symbol(s) the gateway must not link")
        return 1
    print(f"check_gateway_links: {binary}: {len(lines)} symbols, none of a runtime, egress, "
          "snapshot, audit or daemon implementation, nor SQLite")
    return 0


if __name__ == "__main__":
    sys.exit(main())
