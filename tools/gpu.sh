#!/usr/bin/env bash
# Every job on a GPU machine that has no package registry (the lent H100/H200), through one
# build: libdlfuse, the CLI, the CUDA and OpenCL plugins and the bench targets (no oneDNN).
#
#   bash tools/gpu.sh JOB...        e.g. bash tools/gpu.sh main conform bench
#
# Jobs (each logs to $LOGS/<job>/, summary lines to $LOGS/summary.txt):
#   main           dlfuse list + run both ops fwd+bwd on every device and dtype (the README's main job)
#   conform[=N]    the hardened conformance suite N times (default 1), each with a new seed, on
#                  the CUDA plugin (also with its small forms off: DLFUSE_CUDA_SMALL_GEMM=0
#                  DLFUSE_CUDA_SMALL_BACKWARD=0) and the OpenCL plugin
#                  (every device: NVIDIA OpenCL, PoCL), plus forced float16 on the OpenCL GPU
#   soak[=N]       tools/soak.sh: the commit-seed sweep (64 cases per kernel and dtype) at N seeds
#                  (default 200) from $SOAK_BASE (else drawn) on the CUDA plugin and on the OpenCL
#                  plugin's NVIDIA device ($SOAK_PLUGINS, default "cuda opencl"), $SOAK_JOBS
#                  seeds at a time (default 16), each plugin's seeds started within
#                  $SOAK_SECONDS; SOAK_MPS=1 runs them under MPS (a fault there fails every
#                  seed then running: the failing CUDA seeds then run again alone, in order,
#                  until one fails by itself). The counts go to docs/reliability.md.
#   coverage       line and branch coverage of the CUDA plugin's and the OpenCL plugin's host code
#                  under `conform` (default seed, then the CUDA small forms off, as job conform),
#                  from a second build with gcc --coverage; gcovr installed, or carried in .whl/ (gcovr,
#                  colorlog) beside python3's jinja2, lxml and pygments
#   grid           the conformance grid of GEMM shapes with rows not 16-byte aligned (--grid) on
#                  the CUDA plugin, every matmul op and dtype, one process each
#   memcheck       compute-sanitizer memcheck over the CUDA plugin's bfloat16 conformance and its
#                  float32 cases of 2^26 elements or more (--large)
#   cuda-checks    the CUDA plugin as built holds device code for every listed architecture, is
#                  listed available, passes the large-reduction and fault tests (plugins/cuda/tests),
#                  the latter also under compute-sanitizer's leak check
#   bench[=ARGS]   bench/run.py: every plugin against every peer (cuBLASLt, PyTorch on the GPU),
#                  ceilings, dispatch; results.json and the markdown tables of
#                  docs/performance.md (tables.md) in $LOGS/bench; ARGS are run.py's options, e.g.
#                  bench="--quick --plugins cuda --ops matmul_add_relu"
#   python[=PARTS] bindings/python/tools/gpu_job.sh over this build; PARTS of tests (pytest with
#                  CUDA required, CUDA graphs), bench (call overhead), dlrm, ddp (default: all)
#   ab[=ARGS]      before/after in one run, for a change to a GPU plugin: the CUDA and OpenCL
#                  plugins built from the source tree $AB_BASE (e.g. `mkdir .ab-base && git archive
#                  REV | tar -x -C .ab-base`, carried) against this tree's, swapped in turn under
#                  the same driver, libdlfuse and Python ($AB_ROUNDS rounds, default 1, base first
#                  in odd rounds and second in even ones): bench/run.py ARGS and the Python call
#                  overhead (torch, CUDA) over each; bench/compare.py prints new/base per row
#   jax            dlfuse.jax on CUDA: test_jax.py with CUDA required (jit, grad, vmap, the 4-layer
#                  MLP, the handlers beside XLA command buffers), examples/jax_mlp.py trained 300
#                  steps against jax.numpy, bench/jax_bench.py (per call and MLP step vs XLA)
#   webgpu         the WebGPU plugin on the NVIDIA Vulkan driver: carried Vulkan loader (.gl/*.deb)
#                  and wgpu wheel (.whl/wgpu-*.whl) unpacked, the plugin built, its conformance
#                  (random seed, sweep 64) and dlfuse_webgpu_perf (matmul vs cuBLAS, add_mul vs copy)
#   wheel          the Python wheel as a user here builds it: a fresh venv that sees the machine's
#                  torch (--system-site-packages), `pip install --no-build-isolation ./bindings/python`
#                  in it (build requirements from a carried .whl/ folder where there is one), then
#                  from outside the tree with no DLFUSE_* variable set every op forward and
#                  backward on CUDA tensors against float64: the package calls and dlfuse.torch's
#                  C++ operators (bindings/python/tools/wheel_ops.py)
#   bindings       bench/python_overhead.py: the package's per-call cost (torch CUDA, NumPy on
#                  the no-op plugin); tables in summary.txt, JSON in $LOGS/bindings
#   mlp[=ARGS]     bench/mlp_step.py: DLRM-v2's dense-MLP training step, dlfuse.torch against PyTorch,
#                  eager, CUDA graphs, torch.compile; ARGS are its options, e.g. mlp="--no-compile"
# When $OUT is set (the device tool), everything is packed into $OUT/gpu-logs.tgz at the end.
#
# Inputs are found the same way for every job (tools/gpu_env.sh): the DLPack header from
# python3's apache-tvm-ffi or a carried .whl/apache_tvm_ffi-*.whl; OpenCL headers and loader
# from the system or the CUDA toolkit; an NVIDIA ICD that no vendors file names is registered
# for this run only. CUDA_ARCHS overrides the CUDA architectures (default: the project's).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOGS=${LOGS:-/tmp/dlfuse-gpu-logs}
B=${BUILD_DIR:-/tmp/dlfuse-gpu-build}
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
source tools/gpu_env.sh
summary() { echo "$*" | tee -a "$LOGS/summary.txt"; }
pack() { [ -z "${OUT:-}" ] || { tar -C "$LOGS" -czf "$OUT/gpu-logs.tgz" . && cp "$LOGS/summary.txt" "$OUT/"; }; }

