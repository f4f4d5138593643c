#!/usr/bin/env bash
# Line and branch coverage that `dlfuse conform` reaches in libdlfuse and in each plugin of
# a CPU machine (oneDNN; OpenCL on PoCL; WebGPU on lavapipe; testref): the `coverage`
# preset (Debug, gcc --coverage), the targets the conformance ctests run, those ctests as
# CI registers them (`ctest -L conformance`), then gcovr per component and one table.
#
#   bash tools/coverage.sh [BUILD_DIR]     # default build/coverage; needs gcovr (pip install gcovr)
#
# Each plugin is measured from its own object files (plugins/common is compiled into the
# OpenCL and WebGPU plugins, so it has a row under each); testref from its correct build
# only (the mutants and the deliberately wrong builds compile the same sources). Branches:
# gcc's branch counts without the ones that only exceptions take and without unreachable
# ones (gcovr --exclude-throw-branches --exclude-unreachable-branches). Device code
# (OpenCL C, WGSL) runs in the driver, outside gcov. HTML per component: BUILD_DIR/coverage/.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/coverage}
JOBS=${JOBS:-2}
if ! command -v gcovr >/dev/null; then
  echo "gcovr not found: pip install gcovr" >&2
  exit 1
fi

cmake --preset coverage -B "$B"
# What the conformance ctests run: the CLI, the plugins, testref's wrong builds and mutants,
# and the OpenCL/WebGPU test drivers labelled conformance.
targets=(dlfuse_cli dlfuse_testref dlfuse_onednn dlfuse_opencl dlfuse_webgpu
         dlfuse_testref_wrong dlfuse_testref_unwritten dlfuse_testref_stale_scratch dlfuse_testref_thread_unsafe
         dlfuse_opencl_threads dlfuse_opencl_subbuffers dlfuse_webgpu_perf)
mapfile -t mutants < <(cmake --build "$B" --target help | grep -o 'dlfuse_testref_m_[a-z0-9_]*' | sort -u)
cmake --build "$B" -j "$JOBS" --target "${targets[@]}" "${mutants[@]}"

find "$B" -name '*.gcda' -delete
start=$(date +%s)
rc=0
ctest --test-dir "$B" -L conformance -j "$JOBS" --output-on-failure || rc=$?
secs=$(( $(date +%s) - start ))

out="$B/coverage"
mkdir -p "$out"
# name | source filter (regex, relative to the repository) | object folder searched
components=(
  "registry|registry/src/|$B/registry"
  "onednn|plugins/onednn/src/|$B/plugins/onednn/CMakeFiles/dlfuse_onednn.dir"
  "opencl|plugins/opencl/src/|$B/plugins/opencl/CMakeFiles/dlfuse_opencl.dir"
  "common (in opencl)|plugins/common/src/|$B/plugins/opencl/CMakeFiles/dlfuse_opencl.dir"
  "webgpu|plugins/webgpu/src/|$B/plugins/webgpu/CMakeFiles/dlfuse_webgpu.dir"
  "common (in webgpu)|plugins/common/src/|$B/plugins/webgpu/CMakeFiles/dlfuse_webgpu.dir"
  "testref|tests/plugins/testref/|$B/tests/plugins/testref/CMakeFiles/dlfuse_testref.dir"
)
summaries=()
for c in "${components[@]}"; do
  IFS='|' read -r name filter objdir <<<"$c"
  slug=$(echo "$name" | tr -c 'a-z0-9\n' '_')
  gcovr -r . --filter "$filter" --exclude-throw-branches --exclude-unreachable-branches -j "$JOBS" \
        --json-summary "$out/$slug.json" --html-details "$out/$slug.html" "$objdir" >/dev/null
  summaries+=("$name|$filter|$out/$slug.json")
done

echo
echo "coverage of \`ctest -L conformance\` ($(git rev-parse --short HEAD), $(date -u +%Y-%m-%d), ${secs} s, ctest exit $rc)"
python3 - "${summaries[@]}" <<'EOF'
import json, sys
print("| component | sources | lines | branches |")
print("|---|---|---|---|")
for arg in sys.argv[1:]:
    name, src, path = arg.split("|")
    s = json.load(open(path))
    print(f"| {name} | `{src}` | {s['line_percent']:.1f}% ({s['line_covered']}/{s['line_total']}) "
          f"| {s['branch_percent']:.1f}% ({s['branch_covered']}/{s['branch_total']}) |")
EOF
echo "details: $out/*.html"
exit $rc
