"""The selection options bench/run.py passes to its Python peers (the C++ programs take the
same): --quick, --ops LIST, --shapes MxKxN,MxN,..., --dtypes LIST."""
import argparse


def parse_selection(argv, dtypes=True):
    """Returns (quick, ops, shapes as int tuples or None for the defaults[, dtypes])."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--ops", default="matmul_add_relu,add_mul_activation")
    ap.add_argument("--shapes", default="")
    if dtypes:
        ap.add_argument("--dtypes", default="float32,bfloat16")
    a = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",") if s] or None
    out = (a.quick, a.ops.split(","), shapes)
    return out + (a.dtypes.split(","),) if dtypes else out
