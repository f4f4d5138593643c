"""PyTorch peers and GPU ceilings for bench/run.py (needs torch with CUDA and triton).

Ceilings: device-to-device copy of 1 GiB (bytes read + written) and a plain 8192^3 GEMM
per dtype (float32 exact: TF32 off; bfloat16). Peers on the anchor shapes, relu:
matmul_add_relu fwd as eager relu(addmm), torch._addmm_activation (cuBLASLt's bias+relu
epilogue) and torch.compile; bwd (grad_a, grad_b, grad_bias from a saved out) eager and
compiled; add_mul_activation fwd/bwd eager and compiled (the backward recomputes the
pre-activation from x, y, bias, as the plugins do).
Timing: triton.testing.do_bench (CUDA events, L2 flushed before each call), median and
10th/90th percentiles. torch.compile runs with dynamic=True: one compilation per function
and dtype instead of one per shape, which keeps the whole run inside a GPU lease.
Usage: python3 bench/peers_torch.py [--quick]
"""
import json
import sys

import torch
from triton.testing import do_bench

QUICK = "--quick" in sys.argv
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch._dynamo.config.recompile_limit = 64
dev = "cuda"
REP = 50 if QUICK else 200


def bench(fn):
    p10, med, p90 = do_bench(fn, warmup=25, rep=REP, quantiles=[0.1, 0.5, 0.9])
    return {"median_ms": med, "p10_ms": p10, "p90_ms": p90}


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
s = bench(lambda: y.copy_(x))
emit({"ceiling": "copy_bw", "device": "cuda:0", "impl": "torch_copy_1GiB", "bytes": 2 * x.numel(),
      "GBps": 2 * x.numel() / (s["median_ms"] * 1e-3) / 1e9, **s})
del x, y
for dt in (torch.float32, torch.bfloat16):
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=dt)
    b = torch.randn(n, n, device=dev, dtype=dt)
    s = bench(lambda: a @ b)
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


for dt in (torch.float32, torch.bfloat16):
    torch._dynamo.reset()
    mar_c = torch.compile(mar_eager, dynamic=True)
    mar_bwd_c = torch.compile(mar_bwd, dynamic=True)
    ama_c = torch.compile(ama, dynamic=True)
    ama_bwd_c = torch.compile(ama_bwd, dynamic=True)
    for (M, K, N) in [(2048, 512, 256), (4096, 1024, 1024), (8192, 4096, 4096)]:
        a = torch.randn(M, K, device=dev, dtype=dt)
        b = torch.randn(K, N, device=dev, dtype=dt)
        bias = torch.randn(N, device=dev, dtype=dt)
        g = torch.randn(M, N, device=dev, dtype=dt)
        shape = f"{M}x{K}x{N}"
        row("matmul_add_relu", "fwd", dt, shape, "torch_gemm_only", bench(lambda: a @ b))
        row("matmul_add_relu", "fwd", dt, shape, "torch_eager", bench(lambda: mar_eager(a, b, bias)))
        row("matmul_add_relu", "fwd", dt, shape, "torch_addmm_activation",
            bench(lambda: torch._addmm_activation(bias, a, b)))
        row("matmul_add_relu", "fwd", dt, shape, "torch_compile", bench(lambda: mar_c(a, b, bias)))
        out = mar_eager(a, b, bias)
        row("matmul_add_relu", "bwd", dt, shape, "torch_eager", bench(lambda: mar_bwd(g, out, a, b)))
        row("matmul_add_relu", "bwd", dt, shape, "torch_compile", bench(lambda: mar_bwd_c(g, out, a, b)))
        del a, b, bias, g, out
    for (M, N) in [(2048, 512), (16384, 8192)]:
        x = torch.randn(M, N, device=dev, dtype=dt)
        y = torch.randn(M, N, device=dev, dtype=dt)
        bias = torch.randn(N, device=dev, dtype=dt)
        g = torch.randn(M, N, device=dev, dtype=dt)
        shape = f"{M}x{N}"
        row("add_mul_activation", "fwd", dt, shape, "torch_eager", bench(lambda: ama(x, bias, y)))
        row("add_mul_activation", "fwd", dt, shape, "torch_compile", bench(lambda: ama_c(x, bias, y)))
        row("add_mul_activation", "bwd", dt, shape, "torch_eager", bench(lambda: ama_bwd(g, x, y, bias)))
        row("add_mul_activation", "bwd", dt, shape, "torch_compile", bench(lambda: ama_bwd_c(g, x, y, bias)))
        del x, y, bias, g
