#!/usr/bin/env python3
"""dlfuse.jax against XLA's own fusion, inside jax.jit.

  per call   each op applied --chain times in a row inside one jitted function (the output
             feeding the next call), against the same expression in jax.numpy, which XLA
             fuses itself (e.g. its GEMM with a bias/activation epilogue); time per call
  MLP step   examples/jax_mlp.py's 4-layer MLP: one jitted SGD training step (forward,
             backward, update) with dlfuse ops against the same model in jax.numpy

Every number is the median over --reps runs of the jitted function (ended by
block_until_ready), after --warm runs; a per-call figure divides by --chain. Float32 matmuls
are exact in both (jax_default_matmul_precision="highest", dlfuse's allow_tf32 off).
Prints a table; --json writes the numbers.

    DLFUSE_LIBRARY=build/<dir>/lib/libdlfuse.so DLFUSE_EXT_DIR=build/<dir>/python/dlfuse \
        python3 bench/jax_bench.py --device cuda --json jax_bench.json
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python", "src"))
sys.path.insert(0, os.path.join(HERE, "..", "bindings", "python", "examples"))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import dlfuse  # noqa: E402
import dlfuse.jax as djx  # noqa: E402
import jax_mlp  # noqa: E402


def median_time(fn, args, warm, reps):
    for _ in range(warm):
        jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts) / 1e3  # us


# name -> (dlfuse call, jax.numpy expression), each h -> h with the extra operands
OPS = {
    "matmul_add_relu": (lambda h, w, b: djx.matmul_add_relu(h, w, b),
                        lambda h, w, b: jax.nn.relu(h @ w + b)),
    "matmul_add_activation gelu_tanh": (
        lambda h, w, b: djx.matmul_add_activation(h, w, b, "gelu_tanh"),
        lambda h, w, b: jax.nn.gelu(h @ w + b, approximate=True)),
    "matmul_add_residual": (lambda h, w, b: djx.matmul_add_residual(h, w, b, h),
                            lambda h, w, b: h @ w + b + h),
    "add_mul_activation silu": (lambda h, y, b: djx.add_mul_activation(h, y, b, 0.5, "silu"),
                                lambda h, y, b: jax.nn.silu(h + b + 0.5 * y)),
}


def chained(op, n):
    def f(h, w, b):
        for _ in range(n):
            h = op(h, w, b)
        return h
    return jax.jit(f)


def per_call(device, dtype, sizes, chain, warm, reps):
    rows = []
    rng = np.random.default_rng(0)
    for m, k in sizes:
        for name, (fd, fx) in OPS.items():
            scale = 1 / np.sqrt(k)
            h = jax.device_put(jnp.asarray(rng.standard_normal((m, k)), dtype), device)
            second = (m, k) if name.startswith("add_mul") else (k, k)
            w = jax.device_put(jnp.asarray(rng.standard_normal(second) * scale, dtype), device)
            b = jax.device_put(jnp.asarray(rng.standard_normal((k,)) * 0.1, dtype), device)
            td = median_time(chained(fd, chain), (h, w, b), warm, reps) / chain
            tx = median_time(chained(fx, chain), (h, w, b), warm, reps) / chain
            rows.append({"what": f"{name} {m}x{k}" + ("" if name.startswith("add_mul") else f"x{k}"),
                         "dtype": jnp.dtype(dtype).name, "dlfuse_us": td, "xla_us": tx,
                         "dlfuse/xla": td / tx})
    return rows


def mlp_step(device, dtype, batch, width, hidden, warm, reps):
    params64 = jax_mlp.init(0, (width, hidden, hidden, hidden, width))
    x64, y64 = jax_mlp.data(1, batch, width)
    params = [jax.device_put(jnp.asarray(p, dtype), device) for p in params64]
    x, y = (jax.device_put(jnp.asarray(a, dtype), device) for a in (x64, y64))
    t = {ops: median_time(jax_mlp.make_step(ops, 1e-3), (params, x, y), warm, reps)
         for ops in ("dlfuse", "jnp")}
    return {"what": f"MLP step {batch}x({width}-{hidden}-{hidden}-{hidden}-{width})",
            "dtype": jnp.dtype(dtype).name, "dlfuse_us": t["dlfuse"], "xla_us": t["jnp"],
            "dlfuse/xla": t["dlfuse"] / t["jnp"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--sizes", default="256x256,4096x1024,8192x4096",
                    help="per-call shapes MxK (a GEMM is MxKxK)")
    ap.add_argument("--chain", type=int, default=10)
    ap.add_argument("--mlp", default="4096x1024x4096", help="batch x width x hidden")
    ap.add_argument("--warm", type=int, default=10)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json")
    a = ap.parse_args()
    device = jax.devices(a.device)[0]
    sizes = [tuple(int(v) for v in s.split("x")) for s in a.sizes.split(",")]
    batch, width, hidden = (int(v) for v in a.mlp.split("x"))
    rows = []
    with jax.default_matmul_precision("highest"):
        for dt in a.dtypes.split(","):
            dtype = jnp.dtype(dt)
            rows += per_call(device, dtype, sizes, a.chain, a.warm, a.reps)
            rows.append(mlp_step(device, dtype, batch, width, hidden, a.warm, a.reps))
    plugin = dlfuse.registry().resolve("matmul_add_relu", "cpu" if device.platform == "cpu"
                                       else "cuda", "float32")
    print(f"# {device.device_kind} ({device.platform}), jax {jax.__version__}, dlfuse plugin "
          f"{plugin}; median of {a.reps} after {a.warm}; per call = chain of {a.chain} / {a.chain}")
    print(f"{'what':<48} {'dtype':<9} {'dlfuse us':>11} {'XLA us':>11} {'dlfuse/XLA':>10}")
    for r in rows:
        print(f"{r['what']:<48} {r['dtype']:<9} {r['dlfuse_us']:>11.2f} {r['xla_us']:>11.2f} "
              f"{r['dlfuse/xla']:>10.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": device.device_kind, "platform": device.platform,
                       "jax": jax.__version__, "host": platform.node(), "plugin": plugin,
                       "reps": a.reps, "warm": a.warm, "chain": a.chain, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
