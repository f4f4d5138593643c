"""The ops of ABI 1.1 through the package, on NumPy arrays and the CPU plugins: results
against float64 references (docs/ops.md), the optional `pre` output, the in-place
residual, add_mul_activation_backward from `out`, and the errors."""
import numpy as np
import pytest

import dlfuse
from conftest import assert_close_sum
from test_numpy import ACTS, reduce_to


def _serving(op):
    try:
        return dlfuse.registry().resolve(op, "cpu", "float32")
    except dlfuse.Error:
        return None


def _require(op):
    name = _serving(op)
    if name is None:
        pytest.skip(f"no CPU plugin serves {op} for float32: {dlfuse.plugins()!r}")
    return name


def _case(rng, M=5, K=7, N=6, batch=()):
    a = rng.uniform(-1, 1, (*batch, M, K)).astype(np.float32)
    b = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    bias = rng.uniform(-1, 1, (N,)).astype(np.float32)
    f64 = [x.astype(np.float64) for x in (a, b, bias)]
    pre = np.matmul(f64[0], f64[1]) + f64[2]
    scale = np.matmul(np.abs(f64[0]), np.abs(f64[1])) + np.abs(f64[2])
    return a, b, bias, pre, scale


@pytest.mark.parametrize("act", sorted(ACTS))
def test_matmul_add_activation_forward_and_pre(rng, act):
    _require("matmul_add_activation")
    a, b, bias, pre_ref, scale = _case(rng, batch=(2,))
    out, pre = dlfuse.matmul_add_activation(a, b, bias, act, pre=True)
    out, pre = np.from_dlpack(out), np.from_dlpack(pre)
    assert out.shape == pre.shape == (2, 5, 6)
    assert_close_sum(pre, pre_ref, scale, "float32")
    fwd, d = ACTS[act]
    assert_close_sum(out, fwd(pre_ref), scale * np.maximum(1.0, np.abs(d(pre_ref))), "float32")
    # Without pre a plugin may fuse the activation differently (oneDNN: a post-op): same
    # tolerance, not the same bits.
    only_out = np.from_dlpack(dlfuse.matmul_add_activation(a, b, bias, act))
    assert_close_sum(only_out, fwd(pre_ref), scale * np.maximum(1.0, np.abs(d(pre_ref))), "float32")


@pytest.mark.parametrize("act,form", [("gelu_erf", "pre"), ("silu", "pre"), ("tanh", "out"),
                                      ("sigmoid", "out"), ("relu", "out"), ("identity", "pre")])
def test_matmul_add_activation_backward(rng, act, form):
    _require("matmul_add_activation_backward")
    a, b, bias, pre_ref, _ = _case(rng)
    out, pre = (np.from_dlpack(t) for t in dlfuse.matmul_add_activation(a, b, bias, act, pre=True))
    g = rng.uniform(-1, 1, out.shape).astype(np.float32)
    kw = {"out": out} if form == "out" else {"pre": pre}
    ga, gb, gbias = (np.from_dlpack(t) for t in
                     dlfuse.matmul_add_activation_backward(g, a, b, act, bias_shape=bias.shape, **kw))
    fwd, d = ACTS[act]
    p = pre.astype(np.float64)
    if form == "out":  # the derivative from out, on the out the kernel got (docs/ops.md)
        o = out.astype(np.float64)
        deriv = {"tanh": 1 - o * o, "sigmoid": o * (1 - o),
                 "relu": np.where(o > 0, 1.0, 0.0), "identity": np.ones_like(o)}[act]
    else:
        deriv = d(p)
    dz = g.astype(np.float64) * deriv
    adz = np.abs(g.astype(np.float64)) * np.maximum(1.0, np.abs(deriv))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close_sum(ga, dz @ b64.T, adz @ np.abs(b64.T), "float32")
    assert_close_sum(gb, a64.T @ dz, np.abs(a64.T) @ adz, "float32")
    assert_close_sum(gbias, dz.sum(0), adz.sum(0), "float32")


