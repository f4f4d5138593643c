"""Property-based tests (hypothesis) of the core ops through the three front ends.

For matmul_add_relu, add_mul_activation, matmul_add_activation, matmul_add_residual and
their backward ops, hypothesis draws: shapes (batch dims, NumPy broadcasts of bias,
residual, x and y, zero-size dims, K = 0, 0-d operands); the dtype (float32 always;
float64, float16 and bfloat16 where the plugin serving the device declares the op and its
backward in it); the activation (all seven, by name or by dlfuse_activation_t integer); the
multiplier; allow_tf32; the data (a seed for NumPy's generator: values on a dyadic grid,
exact zeros included, or uniform); and, where dlfuse reads the arrays as they are, their
layout: storage in another dim order (transposed views), slices with steps from an offset
(the data does not start where its buffer does), stride-0 views (np.broadcast_to, torch's
expand) and outputs given as views of poisoned buffers. The tests:

- test_package[op-device]: the dlfuse.* functions on NumPy arrays (torch tensors on CUDA,
  and for bfloat16, which NumPy cannot export), forward and backward, through each plugin
  that serves the call (oneDNN and testref on the CPU): any subset of the gradients asked
  for, outputs allocated or given (written inside the view only), in place where the op
  allows it, both forms of a backward that has two (from x, y, bias or from `pre`, and
  from `out`; the out form refused for gelu/silu), input buffers left unchanged;
- test_torch[op-device]: dlfuse.torch's forward without grad (the eager path) and with
  it, and torch.autograd.grad of the fused op with respect to a drawn subset of inputs;
- test_jax[op-device]: dlfuse.jax under jax.jit, and jax.jit(jax.grad(...)) with respect
  to a drawn subset of inputs (JAX arrays are dense: no layouts);
- test_reference_is_the_composition[op]: the reference itself against torch's (or JAX's)
  autograd of the plain float64 composition.

Every result is checked against a float64 NumPy composition on the very values the op saw
(inputs rounded to the dtype, what a stride-0 view holds, a backward's `out` or `pre` as
the forward wrote it), with docs/ops.md's tolerances exactly: |got - ref| <= atol + rtol *
scale per element, rtol and atol of the dtype (bfloat16's rtol for float32 with
allow_tf32), the scale that page gives each output (the sum of the absolute terms,
|grad_out| * A for dZ, summed as the gradient is). The data is drawn where that bound
holds for every correct kernel, and no wider:
- K <= 40 and at most 160 elements in any output, so in any reduction: a float32 sum of
  n terms, in any order, is off by at most (n - 1) 2^-24 of the sum of |terms|, inside
  rtol; magnitudes (<= 4 in matmuls, 16 in add_mul) keep float16 from overflowing;
- add_mul_activation's `out` is checked against |ref| alone, which cancelling terms of
  pre = x + bias + multiplier * y break for a correct kernel (float32 rounding of pre up to
  about 3 * 2^-24 of |x| + |bias| + |multiplier y|, over atol when they exceed ~5): so its
  values are either on a grid on which pre is exact in float32 whatever the order, or, in
  float32, uniform with |x| + |bias| + |multiplier y| <= 3.5. float64 (atol 1e-300) draws
  grid values only;
- add_mul_activation_backward from x, y, bias recomputes pre: relu's select within that
  rounding of 0 can go either way, so such examples (off the grid) are discarded (assume).

Devices: each test runs for every device in $DLFUSE_PROPERTY_DEVICES (comma-separated,
default "cpu,cuda"); a CUDA case skips where torch or JAX has no GPU or dlfuse no CUDA
plugin, and fails instead under DLFUSE_REQUIRE_CUDA=1, as in the rest of the suite (on a
GPU machine: DLFUSE_PROPERTY_DEVICES=cuda DLFUSE_REQUIRE_CUDA=1; docs/python.md).
$DLFUSE_PROPERTY_EXAMPLES sets the number of examples of every test (default: 40 for the
package's, 25 for torch's, 15 for JAX's, each of which compiles, 12 for the reference's).

Reproducing: each run draws new examples (not derandomized; no example database). A
failure prints the falsifying example, every draw labelled, and a line
`@reproduce_failure('<hypothesis version>', b'<blob>')`: add that decorator to the failing
test (below its @given) to replay exactly that example with the same hypothesis version.
`pytest --hypothesis-seed=<n>` makes a whole run repeatable.
"""
import math
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import dlfuse  # noqa: E402
from conftest import REQUIRE_CUDA, cuda_plugin_available  # noqa: E402

try:
    import ml_dtypes
except ImportError:  # bfloat16 is then rounded through torch, or not drawn
    ml_dtypes = None

ACTS = ("identity", "relu", "sigmoid", "tanh", "gelu_erf", "gelu_tanh", "silu")
ACT_CODE = {n: i for i, n in enumerate(ACTS)}  # dlfuse_activation_t
OUT_FORM = ("identity", "relu", "sigmoid", "tanh")  # derivative from the output
DTYPES = ("float32", "float64", "float16", "bfloat16")
# docs/ops.md, "Tolerances": (rtol, atol)
TOL = {"float64": (1e-11, 1e-300), "float32": (2e-5, 1e-6), "float16": (4e-3, 1e-3),
       "bfloat16": (1.6e-2, 1e-2)}
# the unit roundoff of the arithmetic pre is computed in (float32 or wider: docs/ops.md)
U_PRE = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -24}
POISON = 1234.5
MAX_TERMS = 160  # elements of any output, so of any reduction
MAX_K = 40
MATMUL_OPS = ("matmul_add_relu", "matmul_add_activation", "matmul_add_residual")
OPS = MATMUL_OPS[:1] + ("add_mul_activation",) + MATMUL_OPS[1:]
DEVICES = tuple(d.strip() for d in os.environ.get("DLFUSE_PROPERTY_DEVICES", "cpu,cuda").split(",")
                if d.strip())


