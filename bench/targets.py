#!/usr/bin/env python3
"""The ratios issue 17 asks of the ABI 1.1 rows, each with PASS or FAIL, from one
bench/run.py results.json (numbers of one run only, so that a ratio never spans two
machines or two moments).

  python3 bench/targets.py path/to/results.json

One line per target, dtype, shape and dlfuse implementation:
  - matmul_add_activation[gelu_tanh] fwd <= 1.03 x torch_gemm_only (float32 and bfloat16,
    8192x4096x4096 and 4096x1024x1024): the GELU epilogue costs at most 3% over the GEMM;
  - matmul_add_activation[gelu_tanh] bwd (from pre) < torch_eager and < torch_compile
    (the same cases);
  - add_mul_activation bwd_from_out, float32 16384x8192, <= 1.05 x the time of moving its 4
    full arrays (grad_out, out read; grad_x, grad_y written) at the copy bandwidth measured
    in the run on the row's kind of device;
  - add_mul_activation bwd_from_out < torch_compile (float32 and bfloat16, 16384x8192);
  - matmul_add_residual fwd, bfloat16 8192x4096x4096, <= 1.03 x torch_gemm_only.
A target is evaluated only when the run has a row of its op and direction; a case the run
lacks (no dlfuse row, no peer row, no copy bandwidth) prints MISSING. A peer row counts only
on the dlfuse row's kind of device (gpu or cpu), as in run.py's % of ceiling.
Every line comes out of one GPU run (the PyTorch peers need torch with CUDA), e.g.
  bash tools/gpu.sh bench="--plugins cuda --peers torch --ops
    matmul_add_activation,matmul_add_residual,add_mul_activation
    --shapes 4096x1024x1024,8192x4096x4096,16384x8192 --dtypes float32,bfloat16 --no-dispatch"
(one line in the shell); run.py prints them last, report.py under **Targets**.
"""
import json
import sys

GELU = "matmul_add_activation[gelu_tanh]"
MM_CASES = [(dt, sh) for sh in ("8192x4096x4096", "4096x1024x1024") for dt in ("float32", "bfloat16")]
AM_SHAPE = "16384x8192"
ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}

# (op, dir, cases, reference, comparison, limit). reference: a peer's impl name, or
# "copy_bw" for the time of 4 full arrays at the run's copy bandwidth.
TARGETS = [
    (GELU, "fwd", MM_CASES, "torch_gemm_only", "<=", 1.03),
    (GELU, "bwd", MM_CASES, "torch_eager", "<", 1.0),
    (GELU, "bwd", MM_CASES, "torch_compile", "<", 1.0),
    ("add_mul_activation", "bwd_from_out", [("float32", AM_SHAPE)], "copy_bw", "<=", 1.05),
    ("add_mul_activation", "bwd_from_out", [("float32", AM_SHAPE), ("bfloat16", AM_SHAPE)], "torch_compile", "<", 1.0),
    ("matmul_add_residual", "fwd", [("bfloat16", "8192x4096x4096")], "torch_gemm_only", "<=", 1.03),
]


def kind(r):
    """gpu or cpu: the device whose ceilings and peers a row is measured against."""
    return r.get("ceiling_device") or ("gpu" if r["device"].startswith("cuda") else "cpu")


def copy_bw(res, k):
    """Best copy bandwidth (GB/s, bytes read + written) measured in the run on kind k."""
    bws = [c["GBps"] for c in res.get("ceilings", []) if c.get("ceiling") == "copy_bw"
           and ("gpu" if c["device"].startswith("cuda") else "cpu") == k]
    return max(bws) if bws else None


def evaluate(res):
    """A dict per target line: target, case, impl, ms, ref_ms, ratio, limit, verdict
    (PASS, FAIL or MISSING) and, for MISSING, why."""
    rows = res.get("rows", [])
    out = []
    for op, d, cases, ref, cmp, limit in TARGETS:
        if not any(r["op"] == op and r["dir"] == d for r in rows):
            continue
        name = f"{op} {d} {'/ ' + ref if ref != 'copy_bw' else '/ (4 arrays at copy_bw)'} {cmp} {limit:.2f}"
        for dt, sh in cases:
            here = [r for r in rows if (r["op"], r["dir"], r["dtype"], r["shape"]) == (op, d, dt, sh)]
            mine = sorted((r for r in here if r["impl"].startswith("dlfuse_")), key=lambda r: r["impl"])
            base = {"target": name, "dtype": dt, "shape": sh, "limit": limit}
            if not mine:
                out.append(dict(base, impl="dlfuse", verdict="MISSING", why="no dlfuse row"))
                continue
            for r in mine:
                line = dict(base, impl=r["impl"], ms=r["median_ms"])
                if ref == "copy_bw":
                    bw = copy_bw(res, kind(r))
                    if bw is None:
                        out.append(dict(line, verdict="MISSING", why=f"no {kind(r)} copy_bw ceiling"))
                        continue
                    dims = [int(v) for v in sh.split("x")]
                    ref_ms = 4 * dims[0] * dims[1] * ITEMSIZE[dt] / (bw * 1e9) * 1e3
                else:
                    peer = next((p for p in here if p["impl"] == ref and kind(p) == kind(r)), None)
                    if peer is None:
                        out.append(dict(line, verdict="MISSING", why=f"no {ref} row"))
                        continue
                    ref_ms = peer["median_ms"]
                ratio = r["median_ms"] / ref_ms
                ok = ratio <= limit if cmp == "<=" else ratio < limit
                out.append(dict(line, ref_ms=ref_ms, ratio=ratio, verdict="PASS" if ok else "FAIL"))
    return out


def fmt(t):
    head = f"target {t['target']}: {t['dtype']} {t['shape']} {t['impl']}"
    if t["verdict"] == "MISSING":
        return f"{head}: MISSING ({t['why']})"
    return f"{head}: {t['ms']:.4f} / {t['ref_ms']:.4f} ms = {t['ratio']:.3f} {t['verdict']}"


def main(argv):
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for t in evaluate(json.load(open(argv[0]))):
        print(fmt(t))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
