#!/usr/bin/env bash
# The Python binding's job on a GPU machine without a package registry (torch, CuPy, JAX
# preinstalled), run by `tools/gpu.sh python[=PARTS]` over its build folder (configured
# there); builds what is needed: libdlfuse, the CUDA plugin, the no-op plugin and
# dlfuse._ext. PARTS (comma-separated; default all): tests, bench, dlrm, ddp. Logs to $OUT:
#   pytest.log               every Python test, CUDA required (DLFUSE_REQUIRE_CUDA=1: the
#                            CUDA cases fail instead of skipping), CUDA graph capture and
#                            replay, torch.compile(mode="reduce-overhead"), DDP on every GPU
#   pytest_pyops.log         the torch tests again with DLFUSE_TORCH_OPS=python
#   overhead_*.json/.log     bench/python_overhead.py: torch CUDA, CuPy, NumPy + no-op plugin
#   dlrm_*.log               the DLRM MLP: dlfuse vs plain PyTorch, eager and torch.compile,
#                            batch 256 and 4096 (times printed in each log); batch 256 also
#                            with dlfuse.torch's Python operators (dlrm_*_pyops_*)
#   ddp.log                  examples/dlrm_ddp.py under torchrun on every visible GPU
#     bash bindings/python/tools/gpu_job.sh BUILD_DIR [PARTS]
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
B=$(realpath -m "${1:-build/cuda}")
PARTS=,${2:-tests,bench,dlrm,ddp},
want() { [[ $PARTS == *",$1,"* ]]; }
OUT=${OUT:-/tmp/dlfuse-py-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_job.log") 2>&1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
date -u; nvidia-smi -L || true
python3 -c "import sys, numpy, torch; print('python', sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count())"
python3 -c "import cupy; print('cupy', cupy.__version__)" || true
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" || true

[ -f "$B/CMakeCache.txt" ] || { echo "$B is not a configured build: run this through tools/gpu.sh python"; exit 3; }
grep -E "^DLPACK_INCLUDE_DIR" "$B/CMakeCache.txt"
t0=$(date +%s)
targets="dlfuse dlfuse_cuda dlfuse_pyext dlfuse_noop"
# the C++ torch operators: configured where python3 imports torch (bindings/python/CMakeLists.txt)
cmake --build "$B" --target help | grep -q dlfuse_torch_ops && targets+=" dlfuse_torch_ops"
# the test plugin with an op of its own (test_adding_an_op.py, test_torch_derived.py), in builds with tests
cmake --build "$B" --target help | grep -q dlfuse_testref_ops && targets+=" dlfuse_testref_ops"
cmake --build "$B" -j "$(nproc)" --target $targets >>"$OUT/cmake.log" 2>&1 \
  || { tail -30 "$OUT/cmake.log"; exit 3; }
echo "build: $(( $(date +%s) - t0 )) s"
export DLFUSE_LIBRARY=$B/lib/libdlfuse.so DLFUSE_EXT_DIR=$B/python/dlfuse
[ -d "$B/tests/plugins" ] && export DLFUSE_TEST_PLUGIN_DIR=$B/tests/plugins
unset DLFUSE_PLUGIN_PATH DLFUSE_PREFER
export PYTHONPATH=$ROOT/bindings/python/src${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import torch, dlfuse; from dlfuse import _ext; print('exchange API of torch.Tensor:', _ext.exchange_api(torch.Tensor)); print(dlfuse.plugins())"
python3 -c "import dlfuse.torch as d; print('dlfuse.torch operators:', 'C++' if d.CPP_OPS else 'Python: ' + str(d._torch_cpp.why_not))"
# the tests then require the C++ operators where they were built
[[ $targets == *dlfuse_torch_ops* ]] && export DLFUSE_REQUIRE_TORCH_OPS=cpp

rc=0
step() {  # step NAME TIMEOUT CMD...: run, log to $OUT/NAME.log, show its tail
  local name=$1 t=$2; shift 2
  echo "== $name: $*"
  timeout "$t" "$@" >"$OUT/$name.log" 2>&1 || { echo "FAILED: $name (rc $?)"; rc=1; }
  tail -15 "$OUT/$name.log"
}

want tests && step pytest 540 env DLFUSE_REQUIRE_CUDA=1 python3 -m pytest -v -rs -p no:cacheprovider bindings/python/tests
# the torch tests again on dlfuse.torch's Python operators (the path without the C++ library)
want tests && step pytest_pyops 300 env DLFUSE_REQUIRE_CUDA=1 DLFUSE_TORCH_OPS=python DLFUSE_REQUIRE_TORCH_OPS= \
  python3 -m pytest -v -rs -p no:cacheprovider bindings/python/tests/test_torch.py bindings/python/tests/test_torch_abi11.py
NOOP=$B/bench/plugins/libdlfuse_noop.so
want bench && step overhead_torch 300 python3 bench/python_overhead.py --framework torch --device cuda \
  --json "$OUT/overhead_torch_cuda.json"
want bench && step overhead_numpy_noop 200 python3 bench/python_overhead.py --framework numpy --noop "$NOOP" \
  --json "$OUT/overhead_numpy_noop.json"
want bench && step overhead_cupy 200 python3 bench/python_overhead.py --framework cupy --device cuda \
  --json "$OUT/overhead_cupy_cuda.json"
want dlrm && for batch in 256 4096; do
  step "dlrm_eager_b$batch" 300 python3 bindings/python/examples/dlrm_mlp.py --device cuda \
    --steps 300 --batch "$batch"
  step "dlrm_compile_b$batch" 400 python3 bindings/python/examples/dlrm_mlp.py --device cuda \
    --steps 300 --batch "$batch" --compile
done
want dlrm && for mode in eager compile; do
  flag=""; [ $mode = compile ] && flag=--compile
  step "dlrm_${mode}_pyops_b256" 400 env DLFUSE_TORCH_OPS=python python3 bindings/python/examples/dlrm_mlp.py \
    --device cuda --steps 300 --batch 256 $flag
done
want ddp && step ddp 400 python3 -m torch.distributed.run --standalone --nproc_per_node=gpu \
  bindings/python/examples/dlrm_ddp.py --device cuda --steps 50
grep -h "^time:" "$OUT"/dlrm_*.log 2>/dev/null
echo "gpu_job rc=$rc"
exit $rc