def _settings(default_examples):
    n = int(os.environ.get("DLFUSE_PROPERTY_EXAMPLES", default_examples))
    return settings(max_examples=n, deadline=None, print_blob=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# ---- float64 reference (docs/ops.md) --------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_SQRT2 = math.sqrt(2.0)
_C = math.sqrt(2.0 / math.pi)


def _sigmoid(z):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-z))


def _u(p):  # GELU_TANH's u
    return _C * (p + 0.044715 * p ** 3)


def act_ref(act, p):
    if act == "identity":
        return p.copy()
    if act == "relu":
        return np.where(p > 0, p, 0.0)
    if act == "sigmoid":
        return _sigmoid(p)
    if act == "tanh":
        return np.tanh(p)
    if act == "gelu_erf":
        return p * 0.5 * _erfc(-p / _SQRT2)
    if act == "gelu_tanh":
        return p * _sigmoid(2 * _u(p))
    return p * _sigmoid(p)


def out_scale(act, p, out):
    """The scale of add_mul_activation's out: |ref|, GELU's bracket by its terms."""
    if act == "gelu_erf":
        return 0.5 * np.abs(p) * (1 + np.abs(_erf(p / _SQRT2)))
    if act == "gelu_tanh":
        return 0.5 * np.abs(p) * (1 + np.abs(np.tanh(_u(p))))
    return np.abs(out)


def dact(act, p):
    """(act'(p), A(p)): the derivative and the sum of its terms' magnitudes."""
    if act == "identity":
        return np.ones_like(p), np.ones_like(p)
    if act == "relu":
        d = (p > 0).astype(np.float64)
        return d, d
    if act == "sigmoid":
        s = _sigmoid(p)
        return s * _sigmoid(-p), s + s * s
    if act == "tanh":
        t = np.tanh(p)
        return 1 - t * t, 1 + t * t
    if act == "gelu_erf":
        pdf = np.exp(-p * p / 2) / math.sqrt(2 * math.pi)
        return 0.5 * _erfc(-p / _SQRT2) + p * pdf, 0.5 * (1 + np.abs(_erf(p / _SQRT2))) + np.abs(p) * pdf
    if act == "gelu_tanh":
        u, du = _u(p), _C * (1 + 3 * 0.044715 * p * p)
        t = np.tanh(u)
        d = _sigmoid(2 * u) * (1 + 2 * p * _sigmoid(-2 * u) * du)
        return d, 0.5 * (1 + np.abs(t)) + 0.5 * np.abs(p) * (1 + t * t) * du
    s = _sigmoid(p)
    return s * (1 + p * _sigmoid(-p)), s + np.abs(p) * (s + s * s)


def dact_out(act, out):
    """(act'(p), A(out)) read in the output (the out form of the backwards)."""
    if act == "identity":
        return np.ones_like(out), np.ones_like(out)
    if act == "relu":
        d = (out > 0).astype(np.float64)
        return d, d
    if act == "sigmoid":
        return out * (1 - out), np.abs(out) + out * out
    return 1 - out * out, 1 + out * out


def reduce_to(g, shape):
    g = np.asarray(g)
    while g.ndim > len(shape):
        g = g.sum(0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(i, keepdims=True)
    return np.asarray(g)


def _t(x):
    return np.swapaxes(x, -1, -2)


def forward_ref(p):
    """{output: (ref, scale)} of the forward on p.v, the values the op saw."""
    v = p.v
    if p.op == "add_mul_activation":
        pre = np.asarray(v["x"] + v["bias"] + p.mult * v["y"], np.float64)
        out = act_ref(p.act, pre)
        return {"out": (out, out_scale(p.act, pre, out))}, pre
    pre = v["a"] @ v["b"] + v["bias"]
    scale = np.abs(v["a"]) @ np.abs(v["b"]) + np.abs(v["bias"])
    if p.op == "matmul_add_residual":
        pre, scale = pre + v["residual"], scale + np.abs(v["residual"])
    # act' <= 1.13 and |out| <= max(|pre|, 1): out takes pre's scale (docs/ops.md)
    return {"out": (act_ref(p.act, pre), scale), "pre": (pre, scale)}, pre


def dz_ref(act, g, pre=None, out=None):
    """dZ / d_pre and its scale |grad_out| A, from pre or (out form) from out."""
    d, a = dact(act, pre) if pre is not None else dact_out(act, out)
    return g * d, np.abs(g) * a


def matmul_grads_ref(p, dz, sdz):
    a, b = p.v["a"], p.v["b"]
    r = {"grad_a": (reduce_to(dz @ _t(b), a.shape), reduce_to(sdz @ _t(np.abs(b)), a.shape)),
         "grad_b": (reduce_to(_t(a) @ dz, b.shape), reduce_to(_t(np.abs(a)) @ sdz, b.shape)),
         "grad_bias": (reduce_to(dz, p.shapes["bias"]), reduce_to(sdz, p.shapes["bias"]))}
    if "residual" in p.shapes:
        r["grad_residual"] = (reduce_to(dz, p.shapes["residual"]), reduce_to(sdz, p.shapes["residual"]))
    return r


def add_mul_grads_ref(p, d, sd):
    m = p.mult
    return {"grad_x": (reduce_to(d, p.shapes["x"]), reduce_to(sd, p.shapes["x"])),
            "grad_y": (reduce_to(m * d, p.shapes["y"]), abs(m) * reduce_to(sd, p.shapes["y"])),
            "grad_bias": (reduce_to(d, p.shapes["bias"]), reduce_to(sd, p.shapes["bias"]))}


def check(what, got, ref, scale, p):
    """docs/ops.md: |got - ref| <= atol + rtol * scale, every element (NaN fails)."""
    got = to_f64(got)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    rtol, atol = TOL[p.dtype]
    if p.tf32 and p.dtype == "float32":
        rtol = TOL["bfloat16"][0]
    err = np.abs(got - ref)
    bound = atol + rtol * scale
    bad = ~(err <= bound)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err / bound, -1)), bad.shape) if bad.ndim else ()
        raise AssertionError(f"{what} ({p.dtype}, {p.act}): {int(bad.sum())} of {bad.size} elements off; "
                             f"worst at {tuple(int(j) for j in i)}: got {got[i]!r}, ref {ref[i]!r}, "
                             f"|err| {err[i]:.3g} > bound {bound[i]:.3g} (scale {scale[i]:.3g})")


