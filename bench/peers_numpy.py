"""NumPy peers (unfused, float32) of the anchor cases, for bench/run.py.

One JSON object per line on stdout, with the same fields as dlfuse_bench's rows. Timing:
perf_counter around each call after one warm-up; median and 10th/90th percentiles over
the repetitions (bounded by a time budget per case).
Usage: python3 bench/peers_numpy.py [--quick] [--ops LIST] [--shapes MxKxN,MxN,...]
"""
import json
import sys
import time

import numpy as np

from peer_args import parse_selection

QUICK, OPS, SHAPES = parse_selection(sys.argv[1:], dtypes=False)
BUDGET = 0.3 if QUICK else 2.0
MIN_REPS, MAX_REPS = (3, 30) if QUICK else (5, 300)


def measure(fn):
    fn()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    reps = int(min(MAX_REPS, max(MIN_REPS, BUDGET / max(one, 1e-7))))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    q = np.quantile(np.array(ts), [0.1, 0.5, 0.9])
    return {"median_ms": q[1] * 1e3, "p10_ms": q[0] * 1e3, "p90_ms": q[2] * 1e3, "min_ms": min(ts) * 1e3,
            "rounds": reps, "batch": 1}


def emit(op, d, shape, stats):
    r = {"op": op, "dir": d, "dtype": "float32", "shape": shape, "impl": "numpy", "device": "cpu:0"}
    r.update(stats)
    print(json.dumps(r), flush=True)
    print(f"  numpy {op} {d} float32 {shape}: median {stats['median_ms']:.4f} ms", file=sys.stderr, flush=True)


def main():
    print(json.dumps({"peer": "numpy", "version": np.__version__}), flush=True)
    rng = np.random.default_rng(0)
    f32 = np.float32
    for M, K, N in (s for s in SHAPES or [(2048, 512, 256), (4096, 1024, 1024)] if len(s) == 3):
        if "matmul_add_relu" not in OPS:
            break
        a = rng.uniform(-1, 1, (M, K)).astype(f32)
        b = rng.uniform(-1, 1, (K, N)).astype(f32)
        bias = rng.uniform(-1, 1, N).astype(f32)
        shape = f"{M}x{K}x{N}"
        emit("matmul_add_relu", "fwd", shape, measure(lambda: np.maximum(a @ b + bias, 0)))
        out = np.maximum(a @ b + bias, 0)
        g = rng.uniform(-1, 1, (M, N)).astype(f32)

        def bwd():
            dz = np.where(out > 0, g, f32(0))
            return dz @ b.T, a.T @ dz, dz.sum(axis=0)

        emit("matmul_add_relu", "bwd", shape, measure(bwd))
    m = f32(0.5)
    for M, N in (s for s in SHAPES or [(2048, 512), (16384, 8192)] if len(s) == 2):
        if "add_mul_activation" not in OPS:
            break
        x = rng.uniform(-1, 1, (M, N)).astype(f32)
        y = rng.uniform(-1, 1, (M, N)).astype(f32)
        bias = rng.uniform(-1, 1, N).astype(f32)
        g = rng.uniform(-1, 1, (M, N)).astype(f32)
        shape = f"{M}x{N}"
        emit("add_mul_activation", "fwd", shape, measure(lambda: np.maximum(x + bias + m * y, 0)))

        def relu_bwd():
            d = np.where(x + bias + m * y > 0, g, f32(0))
            return d, m * d, d.sum(axis=0)

        emit("add_mul_activation", "bwd", shape, measure(relu_bwd))


if __name__ == "__main__":
    main()
