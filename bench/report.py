#!/usr/bin/env python3
"""Markdown tables from a bench/run.py results.json (what docs/performance.md shows).

  python3 bench/report.py path/to/results.json

One table per op and direction: a row per dtype and shape, a column per implementation,
cells `median (p10-p90) [% of ceiling]` in us or ms; then the ceilings, the dispatch
overhead, the checks (outputs against float64, the NaN probes of the epilogues) and the
ratios of issue 17's targets with PASS/FAIL (bench/targets.py).
"""
import json
import sys

import targets


def order(impl):
    return (not impl.startswith("dlfuse_"), not impl.startswith("onednn"), impl)


def fmt_t(ms):
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.2f} ms"


def fmt_range(r):
    """median (p10-p90) in one unit."""
    unit, k = ("us", 1e3) if r["median_ms"] < 1 else ("ms", 1.0)
    d = 1 if unit == "us" else 2
    return f"{r['median_ms'] * k:.{d}f} ({r['p10_ms'] * k:.{d}f}-{r['p90_ms'] * k:.{d}f}) {unit}"


def main():
    res = json.load(open(sys.argv[1]))
    m = res["meta"]
    print(f"Run: {m['date_utc']}, `{m['command']}`, {m.get('gpu') or ''} host {m['host_cpu']} "
          f"({m['host_cores']} cores), load average {m['loadavg_before']} -> {m['loadavg_after']}, "
          f"git {m['git']}{' (dirty)' if m.get('git_dirty') else ''}, mode {m['mode']}.\n")
    print("| ceiling | device | dtype | how | median | p10-p90 of time |")
    print("|---|---|---|---|---:|---|")
    for c in res["ceilings"]:
        if "GBps" in c:
            v = f"{c['GBps']:.1f} GB/s"
        else:
            v = f"{c['GFLOPs'] / 1e3:.2f} TFLOP/s" if c["GFLOPs"] >= 1000 else f"{c['GFLOPs']:.1f} GFLOP/s"
        print(f"| {c['ceiling']} | {c['device']} | {c.get('dtype', '-')} | {c['impl']} | {v} | "
              f"{fmt_t(c['p10_ms'])} - {fmt_t(c['p90_ms'])} |")
    print()
    groups = {}
    for r in res["rows"]:
        groups.setdefault((r["op"], r["dir"]), []).append(r)
    for (op, d), rows in sorted(groups.items()):
        impls = sorted({r["impl"] for r in rows}, key=order)
        cases = sorted({(r["dtype"], r["shape"]) for r in rows},
                       key=lambda c: (c[0] != "float32", [int(v) for v in c[1].split("x")]))
        print(f"**{op} {d}** (median, p10-p90 in brackets, [% of ceiling])\n")
        print("| dtype | shape | " + " | ".join(impls) + " |")
        print("|---|---|" + "---:|" * len(impls))
        for dt, sh in cases:
            cells = []
            for i in impls:
                r = next((r for r in rows if r["impl"] == i and r["dtype"] == dt and r["shape"] == sh), None)
                if not r:
                    cells.append("-")
                    continue
                p = r.get("pct_of_ceiling")
                cells.append(fmt_range(r) + (f" [{p:.0f}%]" if p is not None else ""))
            print(f"| {dt} | {sh} | " + " | ".join(cells) + " |")
        print()
    print("| dispatch of a no-op kernel | via | median ns/call | p10 | p90 |")
    print("|---|---|---:|---:|---:|")
    for x in res["dispatch"]:
        if "median_ns" in x:
            print(f"| {x['dispatch']} | {x.get('via', 'C API')} | {x['median_ns']:.1f} | {x['p10_ns']:.1f} | "
                  f"{x['p90_ns']:.1f} |")
        else:
            print(f"| {x['dispatch']} | {x.get('via', '')} | {x.get('note', '')} | | |")
    print()
    for c in res.get("checks", []):
        print(f"- check {'ok' if c.get('ok') else 'NOT OK'}: " + ", ".join(f"{k} {v}" for k, v in c.items()
                                                                      if k not in ("check", "ok")) + f" ({c['check']})")
    lines = targets.evaluate(res)
    if lines:
        print("\n**Targets** (issue 17; ratio = dlfuse median / reference median, same run)\n")
        for t in lines:
            print(f"- {targets.fmt(t)}")


if __name__ == "__main__":
    main()
