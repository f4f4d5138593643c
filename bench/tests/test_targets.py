"""bench/targets.py: issue 17's ratios from a results.json (synthetic rows whose ratios are
known, and the kept results), and bench/report.py printing them. No torch, no GPU:
  python3 bench/tests/test_targets.py   (or pytest; ctest runs it as bench.targets)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
import targets  # noqa: E402

GELU = targets.GELU
BIG, MID, AM = "8192x4096x4096", "4096x1024x1024", "16384x8192"


def row(op, d, dt, sh, impl, ms, device="cuda:0", **kw):
    return {"op": op, "dir": d, "dtype": dt, "shape": sh, "impl": impl, "device": device, "median_ms": ms,
            "p10_ms": ms, "p90_ms": ms, **kw}


def synthetic():
    """A GPU run: 16384*8192 float32 x 4 arrays = 2^31 bytes, 1 ms at 2147.483648 GB/s."""
    rows = [
        row(GELU, "fwd", "float32", BIG, "dlfuse_cuda", 5.1), row(GELU, "fwd", "float32", BIG, "torch_gemm_only", 5.0),
        row(GELU, "fwd", "bfloat16", BIG, "dlfuse_cuda", 1.6),
        row(GELU, "fwd", "bfloat16", BIG, "torch_gemm_only", 1.5),
        # no torch_gemm_only at float32 MID; bfloat16 MID has no row at all
        row(GELU, "fwd", "float32", MID, "dlfuse_cuda", 0.2),
        row(GELU, "bwd", "float32", BIG, "dlfuse_cuda", 2.0), row(GELU, "bwd", "float32", BIG, "torch_eager", 2.0),
        row(GELU, "bwd", "float32", BIG, "torch_compile", 2.5),
        # an OpenCL device on the GPU is compared with the GPU's peers
        row(GELU, "bwd", "float32", BIG, "dlfuse_opencl:0", 3.0, device="opencl:0", ceiling_device="gpu"),
        row("add_mul_activation", "bwd_from_out", "float32", AM, "dlfuse_cuda", 1.04),
        row("add_mul_activation", "bwd_from_out", "float32", AM, "torch_compile", 1.2),
        row("add_mul_activation", "bwd_from_out", "bfloat16", AM, "dlfuse_cuda", 0.6),
        row("add_mul_activation", "bwd_from_out", "bfloat16", AM, "torch_compile", 0.5),
        # a CPU plugin's row finds neither the GPU's peers nor its copy bandwidth
        row("add_mul_activation", "bwd_from_out", "float32", AM, "dlfuse_onednn", 30.0, device="cpu:0"),
    ]
    t = {"impl": "synthetic", "median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0}
    ceilings = [dict(t, ceiling="copy_bw", device="cuda:0", GBps=2147.483648),
                dict(t, ceiling="copy_bw", device="cuda:0", GBps=1000.0),
                dict(t, ceiling="gemm_peak", device="cuda:0", dtype="float32", GFLOPs=5e4)]
    return {"meta": {}, "ceilings": ceilings, "rows": rows}


def find(lines, target_part, dt, sh, impl):
    hits = [t for t in lines if target_part in t["target"] and (t["dtype"], t["shape"], t["impl"]) == (dt, sh, impl)]
    assert len(hits) == 1, (target_part, dt, sh, impl, hits)
    return hits[0]


class Ratios(unittest.TestCase):
    def setUp(self):
        self.lines = targets.evaluate(synthetic())

    def test_gemm_floor(self):
        t = find(self.lines, "fwd / torch_gemm_only", "float32", BIG, "dlfuse_cuda")
        self.assertAlmostEqual(t["ratio"], 1.02)
        self.assertEqual(t["verdict"], "PASS")
        t = find(self.lines, "fwd / torch_gemm_only", "bfloat16", BIG, "dlfuse_cuda")
        self.assertAlmostEqual(t["ratio"], 1.6 / 1.5)
        self.assertEqual(t["verdict"], "FAIL")

    def test_missing_rows_say_so(self):
        t = find(self.lines, "fwd / torch_gemm_only", "float32", MID, "dlfuse_cuda")
        self.assertEqual((t["verdict"], t["why"]), ("MISSING", "no torch_gemm_only row"))
        t = find(self.lines, "fwd / torch_gemm_only", "bfloat16", MID, "dlfuse")
        self.assertEqual((t["verdict"], t["why"]), ("MISSING", "no dlfuse row"))

    def test_strictly_faster(self):
        # level with eager is not faster than eager
        t = find(self.lines, "bwd / torch_eager", "float32", BIG, "dlfuse_cuda")
        self.assertEqual((t["ratio"], t["verdict"]), (1.0, "FAIL"))
        t = find(self.lines, "bwd / torch_compile", "float32", BIG, "dlfuse_cuda")
        self.assertEqual((t["ratio"], t["verdict"]), (0.8, "PASS"))
        t = find(self.lines, "bwd / torch_compile", "float32", BIG, "dlfuse_opencl:0")
        self.assertEqual((t["ratio"], t["verdict"]), (1.2, "FAIL"))

    def test_copy_bandwidth_bound(self):
        t = find(self.lines, "copy_bw", "float32", AM, "dlfuse_cuda")
        self.assertAlmostEqual(t["ref_ms"], 1.0)  # the best GPU copy bandwidth of the run
        self.assertAlmostEqual(t["ratio"], 1.04)
        self.assertEqual(t["verdict"], "PASS")
        t = find(self.lines, "copy_bw", "float32", AM, "dlfuse_onednn")
        self.assertEqual((t["verdict"], t["why"]), ("MISSING", "no cpu copy_bw ceiling"))
        slow = synthetic()
        next(r for r in slow["rows"] if r["dir"] == "bwd_from_out" and r["impl"] == "dlfuse_cuda")["median_ms"] = 1.06
        t = find(targets.evaluate(slow), "copy_bw", "float32", AM, "dlfuse_cuda")
        self.assertEqual(t["verdict"], "FAIL")

    def test_from_out_vs_compile_on_the_same_device(self):
        verdict = lambda dt, impl: find(self.lines, "bwd_from_out / torch_compile", dt, AM, impl)["verdict"]  # noqa
        self.assertEqual(verdict("float32", "dlfuse_cuda"), "PASS")
        self.assertEqual(verdict("bfloat16", "dlfuse_cuda"), "FAIL")
        t = find(self.lines, "bwd_from_out / torch_compile", "float32", AM, "dlfuse_onednn")
        self.assertEqual((t["verdict"], t["why"]), ("MISSING", "no torch_compile row"))

    def test_target_without_rows_is_left_out(self):
        self.assertFalse([t for t in self.lines if "matmul_add_residual" in t["target"]])

    def test_line(self):
        t = find(self.lines, "fwd / torch_gemm_only", "float32", BIG, "dlfuse_cuda")
        self.assertEqual(targets.fmt(t), "target matmul_add_activation[gelu_tanh] fwd / torch_gemm_only <= 1.03: "
                                         "float32 8192x4096x4096 dlfuse_cuda: 5.1000 / 5.0000 ms = 1.020 PASS")


class KeptResults(unittest.TestCase):
    def run_script(self, script, path):
        p = subprocess.run([sys.executable, os.path.join(BENCH, script), path], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def test_report_prints_the_targets(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.json")
            with open(path, "w") as f:
                json.dump(dict(synthetic(), dispatch=[], checks=[], meta={
                    "date_utc": "2026-11-23T00:00:00Z", "command": "synthetic", "host_cpu": "none", "host_cores": 1,
                    "loadavg_before": None, "loadavg_after": None, "git": "0", "mode": "quick"}), f)
            out = self.run_script("report.py", path)
        self.assertIn("- target matmul_add_activation[gelu_tanh] fwd / torch_gemm_only <= 1.03: float32 "
                      "8192x4096x4096 dlfuse_cuda: 5.1000 / 5.0000 ms = 1.020 PASS", out)

    def test_cpu_run_without_peers(self):
        # ABI 1.1 rows of the oneDNN plugin on other shapes, no torch: every case is missing
        out = self.run_script("targets.py", os.path.join(BENCH, "results", "2026-11-23-cpu-epyc-abi11", "results.json"))
        lines = out.splitlines()
        self.assertEqual(len(lines), 16)
        self.assertTrue(all(line.startswith("target ") and "MISSING" in line for line in lines))

    def test_run_before_abi_1_1(self):
        out = self.run_script("targets.py", os.path.join(BENCH, "results", "2026-11-23-h100", "results.json"))
        self.assertEqual(out, "")


if __name__ == "__main__":
    unittest.main()
