"""PyTorch's side of dlfuse_lt_candidates (bench/cuda/lt_candidates.cu): GPU time per call of `a @ b` and friends, 20 calls per
CUDA graph, median of 31 replays (no host cost in the figure); warm (one set of operands)
and cold (rotating over sets of at least 128 MiB in all, as bench/run.py does).

    python3 bench/cuda/lt_candidates_torch.py DTYPE M K N
"""
import sys

import torch
import torch.nn.functional as F

dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[sys.argv[1]]
M, K, N = map(int, sys.argv[2:5])
torch.backends.cuda.matmul.allow_tf32 = False
g = torch.Generator(device="cuda").manual_seed(0)
SETS = max(1, -(-(128 << 20) // ((M * K + K * N + 2 * M * N + N) * torch.finfo(dt).bits // 8)))
ops = [(torch.rand(M, K, device="cuda", generator=g).sub_(0.5).to(dt),
        torch.rand(K, N, device="cuda", generator=g).sub_(0.5).to(dt),
        torch.rand(N, device="cuda", generator=g).to(dt),
        torch.rand(M, N, device="cuda", generator=g).to(dt)) for _ in range(SETS)]
CALLS, REPLAYS = 20, 31


def graph_us(f, n_sets):
    it = iter(range(10**9))

    def fn():
        return f(*ops[next(it) % n_sets])

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        for _ in range(CALLS):
            fn()
    for _ in range(3):
        gr.replay()
    ts = []
    for _ in range(REPLAYS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        gr.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000 / CALLS)
    return sorted(ts)[len(ts) // 2]


for name, f in (("torch a @ b", lambda a, b, bias, res: a @ b),
                ("torch addmm(bias, a, b)", lambda a, b, bias, res: torch.addmm(bias, a, b)),
                ("torch gelu_tanh(addmm)", lambda a, b, bias, res: F.gelu(torch.addmm(bias, a, b), approximate="tanh")),
                ("torch addmm + residual", lambda a, b, bias, res: torch.addmm(bias, a, b).add_(res))):
    print(f"{sys.argv[1]} {M}x{K}x{N} {name}: warm {graph_us(f, 1):.2f}, cold {graph_us(f, SETS):.2f} us "
          f"per call ({SETS} sets)")