job_main() {
  "$CLI" list && "$CLI" run all
}

job_conform() {
  # Each round a new random seed (printed in its log) and a longer sweep, plus the stale-scratch
  # regression cases 64 times; a failing row is reproduced with
  #   dlfuse conform <plugin> --seed <S> --sweep 64 --op <op> --case <case>
  local n=${1:-1} rc=0 r p
  export POCL_CACHE_DIR=$B/pocl-cache
  for r in $(seq 1 "$n"); do
    for p in cuda opencl; do
      # --large (cases of 2^26 elements or more) on CUDA only: the OpenCL plugin also lists PoCL's CPU.
      timeout 600 "$CLI" conform "$PLUGINS/libdlfuse_$p.so" --seed random --sweep 64 $([ "$p" = cuda ] && echo --large) \
        >"$J/$p.$r.log" 2>&1 &&
        "$CLI" conform "$PLUGINS/libdlfuse_$p.so" --op add_mul_activation_backward --case rows_chunks --repeat 64 \
          --sweep 0 --threads 0 --no-bad-inputs >>"$J/$p.$r.log" 2>&1 ||
        { rc=1; summary "conform $p round $r ($(grep -m1 -o 'seed [0-9]*' "$J/$p.$r.log")) FAILED"; }
    done
    # The conformance cases are small: most of the CUDA plugin's GEMMs and elementwise
    # backwards take its small forms, so the cuBLASLt path and the partial-sum kernels get a
    # run of their own.
    DLFUSE_CUDA_SMALL_GEMM=0 DLFUSE_CUDA_SMALL_BACKWARD=0 timeout 600 "$CLI" conform "$PLUGINS/libdlfuse_cuda.so" \
      --seed random >"$J/cuda_cublaslt.$r.log" 2>&1 || { rc=1; summary "conform cuda (small forms off) round $r FAILED"; }
    # NVIDIA does not report cl_khr_fp16; the kernels use only core vload_half/vstore_half.
    DLFUSE_OPENCL_DEVICE=0 DLFUSE_OPENCL_FP16=force timeout 600 "$CLI" conform "$PLUGINS/libdlfuse_opencl.so" \
      --dtype float16 --seed random >"$J/opencl0_f16.$r.log" 2>&1 || { rc=1; summary "conform opencl f16 round $r FAILED"; }
  done
  for f in "$J"/*.1.log; do summary "$(basename "$f" .1.log) round 1: $(grep -hE 'passed, [0-9]+ failed' "$f" | head -1)"; done
  summary "conform: $n rounds each, $(cat "$J"/*.log | grep -cE '^FAIL') failing rows"
  return $rc
}

# MPS for the soak: its processes then share the GPU instead of taking time slices of it,
# which a sweep's many small synchronized calls wait out (SOAK_MPS=1; started here, stopped
# after, its pipes under the build folder).
mps_start() {
  [ "${SOAK_MPS:-0}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null || return 0
  export CUDA_MPS_PIPE_DIRECTORY=$B/mps-pipe CUDA_MPS_LOG_DIRECTORY=$B/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    summary "soak: MPS started"
  else
    summary "soak: MPS did not start; without it"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  fi
}
mps_stop() { [ -z "${CUDA_MPS_PIPE_DIRECTORY:-}" ] || echo quit | nvidia-cuda-mps-control; }

job_soak() {
  local n=${1:-200} rc=0 p s mps
  export POCL_CACHE_DIR=$B/pocl-cache
  mps_start
  mps=${CUDA_MPS_PIPE_DIRECTORY:-}
  for p in ${SOAK_PLUGINS:-cuda opencl}; do
    if [ "$p" = opencl ]; then
      DLFUSE_OPENCL_DEVICE=gpu bash tools/soak.sh "$CLI" "$PLUGINS/libdlfuse_opencl.so" "$n" "${SOAK_JOBS:-16}" \
        >"$J/$p.log" 2>&1 || rc=1
    else
      bash tools/soak.sh "$CLI" "$PLUGINS/libdlfuse_$p.so" "$n" "${SOAK_JOBS:-16}" >"$J/$p.log" 2>&1 || rc=1
    fi
    summary "soak $p: $(tail -1 "$J/$p.log")"
  done
  mps_stop
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  # Under MPS a fault in one process fails every process sharing the GPU with it: the
  # failing CUDA seeds run again one at a time without MPS, in order, until one fails on its
  # own (the culprit), whose log is kept and whose first failing row is summarized. The
  # first 16 only: the culprit was among those then running, and a seed alone takes ~20 s.
  if [ -n "$mps" ] && [ -f "$J/cuda.log" ]; then
    for s in $(grep -oE -- '--seed [0-9]+' "$J/cuda.log" | awk '{print $2}' | head -16); do
      "$CLI" conform "$PLUGINS/libdlfuse_cuda.so" --seed "$s" --sweep 64 --no-bad-inputs --case sweep_ \
        >"$J/alone_$s.log" 2>&1 && { rm "$J/alone_$s.log"; summary "soak cuda: seed $s passes alone"; continue; }
      summary "soak cuda: seed $s fails alone: $(grep -m1 -A1 '^FAIL' "$J/alone_$s.log" | tr -s ' ' | tr '\n' ' ')"
      break
    done
  fi
  return $rc
}

job_coverage() {
  local c=$B-coverage v=$B-gcovr rc=0 gcovr=gcovr
  # Atomic counters: the plugins run host code from many threads (conform's threads stage).
  local cov="--coverage -fprofile-update=atomic"
  GPU_CMAKE_ARGS=("-DCMAKE_C_FLAGS=$cov" "-DCMAKE_CXX_FLAGS=$cov" "-DCMAKE_CUDA_FLAGS=-Xcompiler=--coverage,-fprofile-update=atomic"
                  -DCMAKE_SHARED_LINKER_FLAGS=--coverage -DCMAKE_MODULE_LINKER_FLAGS=--coverage
                  -DCMAKE_EXE_LINKER_FLAGS=--coverage)
  gpu_build "$c" "$ROOT" dlfuse_cli dlfuse_cuda dlfuse_opencl >"$J/build.log" 2>&1 || { tail -20 "$J/build.log"; return 1; }
  GPU_CMAKE_ARGS=()
  if ! command -v gcovr >/dev/null; then
    # The carried gcovr and colorlog beside python3's own jinja2, lxml and pygments (a venv
    # would not see them: the GPU machine's python3 is itself a venv).
    python3 -m pip install -q --no-index --no-deps --target "$v" "$ROOT"/.whl/gcovr-*.whl "$ROOT"/.whl/colorlog-*.whl ||
      return 1
    gcovr="env PYTHONPATH=$v python3 -m gcovr"
  fi
  local p=$c/lib/dlfuse/plugins
  export POCL_CACHE_DIR=$B/pocl-cache
  "$c/bin/dlfuse" conform "$p/libdlfuse_cuda.so" >"$J/cuda.log" 2>&1 || rc=1
  DLFUSE_CUDA_SMALL_GEMM=0 DLFUSE_CUDA_SMALL_BACKWARD=0 "$c/bin/dlfuse" conform "$p/libdlfuse_cuda.so" \
    >"$J/cuda_cublaslt.log" 2>&1 || rc=1
  DLFUSE_OPENCL_DEVICE=gpu "$c/bin/dlfuse" conform "$p/libdlfuse_opencl.so" >"$J/opencl.log" 2>&1 || rc=1
  # Host code only: nvcc's objects of kernels/*.cu name temporary stub sources.
  find "$c/plugins/cuda" \( -name '*.cu.gcda' -o -name '*.cu.gcno' \) -delete
  local name filter obj
  for name in cuda opencl common; do
    case $name in
      cuda) filter=plugins/cuda/src/ obj=$c/plugins/cuda ;;
      opencl) filter=plugins/opencl/src/ obj=$c/plugins/opencl ;;
      common) filter=plugins/common/src/ obj=$c/plugins/opencl ;;
    esac
    $gcovr -r "$ROOT" --filter "$filter" --exclude-throw-branches --exclude-unreachable-branches -j "$(nproc)" \
      --json-summary "$J/$name.json" --html-details "$J/$name.html" "$obj" >/dev/null || rc=1
    summary "coverage $name: $(python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(f\"lines {s['line_percent']:.1f}% ({s['line_covered']}/{s['line_total']}), branches {s['branch_percent']:.1f}% ({s['branch_covered']}/{s['branch_total']})\")" "$J/$name.json")"
  done
  return $rc
}

job_grid() {
  # The padded-copy GEMM paths over many shapes; the float64 reference dominates, so the
  # (op, dtype) pairs run side by side.
  local op dt rc=0 pids=()
  for op in matmul_add_relu matmul_add_activation matmul_add_residual; do
    for op in "$op" "${op}_backward"; do
      for dt in float32 float16 bfloat16; do
        timeout 580 "$CLI" conform "$PLUGINS/libdlfuse_cuda.so" --op "$op" --dtype "$dt" --grid --case grid_ \
          --sweep 0 --threads 0 --no-bad-inputs >"$J/$op.$dt.log" 2>&1 &
        pids+=($!)
      done
    done
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  for f in "$J"/matmul_*.log; do summary "grid $(basename "$f" .log): $(grep -hE 'passed, [0-9]+ failed' "$f" | head -1)"; done
  return $rc
}

job_memcheck() {
  timeout 500 compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 "$CLI" conform \
    "$PLUGINS/libdlfuse_cuda.so" --dtype bfloat16 >"$J/memcheck.txt" 2>&1
  local rc=$?
  # The large cases (the flat backward and its group reduction), once each, float32.
  timeout 300 compute-sanitizer --tool memcheck --print-limit 20 --error-exitcode 1 "$CLI" conform \
    "$PLUGINS/libdlfuse_cuda.so" --dtype float32 --large --case large --repeat 1 --sweep 0 --threads 0 \
    --no-bad-inputs >"$J/memcheck_large.txt" 2>&1 || rc=1
  grep -E "ERROR SUMMARY|passed, " "$J/memcheck.txt" "$J/memcheck_large.txt" | tee -a "$LOGS/summary.txt"
  return $rc
}

job_cuda-checks() {
  local p=$PLUGINS/libdlfuse_cuda.so archs lister rc=0
  archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$B/CMakeCache.txt")
  lister=$(command -v cuobjdump || echo "python3;$ROOT/plugins/cuda/tests/list_device_code.py")
  nvidia-smi --query-gpu=index,name,compute_cap --format=csv
  cmake "-DLISTER=$lister" -DPLUGIN="$p" "-DARCHS=$archs" -P plugins/cuda/tests/device_code.cmake || rc=1
  (unset DLFUSE_PLUGIN_PATH DLFUSE_PREFER; "$CLI" list) | grep -Eq "^cuda +[^ ]+ +available +cuda x[1-9]" ||
    { echo "cuda is not listed available"; rc=1; }
  g++ -std=c++17 -O1 -g plugins/cuda/tests/large_reduce.cpp -o "$B/large_reduce" -Iabi/include -I"$DLINC" \
    -I"$CUDA_HOME/include" -L"$B/lib" -ldlfuse -L"$CUDA_HOME/lib64" -lcudart -Wl,-rpath,"$B/lib:$CUDA_HOME/lib64" &&
    "$B/large_reduce" "$p" || rc=1
  g++ -std=c++17 -O1 -g plugins/cuda/tests/faults.cpp -o "$B/faults" -Iabi/include -I"$DLINC" -I"$CUDA_HOME/include" \
    -L"$B/lib" -ldlfuse -L"$CUDA_HOME/lib64" -lcudart -Wl,-rpath,"$B/lib:$CUDA_HOME/lib64" && "$B/faults" "$p" || rc=1
  # Leaks and bad accesses in the fault paths (no memory exhaustion under the sanitizer).
  compute-sanitizer --tool memcheck --leak-check full --report-api-errors no --error-exitcode 1 "$B/faults" "$p" \
    --no-exhaust >"$J/faults_sanitizer.log" 2>&1 || { echo "faults under compute-sanitizer FAILED"; rc=1; }
  return $rc
}

job_bench() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
  DLFUSE_OPENCL_DEVICE=${DLFUSE_OPENCL_DEVICE:-gpu} python3 bench/run.py --build "$B" --out "$J" --no-build --no-plot "$@" \
    2>"$J/progress.log"
}

job_mlp() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
  env -u DLFUSE_PLUGIN_PATH -u DLFUSE_PREFER DLFUSE_LIBRARY="$B/lib/libdlfuse.so" DLFUSE_EXT_DIR="$B/python/dlfuse" \
    python3 bench/mlp_step.py --json "$J/mlp_step.json" "$@" 2>"$J/progress.log" | tee "$J/table.md"
}

job_ab() {
  [ -d "${AB_BASE:-}" ] || { echo "ab: AB_BASE must name the baseline's source tree"; return 2; }
  local base=$B-ab-base keep=$B-ab-new r v p order rc=0
  gpu_build "$base" "$(realpath "$AB_BASE")" dlfuse_cuda dlfuse_opencl >"$J/base_build.log" 2>&1 ||
    { tail -20 "$J/base_build.log"; return 1; }
  cmake --build "$B" --target dlfuse_pyext >"$J/new_build.log" 2>&1 || { tail -20 "$J/new_build.log"; return 1; }
  mkdir -p "$keep"
  for p in cuda opencl; do cp "$PLUGINS/libdlfuse_$p.so" "$keep/"; done
  use() { for p in cuda opencl; do cp "$1/libdlfuse_$p.so" "$PLUGINS/"; done; }
  for r in $(seq 1 "${AB_ROUNDS:-1}"); do
    order="base new"
    ((r % 2 == 0)) && order="new base"  # alternate: on the lent machines order alone moves figures
    for v in $order; do
      if [ $v = base ]; then use "$base/lib/dlfuse/plugins"; else use "$keep"; fi
      echo "== round $r: $v"
      DLFUSE_LIBRARY=$B/lib/libdlfuse.so DLFUSE_EXT_DIR=$B/python/dlfuse python3 bench/python_overhead.py \
        --framework torch --device cuda --json "$J/overhead_$v.$r.json" >"$J/overhead_$v.$r.log" 2>&1 || rc=1
      DLFUSE_OPENCL_DEVICE=${DLFUSE_OPENCL_DEVICE:-gpu} python3 bench/run.py --build "$B" --out "$J/bench_$v.$r" \
        --no-build --no-plot --no-dispatch "$@" >"$J/bench_$v.$r.log" 2>&1 || rc=1
    done
  done
  use "$keep"
  python3 bench/compare.py "$J"/bench_base.*/results.json -- "$J"/bench_new.*/results.json | tee "$J/compare.txt"
  python3 bench/compare.py "$J"/overhead_base.*.json -- "$J"/overhead_new.*.json | tee "$J/compare_overhead.txt"
  return $rc
}

