#!/usr/bin/env bash
# Builds onednn_versions.cpp twice: against Debian's oneDNN 2.6.3 (libdnnl-dev: /usr/include,
# -ldnnl) and against oneDNN 3.2 from PyPI's onednn-devel-cpu-gomp / onednn-cpu-gomp
# 2023.2.0 wheels (GNU OpenMP build; headers and libdnnl.so.3 unpacked from the wheels,
# linked with an rpath). Standalone: not part of the CMake build or of CI.
#
#   bench/peers/onednn_versions/build.sh [OUT_DIR]     # default build/onednn_versions
#
# ONEDNN3_DIR (default /tmp/onednn3): where the wheels are downloaded and unpacked.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${1:-$root/build/onednn_versions}"
o3="${ONEDNN3_DIR:-/tmp/onednn3}"
mkdir -p "$out" "$o3"

# The wheels (zip files). The sha256 sums are those of the files PyPI served on 2026-11-24.
whl_lib=onednn_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl
whl_dev=onednn_devel_cpu_gomp-2023.2.0-py2.py3-none-manylinux1_x86_64.whl
if [[ ! -f "$o3/$whl_lib" || ! -f "$o3/$whl_dev" ]]; then
  python3 -m pip download onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 --no-deps -d "$o3"
fi
(cd "$o3" && sha256sum -c - <<SUMS
2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb  $whl_lib
9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284  $whl_dev
SUMS
)
inc3="$o3/x/onednn_devel_cpu_gomp-2023.2.0.data/data/include"
lib3="$o3/x/onednn_cpu_gomp-2023.2.0.data/data/lib"
if [[ ! -f "$inc3/oneapi/dnnl/dnnl.hpp" || ! -f "$lib3/libdnnl.so.3" ]]; then
  mkdir -p "$o3/x"
  python3 -m zipfile -e "$o3/$whl_lib" "$o3/x"
  python3 -m zipfile -e "$o3/$whl_dev" "$o3/x"
fi

[[ -f /usr/include/oneapi/dnnl/dnnl.hpp ]] || { echo "Debian's libdnnl-dev is not installed" >&2; exit 1; }
flags=(-std=c++17 -O2 -Wall -Wextra -fopenmp)
src="$here/onednn_versions.cpp"
set -x
# 2.6.3: Debian's headers and library only (-nostdinc++ is not needed: the 3.2 headers are
# not on this command's include path).
g++ "${flags[@]}" "$src" -o "$out/bench_dnnl26" -ldnnl
# 3.2: the wheel's headers first, its libdnnl.so.3 by full path, found at run time by rpath.
g++ "${flags[@]}" -I"$inc3" "$src" -o "$out/bench_dnnl32" "$lib3/libdnnl.so.3" -Wl,-rpath,"$lib3"
{ set +x; } 2>/dev/null
for b in bench_dnnl26 bench_dnnl32; do
  echo "$b: $(ldd "$out/$b" | grep -E 'dnnl|gomp' | awk '{print $1 " => " $3}' | tr '\n' ' ')"
done