# ---- dtypes, carriers ------------------------------------------------------------------------

def _torch_mod():
    try:
        import torch
        return torch
    except ImportError:
        return None


def round_to(values, dtype):
    """The float64 values of `values` rounded to `dtype` (round to nearest even)."""
    v = np.asarray(values, np.float64)
    if dtype == "float64":
        return v.copy()
    if dtype == "bfloat16":
        if ml_dtypes is not None:
            return v.astype(ml_dtypes.bfloat16).astype(np.float64)
        torch = _torch_mod()
        return torch.from_numpy(v).to(torch.bfloat16).double().numpy()
    return v.astype(dtype).astype(np.float64)


def to_f64(x):
    """A float64 NumPy copy of a NumPy, torch or JAX array (or a dlfuse.Tensor)."""
    if isinstance(x, np.ndarray):
        return x.astype(np.float64)
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().double().numpy()
    if hasattr(x, "to_numpy"):
        return np.asarray(x.to_numpy(), np.float64)
    x = np.asarray(x)  # JAX: bfloat16 comes as ml_dtypes' type
    return (x.astype(np.float32) if x.dtype.name == "bfloat16" else x).astype(np.float64)


class Carrier:
    """Makes arrays of one framework (NumPy, torch) on one device, in a drawn layout."""

    def __init__(self, kind, device="cpu"):
        self.kind, self.device = kind, device
        if kind == "torch":
            self.torch = _torch_mod()
            self.tdtype = {"float32": self.torch.float32, "float64": self.torch.float64,
                           "float16": self.torch.float16, "bfloat16": self.torch.bfloat16}

    def storage(self, values, dtype):
        """A dense array holding `values` (float64, representable in dtype)."""
        values = np.array(values, np.float64, order="C")  # 0-d stays 0-d
        if self.kind == "numpy":
            return values.astype(dtype)
        t = self.torch.from_numpy(values)
        return t.to(device=self.device, dtype=self.tdtype[dtype])

    def full(self, shape, dtype):
        return self.storage(np.full(shape, POISON), dtype)


class Layout:
    """perm: storage dim j holds logical dim perm[j]; steps, offs: slicing per logical dim;
    bcast: logical dims read with stride 0 (values constant along them)."""

    def __init__(self, ndim, perm=None, steps=None, offs=None, bcast=()):
        self.perm = tuple(perm) if perm is not None else tuple(range(ndim))
        self.steps = tuple(steps) if steps is not None else (1,) * ndim
        self.offs = tuple(offs) if offs is not None else (0,) * ndim
        self.bcast = tuple(bcast)

    def __repr__(self):
        parts = []
        if self.perm != tuple(sorted(self.perm)):
            parts.append(f"perm={self.perm}")
        if any(s != 1 for s in self.steps) or any(self.offs):
            parts.append(f"steps={self.steps} offs={self.offs}")
        if self.bcast:
            parts.append(f"stride0={self.bcast}")
        return "Layout(" + (", ".join(parts) or "dense") + ")"


@st.composite
def layouts(draw, shape, allow_bcast=True):
    nd = len(shape)
    if nd == 0:
        return Layout(0)
    perm = draw(st.permutations(range(nd))) if nd > 1 and draw(st.booleans()) else None
    steps = offs = None
    if draw(st.booleans()):
        steps = draw(st.tuples(*[st.integers(1, 3)] * nd))
        offs = draw(st.tuples(*[st.integers(0, 2)] * nd))
    bcast = ()
    wide = [d for d in range(nd) if shape[d] > 1]
    if allow_bcast and wide and draw(st.integers(0, 3)) == 0:
        bcast = tuple(sorted(draw(st.sets(st.sampled_from(wide), min_size=1))))
    return Layout(nd, perm, steps, offs, bcast)


def _inverse(perm):
    inv = [0] * len(perm)
    for j, d in enumerate(perm):
        inv[d] = j
    return tuple(inv)


def make_view(carrier, values, dtype, layout, grad=False):
    """(view, storage, seen): an array of `values`' shape laid out as `layout` says, its
    storage (POISON outside the view; requiring grad with `grad`, torch) and the float64
    values it holds (constant along the stride-0 dims: those at index 0)."""
    shape = values.shape
    if values.ndim == 0:
        s = carrier.storage(values, dtype)
        if grad:
            s.requires_grad_(True)
        return s, s, values.copy()
    keep = tuple(slice(0, 1) if d in layout.bcast else slice(None) for d in range(values.ndim))
    small = values[keep]
    seen = np.broadcast_to(small, shape).copy()
    perm = layout.perm
    sshape = tuple(layout.offs[d] + layout.steps[d] * small.shape[d] for d in perm)
    sl = tuple(slice(layout.offs[d], layout.offs[d] + layout.steps[d] * small.shape[d], layout.steps[d])
               for d in perm)
    storage = carrier.full(sshape, dtype)
    storage[sl] = carrier.storage(small.transpose(perm), dtype)
    if grad:
        storage.requires_grad_(True)
    view = storage[sl]
    inv = _inverse(perm)
    if carrier.kind == "numpy":
        view = view.transpose(inv)
        if layout.bcast:
            view = np.broadcast_to(view, shape)
    else:
        view = view.permute(*inv)
        if layout.bcast:
            view = view.expand(*shape)
    return view, storage, seen


