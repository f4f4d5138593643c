"""What a binding does with an attribute comes from the op's schema (its type, name, range,
default), never from a core op's key number: a plugin's keys are its own (docs/abi.md).
testref_ops's testref_axpby declares a FLOAT64 under ACTIVATION's key, an INT64 under
MULTIPLIER's, a FLOAT64 under OUTPUT_ACTIVATION's and an enum-like INT64 of [0, 2] (MODE,
default 2) under ALLOW_TF32's, a truth value of default 0 for the core ops; its values,
defaults and gradients through dlfuse.<op>, dlfuse.call, dlfuse.torch (both operator kinds,
with and without grad) and dlfuse.jax (jit, grad) must be exactly the float64 formula's, and a
bad value raises TypeError or ValueError naming the argument, one out of its range
InvalidArgumentError naming it. The cases (attr_keys_cases.py) run in processes of their own,
one per front end: the plugin goes into the default registry, which is made once per process.
The Rust crate's counterpart is bindings/rust/dlfuse/tests/attr_keys.rs."""
import json
import os
import subprocess
import sys

import pytest

import attr_keys_cases

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN = os.path.join(os.environ.get("DLFUSE_TEST_PLUGIN_DIR", ""), "libdlfuse_testref_ops.so")

# (group of cases, process environment on top of the suite's)
RUNS = {"numpy": ("numpy", {}), "torch-cpp": ("torch", {}), "torch-python": ("torch", {"DLFUSE_TORCH_OPS": "python"}),
        "jax": ("jax", {})}
NEEDS = {"torch": "torch", "jax": "jax"}

_results = {}


def _run(run):
    if run not in _results:
        group, extra = RUNS[run]
        import dlfuse
        env = dict(os.environ)
        env.pop("DLFUSE_TORCH_OPS", None)  # each torch run picks its operators itself
        env.update(DLFUSE_PLUGIN_PATH=PLUGIN, **extra)
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(dlfuse.__file__))), HERE]
                                            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        p = subprocess.run([sys.executable, os.path.join(HERE, "attr_keys_cases.py"), group], capture_output=True,
                           text=True, timeout=600, env=env)
        lines = p.stdout.strip().splitlines()
        try:
            _results[run] = json.loads(lines[-1]) if p.returncode == 0 and lines else None
        except ValueError:
            _results[run] = None
        if _results[run] is None:  # a crash (a negative code is a signal) or no report
            _results[run] = f"exit code {p.returncode}\n{p.stdout}\n{p.stderr}"
    return _results[run]


CASES = [(run, name) for run, (group, _e) in RUNS.items() for name in attr_keys_cases.CASES
         if name.startswith(group + "_")]


@pytest.mark.parametrize("run,case", CASES, ids=[f"{r}-{c}" for r, c in CASES])
def test_attributes_by_their_schema(run, case):
    if not os.path.exists(PLUGIN):
        pytest.skip(f"{PLUGIN} not built (DLFUSE_TEST_PLUGIN_DIR)")
    module = NEEDS.get(RUNS[run][0])
    if module == "jax" and "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("jaxlib does not start with the ASan runtime preloaded; sanitized builds have no dlfuse.jax")
    if module:
        pytest.importorskip(module)
    res = _run(run)
    assert isinstance(res, dict), f"the {run} process failed: {res}"
    got = res.get(case, "not run")
    if got.startswith("skip: "):
        pytest.skip(got[6:])
    assert got == "ok", got
