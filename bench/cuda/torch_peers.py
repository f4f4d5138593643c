"""PyTorch peers of the CUDA plugin's benchmark, same GPU, same run, same shapes.

Timings: triton.testing.do_bench medians (warm-up 25 ms, rep 200 ms), as in
../shared/anchors/torch_anchor.py. One JSON object per line, like bench_cuda.
"""
import json
import sys

import torch
import torch._dynamo
from triton.testing import do_bench

torch._dynamo.config.recompile_limit = 256
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
quick = "--quick" in sys.argv


def bench(fn, rep=200):
    return do_bench(fn, warmup=25, rep=rep, return_mode="median")


def row(op, dt, shape, impl, ms, **extra):
    r = {"op": op, "dtype": str(dt).split(".")[1], "shape": shape, "impl": impl, "ms": ms}
    r.update(extra)
    print(json.dumps(r), flush=True)


print(json.dumps({"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                  "gpu": torch.cuda.get_device_name(0)}), flush=True)
x = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
y = torch.empty_like(x)
t = bench(lambda: y.copy_(x))
print(json.dumps({"op": "torch_copy", "TBps": 2 * x.numel() / t / 1e9, "ms": t}), flush=True)
del x, y


def mar_eager(a, b, bias):
    return torch.relu(torch.addmm(bias, a, b))


def mar_fused(a, b, bias):
    return torch._addmm_activation(bias, a, b)


for dt in (torch.bfloat16, torch.float32):
    for (M, K, N) in [(4096, 1024, 1024), (8192, 4096, 4096)]:
        if quick and M != 8192:
            continue
        torch._dynamo.reset()
        mar_comp = torch.compile(mar_eager)
        a = torch.randn(M, K, device=dev, dtype=dt)
        b = torch.randn(K, N, device=dev, dtype=dt)
        bias = torch.randn(N, device=dev, dtype=dt)
        shape = f"{M}x{K}x{N}"
        op = "matmul_add_relu.fwd"
        row(op, dt, shape, "torch_gemm_only", bench(lambda: a @ b))
        row(op, dt, shape, "torch_eager", bench(lambda: mar_eager(a, b, bias)))
        row(op, dt, shape, "torch_addmm_activation", bench(lambda: mar_fused(a, b, bias)))
        row(op, dt, shape, "torch_compile", bench(lambda: mar_comp(a, b, bias)))
        # NaN through torch._addmm_activation (cuBLASLt RELU epilogue) vs eager relu.
        if M == 8192 and dt == torch.bfloat16:
            a2 = a.clone()
            a2[0, 0] = float("nan")
            fused = torch._addmm_activation(bias, a2, b)[0]
            eager = mar_eager(a2, b, bias)[0]
            print(json.dumps({"op": "torch_addmm_activation_nan_probe", "shape": shape,
                              "fused_nan": int(fused.isnan().sum()), "eager_nan": int(eager.isnan().sum()),
                              "N": N}), flush=True)
        # Backward only, from a saved out: dZ = g * (out > 0); dA = dZ b^T; dB = a^T dZ; dbias = sum.
        g = torch.randn(M, N, device=dev, dtype=dt)
        out = mar_eager(a, b, bias)

        def bwd(g, out, a, b):
            dz = torch.where(out > 0, g, torch.zeros((), dtype=g.dtype, device=g.device))
            return dz @ b.t(), a.t() @ dz, dz.sum(0)

        bwd_c = torch.compile(bwd)
        row("matmul_add_relu.bwd", dt, shape, "torch_eager", bench(lambda: bwd(g, out, a, b)))
        row("matmul_add_relu.bwd", dt, shape, "torch_compile", bench(lambda: bwd_c(g, out, a, b)))
        del a, b, bias, g, out


def ama(x, bias, y, act: str):
    pre = x + bias + 0.5 * y
    return torch.relu(pre) if act == "relu" else torch.sigmoid(pre)


def ama_bwd(g, x, y, bias, act: str):
    # The same backward as the plugin's: recompute pre from x, y, bias.
    pre = x + bias + 0.5 * y
    if act == "relu":
        d = torch.where(pre > 0, g, torch.zeros((), dtype=g.dtype, device=g.device))
    else:
        s = torch.sigmoid(pre)
        d = g * s * (1 - s)
    return d, 0.5 * d, d.sum(0)


def ama_bwd_from_out(g, out, act: str):
    # The anchor's backward (h100_torch_anchor.json): from the saved out, 4 streams.
    d = g * (out > 0) if act == "relu" else g * out * (1 - out)
    return d, 0.5 * d, d.sum(0)


for dt in (torch.float32, torch.bfloat16):
    for (M, N) in [(2048, 512), (16384, 8192)]:
        if quick and M != 16384:
            continue
        for act in ("relu", "sigmoid"):
            torch._dynamo.reset()
            f = torch.compile(lambda a, b, c: ama(a, b, c, act))
            fb = torch.compile(lambda g, x, y, b: ama_bwd(g, x, y, b, act))
            fo = torch.compile(lambda g, o: ama_bwd_from_out(g, o, act))
            x = torch.randn(M, N, device=dev, dtype=dt)
            y = torch.randn(M, N, device=dev, dtype=dt)
            bias = torch.randn(N, device=dev, dtype=dt)
            g = torch.randn(M, N, device=dev, dtype=dt)
            shape = f"{M}x{N}"
            row(f"add_mul_{act}.fwd", dt, shape, "torch_eager", bench(lambda: ama(x, bias, y, act)))
            row(f"add_mul_{act}.fwd", dt, shape, "torch_compile", bench(lambda: f(x, bias, y)))
            row(f"add_mul_{act}.bwd", dt, shape, "torch_eager", bench(lambda: ama_bwd(g, x, y, bias, act)))
            row(f"add_mul_{act}.bwd", dt, shape, "torch_compile", bench(lambda: fb(g, x, y, bias)))
            out = ama(x, bias, y, act)
            row(f"add_mul_{act}.bwd", dt, shape, "torch_compile_from_out", bench(lambda: fo(g, out)))
            del x, y, bias, g, out
