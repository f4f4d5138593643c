#!/usr/bin/env python3
"""A training step of MLPerf DLRM-v2's dense MLPs: dlfuse.torch against PyTorch.

Model: bottom MLP 13-512-256-128 over the dense features, its output concatenated with 896
columns that stand for the embeddings' interaction (fixed data, no gradient) into the top
MLP's 1024-wide input, top MLP 1024-1024-512-256-1; ReLU after every layer but the last
(the logit), binary cross-entropy with logits (mean). Three models with the same parameters:
PyTorch's (F.linear + F.relu), dlfuse's per-layer ops (dlfuse.torch.matmul_add_relu, and
matmul_add_activation "identity" for the logit), and FusedMLP (each MLP as one
dlfuse.torch.FusedMLP: one mlp call forward, one mlp_backward call backward). A step is zero_grad, forward, loss and
backward (and an optimizer step with --optimizer).

Modes, each for both models: eager; graphed (the whole step captured once with
torch.cuda.graph, then replayed); torch.compile "default" and "max-autotune" of forward +
loss (the backward is compiled by AOTAutograd; the optimizer step stays eager). For every
dtype (bfloat16, float32) and batch (4096, 32768):

 1. Gradients first, in one step of dlfuse's per-layer model (eager; loss reduced by sum, so that the
    gradients are O(1) and docs/ops.md's atol means what it means there): every layer's
    output and its weight, bias and input gradients against float64 on the very inputs its
    kernels saw (the layer's input, the incoming gradient, the ReLU mask from the output the
    backward was given), each element within docs/ops.md's atol + rtol * Σ|term| for the
    dtype. This holds whenever every op meets its documented tolerance, so a correct build
    never fails it by chance, and it stays as tight as conformance itself (float32: 2e-5)
    however deep the network. Beside it, printed and not enforced: each parameter's
    end-to-end relative RMS error against the float64 model, dlfuse's and PyTorch's in the
    same dtype. (A worst-case bound propagated end to end through |W| grows by Σ|W| per
    layer, about 16 for these widths, and admits anything after eight layers.) FusedMLP
    composes the same kernels in the same order, so its gradients must equal the per-layer
    model's within the dtype's rtol in norm (enforced). The bench stops at a failing check.
 2. Timing: every (model, mode) of the configuration plus torch.matmul of a square
    --peak-size problem in the dtype (the GEMM peak) are warmed up, then run in --rounds
    rounds of --steps steps each, the order of the runs reversed every other round, so that
    drift of clocks and temperature hits all alike. Each step is timed by CUDA events
    (perf_counter on the CPU); the figure is the median over all rounds' steps.
    TFLOP/s counts the GEMMs' multiply-adds x 2: 3 x the forward's (forward, input and
    weight gradients) less the bottom input's gradient, which no one computes.

Float32 GEMMs run without TF32 on both sides (dlfuse's default). Prints a markdown table;
--json writes every figure. --profile N adds, per configuration and run, where the GPU time
of a step goes: N more steps under torch.profiler (CUDA kernels, also inside graph replays),
kernel time per step by kind (GEMM, dlfuse's own kernels, PyTorch's, copies and fills) and
the kernels that take most of it.

    python3 bench/mlp_step.py [--dtypes bfloat16,float32] [--batches 4096,32768]
        [--modes eager,graphed,default,max-autotune | --no-compile] [--optimizer adam]
    DLFUSE_LIBRARY=build/<dir>/lib/libdlfuse.so DLFUSE_EXT_DIR=build/<dir>/python/dlfuse ...
    bash tools/gpu.sh mlp="--no-compile"          (on a GPU machine: builds, then runs this)

On the CPU (--device cpu, eager only) it runs the same code at whatever batch is given: a
check of the bench itself, not a benchmark.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python", "src"))
import dlfuse.torch as dft  # noqa: E402

BOTTOM = (13, 512, 256, 128)
TOP = (1024, 1024, 512, 256, 1)
SPARSE = TOP[0] - BOTTOM[-1]  # the interaction's columns beside the bottom MLP's output

# docs/ops.md's tolerances: (rtol, atol) per dtype
TOL = {torch.float32: (2e-5, 1e-6), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (4e-3, 1e-3)}
MODES = ("eager", "graphed", "default", "max-autotune")


def gemm_flops(batch):
    mults = sum(i * o for i, o in zip(BOTTOM[:-1], BOTTOM[1:])) + sum(i * o for i, o in zip(TOP[:-1], TOP[1:]))
    return 2 * batch * (3 * mults - BOTTOM[0] * BOTTOM[1])


IMPLS = ("PyTorch", "dlfuse", "FusedMLP")


class DenseMLPs(torch.nn.Module):
    """The model; impl: "PyTorch" (nn.Linear's parameters through F.linear + F.relu),
    "dlfuse" (the same through dlfuse.torch's per-layer ops) or "FusedMLP" (each MLP as one
    dlfuse.torch.FusedMLP call). One state_dict fits all three."""

    def __init__(self, impl):
        super().__init__()
        self.impl = impl
        self.record = None
        self.bottom = dft.FusedMLP(BOTTOM, "relu", "relu")
        self.top = dft.FusedMLP(TOP, "relu", "identity")

    def layer(self, x, lin, relu):
        y = self.linear(x, lin, relu)
        if self.record is not None:  # check_gradients: what each layer's kernels saw
            r = {"x": x.detach(), "y": y.detach(), "relu": relu}
            y.register_hook(lambda g: r.__setitem__("grad_y", g.detach()))
            if x.requires_grad:
                x.register_hook(lambda g: r.__setitem__("grad_x", g.detach()))
            self.record.append(r)
        return y

    def linear(self, x, lin, relu):
        if self.impl == "dlfuse":
            if relu:
                return dft.matmul_add_relu(x, lin.weight.t(), lin.bias)
            return dft.matmul_add_activation(x, lin.weight.t(), lin.bias, "identity")
        y = F.linear(x, lin.weight, lin.bias)
        return F.relu(y) if relu else y

    def mlp(self, x, m, last_relu):
        if self.impl == "FusedMLP":
            return m(x)
        for i, lin in enumerate(m.layers):
            x = self.layer(x, lin, i < len(m.layers) - 1 or last_relu)
        return x

    def forward(self, dense, sparse):
        x = self.mlp(dense, self.bottom, True)
        x = torch.cat([x, sparse], dim=1)
        return self.mlp(x, self.top, False).squeeze(1)


def make_data(batch, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    dense = torch.randn(batch, BOTTOM[0], generator=g)
    sparse = torch.randn(batch, SPARSE, generator=g)
    target = (torch.rand(batch, generator=g) < 0.5).float()
    return tuple(t.to(device=device, dtype=dtype) for t in (dense, sparse, target))


# ---- gradients against float64 --------------------------------------------------------------

def sum_loss_step(model, data, record=None):
    """One forward and backward of the loss reduced by sum; returns every parameter's gradient.
    With record (a list), each layer appends its input, its output and (through hooks filled
    in by the backward) the gradients of its output and input."""
    model.zero_grad(set_to_none=True)
    model.record = record
    dense, sparse, target = data
    F.binary_cross_entropy_with_logits(model(dense, sparse), target, reduction="sum").backward()
    model.record = None
    return {k: p.grad.detach() for k, p in model.named_parameters()}


def layer_errors(model, rec, dtype):
    """Each layer's forward output and gradients against float64 on the very inputs the
    kernels saw: (name, worst |got - ref| / (atol + rtol * scale)) with docs/ops.md's
    tolerance and sum scales, the ReLU's mask read from the out the backward was given."""
    rtol, atol = TOL[dtype]
    names = [f"bottom.{i}" for i in range(len(model.bottom.layers))] + \
        [f"top.{i}" for i in range(len(model.top.layers))]
    lins = list(model.bottom.layers) + list(model.top.layers)
    worst = []
    for name, lin, r in zip(names, lins, rec):
        x, y, relu = r["x"].double(), r["y"].double(), r["relu"]
        W, b = lin.weight.detach().double(), lin.bias.detach().double()
        aW, ax = W.abs(), x.abs()
        pre = x @ W.t() + b
        checks = [("out", y, pre.clamp_min(0) if relu else pre, ax @ aW.t() + b.abs())]
        go = r["grad_y"].double()
        d = go * (y > 0) if relu else go
        ad = d.abs()
        checks += [("grad weight", lin.weight.grad.double(), d.t() @ x, ad.t() @ ax),
                   ("grad bias", lin.bias.grad.double(), d.sum(0), ad.sum(0))]
        if "grad_x" in r:
            checks.append(("grad input", r["grad_x"].double(), d @ W, ad @ aW))
        for what, got, ref, scale in checks:
            q = ((got - ref).abs() / (atol + rtol * scale)).nan_to_num(nan=math.inf).max().item()
            worst.append((f"{name} {what}", q))
    return worst


def rel_rms(got, ref):
    return ((got.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def check_gradients(base, data, dtype, device):
    """dlfuse's per-layer model, one step: every layer within docs/ops.md's tolerance of
    float64 on its inputs (enforced); FusedMLP's gradients equal to the per-layer model's,
    each parameter's within rtol of the dtype in norm (enforced: the same kernels in the same
    order, differing only where a plugin's fused path rounds otherwise); and each parameter's
    end-to-end relative RMS error against the float64 model, dlfuse's beside PyTorch's in the
    same dtype (printed). Returns (ok, lines)."""
    m64 = DenseMLPs("PyTorch").to(device=device, dtype=torch.float64)
    m64.load_state_dict(base.state_dict())
    g64 = sum_loss_step(m64, tuple(t.double() for t in data))
    models = {}
    for impl in IMPLS:
        models[impl] = DenseMLPs(impl).to(device=device, dtype=dtype)
        models[impl].load_state_dict(base.state_dict())
    rec = []
    grads = {"dlfuse": sum_loss_step(models["dlfuse"], data, rec),
             "PyTorch": sum_loss_step(models["PyTorch"], data),
             "FusedMLP": sum_loss_step(models["FusedMLP"], data)}
    layers = layer_errors(models["dlfuse"], rec, dtype)
    where, q = max(layers, key=lambda t: t[1])
    rtol = TOL[dtype][0]
    fused = {k: rel_rms(grads["FusedMLP"][k], grads["dlfuse"][k].double()) for k in g64}
    fk = max(fused, key=fused.get)
    ok = q <= 1 and fused[fk] <= rtol
    tag = f"{str(dtype)[6:]} batch {data[0].shape[0]}"
    lines = [f"gradients {tag}: dlfuse's layers against float64 on their inputs ({len(layers)} outputs "
             f"and gradients): worst |got - ref| / tolerance {q:.3e} (at {where}) {'pass' if q <= 1 else 'FAIL'}",
             f"gradients {tag}: FusedMLP against the per-layer ops, relative RMS difference, worst "
             f"{fused[fk]:.3e} (at {fk}; bound {rtol:g}) {'pass' if fused[fk] <= rtol else 'FAIL'}"]
    e2e = {impl: {k: rel_rms(g[k], g64[k]) for k in g64} for impl, g in grads.items()}
    k = max(g64, key=lambda k: e2e["dlfuse"][k] / max(e2e["PyTorch"][k], 1e-300))
    lines.append(f"gradients {tag}: end to end against the float64 model, relative RMS error, worst over "
                 f"parameters: dlfuse {max(e2e['dlfuse'].values()):.3e}, FusedMLP "
                 f"{max(e2e['FusedMLP'].values()):.3e}, PyTorch {max(e2e['PyTorch'].values()):.3e}; "
                 f"largest dlfuse / PyTorch at {k}: {e2e['dlfuse'][k]:.3e} / {e2e['PyTorch'][k]:.3e}")
    return ok, lines


# ---- the runs -------------------------------------------------------------------------------

class Run:
    """One (model, mode) of a configuration: step() does one training step."""

    def __init__(self, name, base, impl, mode, data, optimizer, device):
        self.name, self.times = name, []
        dtype = data[0].dtype
        model = DenseMLPs(impl).to(device=device, dtype=dtype)
        model.load_state_dict(base.state_dict())
        dense, sparse, target = data
        cuda = device.startswith("cuda")
        opt = None
        if optimizer == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        elif optimizer == "adam":
            opt = torch.optim.Adam(model.parameters(), lr=1e-4, capturable=cuda)

        def loss_fn(d, s, t):
            return F.binary_cross_entropy_with_logits(model(d, s), t)

        if mode in ("default", "max-autotune"):
            compiled = torch.compile(loss_fn, mode=mode, dynamic=False)

            def step():
                torch.compiler.cudagraph_mark_step_begin()  # max-autotune replays CUDA graphs
                model.zero_grad(set_to_none=True)
                compiled(dense, sparse, target).backward()
                if opt:
                    opt.step()
        else:
            def step():
                model.zero_grad(set_to_none=True)
                loss_fn(dense, sparse, target).backward()
                if opt:
                    opt.step()
        if mode == "graphed":
            # PyTorch's whole-network capture: warm up on a side stream (cuBLAS handles,
            # workspaces, the optimizer's state), then capture one step; .grad is allocated
            # inside the graph's pool and rewritten by every replay.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            model.zero_grad(set_to_none=True)
            with torch.cuda.graph(graph):
                loss_fn(dense, sparse, target).backward()
                if opt:
                    opt.step()
            step = graph.replay
        self.step = step
        self.model = model


class PeakRun:
    """torch.matmul of an n x n x n problem into a preallocated output: the GEMM peak."""

    def __init__(self, n, dtype, device):
        g = torch.Generator(device=device).manual_seed(7)
        a, b = (torch.randn(n, n, device=device, dtype=dtype, generator=g) for _ in range(2))
        c = torch.empty(n, n, device=device, dtype=dtype)
        self.name, self.times, self.flops = "gemm peak", [], 2 * n ** 3
        self.step = lambda: torch.matmul(a, b, out=c)


def time_steps(run, steps, cuda):
    if cuda:
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        ev[0].record()
        for i in range(steps):
            run.step()
            ev[i + 1].record()
        ev[-1].synchronize()
        run.times += [ev[i].elapsed_time(ev[i + 1]) * 1e-3 for i in range(steps)]
    else:
        for _ in range(steps):
            t0 = time.perf_counter()
            run.step()
            run.times.append(time.perf_counter() - t0)


# Kernel kinds by name: cuBLAS(Lt)/CUTLASS GEMMs (nvjet, sm90_xmma, cutlass, gemm), the
# CUDA plugin's own kernels (namespace dlfuse_cuda), PyTorch's (at::native), copies/fills.
KINDS = (("GEMM", ("nvjet", "xmma", "cutlass", "gemm", "Kernel2")), ("dlfuse", ("dlfuse",)),
         ("PyTorch", ("at::native", "at_cuda_detail")), ("copy/fill", ("Memcpy", "Memset", "memcpy", "memset")))


TOP_KERNELS = 16


def kind_of(name):
    return next((k for k, keys in KINDS if any(key in name for key in keys)), "other")


def profile_run(run, steps):
    """{kernel name: (calls, seconds)} per step over `steps` steps of `run`, GPU time only."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            run.step()
        torch.cuda.synchronize()
    per = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        t = e.self_cuda_time_total if t is None else t
        if t > 0:
            per[e.key] = (e.count / steps, t * 1e-6 / steps)
    return per


def profile_lines(title, runs, steps):
    lines = [f"\n### Where a step's GPU time goes: {title} ({steps} steps under torch.profiler)\n",
             "| run | step (events) ms | kernels per step | kernels ms | " + " | ".join(f"{k} ms" for k, _ in KINDS) +
             " | other ms |",
             "|---|---:|---:|---:|" + "---:|" * (len(KINDS) + 1)]
    tops = []
    for run in runs:
        per = profile_run(run, steps)
        by_kind = {}
        for name, (_n, t) in per.items():
            by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + t
        step = statistics.median(run.times) if run.times else float("nan")
        calls = sum(n for n, _t in per.values())
        lines.append(f"| {run.name} | {step * 1e3:.3f} | {calls:g} | {sum(by_kind.values()) * 1e3:.3f} | " +
                     " | ".join(f"{by_kind.get(k, 0.0) * 1e3:.3f}" for k, _ in KINDS) +
                     f" | {by_kind.get('other', 0.0) * 1e3:.3f} |")
        top = sorted(per.items(), key=lambda kv: -kv[1][1])[:TOP_KERNELS]
        tops.append(f"\n{run.name}, the {TOP_KERNELS} largest kernels (calls per step, ms per step, kind):\n" +
                    "\n".join(f"- {t * 1e3:.3f} ms, {n:g} calls, {kind_of(k)}: {k[:110]}" for k, (n, t) in top))
    return lines + tops


def bench_config(dtype, batch, args):
    device, cuda = args.device, args.device.startswith("cuda")
    torch.manual_seed(args.seed)
    base = DenseMLPs("PyTorch").to(device=device, dtype=dtype)
    data = make_data(batch, dtype, device, args.seed + 1)
    ok, lines = check_gradients(base, data, dtype, device)
    for line in lines:
        print(line, file=sys.stderr)
    if not ok:
        return None, lines
    torch._dynamo.reset()  # the previous configuration's compiled code and graphs go
    runs = [PeakRun(args.peak_size, dtype, device)]
    for mode in args.modes:
        for impl in IMPLS:
            t0 = time.perf_counter()
            runs.append(Run(f"{impl} {mode}", base, impl, mode, data, args.optimizer, device))
            for _ in range(args.warmup):
                runs[-1].step()
            if cuda:
                torch.cuda.synchronize()
            print(f"{str(dtype)[6:]} batch {batch}: {impl} {mode} set up and warmed up in "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    for r in range(args.rounds):
        for run in (runs if r % 2 == 0 else reversed(runs)):
            time_steps(run, args.steps, cuda)
    med = {run.name: statistics.median(run.times) for run in runs}
    if args.profile and cuda:
        lines = lines + profile_lines(f"{str(dtype)[6:]}, batch {batch}", runs[1:], args.profile)
    peak = runs[0].flops / med["gemm peak"]
    rows = []
    for mode in args.modes:
        t_pt, t_dl, t_fu = med[f"PyTorch {mode}"], med[f"dlfuse {mode}"], med[f"FusedMLP {mode}"]
        fl = gemm_flops(batch)
        rows.append({"dtype": str(dtype)[6:], "batch": batch, "mode": mode, "pytorch_s": t_pt, "dlfuse_s": t_dl,
                     "ratio": t_dl / t_pt, "fused_s": t_fu, "fused_ratio": t_fu / t_pt,
                     "pytorch_tflops": fl / t_pt * 1e-12, "dlfuse_tflops": fl / t_dl * 1e-12,
                     "fused_tflops": fl / t_fu * 1e-12, "peak_tflops": peak * 1e-12, "steps": len(runs[1].times)})
    return rows, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--batches", default="4096,32768")
    ap.add_argument("--modes", default=",".join(MODES), help=f"a subset of {','.join(MODES)}")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile modes (slow to compile)")
    ap.add_argument("--optimizer", choices=("none", "sgd", "adam"), default="none",
                    help="add an optimizer step to every step")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per run and round")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps per run before the rounds")
    ap.add_argument("--peak-size", type=int, default=8192, help="n of the n x n x n peak GEMM")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile N more steps of every run (CUDA): GPU time per step by kernel kind")
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in args.modes if m not in MODES]
    if bad:
        ap.error(f"--modes: unknown {bad}; choose from {MODES}")
    if args.no_compile:
        args.modes = [m for m in args.modes if m in ("eager", "graphed")]
    if not args.device.startswith("cuda") and "graphed" in args.modes:
        args.modes.remove("graphed")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # Every compiled run compiles the same code object (Run's loss_fn) over another model, a
    # recompile to dynamo: past its limit it would run the rest eagerly and time that.
    for name, value in (("recompile_limit", 64), ("cache_size_limit", 64), ("fail_on_recompile_limit_hit", True)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)
    dev = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    print(f"# DLRM-v2 dense MLPs, training step: {dev}, torch {torch.__version__}, dlfuse.torch "
          f"{'C++' if dft.CPP_OPS else 'Python'} operators, optimizer {args.optimizer}, median of "
          f"{args.rounds} x {args.steps} steps per run (interleaved rounds)\n")
    rows, checks, ok = [], [], True
    configs = [(getattr(torch, dt), int(b)) for dt in args.dtypes.split(",") for b in args.batches.split(",")]
    for dtype, batch in configs:
        r, lines = bench_config(dtype, batch, args)
        checks += lines
        if r is None:
            ok = False
            break
        rows += r
    print("| dtype | batch | mode | PyTorch ms | dlfuse ms | dlfuse / PyTorch | FusedMLP ms | FusedMLP / PyTorch "
          "| PyTorch TFLOP/s (% peak) | dlfuse TFLOP/s (% peak) | FusedMLP TFLOP/s (% peak) | GEMM peak TFLOP/s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        p = r["peak_tflops"]
        pct = " | ".join(f"{r[k]:.1f} ({100 * r[k] / p:.0f}%)" for k in ("pytorch_tflops", "dlfuse_tflops",
                                                                           "fused_tflops"))
        print(f"| {r['dtype']} | {r['batch']} | {r['mode']} | {r['pytorch_s'] * 1e3:.3f} | {r['dlfuse_s'] * 1e3:.3f} "
              f"| {r['ratio']:.3f} | {r['fused_s'] * 1e3:.3f} | {r['fused_ratio']:.3f} | {pct} | {p:.1f} |")
    print(f"\nGEMM peak: torch.matmul {args.peak_size}^3 in the dtype, timed in the same rounds. "
          f"TFLOP/s: {gemm_flops(1) / 1e6:.3f} MFLOP per row of the batch.")
    print("\n" + "\n".join(checks))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "checks": checks, "args": vars(args)}, f, indent=1)
    if not ok:
        print("FAIL: dlfuse's gradients are outside the bound")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
