#!/usr/bin/env python3
"""A small DLRM-style model trained from one initialization on the same synthetic data three
times: with dlfuse ops (dlfuse.torch, float32), in pure PyTorch (float32), and in pure
PyTorch in float64 (the anchor). The script exits 1 unless
  (a) over the first --early steps, before training's chaotic amplification of rounding
      sets in, dlfuse is close to the float64 run:
      max_i<early |L_dlfuse - L_64| <= --factor * max_k max_i<early |L_torch32_k - L_64| + --rtol
      (relative, floor 1; torch32_k the float32 runs of (b)). A wrong kernel fails here
      within 20 steps;
  (b) over all steps dlfuse stays as close to the float64 run as PyTorch float32 does.
      Two float32 programs that sum in different orders drift apart under Adam, which
      divides tiny gradient differences by tiny second moments, and how far is a matter of
      chance: D = max_i |L - L_64| (relative, floor 1) of one float32 run is one draw from a
      wide distribution (20 row-permuted runs, batch 256 on the CPU: a factor of 28 from
      the least to the largest, log D's standard deviation 1.2). The draws D_k: the plain
      PyTorch float32 run and --spread runs that see each batch's rows in another order
      (the same loss and gradients in exact arithmetic, other rounding); dlfuse's D, a
      correct run being one more draw, must lie below
        max(--factor * max_k D_k, exp(m + t * s * sqrt(1 + 1/n))) + --slack,
      where m and s are the mean and standard deviation of log D_k over the n draws and t
      Student's t quantile with n - 1 degrees of freedom at 1 - --alpha: the one-sided
      prediction bound of one more draw of a log-normal quantity, which a correct run
      exceeds with probability --alpha (1e-4). (b) is thereby loose (at that spread, with
      n = 16, about 460 times the draws' geometric mean: each of those 20 draws against the
      bound from 16 of the others, 2000 times, came to at most 0.03 of it, where a bound
      of 2 x the largest of 4 draws failed 8% of the time); it catches divergence and NaN
      late in training, and (a) catches a wrong kernel;
  (c) the loss falls (the last 10 steps' mean is below 0.9x the first 10 steps').

Model (as in the cuda-mode DLRM lecture's MLP sizes):
  dense [B, 13] -> bottom MLP 13-512-256-64-16 (Linear+ReLU each: a dlfuse.torch.FusedMLP's
  parameters, run layer by layer through dlfuse matmul_add_relu, or with --ops mlp,add_mul as
  one dlfuse mlp call forward and one mlp_backward call backward)
  26+5 = 31 categorical features -> embedding tables of width 16 -> [B, 31*16 = 496]
  h = concat(bottom, embeddings)                  [B, 512]
  z = silu(h + b_int + 0.5 * tile(bottom, 32))    [B, 512]  (dlfuse add_mul_activation)
  top MLP 512-256-1: Linear+ReLU then Linear (logit), a FusedMLP too; BCE-with-logits loss.

    python3 examples/dlrm_mlp.py --device cuda --steps 300
"""
import argparse
import copy
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

try:
    import dlfuse.torch as dft
except ImportError:  # run from the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    import dlfuse.torch as dft

NUM_DENSE = 13
NUM_SPARSE = 31
EMB_DIM = 16
TABLE_ROWS = 1000
BOTTOM = (13, 512, 256, 64, 16)
TOP = (512, 256, 1)


