#!/usr/bin/env bash
# The main job: set up, build every plugin this machine can compile, discover them, run
# both ops forward and backward on every available device and dtype, check each against
# the float64 reference and print a table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
source tools/preset.sh
preset=$(plain_preset)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
"./build/$preset/bin/dlfuse" list
"./build/$preset/bin/dlfuse" run all
