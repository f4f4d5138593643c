#!/usr/bin/env python3
"""The same dlfuse op through each Python binding technique, side by side.

add_mul_activation (relu, float32, x and y [64, 64], bias [64], out given) on the same tensors
through:
  dlfuse._ext        the package as shipped: dlfuse.add_mul_activation, an _ext.OpFunction
                     whose parameters come from the op's schema (plain CPython API)
  capi-proto         a plain CPython-API module doing only what the two below do
                     (bench/binding_techniques/proto_capi.c)
  nanobind           nb::ndarray<> arguments (proto_nanobind.cpp)
  tvm-ffi            apache-tvm-ffi: a typed function over its C ABI, TensorView arguments
                     (proto_tvmffi.cpp)
Each prototype looks the op up once and calls dlfuse_op_call with the four tensors as its
technique hands them over; only the technique differs. A number is the median over --reps
rounds of (time of --calls back-to-back calls) / --calls after --warm calls; on CUDA a round
ends with a synchronize. With --noop PATH the calls go through a registry holding only the
no-op plugin (the binding plus the registry's validation, no kernel).

The prototypes are built here with CMake into --build-dir (nanobind from `python3 -m
nanobind --cmake_dir`, tvm-ffi from the tvm_ffi package); a technique whose package is
missing is listed as skipped.

    DLFUSE_LIBRARY=build/cpu/lib/libdlfuse.so DLFUSE_EXT_DIR=build/cpu/python/dlfuse \\
        python3 bench/binding_techniques.py --framework numpy \\
        --noop build/cpu/bench/plugins/libdlfuse_noop.so
"""
import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))
import numpy as np  # noqa: E402

import dlfuse  # noqa: E402
from dlfuse import _ext  # noqa: E402

sys.path.insert(0, HERE)
from python_overhead import run_meta, timeit  # noqa: E402  (shared by the Python benches)

OP = "add_mul_activation"


def build(build_dir):
    """Configures and builds the prototypes; returns {technique: why skipped}."""
    skipped = {}
    cfg = ["cmake", "-S", os.path.join(HERE, "binding_techniques"), "-B", build_dir,
           f"-DDLFUSE_INCLUDE={os.path.join(ROOT, 'abi', 'include')}",
           f"-DPython_EXECUTABLE={sys.executable}"]
    try:
        import tvm_ffi.libinfo as li
        cfg += [f"-DDLPACK_INCLUDE={li.find_dlpack_include_path()}",
                f"-DTVM_FFI_ROOT={os.path.dirname(os.path.abspath(li.__file__))}"]
    except ImportError as e:
        skipped["tvm-ffi"] = f"apache-tvm-ffi not importable ({e})"
        inc = os.environ.get("DLPACK_INCLUDE")
        if inc:
            cfg.append(f"-DDLPACK_INCLUDE={inc}")
    try:
        nb = subprocess.run([sys.executable, "-m", "nanobind", "--cmake_dir"], capture_output=True,
                            text=True, check=True).stdout.strip()
        cfg.append(f"-Dnanobind_DIR={nb}")
    except (subprocess.CalledProcessError, OSError) as e:
        skipped["nanobind"] = f"nanobind not importable ({e})"
    subprocess.run(cfg, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 2)], check=True,
                   stdout=subprocess.DEVNULL)
    return skipped


def load_module(name, build_dir):
    found = glob.glob(os.path.join(build_dir, name + "*.so"))
    if not found:
        return None
    spec = importlib.util.spec_from_file_location(name, found[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def tensors(framework, device):
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    b = rng.standard_normal(64).astype(np.float32)
    if framework == "numpy":
        return x, y, b, np.empty_like(x), None
    import torch
    t = [torch.from_numpy(a).to(device) for a in (x, y, b)]
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    return t[0], t[1], t[2], torch.empty_like(t[0]), sync


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", choices=("numpy", "torch"), default="numpy")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--noop", help="libdlfuse_noop.so: a registry holding only the no-op plugin")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "binding_techniques"))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--warm", type=int, default=500)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    skipped = build(args.build_dir)
    if args.noop:
        reg = dlfuse.Registry(plugin_paths=[os.path.abspath(args.noop)], discovery=0)
        assert [p.name for p in reg.plugins() if p.available] == ["noop"], reg.plugins()
    else:
        reg = dlfuse.registry()
    addrs = [_ext.symbol(n) for n in ("dlfuse_op_get", "dlfuse_op_call", "dlfuse_last_error")]
    x, y, b, o, sync = tensors(args.framework, args.device)

    fns = {}
    # spelled out: a **kwargs call would build a dict per call, which is not the binding's cost
    if args.noop:
        fns["dlfuse._ext"] = lambda: dlfuse.add_mul_activation(x, y, b, 1.0, "relu", out=o, registry=reg)
    else:
        fns["dlfuse._ext"] = lambda: dlfuse.add_mul_activation(x, y, b, 1.0, "relu", out=o)
    capi = load_module("proto_capi", args.build_dir)
    if capi.init(reg.handle, OP, *addrs):
        raise SystemExit(f"proto_capi: op look-up failed: {dlfuse.last_error()}")
    fns["capi-proto"] = lambda: capi.call(x, y, b, o)
    if "nanobind" not in skipped:
        nbm = load_module("proto_nanobind", args.build_dir)
        if nbm is None:
            skipped["nanobind"] = "its prototype did not build"
        else:
            nbm.init(reg.handle, OP, *addrs)
            fns["nanobind"] = lambda: nbm.call(x, y, b, o)
    if "tvm-ffi" not in skipped:
        path = os.path.join(args.build_dir, "proto_tvmffi.so")
        if not os.path.exists(path):
            skipped["tvm-ffi"] = "its prototype did not build"
        else:
            import tvm_ffi
            tm = tvm_ffi.load_module(path)
            tm.init(reg.handle, OP, *addrs)
            tcall = tm.call  # looked up once, as a caller would
            fns["tvm-ffi"] = lambda: tcall(x, y, b, o)

    # every technique writes the same result (skipped on the no-op plugin, which writes nothing)
    if not args.noop:
        ref = None
        for name, fn in fns.items():
            o[...] = 0
            fn()
            if sync:
                sync()
            got = np.asarray(o.cpu() if args.framework == "torch" else o, dtype=np.float64)
            if ref is None:
                xs, ys, bs = (np.asarray(t.cpu() if args.framework == "torch" else t, np.float64)
                              for t in (x, y, b))
                ref = np.maximum(xs + bs + ys, 0)
            assert np.allclose(got, ref, rtol=1e-5, atol=1e-5), name

    res = {}
    for name, fn in fns.items():
        res[name] = timeit(fn, args.calls, args.reps, sync=sync, warm=args.warm) / 1000.0  # ns -> us
    where = f"{args.framework} {args.device}" + (" (no-op plugin)" if args.noop else "")
    meta = run_meta(args)
    meta.update({"noop": bool(args.noop), "skipped": skipped})
    try:
        import nanobind
        meta["nanobind"] = nanobind.__version__
    except ImportError:
        pass
    try:
        import tvm_ffi
        meta["tvm_ffi"] = tvm_ffi.__version__
    except ImportError:
        pass
    print(json.dumps(meta))
    print(f"{OP} 64x64, {where}: us/call (median of {args.reps} x {args.calls})")
    for name, us in res.items():
        print(f"  {name:<14} {us:8.3f}")
    for name, why in skipped.items():
        print(f"  {name:<14} skipped: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "us_per_call": res}, f, indent=1)


if __name__ == "__main__":
    main()
