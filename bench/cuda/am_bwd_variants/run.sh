#!/usr/bin/env bash
# Build and run the add_mul_activation backward (from out) variant benchmark.
# Usage: bench/cuda/am_bwd_variants/run.sh [--reps N] [--warmup N] [--only SUBSTRING]
set -euo pipefail
cd "$(dirname "$0")"
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null 2>&1 || NVCC=/usr/local/cuda/bin/nvcc
"$NVCC" -O3 -arch=sm_90 -std=c++17 am_bwd_variants.cu -o am_bwd_variants
./am_bwd_variants "$@"
