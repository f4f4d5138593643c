#!/usr/bin/env python3
"""The DLRM MLP of dlrm_mlp.py trained with dlfuse ops under DistributedDataParallel, one
process per GPU (NCCL; gloo on CPU), then checked:
  (1) every rank ends with bit-identical parameters (DDP averages the gradients; each rank
      runs the same optimizer on them);
  (2) those parameters equal a single-process float64 PyTorch run on the whole global
      batch (rank r trains on rows r::world of each batch; the mean of the ranks' means is
      the global mean) within float32 drift: the max relative parameter difference is at
      most --factor x that of a single-process float32 PyTorch run + --slack.
Exits 1 (on rank 0) when a check fails.

    torchrun --standalone --nproc_per_node=gpu bindings/python/examples/dlrm_ddp.py --steps 50
    torchrun --standalone --nproc_per_node=2 bindings/python/examples/dlrm_ddp.py --device cpu
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dlrm_mlp  # noqa: E402  (puts the package's source on sys.path when not installed)


def train(model, data, steps, lr, rank=0, world=1, ddp=False):
    dense, sparse, labels = data
    net = model
    if ddp:
        dev = next(model.parameters()).device
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    losses = []
    for i in range(steps):
        d, s, y = dense[i, rank::world], sparse[i, rank::world], labels[i, rank::world]
        opt.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(net(d, s), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses).cpu()]


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float(((a - b).abs() / b.abs().clamp_min(1.0)).max())


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=512, help="global batch (split over ranks)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--slack", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    if cuda:
        torch.cuda.set_device(local)
        torch.backends.cuda.matmul.allow_tf32 = False
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the world size {world}")

    torch.manual_seed(args.seed)
    init = dlrm_mlp.DLRM(use_dlfuse=False)          # one initialization for every run
    data = dlrm_mlp.make_data(args.steps, args.batch, dev, args.seed)

    model = dlrm_mlp.DLRM(use_dlfuse=True).to(dev)
    model.load_state_dict(init.state_dict())
    losses = train(model, data, args.steps, args.lr, rank, world, ddp=True)

    mine = flat(model)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    ok = True
    if rank == 0:
        same = all(torch.equal(g, gathered[0]) for g in gathered)
        print(f"world {world} on {dev.type}: ranks' parameters identical: {same}")
        ok &= same
        ref = {}
        for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
            m = dlrm_mlp.DLRM(use_dlfuse=False).to(dev)
            m.load_state_dict(init.state_dict())
            m = m.to(dtype)
            d = tuple(t.to(dtype) if t.is_floating_point() else t for t in data)
            ref[name] = (train(m, d, args.steps, args.lr), flat(m))
        drift32 = rel(ref["float32"][1], ref["float64"][1])
        ours = rel(mine, ref["float64"][1])
        moved = rel(ref["float64"][1], flat(init.to(dev).double()))
        bound = args.factor * drift32 + args.slack
        print(f"max rel. parameter change by training (float64): {moved:.3e}")
        ok &= moved > 10 * bound  # the comparison below means something
        print(f"steps {args.steps} global batch {args.batch}: loss {losses[0]:.4f} -> "
              f"{losses[-1]:.4f} (rank 0's shard); float64 {ref['float64'][0][0]:.4f} -> "
              f"{ref['float64'][0][-1]:.4f}")
        print(f"max rel. parameter difference to float64: dlfuse DDP {ours:.3e}, "
              f"PyTorch float32 single process {drift32:.3e} (bound {bound:.3e})")
        ok &= ours <= bound
        print("PASS" if ok else "FAIL")
    flag = torch.tensor([1 if ok else 0], device=dev)
    dist.broadcast(flag, 0)
    dist.destroy_process_group()
    return 0 if int(flag) else 1


if __name__ == "__main__":
    sys.exit(main())
