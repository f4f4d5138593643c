#!/usr/bin/env bash
# The C, C++ and CUDA sources in .clang-format's style, with clang-format 14 (other versions
# format some constructs differently, so the check pins one):
#
#   bash tools/format.sh            rewrite every tracked source in place
#   bash tools/format.sh --check    list the sources that differ; exit 1 if any does
#
# Exit 77 (ctest's skip) where clang-format 14 or git is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null && "$c" --version | grep -q "version 14\."; then cf=$c; break; fi
done
[ -n "$cf" ] || { echo "format: clang-format 14 not found (Debian: clang-format-14)"; exit 77; }
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "format: not a git checkout"; exit 77; }
mapfile -t files < <(git ls-files '*.c' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' '*.inc')
if [ "${1:-}" = "--check" ]; then
  bad=0
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    if ! "$cf" --style=file "$f" | cmp -s - "$f"; then echo "not formatted: $f"; bad=1; fi
  done
  ((bad)) && echo "format: run 'bash tools/format.sh' to format them"
  ((bad == 0)) && echo "format: ${#files[@]} sources formatted"
  exit $bad
fi
"$cf" --style=file -i "${files[@]}"