def out_view(carrier, shape, dtype, layout):
    """An output given as a view of a POISON buffer, and a check that only the view was written."""
    view, storage, _ = make_view(carrier, np.full(shape, POISON), dtype, layout)
    before = to_f64(storage).copy()
    outside = make_view(Carrier("numpy"), np.ones(shape), "float64", layout)[1] == POISON

    def untouched(what):
        assert np.array_equal(to_f64(storage)[outside], before[outside]), f"{what}: written outside its view"
    return view, untouched


# ---- which plugins serve what ----------------------------------------------------------------

_REGISTRIES = {}


def _registries(device):
    """{plugin name: a registry preferring it} for the plugins available on device's type."""
    dev = device.split(":")[0]
    if dev not in _REGISTRIES:
        names = sorted({q.name for q in dlfuse.plugins() if q.available and q.device == dev})
        regs = {}
        for name in names:
            r = dlfuse.Registry()
            r.prefer(name)
            regs[name] = r
        _REGISTRIES[dev] = regs
    return _REGISTRIES[dev]


def _serves(reg, op, device, dtype):
    try:
        return reg.resolve(op, device.split(":")[0], dtype)
    except dlfuse.Error:
        return None


def dtypes_for(op, device):
    """The dtypes that the default registry serves `op` and its backward in, on device."""
    reg = dlfuse.registry()
    out = [dt for dt in DTYPES
           if _serves(reg, op, device, dt) and _serves(reg, op + "_backward", device, dt)]
    if "bfloat16" in out and ml_dtypes is None and _torch_mod() is None:
        out.remove("bfloat16")
    return out


def plugins_for(op, device, dtype):
    """{name: registry preferring it}: each plugin that serves op and its backward for
    device and dtype."""
    return {name: reg for name, reg in _registries(device).items()
            if _serves(reg, op, device, dtype) == name and _serves(reg, op + "_backward", device, dtype) == name}


# ---- drawing a problem -----------------------------------------------------------------------

class Problem:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        keys = ("op", "dtype", "act", "shapes", "mult", "tf32", "exact_pre")
        return "Problem(" + ", ".join(f"{k}={self.__dict__[k]!r}" for k in keys if k in self.__dict__) + ")"

    def act_arg(self, draw):
        """The activation as a name or as its dlfuse_activation_t integer."""
        return ACT_CODE[self.act] if draw(st.booleans()) else self.act


def _broadcast(*shapes):
    return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))


@st.composite
def sub_shape(draw, full, min_rank=0):
    """A shape that broadcasts to `full`: a suffix of it, some dims 1."""
    rank = draw(st.integers(min(min_rank, len(full)), len(full)))
    tail = full[len(full) - rank:]
    return tuple(1 if draw(st.booleans()) else n for n in tail)


