#!/usr/bin/env python3
"""Table of run.sh's runs.jsonl: per case and thread count, the median over runs of each
run's median (ms) for 2.6.3 (A, A2 runs) and 3.2 (B, B2 runs), the ratio 3.2/2.6.3, the
per-round ratios B/A and B2/A2 (min..max), and the A/A band: per-round A2/A (min..max);
"best": the fastest single call over all runs of a version (least touched by other load).
Also the median cold creation time (primitive_desc + primitive) per version.

    python3 bench/peers/onednn_versions/analyze.py OUT_DIR [RUNS_FILE] [--md]   # RUNS_FILE default runs.jsonl
"""
import json
import statistics as st
import sys
from collections import defaultdict

args = [a for a in sys.argv[1:] if a != "--md"]
out = args[0]
runs_file = args[1] if len(args) > 1 else "runs.jsonl"
md = "--md" in sys.argv
rows = [json.loads(l) for l in open(f"{out}/{runs_file}") if l.strip()]
med = defaultdict(dict)  # (case, threads) -> {run tag: median_ms}
mins = defaultdict(dict)  # (case, threads) -> {run tag: min_ms}
create = defaultdict(list)  # (case, dnnl) -> [create_ms]
impl = {}
errors = set()
for r in rows:
    key = (r["case"], r["threads"])
    if "error" in r:
        errors.add((r["case"], r["dnnl"], r["error"]))
        continue
    create[(r["case"], r["dnnl"])].append(r["create_ms"])
    if "median_ms" in r:
        med[key][r["run"]] = r["median_ms"]
        mins[key][r["run"]] = r["min_ms"]
        impl[(r["case"], r["dnnl"])] = r["impl"]

def rng(v):
    return f"{min(v):.2f}-{max(v):.2f}"

cases = list(dict.fromkeys(r["case"] for r in rows if "median_ms" in r))
hdr = ["case", "thr", "2.6.3 ms", "3.2 ms", "3.2/2.6.3", "per-round 3.2/2.6.3", "A/A 2.6.3", "B/B 3.2", "best 2.6.3",
       "best 3.2", "best 3.2/2.6.3", "impl 2.6.3 / 3.2"]
lines = []
for t in ("2", "1"):
    for c in cases:
        m = med.get((c, t))
        if not m:
            continue
        # rounds with all four runs (an interrupted round is left out)
        rounds = sorted(r for r in {k.split(".")[0] for k in m} if all(f"{r}.{x}" in m for x in ("A", "B", "A2", "B2")))
        A = [m[f"{r}.A"] for r in rounds] + [m[f"{r}.A2"] for r in rounds]
        B = [m[f"{r}.B"] for r in rounds] + [m[f"{r}.B2"] for r in rounds]
        ratio = st.median(B) / st.median(A)
        per = [m[f"{r}.B"] / m[f"{r}.A"] for r in rounds] + [m[f"{r}.B2"] / m[f"{r}.A2"] for r in rounds]
        aa = [m[f"{r}.A2"] / m[f"{r}.A"] for r in rounds]
        bb = [m[f"{r}.B2"] / m[f"{r}.B"] for r in rounds]
        mn = mins[(c, t)]
        bestA = min(mn[f"{r}.{x}"] for r in rounds for x in ("A", "A2"))
        bestB = min(mn[f"{r}.{x}"] for r in rounds for x in ("B", "B2"))
        lines.append([c, t, f"{st.median(A):.4g}", f"{st.median(B):.4g}", f"{ratio:.3f}", rng(per), rng(aa), rng(bb),
                      f"{bestA:.4g}", f"{bestB:.4g}", f"{bestB / bestA:.3f}", f"{impl.get((c, '2.6.3'))} / {impl.get((c, '3.2.0'))}"])
if md:
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for l in lines:
        print("| " + " | ".join(l) + " |")
else:
    w = [max(len(str(x[i])) for x in lines + [hdr]) for i in range(len(hdr))]
    for l in [hdr] + lines:
        print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(l)))
print()
print("cold creation, primitive_desc + primitive, median over runs (ms) [min-max]:")
for c in dict.fromkeys(r["case"] for r in rows):
    a, b = create.get((c, "2.6.3"), []), create.get((c, "3.2.0"), [])
    if a and b:
        print(f"  {c:36s} 2.6.3 {st.median(a):7.3f} [{min(a):.3f}-{max(a):.3f}]   3.2 {st.median(b):7.3f} [{min(b):.3f}-{max(b):.3f}]")
for e in sorted(errors):
    print("error:", *e)
