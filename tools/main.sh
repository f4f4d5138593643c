#!/usr/bin/env bash
# The main job: set up, build (release-like, with the test plugin), discover every plugin,
# run both ops forward and backward on every available device, check against the float64
# reference and print a table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu
./build/cpu/bin/dlfuse list
./build/cpu/bin/dlfuse run all
