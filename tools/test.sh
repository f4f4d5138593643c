#!/usr/bin/env bash
# Every test: unit, conformance (every plugin built here), CLI and SDK tests in the plain
# build, then again under ASan+UBSan and under TSan (CPU path). The plain build includes
# the CUDA plugin when nvcc is installed: without a GPU its test checks that it reports
# itself unavailable with the reason. Assumes tools/setup.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/preset.sh
presets=("$(plain_preset)" asan tsan)
for p in "${presets[@]}"; do
  echo "=== workflow preset: $p"
  cmake --workflow --preset "$p"
done
echo "=== all test workflows passed: ${presets[*]}"