job_python() {
  OUT=$J bash bindings/python/tools/gpu_job.sh "$B" "${1:-}"
}

job_bindings() (  # a subshell: its environment stays out of the jobs after it
  local rc=0 noop=$B/bench/plugins/libdlfuse_noop.so
  export DLFUSE_LIBRARY=$B/lib/libdlfuse.so DLFUSE_EXT_DIR=$B/python/dlfuse
  unset DLFUSE_PLUGIN_PATH DLFUSE_PREFER
  # the no-op plugin is a bench target: built by gpu_build
  [ -f "$noop" ] || cmake --build "$B" --target dlfuse_noop -j"$(nproc)" >/dev/null
  python3 bench/python_overhead.py --framework torch --device cuda --json "$J/overhead_torch_cuda.json" \
    >"$J/overhead_torch_cuda.log" 2>&1 || rc=1
  python3 bench/python_overhead.py --framework numpy --noop "$noop" --json "$J/overhead_numpy_noop.json" \
    >"$J/overhead_numpy_noop.log" 2>&1 || rc=1
  grep -hE "^(dlfuse|noop|torch|framework)" "$J"/overhead_*.log | while read -r l; do summary "overhead: $l"; done
  return $rc
)

job_jax() (  # a subshell: its environment stays out of the jobs after it
  # gpu_build configured the XLA FFI handlers against this python3's jaxlib and built them
  local rc=0 lib=$B/python/dlfuse/libdlfuse_jax.so
  [ -f "$lib" ] || { summary "jax: $lib was not built (python3 cannot import jax?)"; return 3; }
  export DLFUSE_LIBRARY=$B/lib/libdlfuse.so DLFUSE_EXT_DIR=$B/python/dlfuse XLA_PYTHON_CLIENT_PREALLOCATE=false \
    PYTHONPATH=$ROOT/bindings/python/src${PYTHONPATH:+:$PYTHONPATH}
  unset DLFUSE_PLUGIN_PATH DLFUSE_PREFER
  python3 -c "import jax, dlfuse; print('jax', jax.__version__, jax.devices()); print(dlfuse.plugins())"
  DLFUSE_REQUIRE_CUDA=1 timeout 1200 python3 -m pytest -q -p no:cacheprovider -rs bindings/python/tests/test_jax.py \
    >"$J/pytest.log" 2>&1 || rc=1
  summary "jax pytest: $(tail -1 "$J/pytest.log")"
  timeout 600 python3 bindings/python/examples/jax_mlp.py --device cuda --steps 300 >"$J/jax_mlp.log" 2>&1 || rc=1
  summary "jax mlp: $(tail -2 "$J/jax_mlp.log" | tr '\n' ' ')"
  timeout 1200 python3 bench/jax_bench.py --device cuda --json "$J/jax_bench.json" >"$J/jax_bench.log" 2>&1 || rc=1
  cat "$J/jax_bench.log"
  return $rc
)

