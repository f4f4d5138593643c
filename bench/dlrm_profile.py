#!/usr/bin/env python3
"""Where a DLRM training step's time goes (bindings/python/examples/dlrm_mlp.py's model), with
dlfuse ops and in plain PyTorch: the host time of forward, backward and optimizer step
(median over steps, the two models stepping in turn; the GPU runs behind the host, so on a
host-bound step these add up to the step), the wait for the GPU at the end of the step, and
then torch.profiler's operators by self CPU time.

    python3 bench/dlrm_profile.py --device cuda --batch 256 [--rows 20] [--compile] [--whole-mlp]

Run it twice, with DLFUSE_TORCH_OPS=python and without, to compare dlfuse.torch's Python
and C++ operators (docs/python.md). --whole-mlp adds a third model, an experiment on the
binding's structure: dlfuse's model with its 4-layer bottom MLP as one autograd node whose
forward and backward call the extension layer by layer (one node and no dispatcher call per
layer instead of one each); its loss and gradients are checked against the per-op model's
first.
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


class BottomMLP(torch.autograd.Function):
    """relu(... relu(x @ W0^T + b0) ...) over every layer, one autograd node."""

    @staticmethod
    def forward(ctx, x, *params):
        ws, bs = params[0::2], params[1::2]
        acts = [x]
        for w, b in zip(ws, bs):
            acts.append(dft._mar_fwd(acts[-1], w.t(), b, False))
        ctx.save_for_backward(*acts, *ws)
        ctx.bias_shapes = [tuple(b.shape) for b in bs]
        return acts[-1]

    @staticmethod
    def backward(ctx, g):
        saved = ctx.saved_tensors
        n = len(ctx.bias_shapes)
        acts, ws = saved[:n + 1], saved[n + 1:]
        grads = []
        for layer in reversed(range(n)):
            need_a = layer > 0 or ctx.needs_input_grad[0]
            ga, gb, gbias = dft._mar_bwd(g, acts[layer], ws[layer].t(), acts[layer + 1],
                                         ctx.bias_shapes[layer], (need_a, True, True), False)
            grads = [gb.t(), gbias] + grads
            g = ga
        return (g if ctx.needs_input_grad[0] else None, *grads)


# torch's C apply, as dlfuse.torch's public functions use it (Function.apply's Python layer
# costs more than a small kernel call)
_bottom_apply = super(torch.autograd.Function, BottomMLP).apply


class WholeMLP(dlrm_mlp.DLRM):
    """dlrm_mlp.DLRM with dlfuse, the bottom MLP as one BottomMLP node."""

    def __init__(self):
        super().__init__(use_dlfuse=True)
        self.bottom_params = [p for lin in self.bottom for p in (lin.weight, lin.bias)]

    def forward(self, dense, sparse):
        return self.interaction_and_top(_bottom_apply(dense, *self.bottom_params), sparse)


def check_whole_mlp(base, data, device):
    """The whole-MLP model's loss and gradients equal the per-op dlfuse model's (one step)."""
    models = []
    for m in (dlrm_mlp.DLRM(use_dlfuse=True), WholeMLP()):
        m = m.to(device)
        m.load_state_dict(base.state_dict())
        loss = F.binary_cross_entropy_with_logits(m(data[0][0], data[1][0]), data[2][0])
        loss.backward()
        models.append((loss.detach(), {k: p.grad for k, p in m.named_parameters()}))
    (l0, g0), (l1, g1) = models
    torch.testing.assert_close(l1, l0, rtol=1e-5, atol=1e-6)
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-4, atol=1e-6, msg=lambda m: f"{k}: {m}")
    print("whole-MLP model: loss and every gradient equal the per-op model's (one step)")


class Phases:
    """One model's training steps, timed by phase (host time; the GPU runs behind)."""

    def __init__(self, model, device):
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        self.sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
        self.rows = []

    def step(self, data, i):
        dense, sparse, labels = data
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(self.model(dense[i], sparse[i]), labels[i])
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        self.opt.step()
        t3 = time.perf_counter()
        self.sync()
        t4 = time.perf_counter()
        return (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=200, help="timed steps (after 50 warm-up)")
    ap.add_argument("--rows", type=int, default=20, help="profiler table rows")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile both models (their forward and backward graphs; the optimizer stays eager)")
    ap.add_argument("--whole-mlp", action="store_true",
                    help="a third model: dlfuse with the bottom MLP as one autograd node (eager only)")
    args = ap.parse_args()
    if args.whole_mlp and args.compile:
        ap.error("--whole-mlp is an eager experiment")
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"dlfuse.torch operators: {'C++' if dft.CPP_OPS else 'Python'}"
          f"{'' if dft.CPP_OPS else ' (' + str(dft._torch_cpp.why_not) + ')'}; torch {torch.__version__}; "
          f"device {args.device}; batch {args.batch}{'; torch.compile' if args.compile else ''}")
    torch.manual_seed(0)
    base = dlrm_mlp.DLRM(use_dlfuse=False).to(args.device)
    data = dlrm_mlp.make_data(50 + args.steps + 10, args.batch, args.device, 1)
    runs = {}
    makers = [("pytorch", lambda: dlrm_mlp.DLRM(use_dlfuse=False)), ("dlfuse", lambda: dlrm_mlp.DLRM(use_dlfuse=True))]
    if args.whole_mlp:
        check_whole_mlp(base, data, args.device)
        makers.append(("dlfuse_mlp1", WholeMLP))
    for name, make in makers:
        model = make().to(args.device)
        model.load_state_dict(base.state_dict())
        runs[name] = Phases(torch.compile(model) if args.compile else model, args.device)
    # The two models step in turn (warm-up: allocator, cuBLAS plans; then timed), so that the
    # host's drift hits both alike, and both are timed before any profiler runs (an earlier
    # version timed dlfuse after PyTorch's torch.profiler session and measured even the
    # identical Adam step 27% slower for dlfuse).
    for i in range(50 + args.steps):
        for name, r in runs.items():
            row = r.step(data, i)
            if i >= 50:
                r.rows.append(row)
    for name, r in runs.items():
        med = [statistics.median(x[k] for x in r.rows) * 1e6 for k in range(5)]
        print(f"{name:11s} us per step (median of {args.steps}, interleaved): forward {med[0]:.0f}  "
              f"backward {med[1]:.0f}  optimizer {med[2]:.0f}  wait for GPU {med[3]:.0f}  step {med[4]:.0f}")
    for name, r in runs.items():
        with torch.profiler.profile() as prof:
            for i in range(50 + args.steps, 50 + args.steps + 10):
                r.step(data, i)
        print(f"{name}: torch.profiler over 10 steps")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
