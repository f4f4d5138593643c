#!/usr/bin/env python3
"""Where a DLRM training step's time goes (bindings/python/examples/dlrm_mlp.py's model), with
dlfuse ops and in plain PyTorch: the host time of forward, backward and optimizer step
(median over steps; the GPU runs behind the host, so on a host-bound step these add up to
the step), the wait for the GPU at the end of the step, and torch.profiler's operators by
self CPU time.

    python3 bench/dlrm_profile.py --device cuda --batch 256 [--rows 20]

Run it twice, with DLFUSE_TORCH_OPS=python and without, to compare dlfuse.torch's Python
and C++ operators (docs/python.md).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings",
                                "python", "examples"))
import dlrm_mlp  # noqa: E402
import dlfuse.torch as dft  # noqa: E402


def phases(model, data, steps, device):
    dense, sparse, labels = data
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    rows = []
    for i in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(model(dense[i], sparse[i]), labels[i])
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        sync()
        t4 = time.perf_counter()
        rows.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=200, help="timed steps (after 50 warm-up)")
    ap.add_argument("--rows", type=int, default=20, help="profiler table rows")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"dlfuse.torch operators: {'C++' if dft.CPP_OPS else 'Python'}"
          f"{'' if dft.CPP_OPS else ' (' + str(dft._torch_cpp.why_not) + ')'}; torch {torch.__version__}; "
          f"device {args.device}; batch {args.batch}")
    torch.manual_seed(0)
    base = dlrm_mlp.DLRM(use_dlfuse=False).to(args.device)
    data = dlrm_mlp.make_data(50 + args.steps + 10, args.batch, args.device, 1)
    for name, use in (("pytorch", False), ("dlfuse", True)):
        model = dlrm_mlp.DLRM(use_dlfuse=use).to(args.device)
        model.load_state_dict(base.state_dict())
        phases(model, data, 50, args.device)  # warm-up: allocator, cuBLAS plans
        rows = phases(model, data, args.steps, args.device)
        med = [statistics.median(r[k] for r in rows) * 1e6 for k in range(5)]
        print(f"{name:8s} us per step (median of {args.steps}): forward {med[0]:.0f}  backward {med[1]:.0f}  "
              f"optimizer {med[2]:.0f}  wait for GPU {med[3]:.0f}  step {med[4]:.0f}")
        with torch.profiler.profile() as prof:
            phases(model, data, 10, args.device)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