class DLRM(torch.nn.Module):
    def __init__(self, use_dlfuse):
        super().__init__()
        self.use_dlfuse = use_dlfuse
        # The MLPs run layer by layer unless --ops names mlp: without the C++ operators (a wheel
        # built with pip's build isolation has none) FusedMLP's derived op is a Python operator,
        # 1.5 ms a step slower in eager mode; with them both take the same time (docs/
        # performance.md).
        self.dlfuse_ops = ("matmul", "add_mul")
        self.bottom = dft.FusedMLP(BOTTOM, "relu", "relu")
        self.emb = torch.nn.Parameter(torch.randn(NUM_SPARSE, TABLE_ROWS, EMB_DIM) * 0.1)
        self.b_int = torch.nn.Parameter(torch.zeros(TOP[0]))
        self.top = dft.FusedMLP(TOP, "relu", "identity")

    def linear_relu(self, x, lin):
        if self.use_dlfuse and "matmul" in self.dlfuse_ops:
            return dft.matmul_add_relu(x, lin.weight.t(), lin.bias)
        return F.relu(F.linear(x, lin.weight, lin.bias))

    def mlp(self, m, x):
        """m (a FusedMLP) as one dlfuse call, or layer by layer with its parameters."""
        if self.use_dlfuse and "mlp" in self.dlfuse_ops:
            return m(x)
        for i, lin in enumerate(m.layers):
            last = i == len(m.layers) - 1
            if not last or m.output_activation == 1:  # relu
                x = self.linear_relu(x, lin)
            else:
                x = F.linear(x, lin.weight, lin.bias)
        return x

    def forward(self, dense, sparse):
        x = self.mlp(self.bottom, dense)                      # [B, 16]
        return self.interaction_and_top(x, sparse)

    def interaction_and_top(self, x, sparse):
        tables = torch.arange(NUM_SPARSE, device=sparse.device)
        e = self.emb[tables, sparse].reshape(sparse.shape[0], NUM_SPARSE * EMB_DIM)
        h = torch.cat([x, e], dim=1)                          # [B, 512]
        y = x.repeat(1, TOP[0] // BOTTOM[-1])                 # [B, 512]
        if self.use_dlfuse and "add_mul" in self.dlfuse_ops:
            z = dft.add_mul_activation(h, y, self.b_int, 0.5, "silu")
        else:
            z = F.silu(h + self.b_int + 0.5 * y)
        return self.mlp(self.top, z).squeeze(1)                # [B]


def make_data(steps, batch, device, seed):
    g = torch.Generator().manual_seed(seed)
    dense = torch.randn(steps, batch, NUM_DENSE, generator=g)
    sparse = torch.randint(0, TABLE_ROWS, (steps, batch, NUM_SPARSE), generator=g)
    # a fixed random "teacher" makes the labels learnable
    w = torch.randn(NUM_DENSE, generator=g)
    t = torch.randn(NUM_SPARSE, TABLE_ROWS, generator=g)
    logit = dense @ w + t[torch.arange(NUM_SPARSE), sparse].sum(-1) * 0.3
    labels = (logit > 0).float()
    return dense.to(device), sparse.to(device), labels.to(device)


class Trainer:
    """One training run, a step at a time (so that two runs can be timed interleaved)."""

    def __init__(self, model, data, lr, opt_name, compile_model, perm_seed=None):
        dense, sparse, labels = data
        if perm_seed is not None:  # the same batches, rows in another order
            g = torch.Generator().manual_seed(perm_seed)
            perm = torch.stack([torch.randperm(dense.shape[1], generator=g)
                                for _ in range(dense.shape[0])]).to(dense.device)
            idx = perm.unsqueeze(-1)
            dense = torch.gather(dense, 1, idx.expand(-1, -1, dense.shape[2]))
            sparse = torch.gather(sparse, 1, idx.expand(-1, -1, sparse.shape[2]))
            labels = torch.gather(labels, 1, perm)
        self.data = (dense, sparse, labels)
        self.steps = dense.shape[0]
        self.model = model
        self.opt = opt = (torch.optim.Adam(model.parameters(), lr=lr) if opt_name == "adam"
                          else torch.optim.SGD(model.parameters(), lr=lr))

        def step(d, s, y):
            opt.zero_grad(set_to_none=True)
            loss = F.binary_cross_entropy_with_logits(model(d, s), y)
            loss.backward()
            return loss

        self.fwd_bwd = torch.compile(step) if compile_model else step
        self.losses = []

    def sync(self):
        if self.data[0].is_cuda:
            torch.cuda.synchronize(self.data[0].device)

    def step(self, i):
        """Step i; returns its time in seconds, the GPU's work included."""
        t0 = time.perf_counter()
        loss = self.fwd_bwd(*(t[i] for t in self.data))
        self.opt.step()
        self.losses.append(loss.detach())
        self.sync()
        return time.perf_counter() - t0

    def loss_values(self):
        return [float(x) for x in torch.stack(self.losses).cpu()]


def train(model, data, lr, opt_name, compile_model, perm_seed=None):
    t = Trainer(model, data, lr, opt_name, compile_model, perm_seed)
    for i in range(t.steps):
        t.step(i)
    return t.loss_values()


def train_timed(runs):
    """Trains the Trainers in lockstep, step i of each in turn (the order alternating between
    steps), so that a drift of the machine's speed hits all alike. Returns each run's
    median step time over the steps after the first fifth (at most 50: compilation,
    cuBLASLt's algorithm choice and allocator growth happen in those) and its total time."""
    n = runs[0].steps
    warm = min(50, n // 5)
    times = [[] for _ in runs]
    for i in range(n):
        order = range(len(runs)) if i % 2 == 0 else reversed(range(len(runs)))
        for k in order:
            times[k].append(runs[k].step(i))
    return [(statistics.median(t[warm:]) if n > warm else statistics.median(t), sum(t))
            for t in times]


def t_tail(x, df):
    """P(T > x) for Student's t with df degrees of freedom, x >= 0: half the regularized
    incomplete beta function I_z(df/2, 1/2) at z = df / (df + x^2), by its continued
    fraction (Numerical Recipes' betacf)."""
    z, a, b = df / (df + x * x), df / 2, 0.5

    def cf(a, b, z):
        c, d = 1.0, 1 / (1 - (a + b) * z / (a + 1))
        h = d
        for m in range(1, 300):
            aa = m * (b - m) * z / ((a - 1 + 2 * m) * (a + 2 * m))
            d, c = 1 / (1 + aa * d), 1 + aa / c
            h *= d * c
            aa = -(a + m) * (a + b + m) * z / ((a + 2 * m) * (a + 1 + 2 * m))
            d, c = 1 / (1 + aa * d), 1 + aa / c
            h *= d * c
            if abs(d * c - 1) < 1e-15:
                break
        return h

    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(z) + b * math.log1p(-z))
    ib = front * cf(a, b, z) / a if z < (a + 1) / (a + b + 2) else 1 - front * cf(b, a, 1 - z) / b
    return 0.5 * ib


def t_quantile(alpha, df):
    """x with P(T > x) = alpha, by bisection."""
    lo, hi = 0.0, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_tail(mid, df) > alpha else (lo, mid)
    return hi


def lognormal_bound(draws, alpha):
    """The one-sided (1 - alpha) prediction bound of one more draw, the draws' logarithms
    taken as normal: exp(m + t * s * sqrt(1 + 1/n)); inf for fewer than 2 draws or a
    non-finite one."""
    n = len(draws)
    if n < 2 or not all(math.isfinite(d) for d in draws):
        return math.inf
    logs = [math.log(max(d, 1e-300)) for d in draws]
    m, s = statistics.mean(logs), statistics.stdev(logs)
    return math.exp(m + t_quantile(alpha, n - 1) * s * math.sqrt(1 + 1 / n))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--opt", choices=("sgd", "adam"), default="adam")
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the dlfuse step and the PyTorch float32 reference step")
    ap.add_argument("--rtol", type=float, default=1e-3,
                    help="(a)'s additive slack, relative to max(1, L)")
    ap.add_argument("--early", type=int, default=100, help="(a)'s number of steps")
    ap.add_argument("--factor", type=float, default=2.0, help="(b)'s factor")
    ap.add_argument("--slack", type=float, default=1e-3, help="(b)'s additive slack")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spread", type=int, default=15,
                    help="(b)'s number of row-permuted PyTorch float32 runs beside the plain one")
    ap.add_argument("--alpha", type=float, default=1e-4,
                    help="(b)'s chance that a correct run fails, the float32 runs' log-deviations taken as normal")
    ap.add_argument("--ops", default="matmul,add_mul",
                    help="which ops go through dlfuse: matmul (the MLPs' layers one by one), mlp (each MLP "
                         "as one FusedMLP call instead), add_mul; fewer is a bisection aid")
    ap.add_argument("--contiguous", action="store_true",
                    help="hand dlfuse contiguous copies of its inputs (debugging aid)")
    args = ap.parse_args(argv)
    dft.FORCE_CONTIGUOUS = args.contiguous
    lr = args.lr if args.lr is not None else (1e-3 if args.opt == "adam" else 0.1)
    # exact fp32 on both sides (dlfuse's default is no TF32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    torch.manual_seed(args.seed)
    ref_model = DLRM(use_dlfuse=False).to(args.device)
    dl_model = copy.deepcopy(ref_model)
    dl_model.use_dlfuse = True
    dl_model.dlfuse_ops = tuple(args.ops.split(","))
    ref64 = copy.deepcopy(ref_model).double()
    ref_model_init = copy.deepcopy(ref_model)
    data = make_data(args.steps, args.batch, args.device, args.seed + 1)
    data64 = (data[0].double(), data[1], data[2].double())

    ref_run = Trainer(ref_model, data, lr, args.opt, args.compile)
    dl_run = Trainer(dl_model, data, lr, args.opt, args.compile)
    (ref_step, ref_t), (dl_step, dl_t) = train_timed([ref_run, dl_run])
    ref_losses, dl_losses = ref_run.loss_values(), dl_run.loss_values()
    l64 = train(ref64, data64, lr, args.opt, False)
    spread = []
    for k in range(args.spread):
        m = copy.deepcopy(ref_model_init)
        spread.append(train(m, data, lr, args.opt, False, perm_seed=1000 + k))

    def rel(a, b):
        d = abs(a - b) / max(1.0, abs(b))
        return d if d == d else float("inf")  # NaN counts as infinitely far

    n = len(ref_losses)
    early = min(args.early, n)
    d_direct = [rel(a, b) for a, b in zip(dl_losses, ref_losses)]
    d_dl64 = [rel(a, b) for a, b in zip(dl_losses, l64)]
    d_t64 = [rel(a, b) for a, b in zip(ref_losses, l64)]
    t64_k = [max(rel(a, b) for a, b in zip(run, l64)) for run in spread]
    for i in sorted(set([0, 1, n // 4, n // 2, 3 * n // 4, n - 1])):
        print(f"step {i:4d}  loss float64 {l64[i]:.6f}  torch32 {ref_losses[i]:.6f}  "
              f"dlfuse {dl_losses[i]:.6f}  dlfuse-torch32 {dl_losses[i] - ref_losses[i]:+.2e}")
    head = sum(ref_losses[:10]) / 10
    tail = sum(ref_losses[-10:]) / 10
    print(f"device {args.device}  steps {n}  batch {args.batch}  opt {args.opt} lr {lr}  "
          f"compile {args.compile}")
    print(f"time: torch {ref_t:.2f} s, dlfuse {dl_t:.2f} s (incl. warm-up/compile)")
    print(f"step: torch {ref_step * 1e3:.3f} ms, dlfuse {dl_step * 1e3:.3f} ms, "
          f"dlfuse/torch {dl_step / ref_step:.3f} (median step, GPU work included, the two runs "
          f"interleaved step by step, after the first fifth of the steps)")
    print(f"loss first-10 mean {head:.4f} -> last-10 mean {tail:.4f}")
    a_worst = max(d_dl64[:early])
    a_spread = max([max(d_t64[:early])] + [max(rel(a, b) for a, b in zip(run[:early], l64))
                                           for run in spread])
    a_bound = args.factor * a_spread + args.rtol
    b_dl, b_draws = max(d_dl64), [max(d_t64)] + t64_k
    b_t, b_ln = max(b_draws), lognormal_bound(b_draws, args.alpha)
    b_bound = max(args.factor * b_t, b_ln) + args.slack
    print(f"max |dlfuse - torch32| (relative) over all steps: {max(d_direct):.3e}")
    print(f"(a) first {early} steps: max |dlfuse - float64| {a_worst:.3e}; PyTorch float32 "
          f"runs' worst {a_spread:.3e}; bound {args.factor:g} x {a_spread:.3e} + {args.rtol:g} "
          f"= {a_bound:.3e}")
    print(f"(b) max |dlfuse - float64| {b_dl:.3e}; max |torch32 - float64| {max(d_t64):.3e}, "
          f"row-permuted runs: {', '.join(f'{v:.3e}' for v in t64_k) or 'none'}; bound max({args.factor:g} x "
          f"{b_t:.3e}, log-normal prediction bound at alpha {args.alpha:g} {b_ln:.3e}) + {args.slack:g} "
          f"= {b_bound:.3e}")
    ok_a = a_worst <= a_bound
    ok_b = b_dl <= b_bound
    ok_c = tail < head * 0.9 or n < 50
    for name, ok in (("a", ok_a), ("b", ok_b), ("c: the loss falls", ok_c)):
        if not ok:
            print(f"FAIL ({name})")
    ok = ok_a and ok_b and ok_c
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
