"""Run by test_jax.py in a fresh process (XLA_FLAGS must be set before JAX starts): compiles a
jitted training step of dlfuse ops on CUDA with XLA's command buffers for custom calls on
("on") or off ("off"), prints as JSON how many dlfuse custom calls the optimized HLO has
inside command-buffer computations and outside them, and how far three runs on new data are
from the same step in jax.numpy (graph replays must read each run's buffers).

    python3 jax_command_buffers.py on|off
"""
import json
import os
import re
import sys

FLAGS = {"on": "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL "
               "--xla_gpu_graph_min_graph_size=1",
         "off": "--xla_gpu_enable_command_buffer="}
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + FLAGS[sys.argv[1]]).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import dlfuse.jax as djx  # noqa: E402
from dlfuse._jax_ffi import TARGET  # noqa: E402


def computations(hlo):
    """name -> body text of each computation in an HLO module's text."""
    out, name, body = {}, None, []
    for line in hlo.splitlines():
        m = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if name is None and m:
            name, body = m.group(1), []
        elif name is not None and line.strip() == "}":
            out[name] = "\n".join(body)
            name = None
        elif name is not None:
            body.append(line)
    return out


def loss(p, x, ops):
    if ops == "dlfuse":
        h = djx.matmul_add_activation(x, p[0], p[1], "silu")
        h = djx.add_mul_activation(h, h, p[1], 0.5, "tanh")
        return jnp.sum(djx.matmul_add_residual(h, p[2], p[3], x) ** 2)
    h = jax.nn.silu(x @ p[0] + p[1])
    h = jnp.tanh(h + p[1] + 0.5 * h)
    return jnp.sum((h @ p[2] + p[3] + x) ** 2)


def main():
    dev = jax.devices("cuda")[0]
    rng = np.random.default_rng(0)

    def arrays():
        shapes = ((64, 128), (128,), (128, 64), (64,), (32, 64))
        return [jax.device_put(jnp.asarray(rng.standard_normal(s) * 0.2, jnp.float32), dev)
                for s in shapes]
    step = jax.jit(jax.grad(lambda p, x: loss(p, x, "dlfuse")))
    ref = jax.jit(jax.grad(lambda p, x: loss(p, x, "jnp")))
    *p, x = arrays()
    hlo = step.lower(p, x).compile().as_text()
    inside = outside = 0
    for name, body in computations(hlo).items():
        n = body.count(f'custom_call_target="{TARGET}"')
        if name.startswith("command_buffer"):
            inside += n
        else:
            outside += n
    errs = []
    with jax.default_matmul_precision("highest"):
        for _ in range(3):
            *p, x = arrays()
            got, want = step(p, x), ref(p, x)
            errs.append(max(float(jnp.max(jnp.abs(g - w)) / (1 + float(jnp.max(jnp.abs(w)))))
                            for g, w in zip(got, want)))
    print(json.dumps({"inside": inside, "outside": outside, "max_rel_err": max(errs)}))


if __name__ == "__main__":
    main()
