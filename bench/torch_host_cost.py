#!/usr/bin/env python3
"""Host time of PyTorch's own calls on the problem of dlfuse_cuda_host_cost's large section
(bfloat16 4096x1024x1024, about 15 us of GPU time on the H100): 64 back-to-back calls a
round, no synchronize inside the round, median of 21 rounds, in ns per call. When this is
below the GPU time, a bench row of that call measures the GPU, not the host.

    python3 bench/torch_host_cost.py          (run by `tools/gpu.sh ab` beside the C++ one)
"""
import statistics
import time

import torch
import torch.nn.functional as F

M, K, N = 4096, 1024, 1024
CALLS, ROUNDS = 64, 21


def median_ns(f):
    for _ in range(200):
        f()
    torch.cuda.synchronize()
    t = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            f()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t.append((t1 - t0) / CALLS * 1e9)
    return statistics.median(t)


def main():
    a = torch.zeros(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.zeros(K, N, device="cuda", dtype=torch.bfloat16)
    bias = torch.zeros(N, device="cuda", dtype=torch.bfloat16)
    print(f"bfloat16 {M}x{K}x{N} ({CALLS} calls a round), ns per call, host")
    for name, f in (("torch a @ b", lambda: a @ b),
                    ("torch.addmm(bias, a, b)", lambda: torch.addmm(bias, a, b)),
                    ("F.gelu(torch.addmm(bias, a, b), approximate='tanh')",
                     lambda: F.gelu(torch.addmm(bias, a, b), approximate="tanh"))):
        print(f"{name:58s} {median_ns(f):8.0f}")


if __name__ == "__main__":
    main()
