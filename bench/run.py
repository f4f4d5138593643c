#!/usr/bin/env python3
"""The benchmark, in one command: every available plugin and every peer present on this
machine, every op forward and backward over the anchor shapes, the ceilings (copy
bandwidth, GEMM peak) and the no-op dispatch overhead, measured in one run; at the end the
markdown tables of docs/performance.md.

  python3 bench/run.py [--build DIR] [--quick] [--out DIR] [--no-build] [--no-plot] [--no-dispatch]
                       [--plugins LIST] [--peers LIST] [--ops LIST] [--shapes LIST] [--dtypes LIST]
                       [--activations LIST] [--no-grad-y] [--opencl-gemm LIST]
  python3 bench/run.py --markdown RESULTS.json

--build   a dlfuse build tree (default build/cpu); the targets this needs (dlfuse_bench,
          dlfuse_noop, and where configured the peers dlfuse_bench_onednn /
          dlfuse_bench_cublaslt and the Python module dlfuse_pyext) are built first unless
          --no-build.
--quick   fewer repetitions (about 0.3 s per case instead of 2 s): a few minutes on the
          2-core CI machine; the full mode is for figures.
--out     where results.json, results.csv, tables.md and the plots go (default
          build/bench-results/<UTC date>-<device>, ignored by git: results are not sources).
--markdown  print the tables of an earlier run's results.json (bench/tables.py: per device,
          each dlfuse row with its bound and the peers' times from the same run) and exit;
          a run prints them at its end and keeps them as tables.md.
Selection (comma-separated lists; default: everything):
--plugins      plugin names as `dlfuse list` shows them (onednn, opencl, cuda, ...)
--peers        onednn_raw, cublaslt, numpy, torch
--ops          matmul_add_relu, add_mul_activation, matmul_add_activation (GELU-tanh
               epilogue: fwd, fwd_pre, bwd from pre), matmul_add_residual (fwd); add_mul
               rows gain bwd_from_out where the plugin reads `out`
--shapes       MxKxN (matmul) and MxN (add_mul) shapes instead of the anchors, e.g.
               4096x1024x1024,16384x8192
--dtypes       float32, bfloat16 (float64 for plugins that have it)
--activations  add_mul activations: relu (default; the peers have only relu) and sigmoid
               (rows labelled add_mul_activation[sigmoid])
--no-grad-y    also the add_mul backward without grad_y on CPU devices (always on a GPU)
--opencl-gemm  also time the OpenCL plugin's matmul with DLFUSE_OPENCL_GEMM set to each
               value (cpu, tiled, tiled64, tiled128; rows dlfuse_opencl:I[VALUE])
--no-dispatch  skip the no-op dispatch overhead

What runs (progress on stderr):
  plugins   `dlfuse_bench list` (default discovery: the build's plugin folder and
            $DLFUSE_PLUGIN_PATH); each available plugin and device except the test plugin,
            through the C API (op handles, device services), float32 and bfloat16;
            the matmul ops at 2048x512x256 and 4096x1024x1024 (+ 8192x4096x4096 on a GPU),
            add_mul_activation (relu, multiplier 0.5, bias [N]) 2048x512 and 16384x8192.
            Each forward's outputs are sampled against float64 (a failed check fails the run).
  peers     raw oneDNN primitives (bench/peers/onednn_raw.cpp); cuBLASLt plain, tuned and
            RELU_BIAS-epilogue GEMMs, the epilogue's NaN probe and the L2-flushed interleaved
            comparison with the CUDA plugin (bench/peers/cublaslt.cpp); NumPy (float32, when a
            CPU plugin ran); PyTorch eager / torch._addmm_activation / torch.compile (and
            the plain GEMM under the ABI 1.1 ops) when torch with CUDA is importable
            (bench/peers_torch.py).
  ceilings  CPU: memcpy bandwidth (dlfuse_bench copy-bw) and oneDNN f32 GEMM 4096^3; GPU:
            torch 1 GiB device copy and 8192^3 GEMM per dtype.
  dispatch  ns per call of the no-op plugin through dlfuse_op_call (cached handle) and the
            typed functions, and through Python (ctypes, or the dlfuse package if present).

% of ceiling (pct_of_ceiling in the JSON) and the bounds of the tables: bench/tables.py.
"""
import argparse
import csv
import ctypes
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time