job_webgpu() {
  # Vulkan loader and GL libraries the NVIDIA driver's Vulkan ICD needs (carried .debs).
  local f wheel res icd rc=0
  for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done
  ldconfig
  if ! ls /usr/share/vulkan/icd.d/*nvidia*.json /etc/vulkan/icd.d/*nvidia*.json >/dev/null 2>&1; then
    icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    [ -f "$icd" ] || icd=$(ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json 2>/dev/null | head -1)
    export VK_DRIVER_FILES=$icd
    echo "VK_DRIVER_FILES=$icd"
  fi
  # wgpu-native's library and headers from the carried wheel (no registry here).
  wheel=$(ls .whl/wgpu-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || { echo "webgpu: carry .whl/wgpu-*.whl"; return 2; }
  res=$B/wgpu-wheel
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$wheel" "$res" || return 2
  cmake -S "$ROOT" -B "$B" -DDLFUSE_WITH_WEBGPU=ON -DDLFUSE_WGPU_INCLUDE_DIR="$res/wgpu/resources" >"$J/configure.log" 2>&1 &&
    cmake --build "$B" -j "$(nproc)" --target dlfuse_webgpu dlfuse_webgpu_perf >"$J/build.log" 2>&1 ||
    { tail -30 "$J/configure.log" "$J/build.log"; return 2; }
  DLFUSE_WEBGPU_VERBOSE=1 "$CLI" list 2>&1 | grep -A9 "^webgpu" | tee "$J/list.txt"
  grep -Eq "^webgpu +[^ ]+ +available" "$J/list.txt" || { summary "webgpu: plugin not available"; return 1; }
  DLFUSE_WEBGPU_ADAPTER=${DLFUSE_WEBGPU_ADAPTER:-gpu} timeout 900 "$CLI" conform "$PLUGINS/libdlfuse_webgpu.so" \
    --seed random --sweep 64 >"$J/conform.log" 2>&1 || rc=1
  summary "webgpu conform: $(grep -hE 'passed, [0-9]+ failed' "$J/conform.log" | tail -1) ($(grep -m1 -o 'seed [0-9]*' "$J/conform.log"))"
  DLFUSE_WEBGPU_ADAPTER=${DLFUSE_WEBGPU_ADAPTER:-gpu} timeout 600 "$B/bin/dlfuse_webgpu_perf" 2>&1 | tee "$J/perf.txt"
  ((${PIPESTATUS[0]} == 0)) || rc=1
  grep RATIO "$J/perf.txt" | while read -r l; do summary "webgpu $l"; done
  # Tuning, quick mode: GEMM tiles (DLFUSE_WEBGPU_GEMM_TILE=BM,BN,BK,TM,TN; WEBGPU_TILES lists
  # them) and vec4s per invocation of the elementwise forward (DLFUSE_WEBGPU_PW_VEC4;
  # WEBGPU_PW_VEC4 lists them).
  for t in ${WEBGPU_TILES:-128,128,8,8,8 128,128,16,8,8 64,128,8,8,8 128,64,8,8,8}; do
    echo "== tile $t"
    DLFUSE_WEBGPU_GEMM_TILE=$t DLFUSE_WEBGPU_ADAPTER=${DLFUSE_WEBGPU_ADAPTER:-gpu} timeout 300 \
      "$B/bin/dlfuse_webgpu_perf" 8192 4096 4096 1024 1024 quick 2>&1 | grep -E "matmul|RATIO matmul"
  done | tee "$J/tiles.txt"
  for v in ${WEBGPU_PW_VEC4:-1 2 4 8}; do
    echo "== vec4s per invocation $v"
    DLFUSE_WEBGPU_PW_VEC4=$v DLFUSE_WEBGPU_ADAPTER=${DLFUSE_WEBGPU_ADAPTER:-gpu} timeout 300 \
      "$B/bin/dlfuse_webgpu_perf" 256 256 256 8192 8192 quick 2>&1 | grep -E "add_mul|copy"
  done | tee "$J/pw_vec4.txt"
  return $rc
}

job_wheel() {
  local v=$B-wheel-venv links=(--no-index) pip
  [ -d "$ROOT/.whl" ] && links+=(--find-links "$ROOT/.whl")
  rm -rf "$v"
  if python3 -m venv --system-site-packages "$v"; then
    pip=("$v/bin/python" -m pip)
  else  # no ensurepip here: the system's pip, pointed at the venv
    python3 -m venv --system-site-packages --without-pip "$v" || return 1
    pip=(python3 -m pip --python "$v/bin/python")
  fi
  # Where python3 is itself a venv (the GPU machine's torch lives in one), --system-site-packages
  # reaches only the base interpreter's packages: a .pth adds python3's own, torch and NumPy.
  python3 -c "import sys, site; sys.exit(sys.prefix == sys.base_prefix)" &&
    python3 -c "import site; print('\n'.join(site.getsitepackages()))" \
      >"$("$v/bin/python" -c "import sysconfig; print(sysconfig.get_path('purelib'))")/machine-site.pth"
  if [ -d "$ROOT/.whl" ]; then
    "${pip[@]}" install "${links[@]}" "scikit-build-core>=1.0" "apache-tvm-ffi>=0.1" || return 1
    ! ls "$ROOT"/.whl/nvidia_cutlass-*.whl >/dev/null 2>&1 || "${pip[@]}" install --no-deps "${links[@]}" nvidia-cutlass || return 1
  fi
  # CUDA_ARCHS narrows the device code here too (the wheel's default is the cuda preset's list).
  [ -z "${CUDA_ARCHS:-}" ] || export SKBUILD_CMAKE_DEFINE="CMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS"
  # Without build isolation the build sees torch, so the wheel holds the C++ operators.
  (cd "$ROOT" && env -u DLFUSE_LIBRARY -u DLFUSE_EXT_DIR -u DLFUSE_PLUGIN_PATH -u DLFUSE_PREFER \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "${pip[@]}" install -v --no-build-isolation "${links[@]}" \
    ./bindings/python) >"$J/pip.log" 2>&1 ||
    { tail -40 "$J/pip.log"; return 1; }
  grep -E "dlfuse wheel:|CUDA architectures|C\+\+ PyTorch operators" "$J/pip.log"
  (cd "$J" && env -u DLFUSE_LIBRARY -u DLFUSE_EXT_DIR -u DLFUSE_PLUGIN_PATH -u DLFUSE_PREFER \
    "$v/bin/python" "$ROOT/bindings/python/tools/wheel_ops.py" cuda --cpp-ops)
}

rc=0
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)  jobs: $*"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
} | tee -a "$LOGS/summary.txt"
t0=$(date +%s)
if gpu_build "$B" >"$LOGS/build.log" 2>&1; then
  summary "build: $(($(date +%s) - t0)) s"
  for arg in "$@"; do
    name=${arg%%=*}
    val=""; [ "$name" != "$arg" ] && val=${arg#*=}
    if ! declare -F "job_$name" >/dev/null; then summary "unknown job: $name"; rc=2; continue; fi
    J=$LOGS/$name
    mkdir -p "$J"
    t1=$(date +%s)
    "job_$name" $val >"$J/out.log" 2>&1
    jrc=$?
    ((jrc == 0)) || rc=1
    summary "job $name: exit $jrc, $(($(date +%s) - t1)) s"
    pack  # after every job: a run cut off by a time limit still leaves what it did
  done
else
  summary "build FAILED"; tail -40 "$LOGS/build.log"; rc=1
fi
pack
exit $rc
