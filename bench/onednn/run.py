#!/usr/bin/env python3
"""One run of the oneDNN plugin benchmark: dlfuse (registry -> libdlfuse_onednn.so) vs raw
oneDNN (same process, alternating reps) vs NumPy unfused, then a table of ratios.

  python3 bench/onednn/run.py [--build build/h-onednn] [--quick] [--only SUBSTR] [--reps-scale X] [--threads N]

--build names a dlfuse build tree with the plugin built (cmake --build <dir> --target
dlfuse_onednn). The C++ program is configured and built in <build>-bench. Not run by CI.
Timing is disturbed by other work on the machine: the load average is printed before and
after; run it when the machine is quiet.
"""
import argparse
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, **kw)


def results(text, into):
    for line in text.splitlines():
        p = line.split()
        if len(p) >= 6 and p[0] == "RESULT":
            into.setdefault(p[1], {})[p[2]] = (float(p[3]), float(p[4]), int(p[5]))
        elif line.startswith("INFO"):
            print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build/h-onednn")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--reps-scale", default="1", help="multiply every case's repetitions")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads for oneDNN/dlfuse (OMP_NUM_THREADS) and NumPy (OPENBLAS_NUM_THREADS); 0: defaults")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    plugin = os.path.join(build, "lib", "dlfuse", "plugins", "libdlfuse_onednn.so")
    if not os.path.exists(plugin):
        sys.exit(f"no plugin at {plugin}: build the dlfuse_onednn target first")
    bench_build = build + "-bench"
    sh(["cmake", "-S", HERE, "-B", bench_build, f"-DDLFUSE_BUILD_DIR={build}", "-DCMAKE_BUILD_TYPE=Release"],
       stdout=subprocess.DEVNULL)
    sh(["cmake", "--build", bench_build, "-j2"], stdout=subprocess.DEVNULL)

    import numpy as np
    load0 = open("/proc/loadavg").read().split()[:3]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# cpu: {cpu}, {os.cpu_count()} cores; python {platform.python_version()}, numpy {np.__version__}")
    print(f"# load average before: {' '.join(load0)}")
    extra = ((["--quick"] if args.quick else []) + (["--only", args.only] if args.only else []) +
             ["--reps-scale", args.reps_scale])
    env = dict(os.environ)
    if args.threads > 0:
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = str(args.threads)
    print(f"# threads: {args.threads or 'library defaults'}")
    res = {}
    out = sh([os.path.join(bench_build, "bench_onednn"), plugin] + extra, capture_output=True, env=env).stdout
    results(out, res)
    out = sh([sys.executable, os.path.join(HERE, "numpy_bench.py")] + extra, capture_output=True, env=env).stdout
    results(out, res)
    load1 = open("/proc/loadavg").read().split()[:3]
    print(f"# load average after: {' '.join(load1)}")

    def ms(case, path):
        return res.get(case, {}).get(path, (None,))[0]

    hdr = (f"{'case':40s} {'oneDNN ms':>10s} {'dlfuse ms':>10s} {'NumPy ms':>10s} "
           f"{'dlfuse/oneDNN':>14s} {'(min)':>7s} {'vs NumPy':>9s} {'(min)':>7s} {'vs NaN-keeping oneDNN':>22s}")
    print(hdr)
    print("-" * len(hdr))
    for case in res:
        p = res[case]
        o, d, n = ms(case, "onednn"), ms(case, "dlfuse"), ms(case, "numpy")
        f = lambda v: f"{v:10.3f}" if v is not None else f"{'-':>10s}"
        r1 = f"{o / d:14.1%} {p['onednn'][1] / p['dlfuse'][1]:7.1%}" if o and d else f"{'-':>14s} {'-':>7s}"
        r2 = f"{n / d:8.2f}x {p['numpy'][1] / p['dlfuse'][1]:6.2f}x" if n and d else f"{'-':>9s} {'-':>7s}"
        k = ms(case, "onednn_nankeep")
        r3 = f"{k / d:14.1%} ({p['onednn_nankeep'][1] / p['dlfuse'][1]:.1%})" if k and d else ""
        print(f"{case:40s} {f(o)} {f(d)} {f(n)} {r1} {r2} {r3}")
    reps = {c: max(v[2] for v in p.values()) for c, p in res.items()}
    print(f"# medians of {min(reps.values()) if reps else 0}..{max(reps.values()) if reps else 0} reps per case; "
          "ratios = other time / dlfuse time (>100% / >1x: dlfuse faster), of medians and of minima")


if __name__ == "__main__":
    main()