def test_matmul_add_activation_backward_refuses_out_for_gelu_and_both_forms(rng):
    _require("matmul_add_activation_backward")
    a, b, bias, _, _ = _case(rng)
    out, pre = dlfuse.matmul_add_activation(a, b, bias, "gelu_tanh", pre=True)
    g = np.ones((5, 6), np.float32)
    with pytest.raises(dlfuse.InvalidArgumentError, match="pass 'pre'"):
        dlfuse.matmul_add_activation_backward(g, a, b, "gelu_tanh", out=out)
    with pytest.raises(dlfuse.InvalidArgumentError, match="both given"):
        dlfuse.matmul_add_activation_backward(g, a, b, "gelu_tanh", out=out, pre=pre)


@pytest.mark.parametrize("residual_shape", [(5, 6), (5, 1), (6,)])
def test_matmul_add_residual_forward_backward(rng, residual_shape):
    _require("matmul_add_residual")
    _require("matmul_add_residual_backward")
    a, b, bias, pre_ref, scale = _case(rng)
    r = rng.uniform(-1, 1, residual_shape).astype(np.float32)
    out = np.from_dlpack(dlfuse.matmul_add_residual(a, b, bias, r))
    assert_close_sum(out, pre_ref + r, scale + np.abs(r), "float32")
    g = rng.uniform(-1, 1, out.shape).astype(np.float32)
    ga, gb, gbias, gr = (np.from_dlpack(t) for t in dlfuse.matmul_add_residual_backward(
        g, a, b, bias_shape=bias.shape, residual_shape=r.shape))
    g64, ag = g.astype(np.float64), np.abs(g.astype(np.float64))
    assert_close_sum(ga, g64 @ b.astype(np.float64).T, ag @ np.abs(b.astype(np.float64).T), "float32")
    assert_close_sum(gb, a.astype(np.float64).T @ g64, np.abs(a.astype(np.float64).T) @ ag, "float32")
    assert_close_sum(gbias, g64.sum(0), ag.sum(0), "float32")
    assert gr.shape == r.shape
    assert_close_sum(gr, reduce_to(g64, r.shape), reduce_to(ag, r.shape), "float32")


def test_matmul_add_residual_in_place(rng):
    _require("matmul_add_residual")
    a, b, bias, pre_ref, scale = _case(rng)
    r = rng.uniform(-1, 1, (5, 6)).astype(np.float32)
    want = pre_ref + r
    got = dlfuse.matmul_add_residual(a, b, bias, r, out=r)
    assert got is r
    assert_close_sum(r, want, scale + np.abs(want), "float32")


@pytest.mark.parametrize("act", ["identity", "relu", "sigmoid", "tanh"])
def test_add_mul_backward_from_out(rng, act):
    _require("add_mul_activation_backward")
    x = rng.uniform(-2, 2, (4, 6)).astype(np.float32)
    y = rng.uniform(-2, 2, (1, 6)).astype(np.float32)
    bias = rng.uniform(-2, 2, (6,)).astype(np.float32)
    out = np.from_dlpack(dlfuse.add_mul_activation(x, y, bias, 0.5, act))
    g = rng.uniform(-1, 1, out.shape).astype(np.float32)
    gx, gy, gb = (np.from_dlpack(t) for t in dlfuse.add_mul_activation_backward(
        g, None, None, None, 0.5, act, out=out, x_shape=x.shape, y_shape=y.shape, bias_shape=bias.shape))
    o = out.astype(np.float64)
    deriv = {"tanh": 1 - o * o, "sigmoid": o * (1 - o), "relu": np.where(o > 0, 1.0, 0.0),
             "identity": np.ones_like(o)}[act]
    d = g.astype(np.float64) * deriv
    ad = np.abs(g.astype(np.float64)) * np.maximum(1.0, np.abs(deriv))
    assert gx.shape == x.shape and gy.shape == y.shape and gb.shape == bias.shape
    assert_close_sum(gx, d, ad, "float32")
    assert_close_sum(gy, reduce_to(0.5 * d, y.shape), reduce_to(0.5 * ad, y.shape), "float32")
    assert_close_sum(gb, reduce_to(d, bias.shape), reduce_to(ad, bias.shape), "float32")


def test_add_mul_backward_forms_do_not_mix():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="either x, y and bias, or out"):
        dlfuse.add_mul_activation_backward(x, x, None, None, 1.0, "relu", out=x)
    with pytest.raises(TypeError, match="missing required argument 'y'"):
        dlfuse.add_mul_activation_backward(x, x)