from tables import markdown, work

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def jsonl(cmd, env=None):
    """Runs cmd (stderr passes through as progress), returns its JSON lines."""
    log("$ " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    out = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    if p.returncode != 0:
        log(f"  exit status {p.returncode} (kept the {len(out)} lines it printed)")
    return out


def loadavg():
    try:
        return [float(v) for v in open("/proc/loadavg").read().split()[:3]]
    except OSError:
        return None


def cpu_name():
    try:
        return next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def gpu_name():
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        return out[0] if out else None
    except (OSError, subprocess.TimeoutExpired):
        return None


# ---- dispatch through Python -------------------------------------------------------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class RegistryOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("discovery", ctypes.c_uint32), ("plugin_paths", ctypes.c_char_p)]


class Attr(ctypes.Structure):
    class _V(ctypes.Union):
        _fields_ = [("i64", ctypes.c_int64), ("f64", ctypes.c_double)]
    _fields_ = [("key", ctypes.c_int32), ("type", ctypes.c_int32), ("value", _V)]


def python_dispatch(build, noop, quick):
    """ns per no-op call from Python: the dlfuse package if importable, else plain ctypes."""
    rows = []
    n = 20000 if quick else 200000
    rounds = 5 if quick else 11

    def timeit(name, fn, how):
        fn()
        v = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            v.append((time.perf_counter() - t0) / n * 1e9)
        v.sort()
        r = {"dispatch": name, "via": how, "median_ns": v[len(v) // 2], "p10_ns": v[max(0, len(v) // 10)],
             "p90_ns": v[min(len(v) - 1, (len(v) * 9) // 10)], "calls_per_round": n, "rounds": rounds}
        log(f"  dispatch {name} ({how}): median {r['median_ns']:.0f} ns/call")
        rows.append(r)

    lib = ctypes.CDLL(os.path.join(build, "lib", "libdlfuse.so"))
    lib.dlfuse_last_error.restype = ctypes.c_char_p
    opts = RegistryOptions(ctypes.sizeof(RegistryOptions), 0, noop.encode())
    reg = ctypes.c_void_p()
    if lib.dlfuse_registry_create(ctypes.byref(opts), ctypes.byref(reg)) != 0:
        raise RuntimeError(lib.dlfuse_last_error().decode())
    noop_op, am_op = ctypes.c_void_p(), ctypes.c_void_p()
    lib.dlfuse_op_get(reg, b"noop", ctypes.byref(noop_op))
    lib.dlfuse_op_get(reg, b"add_mul_activation", ctypes.byref(am_op))
    shp_mn = (ctypes.c_int64 * 2)(2048, 512)
    shp_n = (ctypes.c_int64 * 1)(512)
    bufs = [ctypes.create_string_buffer(2048 * 512 * 4) for _ in range(4)]

    def t(buf, shape, ndim):
        return DLTensor(ctypes.cast(buf, ctypes.c_void_p), DLDevice(1, 0), ndim, DLDataType(2, 32, 1),
                        ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)), None, 0)
    x, y, bias, out = t(bufs[0], shp_mn, 2), t(bufs[1], shp_mn, 2), t(bufs[2], shp_n, 1), t(bufs[3], shp_mn, 2)
    ins1 = (ctypes.POINTER(DLTensor) * 1)(ctypes.pointer(x))
    outs1 = (ctypes.POINTER(DLTensor) * 1)(ctypes.pointer(out))
    ins3 = (ctypes.POINTER(DLTensor) * 3)(ctypes.pointer(x), ctypes.pointer(y), ctypes.pointer(bias))
    attrs = (Attr * 2)()
    attrs[0].key, attrs[0].type, attrs[0].value.i64 = 1, 1, 1
    attrs[1].key, attrs[1].type, attrs[1].value.f64 = 2, 2, 0.5
    call = lib.dlfuse_op_call
    call.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32,
                     ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p]
    for args, what in [((noop_op, ins1, 1, outs1, 1, None, 0, None), "op_call_generic_op"),
                       ((am_op, ins3, 3, outs1, 1, attrs, 2, None), "op_call_add_mul_activation")]:
        if call(*args) != 0:
            raise RuntimeError(lib.dlfuse_last_error().decode())
        timeit(what, lambda: call(*args), "python ctypes, argtypes set, arguments prebuilt")
    lib.dlfuse_registry_destroy(reg)

    try:  # the Python binding (bindings/python/src, package dlfuse), if it is importable here
        env_lib = os.environ.get("DLFUSE_LIBRARY")
        os.environ["DLFUSE_LIBRARY"] = os.path.join(build, "lib", "libdlfuse.so")
        # the build's compiled module dlfuse._ext (docs/python.md), unless one is named already
        os.environ.setdefault("DLFUSE_EXT_DIR", os.path.join(build, "python", "dlfuse"))
        sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))
        import numpy as np
        import dlfuse
        preg = dlfuse.Registry(plugin_paths=[noop], discovery=0)
        xa, ya = np.ones((2048, 512), np.float32), np.ones((2048, 512), np.float32)
        ba, oa = np.ones(512, np.float32), np.empty((2048, 512), np.float32)
        timeit("package_add_mul_activation",
               lambda: dlfuse.add_mul_activation(xa, ya, ba, 0.5, "relu", out=oa, registry=preg),
               "python dlfuse package (NumPy arrays via DLPack, out= given)")
        if env_lib is not None:
            os.environ["DLFUSE_LIBRARY"] = env_lib
    except Exception as e:  # noqa: BLE001 - report why, keep the run
        rows.append({"dispatch": "package", "via": "python dlfuse package", "note": f"not timed: {e!r}"[:300]})
        log(f"  python dlfuse package not timed: {e!r}"[:200])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "cpu"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--no-dispatch", action="store_true")
    lst = lambda s: [v for v in s.split(",") if v]  # noqa: E731
    ap.add_argument("--plugins", type=lst, default=None)
    ap.add_argument("--peers", type=lst, default=["onednn_raw", "cublaslt", "numpy", "torch"])
    ap.add_argument("--ops", type=lst, default=["matmul_add_relu", "add_mul_activation", "matmul_add_activation",
                                                 "matmul_add_residual"])
    ap.add_argument("--shapes", type=lst, default=None)
    ap.add_argument("--dtypes", type=lst, default=["float32", "bfloat16"])
    ap.add_argument("--activations", type=lst, default=["relu"])
    ap.add_argument("--no-grad-y", action="store_true")
    ap.add_argument("--opencl-gemm", type=lst, default=[])
    ap.add_argument("--markdown", metavar="RESULTS.json")
    args = ap.parse_args()
    if args.markdown:
        sys.stdout.write(markdown(json.load(open(args.markdown))))
        return
    for opt, given, known in (("--peers", args.peers, ("onednn_raw", "cublaslt", "numpy", "torch")),
                              ("--ops", args.ops, ("matmul_add_relu", "add_mul_activation",
                                                         "matmul_add_activation", "matmul_add_residual")),
                              ("--activations", args.activations, ("relu", "sigmoid"))):
        if set(given) - set(known):
            ap.error(f"{opt}: unknown {sorted(set(given) - set(known))}; expected {', '.join(known)}")
    for sh in args.shapes or []:
        if not (sh.count("x") in (1, 2) and all(v.isdigit() and int(v) > 0 for v in sh.split("x"))):
            ap.error(f"--shapes: '{sh}' is not MxKxN (matmul) or MxN (add_mul) with positive sizes")
    build = os.path.abspath(args.build)
    mode = "quick" if args.quick else "full"
    t_start = time.time()
    started = datetime.datetime.now(datetime.timezone.utc)
    gpu = gpu_name()
    device_tag = (gpu.split(",")[0] if gpu else cpu_name()).replace(" ", "-").replace("/", "-")
    device_tag = "".join(c for c in device_tag if c.isalnum() or c in "-_.")[:40]
    out_dir = os.path.abspath(args.out or os.path.join(ROOT, "build", "bench-results", started.strftime("%Y-%m-%d") + "-" + device_tag))
    os.makedirs(out_dir, exist_ok=True)

    if not args.no_build:
        targets = ["dlfuse_bench", "dlfuse_noop"]
        have = subprocess.run(["cmake", "--build", build, "--target", "help"], capture_output=True, text=True).stdout
        targets += [t for t in ("dlfuse_bench_onednn", "dlfuse_bench_cublaslt", "dlfuse_pyext") if t in have]
        log(f"building {' '.join(targets)} in {build}")
        subprocess.run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target"] + targets, check=True,
                       stdout=subprocess.DEVNULL)
    exe = os.path.join(build, "bin", "dlfuse_bench")
    noop = os.path.join(build, "bench", "plugins", "libdlfuse_noop.so")
    onednn_exe = os.path.join(build, "bin", "dlfuse_bench_onednn")
    cublaslt_exe = os.path.join(build, "bin", "dlfuse_bench_cublaslt")
    # The selection, as each program takes it.
    shapes_sel = ["--shapes", ",".join(args.shapes)] if args.shapes else []
    sel = ["--ops", ",".join(args.ops)] + shapes_sel
    mode_arg = ["--mode", mode]

    meta = {
        "command": "python3 bench/run.py " + " ".join(sys.argv[1:]),
        "date_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": mode,
        "host_cpu": cpu_name(), "host_cores": os.cpu_count(), "gpu": gpu,
        "python": platform.python_version(),
        "git": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip() or None,
        "git_dirty": bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                                         capture_output=True, text=True).stdout.strip()),
        "loadavg_before": loadavg(),
        "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "POCL_MAX_PTHREAD_COUNT",
                                           "DLFUSE_PLUGIN_PATH", "DLFUSE_OPENCL_DEVICE", "DLFUSE_OPENCL_GEMM",
                                           "DLFUSE_PREFER") if k in os.environ},
    }
    log(f"{meta['date_utc']} {mode} run on {meta['host_cpu']} ({meta['host_cores']} cores)"
        f"{', ' + gpu if gpu else ''}; load average {meta['loadavg_before']}; results -> {out_dir}")
    rows, ceilings, dispatch, plugins, skips, checks = [], [], [], [], [], []

    def take(lines, rename=None):
        for r in lines:
            if "median_ms" in r and "op" in r:
                if rename:
                    r["impl"] = rename(r["impl"])
                rows.append(r)
                if r.get("check") == "FAIL":
                    checks.append({"check": "outputs_vs_float64", "ok": False, **{k: r[k] for k in (
                        "op", "dir", "dtype", "shape", "impl", "check_max_err")}})
            elif "ceiling" in r:
                ceilings.append(r)
            elif "dispatch" in r:
                dispatch.append(r)
            elif "skip" in r:
                skips.append(r)
                log(f"  skipped: {r}")
            elif "check" in r:
                checks.append(r)
                log(f"  check: {r}")
            elif "plugin" in r or "peer" in r:
                plugins.append(r)

    def save(stage):
        """Writes results.json/.csv with what is measured so far (a run cut short keeps them)."""
        meta["complete"] = stage == "done"
        best = {}
        for c in ceilings:
            kind = "gpu" if c["device"].startswith("cuda") else "cpu"
            if c["ceiling"] == "copy_bw":
                key, val = (kind, "copy_bw", None), c["GBps"]
            else:
                key, val = (kind, "gemm_peak", c["dtype"]), c["GFLOPs"]
            best[key] = max(best.get(key, 0.0), val)
        for r in rows:
            kind = r.get("ceiling_device") or ("gpu" if r["device"].startswith("cuda") else "cpu")
            r["ceiling_device"] = kind
            what, amount = work(r)
            sec = r["median_ms"] * 1e-3
            if what == "flops":
                r["GFLOPs"] = amount / sec / 1e9
                peak = best.get((kind, "gemm_peak", r["dtype"])) or (best.get((kind, "gemm_peak", "float32"))
                                                                      if kind == "cpu" else None)
                r["pct_of_ceiling"] = 100.0 * r["GFLOPs"] / peak if peak else None
                r["ceiling"] = f"gemm_peak {peak:.1f} GFLOP/s" if peak else None
            else:
                r["GBps"] = amount / sec / 1e9
                bw = best.get((kind, "copy_bw", None))
                r["pct_of_ceiling"] = 100.0 * r["GBps"] / bw if bw else None
                r["ceiling"] = f"copy_bw {bw:.1f} GB/s" if bw else None
        meta["loadavg_after"] = loadavg()
        meta["wall_s"] = round(time.time() - t_start, 1)
        meta["model"] = ("matmul: flops = 2MNK (fwd), 4MNK (bwd: grad_a + grad_b), vs GEMM peak of the device and dtype "
                         "(CPU bf16 vs the f32 peak); add_mul_activation: bytes = inputs read once + outputs written once "
                         "(fwd (3MN+N)*itemsize, bwd (5MN+2N)*itemsize, bwd_no_grad_y (4MN+2N)*itemsize), vs copy "
                         "bandwidth (bytes read + written)")
        res = {"meta": meta, "plugins": plugins, "skipped": skips, "checks": checks, "ceilings": ceilings,
               "dispatch": dispatch, "rows": rows}
        with open(os.path.join(out_dir, "results.json"), "w") as f:
            json.dump(res, f, indent=1)
        cols = ["op", "dir", "dtype", "shape", "impl", "device", "median_ms", "p10_ms", "p90_ms", "min_ms", "rounds",
                "batch", "GFLOPs", "GBps", "pct_of_ceiling", "ceiling", "check"]
        with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow(r)
        return res

    # 1. dispatch overhead first, while the process and caches are fresh
    if not args.no_dispatch:
        log("[1/5] no-op dispatch through the C API")
        take(jsonl([exe, "dispatch", noop] + mode_arg))
        log("      ... and through Python")
        try:
            dispatch.extend(python_dispatch(build, noop, args.quick))
        except Exception as e:  # noqa: BLE001
            log(f"  python dispatch failed: {e!r}")

    # 2. ceilings (and the raw oneDNN peer, which measures the CPU GEMM peak)
    log("[2/5] ceilings")
    take(jsonl([exe, "copy-bw"] + mode_arg))
    found = jsonl([exe, "list"])
    for p in found:
        if not p["available"]:
            log(f"  plugin {p['name']} unavailable: {p['reason'][:160]}")
            skips.append({"skip": p["name"], "reason": p["reason"]})
        elif args.plugins is not None and p["name"] not in args.plugins:
            p["available"] = 0  # not selected
    if args.plugins:
        missing = set(args.plugins) - {p["name"] for p in found}
        if missing:
            log(f"  --plugins: no plugin named {sorted(missing)} here (found {[p['name'] for p in found]})")
    torch_ok = "torch" in args.peers and subprocess.run(
        [sys.executable, "-c", "import torch, triton; assert torch.cuda.is_available()"], capture_output=True).returncode == 0
    cpu_selected = any(p["available"] and p["device_type"] == 1 for p in found)
    if os.path.exists(onednn_exe):
        raw = "onednn_raw" in args.peers and cpu_selected and "float32" in args.dtypes
        take(jsonl([onednn_exe, "--gemm-peak"] + mode_arg + (sel if raw else ["--ops", "none"])))
    save("ceilings")

    # 3. plugins
    log("[3/5] plugins through the C API")
    common = mode_arg + sel + ["--dtypes", ",".join(args.dtypes), "--activations", ",".join(args.activations)]
    cpu_plugins = []
    for p in found:
        if not p["available"] or p["name"].startswith("testref"):
            continue
        for dev in range(p["device_count"]):
            # OpenCL (4) and WebGPU (15) list GPUs first: a GPU machine's device 0 is its GPU.
            is_gpu = p["device_type"] in (2, 3) or (p["device_type"] in (4, 15) and gpu is not None)
            cmd = [exe, "ops", p["path"], "--device-id", str(dev)] + common
            cmd += (["--large"] if is_gpu else []) + (["--no-grad-y"] if is_gpu or args.no_grad_y else [])
            for gemm in [None] + (args.opencl_gemm if p["name"] == "opencl" else []):
                if gemm and "matmul_add_relu" not in args.ops:
                    continue
                env = dict(os.environ, DLFUSE_OPENCL_GEMM=gemm) if gemm else None
                lines = jsonl(cmd + (["--ops", "matmul_add_relu"] if gemm else []), env=env)
                for r in lines:
                    if "median_ms" in r:
                        r["ceiling_device"] = "gpu" if is_gpu else "cpu"
                take(lines, rename=(lambda i, g=gemm: f"{i}[{g}]") if gemm else None)
            if not is_gpu:
                cpu_plugins.append(p["name"])
    save("plugins")

    # 4. peers
    log("[4/5] peers")
    quick = ["--quick"] if args.quick else []
    if cpu_plugins and "numpy" in args.peers and "float32" in args.dtypes:
        take(jsonl([sys.executable, os.path.join(HERE, "peers_numpy.py")] + quick + sel))
    cuda = next((p for p in found if p["name"] == "cuda" and p["available"]), None)
    if "cublaslt" in args.peers and os.path.exists(cublaslt_exe) and gpu and "matmul_add_relu" in args.ops:
        take(jsonl([cublaslt_exe] + mode_arg + shapes_sel + ["--dtypes", ",".join(args.dtypes)] +
                   (["--dlfuse", cuda["path"]] if cuda else [])))
    if torch_ok:
        take(jsonl([sys.executable, os.path.join(HERE, "peers_torch.py")] + quick + sel +
                   ["--dtypes", ",".join(args.dtypes)]))
    elif "torch" in args.peers:
        log("  torch with CUDA not importable here: no PyTorch peers")

    # 5. % of ceiling
    log("[5/5] % of ceiling, results")
    res = save("done")
    tables = markdown(res)
    with open(os.path.join(out_dir, "tables.md"), "w") as f:
        f.write(tables)
    sys.stdout.write(tables)
    log(f"wrote {out_dir}/results.json, results.csv, tables.md")
    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401
            subprocess.run([sys.executable, os.path.join(HERE, "plot.py"), os.path.join(out_dir, "results.json")],
                           check=False)
        except ImportError:
            log("matplotlib not importable: plot later with python3 bench/plot.py results.json")
    # A dlfuse output off its float64 reference fails the run (a peer's probe only informs).
    failed = [c for c in checks if c["check"] == "outputs_vs_float64"]
    if failed:
        log(f"{len(failed)} output check(s) FAILED: see 'checks' in results.json")
        sys.exit(1)


if __name__ == "__main__":
    main()
