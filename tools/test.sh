#!/usr/bin/env bash
# Every test: unit, conformance and CLI tests in the plain build, then again under
# ASan+UBSan and under TSan (CPU path). Assumes tools/setup.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
presets=(cpu asan tsan)
for p in "${presets[@]}"; do
  echo "=== workflow preset: $p"
  cmake --workflow --preset "$p"
done
echo "=== all test workflows passed: ${presets[*]}"
