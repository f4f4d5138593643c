#!/usr/bin/env python3
"""Before/after table of two sets of benchmark results (what `tools/gpu.sh ab` prints).

  python3 bench/compare.py BASE.json [BASE.json ...] -- NEW.json [NEW.json ...]

Takes bench/run.py's results.json or bench/python_overhead.py's --json files (each side may
hold several rounds: a row's value is the median over them) and prints, per row found on
both sides, base, new and new/base. Rows only one side has are listed after the table.
"""
import json
import statistics
import sys


def rows(path):
    """{row key: time} of one file; times in ms (run.py) or us (python_overhead.py)."""
    res = json.load(open(path))
    out = {}
    for r in res.get("rows", []):
        if "median_ms" in r:
            key = (r["op"], r["dir"], r["dtype"], r["shape"], r["impl"], r.get("device", ""))
            out[key] = r["median_ms"]
        elif "ns_per_call" in r:
            out[(r["path"], r["op"])] = r["ns_per_call"] / 1e3
    return out


def side(paths):
    merged = {}
    for p in paths:
        for k, v in rows(p).items():
            merged.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in merged.items()}


def main(argv):
    if "--" not in argv or argv.index("--") == 0 or argv.index("--") == len(argv) - 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cut = argv.index("--")
    base, new = side(argv[:cut]), side(argv[cut + 1:])
    unit = "us" if any(len(k) == 2 for k in base) else "ms"
    both = [k for k in base if k in new]
    width = max([len(" ".join(k)) for k in both] + [10])
    print(f"{'row':<{width}}  {'base ' + unit:>12}  {'new ' + unit:>12}  {'new/base':>8}")
    for k in both:
        b, n = base[k], new[k]
        print(f"{' '.join(k):<{width}}  {b:12.4f}  {n:12.4f}  {n / b if b else float('nan'):8.3f}")
    for name, only in (("base", base), ("new", new)):
        for k in only:
            if k not in both:
                print(f"only in {name}: {' '.join(k)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