@st.composite
def matmul_shapes(draw, op):
    budget = MAX_TERMS
    nb = draw(st.integers(0, 2))
    batch = []
    for _ in range(nb):
        n = draw(st.integers(1, 3))
        batch.append(n)
        budget //= n
    M = draw(st.integers(0, min(12, budget)))
    N = draw(st.integers(0, min(12, budget // max(M, 1))))
    K = draw(st.integers(0, MAX_K))
    a_batch = draw(sub_shape(tuple(batch)))
    b_batch = draw(sub_shape(tuple(batch)))
    out = _broadcast(a_batch, b_batch) + (M, N)
    row = draw(st.booleans())
    shapes = {"a": a_batch + (M, K), "b": b_batch + (K, N),
              "bias": (N,) if row else draw(sub_shape(out, min_rank=0))}
    if op == "matmul_add_residual":
        shapes["residual"] = out if draw(st.booleans()) else draw(sub_shape(out))
    return shapes, out


@st.composite
def add_mul_shapes(draw):
    budget = MAX_TERMS
    full = []
    for _ in range(draw(st.integers(0, 4))):
        n = draw(st.integers(0, min(6, budget)))
        full.append(n)
        budget //= max(n, 1)
    full = tuple(full)
    shapes = {k: (full if draw(st.integers(0, 2)) == 0 else draw(sub_shape(full))) for k in ("x", "y", "bias")}
    return shapes, _broadcast(*shapes.values())


# (R, e): integers in [-R, R] over 2^e. Every value is a multiple of 2^-6 and, rounded to
# any of the dtypes, stays one; with a multiplier in 2^-3 Z, |m| <= 2, and |values| <= 16,
# x + bias + m y is a multiple of 2^-9 below 2^6: exact in float32 whatever the order.
GRIDS = ((4, 0), (16, 2), (64, 4), (256, 6), (16, 0), (256, 4), (1024, 6))


@st.composite
def problems(draw, op, device, dtypes):
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    if op == "matmul_add_relu":
        act = "relu"
    elif op == "matmul_add_residual":
        act = "identity"
    else:
        act = draw(st.sampled_from(ACTS), label="activation")
    if op == "add_mul_activation":
        shapes, out_shape = draw(add_mul_shapes(), label="shapes")
    else:
        shapes, out_shape = draw(matmul_shapes(op), label="shapes")
    # float64 only on the grid (atol 1e-300); add_mul in float32 off the grid only with
    # |x| + |bias| + |m y| <= 3.5, where pre's rounding stays under atol (module docstring)
    kinds = ["grid"] if dtype == "float64" else ["grid", "uniform"]
    kind = draw(st.sampled_from(kinds), label="values")
    seed = draw(st.integers(0, 2 ** 32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    big = 16 if op == "add_mul_activation" else 4  # matmul operands: |pre| <= 16 K + 8
    mult = 1.0
    if op == "add_mul_activation":
        if kind == "grid":
            mult = draw(st.integers(-16, 16), label="multiplier (x 1/8)") / 8
        else:
            mult = draw(st.one_of(st.sampled_from([0.0, 1.0, -1.0]), st.floats(-1.5, 1.5)), label="multiplier")

    def values(shape, limit):
        if kind == "grid":
            grids = [g for g in GRIDS if g[0] / 2 ** g[1] <= limit]
            R, e = grids[int(rng.integers(len(grids)))]
            v = rng.integers(-R, R + 1, size=shape) / 2.0 ** e
        else:
            r = limit if (op == "add_mul_activation" and dtype == "float32") else limit * rng.choice([0.25, 1.0])
            v = rng.uniform(-r, r, size=shape)
        return round_to(v, dtype)

    uni_limit = 1.0 if (op == "add_mul_activation" and dtype == "float32") else big
    v = {k: values(s, big if kind == "grid" else uni_limit) for k, s in shapes.items()}
    g = values(out_shape, 4)
    tf32 = op != "add_mul_activation" and dtype == "float32" and draw(st.integers(0, 3), label="tf32") == 0
    return Problem(op=op, act=act, dtype=dtype, shapes=shapes, out_shape=out_shape, v=v, g=g,
                   mult=mult, tf32=tf32, exact_pre=kind == "grid", device=device)


def assume_relu_decided(p, pre):
    """A backward that recomputes pre (add_mul_activation_backward from x, y, bias) decides
    relu's select on its own rounding of pre: within that rounding of 0 either side is
    right. Grid data makes pre exact; otherwise such examples are discarded."""
    if p.act != "relu" or p.exact_pre:
        return
    terms = np.abs(p.v["x"]) + np.abs(p.v["bias"]) + abs(p.mult) * np.abs(p.v["y"])
    assume(np.all(np.abs(pre) > 4 * U_PRE[p.dtype] * terms))


# ---- devices ---------------------------------------------------------------------------------

def _need_cuda(what, ok, why):
    if not ok:
        if REQUIRE_CUDA:
            pytest.fail(f"DLFUSE_REQUIRE_CUDA=1 but {why}")
        pytest.skip(f"{what} on CUDA: {why}")


def _torch_or_skip():
    torch = _torch_mod()
    if torch is None:
        pytest.skip("torch is not installed")
    return torch


def _dtypes_or_skip(op, device):
    dts = dtypes_for(op, device)
    if "float32" not in dts:
        pytest.skip(f"no plugin serves {op} and {op}_backward in float32 on {device}: {dlfuse.plugins()!r}")
    return dts


def package_carrier(device, dtype):
    if device == "cpu" and dtype != "bfloat16":
        return Carrier("numpy")
    return Carrier("torch", device)


def _package_setup(op, device):
    if device != "cpu":
        torch = _torch_mod()
        _need_cuda("dlfuse.* on device arrays",
                   torch is not None and torch.cuda.is_available() and cuda_plugin_available(),
                   "torch with CUDA (the device arrays) and dlfuse's CUDA plugin are needed")
    dts = _dtypes_or_skip(op, device)
    if device == "cpu" and _torch_mod() is None and "bfloat16" in dts:
        dts.remove("bfloat16")  # NumPy cannot export bfloat16 through DLPack
    return dts


# ---- dlfuse.* (NumPy arrays) -----------------------------------------------------------------

class Inputs(dict):
    """Views of p.v[name] in drawn layouts (p.v is replaced by what the views hold), and a
    check that a call left their buffers as they were."""

    def __init__(self, draw, carrier, p, names, note_as=""):
        super().__init__()
        self.before = {}
        for k in names:
            lay = draw(layouts(p.v[k].shape), label=f"{note_as}layout of {k}")
            self[k], storage, p.v[k] = make_view(carrier, p.v[k], p.dtype, lay)
            self.before[k] = (storage, to_f64(storage).copy())

    def unchanged(self, call, skip=None):
        for k, (storage, before) in self.before.items():
            if k != skip:
                assert np.array_equal(to_f64(storage), before), f"{call} changed its input {k}'s buffer"


def _given_or_none(draw, carrier, p, name, shape, label):
    """None (allocated by dlfuse) or a view of a poisoned buffer, with its check."""
    if not draw(st.booleans(), label=f"{label}: {name} given"):
        return None, None
    lay = draw(layouts(shape, allow_bcast=False), label=f"{label}: layout of {name}")
    return out_view(carrier, shape, p.dtype, lay)


def _needs(draw, n):
    return draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(any), label="needs")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
@_settings(40)
@given(data=st.data())
def test_package(op, device, data):
    dts = _package_setup(op, device)
    draw = data.draw
    p = draw(problems(op, device, dts))
    carrier = package_carrier(device, p.dtype)
    serving = plugins_for(op, device, p.dtype)
    reg = serving[draw(st.sampled_from(sorted(serving)), label="plugin")]
    in_names = list(p.shapes)
    xs = Inputs(draw, carrier, p, in_names)
    fwd, _ = forward_ref(p)
    act = p.act_arg(draw)

    # forward: out allocated, given as a strided view, or (add_mul x, residual) in place
    in_place = None
    inplace_name = {"add_mul_activation": "x", "matmul_add_residual": "residual"}.get(op)
    if inplace_name and p.shapes[inplace_name] == p.out_shape and not _is_stride0(xs[inplace_name]) \
            and draw(st.booleans(), label="in place"):
        in_place = inplace_name
    out_arg, out_ok = (None, None) if in_place else _given_or_none(draw, carrier, p, "out", p.out_shape, "forward")
    if in_place:
        out_arg = xs[in_place]
    kw = {"registry": reg}
    if op != "add_mul_activation":
        kw["allow_tf32"] = p.tf32
    pre_arg = None
    if op == "matmul_add_relu":
        res = dlfuse.matmul_add_relu(xs["a"], xs["b"], xs["bias"], out=out_arg, **kw)
    elif op == "add_mul_activation":
        res = dlfuse.add_mul_activation(xs["x"], xs["y"], xs["bias"], p.mult, act, out=out_arg, **kw)
    elif op == "matmul_add_residual":
        res = dlfuse.matmul_add_residual(xs["a"], xs["b"], xs["bias"], xs["residual"], out=out_arg, **kw)
    else:
        want_pre = draw(st.sampled_from([False, True, "given"]), label="pre")
        if want_pre == "given":
            pre_arg, pre_ok = _given_or_none(draw, carrier, p, "pre", p.out_shape, "forward")
            want_pre = pre_arg if pre_arg is not None else True
        res = dlfuse.matmul_add_activation(xs["a"], xs["b"], xs["bias"], act, out=out_arg,
                                           pre=None if want_pre is False else want_pre, **kw)
        if want_pre is not False:
            res, pre_k = res
            check("pre", pre_k, *fwd["pre"], p)
            if pre_arg is not None:
                assert pre_k is pre_arg
                pre_ok("pre")
    if out_arg is not None:
        assert res is out_arg
    if out_ok:
        out_ok("out")
    xs.unchanged(op, skip=in_place)
    check("out", res, *fwd["out"], p)
    out_k = to_f64(res)

    # backward: the inputs laid out anew (an in-place forward overwrote one)
    bw = Problem(**p.__dict__)
    bw.v = dict(p.v)
    bw.v["grad_out"] = p.g
    g_lay = draw(layouts(p.out_shape), label="layout of grad_out")
    gv, _, bw.v["grad_out"] = make_view(carrier, p.g, p.dtype, g_lay)
    g64 = bw.v["grad_out"]
    if op == "add_mul_activation":
        form = draw(st.sampled_from(["inputs", "out"] if p.act in OUT_FORM else ["inputs"]), label="backward form")
        outs = ("grad_x", "grad_y", "grad_bias")
        if form == "inputs":
            xs2 = Inputs(draw, carrier, bw, ("x", "y", "bias"), "backward: ")
            pre_bw = forward_ref(bw)[1]  # of the values the backward sees (stride 0 changes them)
            assume_relu_decided(bw, pre_bw)
            d, sd = dz_ref(p.act, g64, pre=pre_bw)
        else:
            ov, _, okv = make_view(carrier, out_k, p.dtype, draw(layouts(p.out_shape), label="backward: layout of out"))
            d, sd = dz_ref(p.act, g64, out=okv)
        ref = add_mul_grads_ref(bw, d, sd)
    else:
        xs2 = Inputs(draw, carrier, bw, ("a", "b"), "backward: ")
        outs = ("grad_a", "grad_b", "grad_bias") + (("grad_residual",) if op == "matmul_add_residual" else ())
        if op == "matmul_add_relu":
            ov, _, okv = make_view(carrier, out_k, p.dtype, draw(layouts(p.out_shape), label="backward: layout of out"))
            dz, sdz = dz_ref("relu", g64, out=okv)
        elif op == "matmul_add_residual":
            dz, sdz = g64, np.abs(g64)
        else:
            form = draw(st.sampled_from(["pre", "out"] if p.act in OUT_FORM else ["pre"]), label="backward form")
            if form == "pre":
                if want_pre is False:  # the forward again, writing pre this time
                    _, pre_k = dlfuse.matmul_add_activation(xs["a"], xs["b"], xs["bias"], act, pre=True, **kw)
                pk = to_f64(pre_k)
                lay = draw(layouts(p.out_shape), label="backward: layout of pre")
                sv, _, skv = make_view(carrier, pk, p.dtype, lay)
                dz, sdz = dz_ref(p.act, g64, pre=skv)
            else:
                lay = draw(layouts(p.out_shape), label="backward: layout of out")
                sv, _, skv = make_view(carrier, out_k, p.dtype, lay)
                dz, sdz = dz_ref(p.act, g64, out=skv)
        ref = matmul_grads_ref(bw, dz, sdz)
    needs = _needs(draw, len(outs))
    given, oks = {}, {}
    for o, want in zip(outs, needs):
        if want:
            given[o], oks[o] = _given_or_none(draw, carrier, p, o, ref[o][0].shape, "backward")
    gkw = {k: v for k, v in given.items() if v is not None}
    if op == "matmul_add_relu":
        got = dlfuse.matmul_add_relu_backward(gv, xs2["a"], xs2["b"], ov, bias_shape=p.shapes["bias"],
                                              needs=needs, allow_tf32=p.tf32, registry=reg, **gkw)
    elif op == "matmul_add_residual":
        got = dlfuse.matmul_add_residual_backward(gv, xs2["a"], xs2["b"], p.shapes["bias"], p.shapes["residual"],
                                                  needs=needs, allow_tf32=p.tf32, registry=reg, **gkw)
    elif op == "matmul_add_activation":
        form_kw = {"pre": sv} if form == "pre" else {"out": sv}
        got = dlfuse.matmul_add_activation_backward(gv, xs2["a"], xs2["b"], act, bias_shape=p.shapes["bias"],
                                                    needs=needs, allow_tf32=p.tf32, registry=reg, **form_kw, **gkw)
    elif form == "inputs":
        got = dlfuse.add_mul_activation_backward(gv, xs2["x"], xs2["y"], xs2["bias"], p.mult, act,
                                                 needs=needs, registry=reg, **gkw)
    else:
        got = dlfuse.add_mul_activation_backward(gv, None, None, None, p.mult, act, out=ov,
                                                 x_shape=p.shapes["x"], y_shape=p.shapes["y"],
                                                 bias_shape=p.shapes["bias"], needs=needs, registry=reg, **gkw)
    if op != "add_mul_activation" or form == "inputs":
        xs2.unchanged(op + "_backward")
    for o, want, r in zip(outs, needs, got):
        if not want:
            assert r is None, f"{o} computed although not asked for"
            continue
        if given.get(o) is not None:
            assert r is given[o]
            oks[o](o)
        check(o, r, *ref[o], bw)
    if op == "add_mul_activation" and p.act not in OUT_FORM:
        with pytest.raises(dlfuse.InvalidArgumentError):  # the out form needs act' of out
            dlfuse.add_mul_activation_backward(gv, None, None, None, p.mult, act, out=gv,
                                               x_shape=p.shapes["x"], y_shape=p.shapes["y"],
                                               bias_shape=p.shapes["bias"], registry=reg)


def _is_stride0(view):
    st_ = view.strides if isinstance(view, np.ndarray) else view.stride()
    return any(s == 0 for s, n in zip(st_, view.shape) if n > 1)


# ---- dlfuse.torch ----------------------------------------------------------------------------

def _grad_name(k):
    return "grad_" + k


def _backward_ref(p, out_k, pre_k=None):
    """The gradients' references for a front end whose backward follows the backward plan
    (docs/python.md): from out for identity/relu/sigmoid/tanh, from pre (matmul, as the
    forward wrote it) or from x, y, bias (add_mul, recomputed) for gelu and silu."""
    g = p.g
    if p.op == "matmul_add_residual":
        return matmul_grads_ref(p, g, np.abs(g))
    if p.act in OUT_FORM:
        d, sd = dz_ref(p.act, g, out=out_k)
    elif p.op == "add_mul_activation":
        d, sd = dz_ref(p.act, g, pre=forward_ref(p)[1])
    else:
        d, sd = dz_ref(p.act, g, pre=pre_k)
    return add_mul_grads_ref(p, d, sd) if p.op == "add_mul_activation" else matmul_grads_ref(p, d, sd)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
@_settings(25)
@given(data=st.data())
def test_torch(op, device, data):
    torch = _torch_or_skip()
    import dlfuse.torch as dft
    if device != "cpu":
        _need_cuda("dlfuse.torch", torch.cuda.is_available() and cuda_plugin_available(),
                   "torch with CUDA and dlfuse's CUDA plugin are needed")
    dts = _dtypes_or_skip(op, device)
    draw = data.draw
    p = draw(problems(op, device, dts))
    carrier = Carrier("torch", device)
    names = list(p.shapes)
    wrt = draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True),
               label="differentiated")
    xs = {}
    for k in names:
        lay = draw(layouts(p.v[k].shape), label=f"layout of {k}")
        xs[k], _, p.v[k] = make_view(carrier, p.v[k], p.dtype, lay, grad=k in wrt)
    act = p.act_arg(draw)
    fwd, _ = forward_ref(p)
    args = [xs[k] for k in names]
    fn = getattr(dft, op)
    if op == "add_mul_activation":
        attrs = (p.mult, act)
    elif op == "matmul_add_activation":
        attrs = (act, int(p.tf32))
    else:
        attrs = (int(p.tf32),)
    with torch.no_grad():  # the eager path, no autograd node
        check("out (no grad)", fn(*args, *attrs), *fwd["out"], p)
    out = fn(*args, *attrs)
    assert out.dtype == xs[names[0]].dtype and out.requires_grad
    check("out", out, *fwd["out"], p)
    pre_k = None
    if op == "matmul_add_activation" and p.act not in OUT_FORM:
        with torch.no_grad():  # the call the forward with grad made: what it kept (kernels are deterministic)
            o2, pre = fn(*args, *attrs, outputs=("out", "pre"))
        check("pre", pre, *fwd["pre"], p)
        assert torch.equal(o2, out.detach()), "the same call gave another out"
        pre_k = to_f64(pre)
    g_lay = draw(layouts(p.out_shape), label="layout of grad_out")
    gv, _, p.g = make_view(carrier, p.g, p.dtype, g_lay)
    grads = torch.autograd.grad(out, [xs[k] for k in wrt], gv)
    ref = _backward_ref(p, to_f64(out), pre_k)
    for k, gr in zip(wrt, grads):
        assert gr.shape == xs[k].shape and gr.dtype == out.dtype
        check(_grad_name(k), gr, *ref[_grad_name(k)], p)


# ---- dlfuse.jax ------------------------------------------------------------------------------

def _jax_or_skip(device):
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("jaxlib does not start with the ASan runtime preloaded: no dlfuse.jax here")
    try:
        import jax
    except ImportError:
        pytest.skip("jax is not installed")
    try:
        import dlfuse.jax as djx
    except ImportError as e:
        pytest.skip(f"dlfuse.jax is not built: {e}")
    if device == "cpu":
        return jax, djx, jax.devices("cpu")[0]
    try:
        gpus = jax.devices("cuda")
    except RuntimeError:
        gpus = []
    _need_cuda("dlfuse.jax", bool(gpus) and cuda_plugin_available(),
               "JAX with CUDA and dlfuse's CUDA plugin are both needed")
    return jax, djx, gpus[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
@_settings(15)
@given(data=st.data())
def test_jax(op, device, data):
    jax, djx, jdev = _jax_or_skip(device)
    import jax.numpy as jnp
    dts = _dtypes_or_skip(op, device)
    draw = data.draw
    p = draw(problems(op, device, dts))
    names = list(p.shapes)
    wrt = draw(st.lists(st.integers(0, len(names) - 1), min_size=1, max_size=len(names), unique=True),
               label="argnums")
    act = p.act_arg(draw)
    fwd, _ = forward_ref(p)
    f = getattr(djx, op)
    if op == "add_mul_activation":
        fn = lambda *a: f(*a, p.mult, act)  # noqa: E731
    elif op == "matmul_add_activation":
        fn = lambda *a: f(*a, act, allow_tf32=p.tf32)  # noqa: E731
    else:
        fn = lambda *a: f(*a, allow_tf32=p.tf32)  # noqa: E731
    jdt = {"float32": jnp.float32, "float64": jnp.float64, "float16": jnp.float16, "bfloat16": jnp.bfloat16}
    with jax.enable_x64(p.dtype == "float64"), jax.default_device(jdev):
        xs = [jax.device_put(jnp.asarray(p.v[k], jdt[p.dtype]), jdev) for k in names]
        out = jax.jit(fn)(*xs)
        assert out.dtype == xs[0].dtype and out.devices() == {jdev}
        check("out (jit)", out, *fwd["out"], p)
        pre_k = None
        if op == "matmul_add_activation" and p.act not in OUT_FORM:
            # the call that grad's forward makes (it writes pre), so the pre its backward reads
            o2, pre = jax.jit(lambda *a: f(*a, act, allow_tf32=p.tf32, outputs=("out", "pre")))(*xs)
            check("out (with pre)", o2, *fwd["out"], p)
            check("pre", pre, *fwd["pre"], p)
            pre_k = to_f64(pre)
        ct = jax.device_put(jnp.asarray(p.g, jdt[p.dtype]), jdev)
        loss = lambda *a: jnp.sum((fn(*a) * ct).astype(jnp.float32))  # noqa: E731  (cotangent: ct)
        grads = jax.jit(jax.grad(loss, argnums=tuple(wrt)))(*xs)
    ref = _backward_ref(p, to_f64(out), pre_k)
    for i, gr in zip(wrt, grads):
        k = names[i]
        assert gr.shape == tuple(p.shapes[k]) and gr.dtype == xs[i].dtype
        check(_grad_name(k), gr, *ref[_grad_name(k)], p)


# ---- the reference itself --------------------------------------------------------------------

def _composition_grads(framework, p):
    """(out, [gradient of each input]) of the plain float64 composition, by the framework's
    own autograd, with cotangent p.g."""
    names = list(p.v)
    if framework == "torch":
        torch = _torch_or_skip()
        F = torch.nn.functional
        acts = {"identity": lambda z: z, "relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
                "gelu_erf": F.gelu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"), "silu": F.silu}
        t = [torch.from_numpy(p.v[k]).requires_grad_(True) for k in names]
        out = _composition(p, acts, dict(zip(names, t)))
        grads = torch.autograd.grad(out, t, torch.from_numpy(p.g), allow_unused=True)
        return out.detach().numpy(), [np.zeros(p.v[k].shape) if gr is None else gr.numpy()
                                      for k, gr in zip(names, grads)]
    jax, _, dev = _jax_or_skip("cpu")
    import jax.numpy as jnp
    acts = {"identity": lambda z: z, "relu": jax.nn.relu, "sigmoid": jax.nn.sigmoid, "tanh": jnp.tanh,
            "gelu_erf": lambda z: jax.nn.gelu(z, approximate=False),
            "gelu_tanh": lambda z: jax.nn.gelu(z, approximate=True), "silu": jax.nn.silu}
    def out_and_grads(ct, *a):  # one compiled program: eager JAX compiles every operation
        out, pull = jax.vjp(lambda *a: _composition(p, acts, dict(zip(names, a))), *a)
        return out, pull(ct)
    with jax.enable_x64(True), jax.default_device(dev):
        out, grads = jax.jit(out_and_grads)(jnp.asarray(p.g), *[jnp.asarray(p.v[k]) for k in names])
        return np.asarray(out), [np.asarray(gr) for gr in grads]


def _composition(p, acts, t):
    if p.op == "add_mul_activation":
        return acts[p.act](t["x"] + t["bias"] + p.mult * t["y"])
    return acts[p.act](t["a"] @ t["b"] + t["bias"] + (t["residual"] if "residual" in t else 0))


@pytest.mark.parametrize("op", OPS)
@_settings(12)
@given(data=st.data())
def test_reference_is_the_composition(op, data):
    """The float64 reference (forward, and the gradient formulas: act', reduce_to, the
    transposes) against torch's autograd (JAX's where torch is not installed) of the plain
    composition, on grid values."""
    p = data.draw(problems(op, "cpu", ["float64"]))
    out, grads = _composition_grads("torch" if _torch_mod() is not None else "jax", p)
    fwd, pre = forward_ref(p)
    ref = _backward_ref(p, fwd["out"][0], pre)
    check("out", out, *fwd["out"], p)
    for k, gr in zip(p.v, grads):
        check(_grad_name(k), gr, *ref[_grad_name(k)], p)
