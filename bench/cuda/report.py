"""Merges bench_cuda.jsonl and torch_peers.jsonl (from `tools/gpu.sh bench-cuda`) into a ratio
table (markdown on stdout) plus results.json and results.csv in the same folder."""
import csv
import json
import os
import sys

out_dir = sys.argv[1]
rows, meta = [], {}
for name in ("bench_cuda.jsonl", "torch_peers.jsonl"):
    path = os.path.join(out_dir, name)
    if not os.path.exists(path):
        continue
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "impl" in r:
            rows.append(r)
        else:
            meta[r.get("op", "meta%d" % len(meta))] = r

t = {}
for r in rows:
    t[(r["op"], r["dtype"], r["shape"], r["impl"])] = r

def ms(op, dt, sh, impl):
    r = t.get((op, dt, sh, impl))
    return r["ms"] if r and r["ms"] > 0 else None

def fmt(x, unit=1e3):
    return "-" if x is None else f"{x * unit:.1f}"

def ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.3f}"

print("# CUDA plugin vs cuBLASLt and PyTorch (same GPU, same run)\n")
for k, v in meta.items():
    print(f"- {k}: {json.dumps(v)}")
print()

keys = sorted({(r["op"], r["dtype"], r["shape"]) for r in rows})
print("## matmul_add_relu forward (us; ratios = dlfuse / peer)\n")
print("| dtype | MxKxN | dlfuse | cuBLASLt GEMM | cuBLASLt GEMM tuned | cuBLASLt RELU_BIAS | torch GEMM | eager | _addmm_activation | compile | /Lt GEMM | /Lt GEMM tuned | /torch GEMM | /eager | /_addmm_act | /compile |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for (op, dt, sh) in keys:
    if op != "matmul_add_relu.fwd":
        continue
    d = ms(op, dt, sh, "dlfuse_cuda")
    g = ms(op, dt, sh, "cublaslt_gemm_only")
    gt = ms(op, dt, sh, "cublaslt_gemm_only_tuned")
    e = ms(op, dt, sh, "cublaslt_relu_bias_epilogue")
    tg, te, ta, tc = (ms(op, dt, sh, i) for i in ("torch_gemm_only", "torch_eager", "torch_addmm_activation", "torch_compile"))
    print(f"| {dt} | {sh} | {fmt(d)} | {fmt(g)} | {fmt(gt)} | {fmt(e)} | {fmt(tg)} | {fmt(te)} | {fmt(ta)} | {fmt(tc)} | "
          f"{ratio(d, g)} | {ratio(d, gt)} | {ratio(d, tg)} | {ratio(d, te)} | {ratio(d, ta)} | {ratio(d, tc)} |")
print("\n## matmul_add_relu forward, do_bench method (L2 flushed before each call, calls timed alone, implementations interleaved; us)\n")
print("| dtype | MxKxN | dlfuse | cuBLASLt GEMM | cuBLASLt GEMM tuned | cuBLASLt RELU_BIAS | torch GEMM | _addmm_activation | /Lt GEMM | /Lt GEMM tuned | /torch GEMM | /_addmm_act |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for (op, dt, sh) in keys:
    if op != "matmul_add_relu.fwd.flushed":
        continue
    d, g, gt, e = (ms(op, dt, sh, i) for i in ("dlfuse_cuda", "cublaslt_gemm_only", "cublaslt_gemm_only_tuned", "cublaslt_relu_bias_epilogue"))
    tg, ta = ms("matmul_add_relu.fwd", dt, sh, "torch_gemm_only"), ms("matmul_add_relu.fwd", dt, sh, "torch_addmm_activation")
    print(f"| {dt} | {sh} | {fmt(d)} | {fmt(g)} | {fmt(gt)} | {fmt(e)} | {fmt(tg)} | {fmt(ta)} | {ratio(d, g)} | {ratio(d, gt)} | {ratio(d, tg)} | {ratio(d, ta)} |")
print("\n## matmul_add_relu backward (grad_a, grad_b, grad_bias from a saved out; us)\n")
print("| dtype | MxKxN | dlfuse | torch eager | torch compile | /eager | /compile |")
print("|---|---|---|---|---|---|---|")
for (op, dt, sh) in keys:
    if op != "matmul_add_relu.bwd":
        continue
    d, te, tc = ms(op, dt, sh, "dlfuse_cuda"), ms(op, dt, sh, "torch_eager"), ms(op, dt, sh, "torch_compile")
    print(f"| {dt} | {sh} | {fmt(d)} | {fmt(te)} | {fmt(tc)} | {ratio(d, te)} | {ratio(d, tc)} |")
print("\n## add_mul_activation (us; fwd: % of the copy-bandwidth floor; bwd: all three gradients)\n")
print("| op | dtype | MxN | dlfuse | % copy BW | torch eager | torch compile | compile from out | /eager | /compile |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (op, dt, sh) in keys:
    if not op.startswith("add_mul_") or op.endswith(".check"):
        continue
    d = ms(op, dt, sh, "dlfuse_cuda")
    r = t.get((op, dt, sh, "dlfuse_cuda"), {})
    pct = f"{r['pct_of_copy_bw']:.1f}" if "pct_of_copy_bw" in r else "-"
    te, tc, to = ms(op, dt, sh, "torch_eager"), ms(op, dt, sh, "torch_compile"), ms(op, dt, sh, "torch_compile_from_out")
    print(f"| {op} | {dt} | {sh} | {fmt(d)} | {pct} | {fmt(te)} | {fmt(tc)} | {fmt(to)} | {ratio(d, te)} | {ratio(d, tc)} |")
print("\n## checks\n")
for r in rows:
    if r["op"].endswith(".check") or "probe" in r["op"]:
        print("- " + json.dumps(r))
for k, v in meta.items():
    if "probe" in k:
        print("- " + json.dumps(v))

json.dump({"meta": meta, "rows": rows}, open(os.path.join(out_dir, "results.json"), "w"), indent=1)
with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["op", "dtype", "shape", "impl", "ms"])
    for r in rows:
        w.writerow([r["op"], r["dtype"], r["shape"], r["impl"], r["ms"]])
