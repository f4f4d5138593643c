"""bench/run.py --markdown and bench/compare.py on synthetic results whose figures are known
(no build, no GPU: stdlib only). ctest runs it as bench.tables; also
  python3 bench/tests/test_tables.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def row(op, d, dt, sh, impl, ms, device="cpu:0", **kw):
    return {"op": op, "dir": d, "dtype": dt, "shape": sh, "impl": impl, "device": device, "median_ms": ms,
            "p10_ms": ms, "p90_ms": ms, **kw}


def results():
    """A CPU and a GPU device. CPU: 10 GB/s, 100 GFLOP/s float32. add_mul fwd 1000x1000 float32
    moves (3 * 10^6 + 1000) * 4 bytes: 1.2004 ms at 10 GB/s. GEMM 1000^3 fwd: 2 GFLOP, 20 ms."""
    t = {"median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0}
    am, mm = "add_mul_activation", "matmul_add_relu"
    return {
        "meta": {"date_utc": "2026-01-01T00:00:00Z", "command": "python3 bench/run.py --synthetic", "mode": "full",
                 "host_cpu": "Test CPU", "host_cores": 2, "gpu": "Test GPU", "git": "abc1234", "git_dirty": False,
                 "loadavg_before": [0.1], "loadavg_after": [0.2]},
        "ceilings": [dict(t, ceiling="copy_bw", device="cpu:0", impl="memcpy_1_threads", GBps=8.0),
                     dict(t, ceiling="copy_bw", device="cpu:0", impl="memcpy_2_threads", GBps=10.0),
                     dict(t, ceiling="gemm_peak", device="cpu:0", dtype="float32", impl="peak_f32", GFLOPs=100.0),
                     dict(t, ceiling="copy_bw", device="cuda:0", impl="gpu_copy", GBps=1000.0)],
        "rows": [
            row(am, "fwd", "float32", "1000x1000", "dlfuse_onednn", 2.4008),
            row(am, "fwd", "bfloat16", "1000x1000", "dlfuse_onednn", 1.8006),
            row(am, "fwd", "float32", "1000x1000", "numpy", 4.8016),
            row(mm, "fwd", "float32", "1000x1000x1000", "dlfuse_onednn", 25.0),
            row(mm, "fwd", "bfloat16", "1000x1000x1000", "dlfuse_onednn", 40.0),
            row(mm, "fwd", "float32", "1000x1000x1000", "onednn_raw", 20.0),
            row(am, "fwd", "float32", "1000x1000", "dlfuse_cuda", 0.015, device="cuda:0"),
            # a peer of another device is not a peer of the CPU rows
            row(am, "fwd", "float32", "1000x1000", "torch_eager", 0.030, device="cuda:0"),
        ],
        "dispatch": [{"dispatch": "op_call", "median_ns": 41.4, "p10_ns": 40.0, "p90_ns": 43.0}],
        "checks": [{"check": "relu_nan_probe", "impl": "onednn_raw", "ok": False}],
    }


def run(script, *args):
    p = subprocess.run([sys.executable, os.path.join(BENCH, script), *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(p.stderr)
    return p.stdout


class Markdown(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.json")
            with open(path, "w") as f:
                json.dump(results(), f)
            cls.out = run("run.py", "--markdown", path)
        cls.lines = cls.out.splitlines()

    def line(self, *parts):
        hits = [ln for ln in self.lines if all(p in ln for p in parts)]
        self.assertEqual(len(hits), 1, (parts, hits))
        return [c.strip() for c in hits[0].strip("|").split("|")]

    def test_header_names_device_date_commit_command(self):
        self.assertIn("### Test CPU (2 cores)", self.lines)
        self.assertIn("### Test GPU", self.lines)
        self.assertIn("Date 2026-01-01T00:00:00Z, commit abc1234, full mode", self.out)
        self.assertIn("Command: `python3 bench/run.py --synthetic`", self.out)

    def test_ceilings_are_the_best_of_the_device(self):
        self.assertIn("Ceilings: copy bandwidth 10.0 GB/s (memcpy_2_threads); GEMM peak float32 0.10 TFLOP/s "
                      "(peak_f32).", self.out)
        self.assertIn("Ceilings: copy bandwidth 1000.0 GB/s (gpu_copy).", self.out)

    def test_byte_floor_bf16_beside_f32_and_peer_ratio(self):
        f32 = self.line("| fwd | 1000x1000 | float32 | onednn |")
        bf16 = self.line("| fwd | 1000x1000 | bfloat16 | onednn |")
        # dir shape dtype dlfuse time bound % bf16/f32 numpy
        self.assertEqual(f32[4:], ["2.40 ms", "1.20 ms", "50%", "", "4.80 ms (0.50)"])
        self.assertEqual(bf16[4:], ["1.80 ms", "600.2 us", "33%", "0.75", "-"])
        self.assertEqual(self.lines.index("| fwd | 1000x1000 | bfloat16 | onednn | 1.80 ms | 600.2 us | 33% | 0.75 | - |"),
                         self.lines.index("| fwd | 1000x1000 | float32 | onednn | 2.40 ms | 1.20 ms | 50% |  | "
                                          "4.80 ms (0.50) |") + 1)

    def test_gemm_bound_cpu_bf16_against_the_f32_peak(self):
        self.assertEqual(self.line("| 1000x1000x1000 | float32 | onednn |")[4:], ["25.00 ms", "20.00 ms", "80%",
                                                                                   "20.00 ms (1.25)"])
        self.assertEqual(self.line("| 1000x1000x1000 | bfloat16 | onednn |")[4:], ["40.00 ms", "20.00 ms", "50%",
                                                                                    "-"])

    def test_peers_only_of_the_same_device(self):
        cpu_head = self.line("| dir | shape | dtype | dlfuse |", "numpy")
        self.assertNotIn("torch_eager", cpu_head)
        self.assertEqual(self.line("| fwd | 1000x1000 | float32 | cuda |")[4:], ["15.0 us", "12.0 us", "80%", "",
                                                                                   "30.0 us (0.50)"])

    def test_dispatch_and_failed_checks(self):
        self.assertIn("| op_call | C API | 41 |", self.lines)
        self.assertTrue(any(ln.startswith("- check NOT OK:") and "relu_nan_probe" in ln for ln in self.lines))


class Compare(unittest.TestCase):
    def write(self, d, name, obj):
        path = os.path.join(d, name)
        with open(path, "w") as f:
            json.dump(obj, f)
        return path

    def test_run_results_median_over_rounds(self):
        with tempfile.TemporaryDirectory() as d:
            r = lambda ms, shape="64x64": {"rows": [row("add_mul_activation", "fwd", "float32", shape, "dlfuse_x", ms)]}  # noqa
            base = [self.write(d, f"b{i}.json", r(ms)) for i, ms in enumerate((2.0, 4.0, 9.0))]
            new = [self.write(d, "n.json", {"rows": r(3.0)["rows"] + r(1.0, "8x8")["rows"]})]
            out = run("compare.py", *base, "--", *new).splitlines()
        self.assertRegex(out[1], r"^add_mul_activation fwd float32 64x64 dlfuse_x cpu:0 +4\.0000 +3\.0000 +0\.750$")
        self.assertEqual(out[2], "only in new: add_mul_activation fwd float32 8x8 dlfuse_x cpu:0")

    def test_call_overhead_in_microseconds(self):
        with tempfile.TemporaryDirectory() as d:
            b = self.write(d, "b.json", {"rows": [{"path": "dlfuse", "op": "matmul 32x32x32", "ns_per_call": 20000}]})
            n = self.write(d, "n.json", {"rows": [{"path": "dlfuse", "op": "matmul 32x32x32", "ns_per_call": 15000}]})
            out = run("compare.py", b, "--", n).splitlines()
        self.assertIn("base us", out[0])
        self.assertRegex(out[1], r"^dlfuse matmul 32x32x32 +20\.0000 +15\.0000 +0\.750$")


if __name__ == "__main__":
    unittest.main()
