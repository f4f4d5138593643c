#!/usr/bin/env python3
"""PNG plots of a bench/run.py results.json (needs matplotlib; the GPU machine has none:
plot where the JSON comes back).

  python3 bench/plot.py path/to/results.json [--out DIR]

Writes, next to the JSON unless --out:
  time_<op>_<dir>.png   per dtype (rows) and shape (columns): median time per
                        implementation, whiskers p10..p90, labelled with % of the ceiling;
  pct_of_ceiling.png    % of the measured ceiling per case and implementation
                        (matmul: GEMM peak; add_mul_activation: copy bandwidth).
"""
import argparse
import json
import os
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def color(impl):
    if impl.startswith("dlfuse_"):
        return "#1f77b4"
    if impl.startswith("onednn"):
        return "#2ca02c"
    if impl.startswith("numpy"):
        return "#9467bd"
    if impl.startswith("torch"):
        return "#ff7f0e"
    return "#7f7f7f"


def shape_key(s):
    return [int(v) for v in s.split("x")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    res = json.load(open(a.results))
    out = a.out or os.path.dirname(os.path.abspath(a.results))
    meta = res["meta"]
    where = meta.get("gpu") or meta.get("host_cpu")
    foot = f"{where}; {meta['date_utc']}; {meta['command']}"
    groups = defaultdict(list)
    for r in res["rows"]:
        groups[(r["op"], r["dir"])].append(r)
    written = []
    for (op, d), rows in sorted(groups.items()):
        dtypes = sorted({r["dtype"] for r in rows}, key=lambda s: (s != "float32", s))
        shapes = sorted({r["shape"] for r in rows}, key=shape_key)
        fig, axes = plt.subplots(len(dtypes), len(shapes), figsize=(5.2 * len(shapes), 0.5 + 2.6 * len(dtypes)),
                                 squeeze=False)
        for i, dt in enumerate(dtypes):
            for j, sh in enumerate(shapes):
                ax = axes[i][j]
                cell = sorted([r for r in rows if r["dtype"] == dt and r["shape"] == sh], key=lambda r: r["impl"])
                if not cell:
                    ax.set_axis_off()
                    continue
                unit, scale = ("us", 1e3) if max(r["median_ms"] for r in cell) < 1 else ("ms", 1.0)
                ys = range(len(cell))
                med = [r["median_ms"] * scale for r in cell]
                lo = [(r["median_ms"] - r["p10_ms"]) * scale for r in cell]
                hi = [(r["p90_ms"] - r["median_ms"]) * scale for r in cell]
                ax.barh(ys, med, xerr=[lo, hi], color=[color(r["impl"]) for r in cell], capsize=2)
                ax.set_yticks(list(ys))
                ax.set_yticklabels([r["impl"] for r in cell], fontsize=7)
                ax.invert_yaxis()
                for y, r, m in zip(ys, cell, med):
                    p = r.get("pct_of_ceiling")
                    ax.text(m, y, f" {m:.3g} {unit}" + (f" ({p:.0f}%)" if p is not None else ""), va="center",
                            fontsize=7)
                ax.set_xlim(0, max(m + h for m, h in zip(med, hi)) * 1.45)
                ax.set_title(f"{dt} {sh}", fontsize=9)
                ax.set_xlabel(f"median time ({unit}), whiskers p10-p90; (% of ceiling)", fontsize=7)
                ax.tick_params(axis="x", labelsize=7)
        fig.suptitle(f"{op} {d}", fontsize=11)
        fig.text(0.01, 0.005, foot, fontsize=6)
        fig.tight_layout(rect=(0, 0.02, 1, 0.97))
        path = os.path.join(out, f"time_{op}_{d}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    cases = sorted({(r["op"], r["dir"], r["dtype"], r["shape"]) for r in res["rows"]},
                   key=lambda c: (c[0], c[1], c[2] != "float32", c[2], shape_key(c[3])))
    impls = sorted({r["impl"] for r in res["rows"] if r.get("pct_of_ceiling") is not None})
    if cases and impls:
        fig, ax = plt.subplots(figsize=(max(8, 1.0 * len(cases) + 2), 5))
        w = 0.8 / len(impls)
        for k, impl in enumerate(impls):
            xs, ys = [], []
            for i, c in enumerate(cases):
                r = next((r for r in res["rows"] if (r["op"], r["dir"], r["dtype"], r["shape"]) == c
                          and r["impl"] == impl and r.get("pct_of_ceiling") is not None), None)
                if r:
                    xs.append(i - 0.4 + w * (k + 0.5))
                    ys.append(r["pct_of_ceiling"])
            ax.bar(xs, ys, width=w, label=impl, color=None if not impl.startswith("dlfuse_") else None)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([f"{'mm' if c[0].startswith('matmul') else 'am'} {c[1]}\n{c[2]}\n{c[3]}" for c in cases],
                           fontsize=6)
        ax.set_ylabel("% of measured ceiling (median)")
        ax.axhline(100, color="k", lw=0.5)
        ax.set_title("% of ceiling: matmul vs GEMM peak, add_mul vs copy bandwidth", fontsize=10)
        ax.legend(fontsize=6, ncol=3)
        fig.text(0.01, 0.005, foot, fontsize=6)
        fig.tight_layout(rect=(0, 0.02, 1, 1))
        path = os.path.join(out, "pct_of_ceiling.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for p in written:
        print(p)


if __name__ == "__main__":
    main()
