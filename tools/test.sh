#!/usr/bin/env bash
# Every test: unit, conformance (every plugin built here), CLI and SDK tests, the stress
# test and (where valgrind is installed) memcheck runs in the plain build, then again under
# ASan+UBSan and under TSan (CPU path), then the libFuzzer targets for a bounded time
# (the `fuzz` preset, clang-14). The plain build includes the CUDA plugin when nvcc is
# installed: without a GPU its test checks that it reports itself unavailable with the
# reason. Assumes tools/setup.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/preset.sh
# Without a GPU the CUDA plugin's device code is compiled, never run: one architecture then
# (minutes less; CUDAARCHS, if set, wins). The wheel test still builds every architecture
# the package ships, as the README's `pip install` does.
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  export CUDAARCHS=${CUDAARCHS:-90}
fi
presets=("$(plain_preset)" asan tsan)
if command -v clang++-14 >/dev/null; then
  presets+=(fuzz)
else
  echo "note: clang++-14 not found: skipping the fuzz workflow (tools/setup.sh should install clang-14)" >&2
fi
for p in "${presets[@]}"; do
  echo "=== workflow preset: $p"
  start=$(date +%s)
  cmake --workflow --preset "$p"
  echo "=== workflow preset $p: $(($(date +%s) - start)) s"
done
echo "=== all test workflows passed: ${presets[*]}"
