#!/usr/bin/env python3
"""A 4-layer MLP trained under jax.jit three times from one initialization on the same
synthetic regression data: with dlfuse ops (dlfuse.jax, float32), in jax.numpy (float32,
XLA's own fusion) and in jax.numpy in float64 (the anchor). The script exits 1 unless
  (a) dlfuse stays as close to the float64 run as jax.numpy float32 does:
      max_i |L_dlfuse - L_64| <= --factor * max_i |L_jnp32 - L_64| + --slack
      (relative to max(1, |L_64|), over every step i);
  (b) the loss falls (the last 10 steps' mean is below 0.9x the first 10 steps').

Model: x [B, D0] -> 3 x (Linear + GELU-tanh: dlfuse matmul_add_activation) -> Linear with
a residual from the input (dlfuse matmul_add_residual) -> MSE against y. Plain SGD. Float32
matmuls run exactly in both programs (jax_default_matmul_precision="highest"; dlfuse's
allow_tf32 off), so the comparison is of rounding, not of TF32.

    python3 examples/jax_mlp.py --device cuda --steps 200
"""
import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

try:
    import dlfuse.jax as djx
except ImportError:  # run from the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import dlfuse.jax as djx


def init(seed, sizes):
    """Weights [in, out] with 1/sqrt(in) scale, small biases; NumPy float64."""
    rng = np.random.default_rng(seed)
    params = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        params.append(rng.standard_normal((i, o)) / np.sqrt(i))
        params.append(rng.standard_normal((o,)) * 0.1)
    return params


def forward(params, x, ops):
    """The model; ops "dlfuse" or "jnp" (the same function, XLA's own fusion)."""
    h = x
    for w, b in zip(params[0:-2:2], params[1:-2:2]):
        if ops == "dlfuse":
            h = djx.matmul_add_activation(h, w, b, "gelu_tanh")
        else:
            h = jax.nn.gelu(h @ w + b, approximate=True)
    w, b = params[-2], params[-1]
    if ops == "dlfuse":
        return djx.matmul_add_residual(h, w, b, x)
    return h @ w + b + x


def loss(params, x, y, ops):
    return jnp.mean((forward(params, x, ops) - y) ** 2)


def make_step(ops, lr):
    @jax.jit
    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y, ops)
        return [p - lr * g for p, g in zip(params, grads)], value
    return step


def data(seed, batch, width):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, width))
    teacher = rng.standard_normal((width, width)) / np.sqrt(width)
    return x, np.tanh(x @ teacher)


def train(ops, dtype, params64, x64, y64, steps, lr, device):
    params = [jax.device_put(jnp.asarray(p, dtype), device) for p in params64]
    x, y = (jax.device_put(jnp.asarray(a, dtype), device) for a in (x64, y64))
    step = make_step(ops, lr)
    losses = []
    for _ in range(steps):
        params, value = step(params, x, y)
        losses.append(float(value))
    return np.array(losses)


def run(device, steps=100, batch=256, width=64, hidden=128, lr=0.3, seed=0):
    """Losses per step of (dlfuse f32, jnp f32, jnp f64)."""
    params64 = init(seed, (width, hidden, hidden, hidden, width))
    x64, y64 = data(seed + 1, batch, width)
    with jax.default_matmul_precision("highest"):
        ld = train("dlfuse", jnp.float32, params64, x64, y64, steps, lr, device)
        l32 = train("jnp", jnp.float32, params64, x64, y64, steps, lr, device)
        with jax.enable_x64(True):
            l64 = train("jnp", jnp.float64, params64, x64, y64, steps, lr, device)
    return ld, l32, l64


def verdict(ld, l32, l64, factor=4.0, slack=1e-6):
    """(ok, message) for the criteria in the module's docstring."""
    scale = np.maximum(1.0, np.abs(l64))
    err_d = float(np.max(np.abs(ld - l64) / scale))
    err_32 = float(np.max(np.abs(l32 - l64) / scale))
    falls = ld[-10:].mean() < 0.9 * ld[:10].mean()
    ok = err_d <= factor * err_32 + slack and falls and np.isfinite(ld).all()
    return ok, (f"loss {ld[0]:.6f} -> {ld[-1]:.6f} (falls: {falls}); max relative distance to "
                f"float64: dlfuse {err_d:.3e}, jax.numpy float32 {err_32:.3e} "
                f"(bound {factor} x + {slack})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=0.3)
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--slack", type=float, default=1e-6)
    a = ap.parse_args()
    device = jax.devices(a.device)[0]
    ld, l32, l64 = run(device, a.steps, a.batch, a.width, a.hidden, a.lr)
    ok, msg = verdict(ld, l32, l64, a.factor, a.slack)
    print(f"jax_mlp on {device}: {a.steps} steps, batch {a.batch}, "
          f"{a.width}-{a.hidden}-{a.hidden}-{a.hidden}-{a.width}: {msg}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
