"""PyTorch peers and GPU ceilings for bench/run.py (needs torch with CUDA and triton).

Ceilings: device-to-device copy of 1 GiB (bytes read + written) and a plain 8192^3 GEMM
per dtype (float32 exact: TF32 off; bfloat16). Peers on the anchor shapes, relu:
matmul_add_relu fwd as eager relu(addmm), torch._addmm_activation (cuBLASLt's bias+relu
epilogue) and torch.compile; bwd (grad_a, grad_b, grad_bias from a saved out) eager and
compiled; add_mul_activation fwd/bwd eager and compiled (the backward recomputes the
pre-activation from x, y, bias, as the plugins do) and bwd_from_out (the same gradients from
grad_out and out, ABI 1.1).
ABI 1.1 ops, when --ops lists them, on the matmul shapes: matmul_add_activation[gelu_tanh]
fwd (plain GEMM, eager gelu(addmm), compiled) and bwd from the saved pre (eager
aten.gelu_backward then the two GEMMs and the bias sum, compiled); matmul_add_residual fwd
(plain GEMM, eager addmm + residual, compiled). The plain GEMM is timed once per shape and
dtype and reported under each op, as the floor an epilogue is measured against.
Timing: the method of bench/driver/dlfuse_bench.cpp, so that the rows compare like for
like with the plugins': warm-up, then batches of about 20 ms of back-to-back calls (at most
100), each batch closed by torch.cuda.synchronize() and timed by the host clock; median and
10th/90th percentiles of the per-call times over the batches (about 2 s per case, 0.3 s
with --quick); inputs rotate over several sets when a set is smaller than 128 MiB.
torch.compile runs with dynamic=True: one compilation per function and dtype instead of
one per shape, which keeps the whole run inside a GPU lease.
Check row: does torch._addmm_activation (the RELU epilogue) keep relu(NaN) = NaN, as eager
relu does? (A[0, 0] = NaN, largest matmul shape, bfloat16.)
Usage: python3 bench/peers_torch.py [--quick] [--ops LIST] [--shapes MxKxN,MxN,...] [--dtypes LIST]
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

from peer_args import parse_selection

QUICK, OPS, SHAPES, DTYPES = parse_selection(sys.argv[1:])
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch._dynamo.config.recompile_limit = 64
dev = "cuda"


def sets_for(set_bytes):
    want = (128 << 20) // max(set_bytes, 1) + 1
    cap = max(1, (1 << 30) // max(set_bytes, 1))
    return max(1, min(want, 8, cap))


# bench/driver/timing.hpp's kBatchSeconds: a batch's target length.
BATCH_SECONDS = 0.020


def bench(call):
    """call(i) runs repetition i (rotating over input sets itself)."""
    budget, min_rounds, max_rounds = (0.3, 3, 30) if QUICK else (2.0, 7, 300)
    sync = torch.cuda.synchronize
    call(0)
    sync()
    t0 = time.perf_counter()
    call(1)
    sync()
    one = time.perf_counter() - t0
    if one < 0.05:
        call(2)
        sync()
        t0 = time.perf_counter()
        call(3)
        sync()
        one = min(one, time.perf_counter() - t0)
    batch = int(min(100, max(1, BATCH_SECONDS / max(one, 1e-7))))
    rounds = int(min(max_rounds, max(min_rounds if one <= 0.5 else 3, budget / max(one * batch, 1e-7))))
    per_call, rep = [], 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(batch):
            call(rep)
            rep += 1
        sync()
        per_call.append((time.perf_counter() - t0) / batch)
    q = torch.tensor(per_call, dtype=torch.float64).quantile(torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    return {"median_ms": float(q[1]) * 1e3, "p10_ms": float(q[0]) * 1e3, "p90_ms": float(q[2]) * 1e3,
            "min_ms": min(per_call) * 1e3, "rounds": rounds, "batch": batch}


def emit(obj):
    print(json.dumps(obj), flush=True)


def row(op, d, dt, shape, impl, stats):
    r = {"op": op, "dir": d, "dtype": str(dt).split(".")[1], "shape": shape, "impl": impl, "device": "cuda:0"}
    r.update(stats)
    emit(r)
    print(f"  {impl} {op} {d} {r['dtype']} {shape}: median {stats['median_ms'] * 1e3:.1f} us", file=sys.stderr,
          flush=True)


emit({"peer": "torch", "version": torch.__version__, "cuda": torch.version.cuda,
      "gpu": torch.cuda.get_device_name(0)})
x = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
y = torch.empty_like(x)
s = bench(lambda i: y.copy_(x))
emit({"ceiling": "copy_bw", "device": "cuda:0", "impl": "torch_copy_1GiB", "bytes": 2 * x.numel(),
      "GBps": 2 * x.numel() / (s["median_ms"] * 1e-3) / 1e9, **s})
del x, y
for dt in (getattr(torch, d) for d in DTYPES if d in ("float32", "bfloat16")):
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=dt)
    b = torch.randn(n, n, device=dev, dtype=dt)
    s = bench(lambda i: a @ b)
    emit({"ceiling": "gemm_peak", "device": "cuda:0", "dtype": str(dt).split(".")[1], "impl": f"torch_mm_{n}^3",
          "GFLOPs": 2 * n ** 3 / (s["median_ms"] * 1e-3) / 1e9, **s})
    del a, b


def mar_eager(a, b, bias):
    return torch.relu(torch.addmm(bias, a, b))


def mar_bwd(g, out, a, b):
    dz = torch.where(out > 0, g, torch.zeros((), dtype=g.dtype, device=g.device))
    return dz @ b.t(), a.t() @ dz, dz.sum(0)


def ama(x, bias, y):
    return torch.relu(x + bias + 0.5 * y)


def ama_bwd(g, x, y, bias):
    d = torch.where(x + bias + 0.5 * y > 0, g, torch.zeros((), dtype=g.dtype, device=g.device))
    return d, 0.5 * d, d.sum(0)


def gelu_fwd(a, b, bias):
    return F.gelu(torch.addmm(bias, a, b), approximate="tanh")


def gelu_bwd(g, pre, a, b):
    dz = torch.ops.aten.gelu_backward(g, pre, approximate="tanh")
    return dz @ b.t(), a.t() @ dz, dz.sum(0)


def residual_fwd(a, b, bias, r):
    return torch.addmm(bias, a, b) + r


def ama_bwd_from_out(g, out):
    # NaN in out selects 0 here and grad_out in dlfuse (docs/ops.md); the timing is the same.
    d = torch.where(out > 0, g, torch.zeros((), dtype=g.dtype, device=g.device))
    return d, 0.5 * d, d.sum(0)


GELU = "matmul_add_activation[gelu_tanh]"
MM = [s for s in SHAPES or [(2048, 512, 256), (4096, 1024, 1024), (8192, 4096, 4096)] if len(s) == 3]
AM = [s for s in SHAPES or [(2048, 512), (16384, 8192)] if len(s) == 2]
for dt in (getattr(torch, d) for d in DTYPES if d in ("float32", "bfloat16")):
    torch._dynamo.reset()
    mar_c = torch.compile(mar_eager, dynamic=True)
    mar_bwd_c = torch.compile(mar_bwd, dynamic=True)
    ama_c = torch.compile(ama, dynamic=True)
    ama_bwd_c = torch.compile(ama_bwd, dynamic=True)
    ama_bwd_out_c = torch.compile(ama_bwd_from_out, dynamic=True)
    gelu_c = torch.compile(gelu_fwd, dynamic=True)
    gelu_bwd_c = torch.compile(gelu_bwd, dynamic=True)
    residual_c = torch.compile(residual_fwd, dynamic=True)
    for (M, K, N) in MM if "matmul_add_relu" in OPS else []:
        it = dt.itemsize
        S = sets_for((M * K + K * N + 2 * M * N + N) * it)
        A = [torch.randn(M, K, device=dev, dtype=dt) for _ in range(S)]
        B = [torch.randn(K, N, device=dev, dtype=dt) for _ in range(S)]
        Bi = [torch.randn(N, device=dev, dtype=dt) for _ in range(S)]
        G = [torch.randn(M, N, device=dev, dtype=dt) for _ in range(S)]
        shape = f"{M}x{K}x{N}"
        row("matmul_add_relu", "fwd", dt, shape, "torch_gemm_only", bench(lambda i: A[i % S] @ B[i % S]))
        row("matmul_add_relu", "fwd", dt, shape, "torch_eager",
            bench(lambda i: mar_eager(A[i % S], B[i % S], Bi[i % S])))
        row("matmul_add_relu", "fwd", dt, shape, "torch_addmm_activation",
            bench(lambda i: torch._addmm_activation(Bi[i % S], A[i % S], B[i % S])))
        row("matmul_add_relu", "fwd", dt, shape, "torch_compile", bench(lambda i: mar_c(A[i % S], B[i % S], Bi[i % S])))
        if dt == torch.bfloat16 and (M, K, N) == max(MM, key=lambda s: s[0] * s[1] * s[2]):
            a = A[0].clone()
            a[0, 0] = float("nan")
            nan = int(torch._addmm_activation(Bi[0], a, B[0])[0].isnan().sum())
            eager_nan = int(mar_eager(a, B[0], Bi[0])[0].isnan().sum())
            emit({"check": "addmm_activation_nan_probe", "impl": "torch_addmm_activation", "dtype": "bfloat16",
                  "shape": shape, "nan_expected": N, "nan_got": nan, "eager_nan_got": eager_nan, "ok": nan == N})
            del a
        O = [mar_eager(A[k], B[k], Bi[k]) for k in range(S)]
        row("matmul_add_relu", "bwd", dt, shape, "torch_eager",
            bench(lambda i: mar_bwd(G[i % S], O[i % S], A[i % S], B[i % S])))
        row("matmul_add_relu", "bwd", dt, shape, "torch_compile",
            bench(lambda i: mar_bwd_c(G[i % S], O[i % S], A[i % S], B[i % S])))
        del A, B, Bi, G, O
    abi11 = [op for op in ("matmul_add_activation", "matmul_add_residual") if op in OPS]
    for (M, K, N) in MM if abi11 else []:
        # The sets of the driver's bench_matmul_epilogue: a, b, bias, out, pre or residual, grad_out.
        S = sets_for((M * K + K * N + 3 * M * N + N) * dt.itemsize)
        A = [torch.randn(M, K, device=dev, dtype=dt) for _ in range(S)]
        B = [torch.randn(K, N, device=dev, dtype=dt) for _ in range(S)]
        Bi = [torch.randn(N, device=dev, dtype=dt) for _ in range(S)]
        shape = f"{M}x{K}x{N}"
        gemm = bench(lambda i: A[i % S] @ B[i % S])
        for op in abi11:
            row(GELU if op == "matmul_add_activation" else op, "fwd", dt, shape, "torch_gemm_only", gemm)
        if "matmul_add_activation" in OPS:
            row(GELU, "fwd", dt, shape, "torch_eager", bench(lambda i: gelu_fwd(A[i % S], B[i % S], Bi[i % S])))
            row(GELU, "fwd", dt, shape, "torch_compile", bench(lambda i: gelu_c(A[i % S], B[i % S], Bi[i % S])))
            P = [torch.addmm(Bi[k], A[k], B[k]) for k in range(S)]
            G = [torch.randn(M, N, device=dev, dtype=dt) for _ in range(S)]
            row(GELU, "bwd", dt, shape, "torch_eager",
                bench(lambda i: gelu_bwd(G[i % S], P[i % S], A[i % S], B[i % S])))
            row(GELU, "bwd", dt, shape, "torch_compile",
                bench(lambda i: gelu_bwd_c(G[i % S], P[i % S], A[i % S], B[i % S])))
            del P, G
        if "matmul_add_residual" in OPS:
            R = [torch.randn(M, N, device=dev, dtype=dt) for _ in range(S)]
            row("matmul_add_residual", "fwd", dt, shape, "torch_eager",
                bench(lambda i: residual_fwd(A[i % S], B[i % S], Bi[i % S], R[i % S])))
            row("matmul_add_residual", "fwd", dt, shape, "torch_compile",
                bench(lambda i: residual_c(A[i % S], B[i % S], Bi[i % S], R[i % S])))
            del R
        del A, B, Bi
    for (M, N) in AM if "add_mul_activation" in OPS else []:
        S = sets_for((7 * M * N + 2 * N) * dt.itemsize)
        X = [torch.randn(M, N, device=dev, dtype=dt) for _ in range(S)]
        Y = [torch.randn(M, N, device=dev, dtype=dt) for _ in range(S)]
        Bi = [torch.randn(N, device=dev, dtype=dt) for _ in range(S)]
        G = [torch.randn(M, N, device=dev, dtype=dt) for _ in range(S)]
        shape = f"{M}x{N}"
        row("add_mul_activation", "fwd", dt, shape, "torch_eager", bench(lambda i: ama(X[i % S], Bi[i % S], Y[i % S])))
        row("add_mul_activation", "fwd", dt, shape, "torch_compile",
            bench(lambda i: ama_c(X[i % S], Bi[i % S], Y[i % S])))
        row("add_mul_activation", "bwd", dt, shape, "torch_eager",
            bench(lambda i: ama_bwd(G[i % S], X[i % S], Y[i % S], Bi[i % S])))
        row("add_mul_activation", "bwd", dt, shape, "torch_compile",
            bench(lambda i: ama_bwd_c(G[i % S], X[i % S], Y[i % S], Bi[i % S])))
        O = [ama(X[k], Bi[k], Y[k]) for k in range(S)]
        row("add_mul_activation", "bwd_from_out", dt, shape, "torch_eager",
            bench(lambda i: ama_bwd_from_out(G[i % S], O[i % S])))
        row("add_mul_activation", "bwd_from_out", dt, shape, "torch_compile",
            bench(lambda i: ama_bwd_out_c(G[i % S], O[i % S])))
        del X, Y, Bi, G, O
