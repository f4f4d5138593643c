"""What each op takes and gives, for dlfuse.jax at trace time: the op table and one function
per shape rule (docs/ops.md). ``output_shapes`` is the one entry point; the rest of dlfuse.jax
knows no op's shapes.

An op is a tuple of input names and a tuple of outputs, each (name, rule, source): the rule
MATMUL (batch dims broadcast, [..., M, N]; bias and residual must broadcast to it), BROADCAST
(NumPy broadcasting of the inputs) or LIKE (the shape of the tensor named `source`: an input
of the call, or a tensor of the forward that the backward was not given, such as its bias).
"""
from ._core import InvalidArgumentError

MATMUL, BROADCAST, LIKE = "matmul", "broadcast", "like"

_MM_IN = ("a", "b", "bias")
_MM_GRADS = (("grad_a", LIKE, "a"), ("grad_b", LIKE, "b"), ("grad_bias", LIKE, "bias"))
_AMA_GRADS = (("grad_x", LIKE, "x"), ("grad_y", LIKE, "y"), ("grad_bias", LIKE, "bias"))

OPS = {
    "matmul_add_relu": (_MM_IN, (("out", MATMUL, None),)),
    "matmul_add_relu_backward": (("grad_out", "a", "b", "out"), _MM_GRADS),
    "add_mul_activation": (("x", "y", "bias"), (("out", BROADCAST, None),)),
    "add_mul_activation_backward": (("grad_out", "x", "y", "bias", "out"), _AMA_GRADS),
    "matmul_add_activation": (_MM_IN, (("out", MATMUL, None), ("pre", MATMUL, None))),
    "matmul_add_activation_backward": (("grad_out", "a", "b", "out", "pre"), _MM_GRADS),
    "matmul_add_residual": (_MM_IN + ("residual",), (("out", MATMUL, None),)),
    "matmul_add_residual_backward": (("grad_out", "a", "b"),
                                     _MM_GRADS + (("grad_residual", LIKE, "residual"),)),
}


def _fail(op, arg, expected, got):
    raise InvalidArgumentError(1, f"{op}: {arg}: expected {expected}, got {got}")


def broadcast_to_shape(op, arg, shape, target):
    """Checks that `shape` broadcasts to `target` (NumPy rules, target unchanged)."""
    ok = len(shape) <= len(target) and all(
        s in (1, t) for s, t in zip(reversed(shape), reversed(target)))
    if not ok:
        _fail(op, arg, f"a shape that broadcasts to the output's {tuple(target)}", tuple(shape))


def _broadcast(op, named):
    out = []
    for arg, shape in named:
        for i, s in enumerate(reversed(shape)):
            if i == len(out):
                out.append(s)
            elif out[i] == 1:
                out[i] = s
            elif s not in (1, out[i]):
                _fail(op, arg, f"a shape that broadcasts with {tuple(reversed(out))}", tuple(shape))
    return tuple(reversed(out))


def matmul_rule(op, shapes):
    a, b = shapes["a"], shapes["b"]
    if len(a) < 2:
        _fail(op, "a", "at least 2 dims [..., M, K] (reshape a 1-D operand)", tuple(a))
    if len(b) < 2:
        _fail(op, "b", "at least 2 dims [..., K, N] (reshape a 1-D operand)", tuple(b))
    if a[-1] != b[-2]:
        _fail(op, "b", f"K = {a[-1]} rows (a's last dim) in {tuple(b)}", b[-2])
    batch = _broadcast(op, (("a", a[:-2]), ("b", b[:-2])))
    out = (*batch, a[-2], b[-1])
    for arg in ("bias", "residual"):
        if arg in shapes:
            broadcast_to_shape(op, arg, shapes[arg], out)
    return out


def broadcast_rule(op, shapes):
    return _broadcast(op, [(n, shapes[n]) for n in OPS[op][0] if n in shapes])


def like_rule(op, shapes, source):
    if source not in shapes:
        _fail(op, source, "its shape (the forward's argument) for the gradient", "none")
    return tuple(shapes[source])


_RULES = {MATMUL: matmul_rule, BROADCAST: broadcast_rule}


def output_shapes(op, shapes, wanted):
    """The shapes of `op`'s outputs named in `wanted`, from `shapes` (name -> shape of every
    input given, plus the forward's tensors that LIKE rules name). Raises InvalidArgumentError
    naming the argument when the inputs do not fit the op."""
    res = {}
    for name, rule, source in OPS[op][1]:
        if name in wanted:
            res[name] = like_rule(op, shapes, source) if rule == LIKE else _RULES[rule](op, shapes)
    return tuple(res[n] for n in wanted)
