#!/usr/bin/env python3
"""Per-call overhead of the Python binding on small tensors.

For add_mul_activation (64x64, relu) and matmul_add_relu (32x32x32), float32, it times:
  dlfuse              the full call: dlfuse.op(x, y, bias, out=o) (the compiled module:
                      DLPack import of every argument, validation in the registry, kernel)
  dlfuse-alloc        the same without out= (the output allocated by the framework)
  dlfuse.torch        dlfuse.torch.op(...) on tensors without grad (eager fast path) [torch]
  dlfuse.torch grad   the same on inputs that require grad (the operator's autograd kernel) [torch]
  dlfuse.torch f+b    forward and backward of (op(...) * g).sum() style: op + .backward(g)
  torch.ops.dlfuse    the operator through the dispatcher (the torch.compile path) [torch]
  framework           the framework's own unfused ops (numpy / torch eager / cupy), and
  framework grad/f+b  its forward with grad / forward+backward [torch]
and, with --noop PATH (bench/'s no-op plugin, libdlfuse_noop.so; CPU only), the full call
through a registry holding only that plugin on NumPy and (where installed) torch CPU
tensors: the binding's own cost plus the registry's validation, with no kernel at all.

Each number is the median over --reps rounds of (time of --calls back-to-back calls) /
--calls, after warm-up; on CUDA a round ends with a device synchronize, so a number is
max(host cost, GPU time) per call. Prints a table and, with --json, writes the numbers.

    DLFUSE_LIBRARY=build/<dir>/lib/libdlfuse.so DLFUSE_EXT_DIR=build/<dir>/python/dlfuse \
        python3 bench/python_overhead.py --framework numpy \
        --noop build/<dir>/bench/plugins/libdlfuse_noop.so --json out.json
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings",
                                "python", "src"))
import numpy as np  # noqa: E402

import dlfuse  # noqa: E402


def timeit(fn, calls, reps, sync=None, warm=200):
    for _ in range(warm):
        fn()
    if sync:
        sync()
    per = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        if sync:
            sync()
        per.append((time.perf_counter_ns() - t0) / calls)
    return statistics.median(per)


def run_meta(args):
    """What a result was measured with: framework, device, versions, machine, date, counts."""
    meta = {"framework": args.framework, "device": args.device,
            "python": platform.python_version(), "numpy": np.__version__,
            "machine": platform.processor() or platform.machine(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "calls": args.calls, "reps": args.reps}
    if args.framework == "torch":
        import torch
        meta["torch"] = torch.__version__
        if args.device.startswith("cuda"):
            meta["gpu"] = torch.cuda.get_device_name()
    return meta


def make(framework, device):
    rng = np.random.default_rng(0)
    host = {"x": rng.standard_normal((64, 64), np.float32),
            "y": rng.standard_normal((64, 64), np.float32),
            "b": rng.standard_normal(64, np.float32),
            "A": rng.standard_normal((32, 32), np.float32),
            "B": rng.standard_normal((32, 32), np.float32),
            "c": rng.standard_normal(32, np.float32)}
    host["o"] = np.empty((64, 64), np.float32)
    host["O"] = np.empty((32, 32), np.float32)
    if framework == "numpy":
        return host, None, None
    if framework == "torch":
        import torch
        t = {k: torch.from_numpy(v).to(device) for k, v in host.items()}
        sync = torch.cuda.synchronize if device.startswith("cuda") else None
        stream = torch.cuda.current_stream().cuda_stream if device.startswith("cuda") else None
        return t, sync, stream
    if framework == "cupy":
        import cupy as cp
        t = {k: cp.asarray(v) for k, v in host.items()}
        return t, cp.cuda.runtime.deviceSynchronize, None
    raise SystemExit(f"unknown framework {framework}")


def binding_rows(args, t, stream, row):
    x, y, b, o, A, B, c, O = (t[k] for k in "xyboABcO")
    row("dlfuse", "add_mul 64x64",
        lambda: dlfuse.add_mul_activation(x, y, b, 1.0, "relu", out=o, stream=stream))
    row("dlfuse", "matmul 32x32x32", lambda: dlfuse.matmul_add_relu(A, B, c, out=O, stream=stream))
    row("dlfuse-alloc", "add_mul 64x64",
        lambda: dlfuse.add_mul_activation(x, y, b, 1.0, "relu", stream=stream))
    row("dlfuse-alloc", "matmul 32x32x32", lambda: dlfuse.matmul_add_relu(A, B, c, stream=stream))
    if args.framework == "torch":
        import torch
        import dlfuse.torch as dft
        row("dlfuse.torch", "add_mul 64x64", lambda: dft.add_mul_activation(x, y, b, 1.0, "relu"))
        row("dlfuse.torch", "matmul 32x32x32", lambda: dft.matmul_add_relu(A, B, c))
        xg, Ag = x.clone().requires_grad_(), A.clone().requires_grad_()
        row("dlfuse.torch grad", "add_mul 64x64",
            lambda: dft.add_mul_activation(xg, y, b, 1.0, "relu"))
        row("dlfuse.torch grad", "matmul 32x32x32", lambda: dft.matmul_add_relu(Ag, B, c))
        row("dlfuse.torch f+b", "add_mul 64x64",
            lambda: dft.add_mul_activation(xg, y, b, 1.0, "relu").backward(o))
        row("dlfuse.torch f+b", "matmul 32x32x32",
            lambda: dft.matmul_add_relu(Ag, B, c).backward(O))
        row("torch.ops.dlfuse", "add_mul 64x64",
            lambda: torch.ops.dlfuse.add_mul_activation(x, y, b, 1, 1.0))
        row("torch.ops.dlfuse", "matmul 32x32x32",
            lambda: torch.ops.dlfuse.matmul_add_relu(A, B, c, 0))


def framework_rows(args, t, row):
    x, y, b, o, A, B, c, O = (t[k] for k in "xyboABcO")
    if args.framework == "numpy":
        row("framework", "add_mul 64x64", lambda: np.maximum(x + b + 1.0 * y, 0, out=o))
        row("framework", "matmul 32x32x32", lambda: np.maximum(A @ B + c, 0, out=O))
    elif args.framework == "torch":
        import torch
        row("framework", "add_mul 64x64", lambda: torch.relu(x + b + 1.0 * y))
        row("framework", "matmul 32x32x32", lambda: torch.relu(torch.addmm(c, A, B)))
        xg, Ag = x.clone().requires_grad_(), A.clone().requires_grad_()
        row("framework grad", "add_mul 64x64", lambda: torch.relu(xg + b + 1.0 * y))
        row("framework grad", "matmul 32x32x32", lambda: torch.relu(torch.addmm(c, Ag, B)))
        row("framework f+b", "add_mul 64x64", lambda: torch.relu(xg + b + 1.0 * y).backward(o))
        row("framework f+b", "matmul 32x32x32",
            lambda: torch.relu(torch.addmm(c, Ag, B)).backward(O))
    else:
        import cupy as cp
        row("framework", "add_mul 64x64", lambda: cp.maximum(x + b + 1.0 * y, 0, out=o))
        row("framework", "matmul 32x32x32", lambda: cp.maximum(A @ B + c, 0, out=O))


def noop_rows(args, row):
    """Through a registry holding only the no-op plugin, on NumPy host arrays."""
    nreg = dlfuse.Registry(plugin_paths=[os.path.abspath(args.noop)], discovery=0)
    assert [p.name for p in nreg.plugins() if p.available] == ["noop"], nreg.plugins()
    h, _, _ = make("numpy", "cpu")
    hx, hy, hb, ho, hA, hB, hc, hO = (h[k] for k in "xyboABcO")
    row("noop plugin: dlfuse", "add_mul 64x64",
        lambda: dlfuse.add_mul_activation(hx, hy, hb, 1.0, "relu", out=ho, registry=nreg))
    row("noop plugin: dlfuse", "matmul 32x32x32",
        lambda: dlfuse.matmul_add_relu(hA, hB, hc, out=hO, registry=nreg))
    try:
        import torch
    except ImportError:
        return
    tt = {k: torch.from_numpy(v) for k, v in h.items()}
    tx, ty, tb, to, tA, tB, tc, tO = (tt[k] for k in "xyboABcO")
    row("noop plugin: torch cpu", "add_mul 64x64",
        lambda: dlfuse.add_mul_activation(tx, ty, tb, 1.0, "relu", out=to, registry=nreg))
    row("noop plugin: torch cpu", "matmul 32x32x32",
        lambda: dlfuse.matmul_add_relu(tA, tB, tc, out=tO, registry=nreg))
    row("noop plugin: torch cpu alloc", "add_mul 64x64",
        lambda: dlfuse.add_mul_activation(tx, ty, tb, 1.0, "relu", registry=nreg))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", choices=("numpy", "torch", "cupy"), default="numpy")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--noop", help="path of libdlfuse_noop.so (CPU)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    t, sync, stream = make(args.framework, args.device)
    rows = []

    def row(name, op, fn):
        ns = timeit(fn, args.calls, args.reps, sync)
        rows.append({"path": name, "op": op, "ns_per_call": ns})

    dev_kind = "cuda" if args.device.startswith("cuda") else "cpu"
    try:
        plug = dlfuse.registry().resolve("add_mul_activation", dev_kind)
    except dlfuse.Error:
        plug = None  # e.g. the GPU machine has no CPU plugin: only the no-op rows
    if plug:
        binding_rows(args, t, stream, row)
    framework_rows(args, t, row)
    if args.noop:
        noop_rows(args, row)

    meta = run_meta(args)
    meta["plugin"] = plug
    print(json.dumps(meta))
    print(f"{'path':28s} {'op':18s} {'us/call':>9s}")
    for r in rows:
        print(f"{r['path']:28s} {r['op']:18s} {r['ns_per_call'] / 1000:9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
