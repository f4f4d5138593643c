"""Markdown tables of one bench/run.py results.json, in the form docs/performance.md shows:
per device, the ceilings, then one table per op with a row per dlfuse implementation,
direction, shape and dtype, its bound, and every peer's time from the same run beside it.

Columns of an op's table:
  time       median of the batches' per-call times (p10-p90 in the JSON);
  bound      the time the row would take at the device's ceiling: a GEMM row's flops at the
             GEMM peak of its dtype (CPU bfloat16: the float32 peak), an add_mul row's bytes
             (every input read once, every output written once) at the copy bandwidth: the
             byte floor;
  % of bound bound / time;
  bf16/f32   (add_mul_activation only) a bfloat16 row's time over its float32 row's; the
             byte floor halves, so 0.50 is the bound;
  a peer     its time and, in brackets, dlfuse's time over it (below 1: dlfuse is faster).
"""
import json

ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}


def work(r):
    """("flops", 2MNK fwd / 4MNK bwd: grad_a and grad_b) of a GEMM row, ("bytes", every input
    read once and every output written once) of an add_mul row."""
    dims = [int(v) for v in r["shape"].split("x")]
    if r["op"].startswith("matmul_add_"):
        M, K, N = dims
        return "flops", 2.0 * M * N * K * (1 if r["dir"].startswith("fwd") else 2)
    M, N = dims
    streams = {"fwd": (3, 1), "bwd": (5, 2), "bwd_no_grad_y": (4, 2), "bwd_from_out": (4, 2)}[r["dir"]]
    return "bytes", float((streams[0] * M * N + streams[1] * N) * ITEMSIZE[r["dtype"]])


def fmt_t(ms):
    if ms is None:
        return "-"
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.2f} ms"


def kind(x):
    return x.get("ceiling_device") or ("gpu" if x["device"].startswith("cuda") else "cpu")


def ceilings(res, k):
    """{'copy_bw': (GB/s, how), ('gemm_peak', dtype): (GFLOP/s, how)}: the best of the run on kind k."""
    best = {}
    for c in res.get("ceilings", []):
        if kind(c) != k:
            continue
        key, val = ("copy_bw", c["GBps"]) if c["ceiling"] == "copy_bw" else (("gemm_peak", c["dtype"]), c["GFLOPs"])
        if val > best.get(key, (0.0, ""))[0]:
            best[key] = (val, c["impl"])
    return best


def bound_ms(r, best, k):
    what, amount = work(r)
    if what == "bytes":
        bw = best.get("copy_bw")
        return amount / (bw[0] * 1e9) * 1e3 if bw else None
    peak = best.get(("gemm_peak", r["dtype"])) or (best.get(("gemm_peak", "float32")) if k == "cpu" else None)
    return amount / (peak[0] * 1e9) * 1e3 if peak else None


def shape_key(sh):
    return [int(v) for v in sh.split("x")]


DIRS = ["fwd", "fwd_pre", "bwd", "bwd_from_out", "bwd_no_grad_y"]


def op_table(rows, best, k):
    mine = [r for r in rows if r["impl"].startswith("dlfuse_")]
    peers = sorted({r["impl"] for r in rows if not r["impl"].startswith("dlfuse_")})
    add_mul = rows[0]["op"].startswith("add_mul_activation")
    at = {(r["dir"], r["shape"], r["dtype"], r["impl"]): r for r in rows}
    head = ["dir", "shape", "dtype", "dlfuse", "time", "bound", "% of bound"] + (["bf16/f32"] if add_mul else [])
    out = ["| " + " | ".join(head + peers) + " |", "|" + "---|" * 4 + "---:|" * (len(head) - 4 + len(peers))]
    order = lambda r: (DIRS.index(r["dir"]) if r["dir"] in DIRS else 9, shape_key(r["shape"]), r["impl"],  # noqa: E731
                       r["dtype"] != "float32", r["dtype"])
    for r in sorted(mine, key=order):
        b = bound_ms(r, best, k)
        cells = [r["dir"], r["shape"], r["dtype"], r["impl"][len("dlfuse_"):], fmt_t(r["median_ms"]), fmt_t(b),
                 f"{100 * b / r['median_ms']:.0f}%" if b else "-"]
        if add_mul:
            f32 = at.get((r["dir"], r["shape"], "float32", r["impl"]))
            cells.append(f"{r['median_ms'] / f32['median_ms']:.2f}" if f32 and r["dtype"] != "float32" else "")
        for p in peers:
            q = at.get((r["dir"], r["shape"], r["dtype"], p))
            cells.append(f"{fmt_t(q['median_ms'])} ({r['median_ms'] / q['median_ms']:.2f})" if q else "-")
        out.append("| " + " | ".join(cells) + " |")
    return out


def markdown(res):
    m = res["meta"]
    lines = []
    for k in ("gpu", "cpu"):
        rows = [r for r in res.get("rows", []) if kind(r) == k]
        if not any(r["impl"].startswith("dlfuse_") for r in rows):
            continue
        best = ceilings(res, k)
        device = (m.get("gpu") or "GPU") if k == "gpu" else f"{m.get('host_cpu')} ({m.get('host_cores')} cores)"
        dirty = " (uncommitted changes)" if m.get("git_dirty") else ""
        lines += [f"### {device}", "",
                  f"Date {m.get('date_utc')}, commit {m.get('git')}{dirty}, {m.get('mode')} mode, load average "
                  f"{m.get('loadavg_before')} before, {m.get('loadavg_after')} after. Command: `{m.get('command')}`", ""]
        ceil = [f"copy bandwidth {best['copy_bw'][0]:.1f} GB/s ({best['copy_bw'][1]})"] if "copy_bw" in best else []
        ceil += [f"GEMM peak {key[1]} {v / 1e3:.2f} TFLOP/s ({how})" for key, (v, how) in sorted(
            (key, v) for key, v in best.items() if key != "copy_bw")]
        lines += ["Ceilings: " + ("; ".join(ceil) or "none measured") + ". A peer's cell: its time (dlfuse's time "
                  "over it).", ""]
        for op in sorted({r["op"] for r in rows}):
            op_rows = [r for r in rows if r["op"] == op]
            if any(r["impl"].startswith("dlfuse_") for r in op_rows):
                lines += [f"**{op}**", ""] + op_table(op_rows, best, k) + [""]
    disp = [d for d in res.get("dispatch", []) if "median_ns" in d]
    if disp:
        lines += ["**Dispatch of a no-op kernel** (ns per call, median)", "", "| call | via | ns |", "|---|---|---:|"]
        lines += [f"| {d['dispatch']} | {d.get('via', 'C API')} | {d['median_ns']:.0f} |" for d in disp] + [""]
    bad = [c for c in res.get("checks", []) if not c.get("ok")]
    lines += [f"- check NOT OK: {json.dumps(c)}" for c in bad]
    return "\n".join(lines).rstrip() + "\n"
