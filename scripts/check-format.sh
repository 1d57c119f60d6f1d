#!/usr/bin/env bash
# The format check (ctest lint.format): every project C/C++ file that `make format` formats
# (src, tests, bench: *.h, *.cc, *.c) must be as clang-format 14 with the repo's .clang-format
# would write it. Lists each file that is not and exits 1; `make format` fixes them.
#
#   scripts/check-format.sh [ROOT]      (default: the repository this script is in)
#
# Pinned to clang-format 14 (Debian 12's clang-format-14, scripts/install-deps.sh): other
# versions format some constructs differently, so a newer one would fail a clean tree.
set -euo pipefail

root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
CLANG_FORMAT="${CLANG_FORMAT:-clang-format-14}"
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "check-format: $CLANG_FORMAT not found (apt-get install clang-format-14;" \
       "scripts/install-deps.sh installs it)" >&2
  exit 2
fi
if ! "$CLANG_FORMAT" --version | grep -q 'version 14\.'; then
  echo "check-format: $CLANG_FORMAT is not clang-format 14: $("$CLANG_FORMAT" --version)" >&2
  exit 2
fi

mapfile -d '' files < <(find src tests bench \( -name '*.h' -o -name '*.cc' -o -name '*.c' \) \
                          -print0 | sort -z)
# --dry-run -Werror prints "<file>:<line>:<col>: error: code should be clang-formatted" for
# each place that differs; keep the file names only.
out="$(printf '%s\0' "${files[@]}" | xargs -0 -r -n 64 "$CLANG_FORMAT" --dry-run -Werror 2>&1 \
       || true)"
bad="$(grep -oE '^[^:]+:[0-9]+:[0-9]+: error' <<<"$out" | cut -d: -f1 | sort -u || true)"
if [[ -z "$bad" ]]; then
  if grep -q . <<<"$out"; then  # clang-format failed for another reason (a bad .clang-format)
    echo "$out" >&2
    exit 2
  fi
  echo "check-format: ${#files[@]} files formatted as clang-format 14 writes them"
  exit 0
fi
echo "check-format: not formatted as clang-format 14 writes them (\`make format\` fixes):"
sed 's/^/  /' <<<"$bad"
echo "check-format: $(wc -l <<<"$bad") of ${#files[@]} files"
exit 1
