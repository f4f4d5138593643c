"""cuBLAS float32 reference for bench/opencl (run in the same job as the OpenCL bench).

For each MxKxN: torch.mm (cuBLAS sgemm, TF32 off), and relu(addmm) as the unfused
matmul_add_relu. Times with CUDA events over back-to-back calls (median of 5 rounds).
Prints RESULT lines in the format of bench_gemm.
"""
import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

shapes = [tuple(int(v) for v in s.split("x")) for s in (sys.argv[1] if len(sys.argv) > 1 else "2048x512x256").split(",")]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
dev = torch.device("cuda")
print(f"# torch {torch.__version__} cuda {torch.version.cuda} {torch.cuda.get_device_name(0)} allow_tf32={torch.backends.cuda.matmul.allow_tf32}")


def timed(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        per.append(a.elapsed_time(b) / reps)
    per.sort()
    return per[len(per) // 2]


for M, K, N in shapes:
    g = torch.Generator(device=dev).manual_seed(0)
    A = torch.rand(M, K, device=dev, generator=g) * 2 - 1
    B = torch.rand(K, N, device=dev, generator=g) * 2 - 1
    bias = torch.rand(N, device=dev, generator=g) * 2 - 1
    C = torch.empty(M, N, device=dev)
    flop = 2.0 * M * K * N
    ms = timed(lambda: torch.mm(A, B, out=C))
    print(f"RESULT impl=cublas-sgemm(torch.mm) device=cuda:0 shape={M}x{K}x{N} pipelined_ms={ms:.4f} pipelined_gflops={flop / ms / 1e6:.1f}", flush=True)
    ms = timed(lambda: torch.relu(torch.addmm(bias, A, B)))
    print(f"RESULT impl=torch-relu(addmm)-fp32 device=cuda:0 shape={M}x{K}x{N} pipelined_ms={ms:.4f} pipelined_gflops={flop / ms / 1e6:.1f}", flush=True)
