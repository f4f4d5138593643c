"""Where a call's GPU time goes, kernel by kernel: dlfuse's CUDA plugin against PyTorch eager
on the same problem, timed by torch.profiler (CUPTI sees the plugin's kernels and
cuBLASLt's too). Needs torch with CUDA and the dlfuse package (DLFUSE_LIBRARY etc. as for the
Python tests).

    python3 bench/kernel_times.py [--shape 4096x1024x1024] [--dtype bfloat16] [--reps 50]
    bash tools/gpu.sh python=profile        (on a GPU machine: builds, then runs it per dtype)

Cases: matmul_add_activation gelu_tanh forward and backward (from pre), against
gelu(addmm) and gelu_backward + dz @ b^T, a^T @ dz, dz.sum(0). Prints, per case, each
kernel's mean time per call and the call's total GPU time.
"""
import argparse

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import dlfuse

p = argparse.ArgumentParser()
p.add_argument("--shape", default="4096x1024x1024")
p.add_argument("--dtype", default="bfloat16")
p.add_argument("--reps", type=int, default=50)
args = p.parse_args()
M, K, N = (int(v) for v in args.shape.split("x"))
dt = getattr(torch, args.dtype)
torch.backends.cuda.matmul.allow_tf32 = False
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(M, K, device="cuda", dtype=dt, generator=g)
b = torch.randn(K, N, device="cuda", dtype=dt, generator=g)
bias = torch.randn(N, device="cuda", dtype=dt, generator=g)
grad = torch.randn(M, N, device="cuda", dtype=dt, generator=g)
out, pre = dlfuse.matmul_add_activation(a, b, bias, "gelu_tanh", pre=True)
pre = torch.from_dlpack(pre)


def eager_bwd():
    dz = torch.ops.aten.gelu_backward(grad, pre, approximate="tanh")
    return dz @ b.t(), a.t() @ dz, dz.sum(0)


cases = {
    "dlfuse fwd": lambda: dlfuse.matmul_add_activation(a, b, bias, "gelu_tanh"),
    "torch eager fwd": lambda: F.gelu(torch.addmm(bias, a, b), approximate="tanh"),
    "dlfuse bwd (from pre)": lambda: dlfuse.matmul_add_activation_backward(
        grad, a, b, "gelu_tanh", pre=pre, bias_shape=(N,)),
    "torch eager bwd": eager_bwd,
}
print(f"{torch.cuda.get_device_name(0)}, {args.dtype} {args.shape}, {args.reps} calls per case")
for name, fn in cases.items():
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.reps):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time_total for e in kernels) / args.reps
    print(f"\n{name}: {total:.1f} us of GPU time per call")
    for e in sorted(kernels, key=lambda e: -e.device_time_total):
        print(f"  {e.device_time_total / args.reps:8.1f} us  x{e.count / args.reps:.0f}  {e.key[:110]}")
