"""NumPy (unfused) counterparts of bench_onednn.cpp's cases, float32, same shapes.

Prints `RESULT <case> numpy <median_ms> <min_ms> <reps>` lines, like the C++ program.
Usage: python3 numpy_bench.py [--quick] [--only SUBSTR] [--reps-scale X]
"""
import sys
import time

import numpy as np
from math import sqrt

try:
    from scipy.special import erf  # optional: a vectorized erf for gelu_erf
except ImportError:  # pragma: no cover
    erf = None


REPS_SCALE = float(sys.argv[sys.argv.index("--reps-scale") + 1]) if "--reps-scale" in sys.argv else 1.0


def measure(name, reps, fn, only):
    if only and only not in name:
        return
    reps = max(1, round(reps * REPS_SCALE))
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    ts.sort()
    print(f"RESULT {name} numpy {ts[len(ts) // 2]:.4f} {ts[0]:.4f} {reps}", flush=True)


def main():
    quick = "--quick" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    rng = np.random.default_rng(0)
    f32 = np.float32
    for M, K, N, reps in [(2048, 512, 256, 60), (4096, 1024, 1024, 15), (2048, 4096, 4096, 5)]:
        reps = 2 if quick else reps
        a = rng.uniform(-1, 1, (M, K)).astype(f32)
        b = rng.uniform(-1, 1, (K, N)).astype(f32)
        bias = rng.uniform(-1, 1, N).astype(f32)
        measure(f"matmul_add_relu_fwd_f32_{M}x{K}x{N}", reps, lambda: np.maximum(a @ b + bias, 0), only)
        if M * K * N <= 4096 * 1024 * 1024:
            out = np.maximum(a @ b + bias, 0)
            g = rng.uniform(-1, 1, (M, N)).astype(f32)

            def bwd():
                dz = np.where(out > 0, g, f32(0))
                return dz @ b.T, a.T @ dz, dz.sum(axis=0)

            measure(f"matmul_add_relu_bwd_f32_{M}x{K}x{N}", 2 if quick else max(3, reps // 2), bwd, only)
    m = f32(0.5)
    for M, N, reps in [(2048, 512, 200), (16384, 8192, 15)]:
        reps = 2 if quick else reps
        x = rng.uniform(-1, 1, (M, N)).astype(f32)
        y = rng.uniform(-1, 1, (M, N)).astype(f32)
        bias = rng.uniform(-1, 1, N).astype(f32)
        g = rng.uniform(-1, 1, (M, N)).astype(f32)
        measure(f"add_mul_relu_fwd_f32_{M}x{N}", reps, lambda: np.maximum(x + bias + m * y, 0), only)

        def relu_bwd():
            pre = x + bias + m * y
            d = np.where(pre > 0, g, f32(0))
            return d, m * d, d.sum(axis=0)

        measure(f"add_mul_relu_bwd_f32_{M}x{N}", reps, relu_bwd, only)
        if erf is not None:
            c = f32(1 / sqrt(2))

            def gelu_fwd():
                p = x + bias + m * y
                return f32(0.5) * p * (f32(1) + erf(p * c))

            def gelu_bwd():
                p = x + bias + m * y
                cdf = f32(0.5) * (f32(1) + erf(p * c))
                pdf = np.exp(f32(-0.5) * p * p) * f32(0.3989422804014327)
                d = g * (cdf + p * pdf)
                return d, m * d, d.sum(axis=0)

            measure(f"add_mul_gelu_erf_fwd_f32_{M}x{N}", reps, gelu_fwd, only)
            measure(f"add_mul_gelu_erf_bwd_f32_{M}x{N}", reps, gelu_bwd, only)


if __name__ == "__main__":
    main()
