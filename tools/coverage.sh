#!/usr/bin/env bash
# Line and branch coverage that `dlfuse conform` reaches in libdlfuse and in each plugin of
# a CPU machine (oneDNN; OpenCL on PoCL; WebGPU on lavapipe; testref): the `coverage`
# preset (Debug at -O1, as the sanitized builds: at -O0 the suite's float64 reference and
# testref's loops pass the ctests' timeouts; gcc --coverage with atomic counters, since the
# suite calls kernels from several threads), the targets the conformance ctests run, those
# ctests as CI registers them (`ctest -L conformance`), then gcovr per component and one table.
#
#   bash tools/coverage.sh [BUILD_DIR]     # default build/coverage; needs gcovr (pip install gcovr)
#
# Each plugin is measured from its own object files (plugins/common is compiled into the
# OpenCL and WebGPU plugins, so it has a row under each); testref from its correct build
# only (the mutants and the deliberately wrong builds compile the same sources). Branches:
# gcc's branch counts without the ones that only exceptions take and without unreachable
# ones (gcovr --exclude-throw-branches --exclude-unreachable-branches). gcc 12 records no
# line inside an OpenMP region (the oneDNN plugin's tile loops: read what they call), and
# device code (OpenCL C, WGSL) runs in the driver, outside gcov. HTML and JSON per
# component: BUILD_DIR/coverage/.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/coverage}
JOBS=${JOBS:-2}
if ! command -v gcovr >/dev/null; then
  echo "gcovr not found: pip install gcovr" >&2
  exit 1
fi

# CMake's file API lists every target's files: the build makes those the conformance ctests
# name (in their commands and in the lists their scripts read: the mutants'), nothing else.
mkdir -p "$B/.cmake/api/v1/query"
touch "$B/.cmake/api/v1/query/codemodel-v2"
cmake --preset coverage -B "$B"
ctest --test-dir "$B" -L conformance --show-only=json-v1 >"$B/conformance-tests.json"
mapfile -t targets < <(python3 - "$B" <<'EOF'
import glob, json, os, re, sys
build = os.path.realpath(sys.argv[1])
reply = os.path.join(build, ".cmake/api/v1/reply")
index = json.load(open(sorted(glob.glob(os.path.join(reply, "index-*.json")))[-1]))
model = json.load(open(os.path.join(reply, index["reply"]["codemodel-v2"]["jsonFile"])))
by_file = {}
for t in model["configurations"][0]["targets"]:
    target = json.load(open(os.path.join(reply, t["jsonFile"])))
    for a in target.get("artifacts", []):
        by_file[os.path.realpath(os.path.join(build, a["path"]))] = target["name"]
# The tests' commands as CMake wrote them (ctest's own listing leaves out a command whose
# executable is not built yet).
tests = {t["name"] for t in json.load(open(os.path.join(build, "conformance-tests.json")))["tests"]}
named = set()
for testfile in glob.glob(os.path.join(build, "**/CTestTestfile.cmake"), recursive=True):
    for name, args in re.findall(r"^add_test\(\[=\[(.*?)\]=\] (.*)\)$", open(testfile).read(), re.M):
        if name not in tests:
            continue
        for path in re.findall(r"/[^ =|;\"]+", args):
            named.add(os.path.realpath(path))
            if path.endswith(".txt") and os.path.isfile(path):
                for line in open(path):
                    named.update(os.path.realpath(p) for p in re.findall(r"/[^ =|;\n]+", line))
for name in sorted({by_file[f] for f in named if f in by_file}):
    print(name)
EOF
)
echo "building ${#targets[@]} targets: ${targets[*]}"
cmake --build "$B" -j "$JOBS" --target "${targets[@]}"

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
