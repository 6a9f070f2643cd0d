"""Lowerings of the elementwise graph ops onto codegen/generic/elementwise.py's kernels:
unary maps and casts on contiguous data, broadcasting binary ops and where on strided views
whose dims the planner merges so the kernel loops over few of them."""
from __future__ import annotations

import math

import numpy as np

from ...codegen.generic import elementwise as K
from .lowering import Unsupported, lowers

# elements one PARALLEL iteration takes (64 KiB of float32); below SERIAL_BELOW elements
# a kernel runs in one iteration, on the calling thread (waking the pool costs more)
PIECE = 16384
SERIAL_BELOW = 2 * PIECE


def contiguous_dims(n: int) -> list[int]:
    """dims of a unary/cast kernel on n elements: [n, piece, pieces]."""
    piece = n if 0 < n < SERIAL_BELOW else PIECE
    return [n, piece, -(-n // piece)]


# -- unary -------------------------------------------------------------------------------------

def _attr(name: str, default=None):
    return lambda node: float(node.attr(name, default))


# graph op -> (kernel op, [fparam of the node] in the kernel's order)
_UNARY = {op: (op, []) for op in (
    "relu", "neg", "abs", "exp", "log", "sqrt", "reciprocal", "erf", "tanh", "sigmoid",
    "hard_swish", "softplus", "softsign", "mish", "sign", *K.MATH)}
_UNARY.update({
    "hard_sigmoid": ("hard_sigmoid", [_attr("alpha", 0.2), _attr("beta", 0.5)]),
    "leaky_relu": ("leaky_relu", [_attr("alpha", 0.01)]),
    "elu": ("elu", [_attr("alpha")]),
    "selu": ("selu", [_attr("alpha"), _attr("gamma")]),
    "celu": ("celu", [_attr("alpha")]),
    "thresholded_relu": ("thresholded_relu", [_attr("alpha")]),
    "shrink": ("shrink", [_attr("lambd"), _attr("bias")]),
    "swish": ("swish", [_attr("alpha")]),
})
_INT_UNARY = {"neg", "abs", "relu", "sign"}


def _unary_call(ctx, kernel: str, fparams=()):
    x, y = ctx.input(0), ctx.output(0)
    if x.size:
        ctx.call(f"elementwise.{kernel}", [x, y], contiguous_dims(x.size), fparams)


@lowers(*_UNARY)
def _unary(node, ctx):
    op, params = _UNARY[node.op]
    dtype = node.inputs[0].dtype
    if dtype != "float32":
        if node.op not in _INT_UNARY or dtype not in ("int64", "int32"):
            raise Unsupported(ctx.describe(f"{dtype} input; the generic kernels take float32"
                                           + (", int64, int32" if node.op in _INT_UNARY
                                              else "")))
        return _unary_call(ctx, f"unary.{op}.{dtype}")
    ctx.require_dtype("float32")
    _unary_call(ctx, f"unary.{op}", [p(node) for p in params])


@lowers("clip")
def _clip(node, ctx):
    ctx.require_dtype("float32")
    lo, hi = node.attr("min"), node.attr("max")
    _unary_call(ctx, "unary.clip", [-math.inf if lo is None else float(lo),
                                    math.inf if hi is None else float(hi)])


@lowers("gelu")
def _gelu(node, ctx):
    ctx.require_dtype("float32")
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise Unsupported(ctx.describe(f"approximate={approximate!r}"))
    _unary_call(ctx, "unary.gelu_tanh" if approximate == "tanh" else "unary.gelu")


@lowers("is_nan")
def _is_nan(node, ctx):
    if node.inputs[0].dtype != "float32":
        raise Unsupported(ctx.describe(f"{node.inputs[0].dtype} input; the generic kernel "
                                       "takes float32"))
    _unary_call(ctx, "unary.is_nan")


@lowers("is_inf")
def _is_inf(node, ctx):
    if node.inputs[0].dtype != "float32":
        raise Unsupported(ctx.describe(f"{node.inputs[0].dtype} input; the generic kernel "
                                       "takes float32"))
    _unary_call(ctx, "unary.is_inf", [float(bool(node.attrs["detect_positive"])),
                                      float(bool(node.attrs["detect_negative"]))])


@lowers("logical_not")
def _logical_not(node, ctx):
    ctx.require_dtype("bool")
    _unary_call(ctx, "unary.logical_not.bool")


@lowers("cast")
def _cast(node, ctx):
    src, dst = node.inputs[0].dtype, node.outputs[0].dtype
    for dtype in (src, dst):
        if dtype not in K.CAST_DTYPES:
            raise Unsupported(ctx.describe(f"cast {src} -> {dst}; the generic kernels cast "
                                           f"between {', '.join(K.CAST_DTYPES)}"))
    if src == dst:
        ctx.alias(0, ctx.input(0))
        return
    _unary_call(ctx, f"cast.{src}.{dst}")


# -- broadcasting ------------------------------------------------------------------------------

def broadcast_layout(out_shape, in_shapes) -> tuple[list[int], list[list[int]]]:
    """(sizes, strides per input) of the output's dims after dropping size-1 dims and merging
    neighbours every input walks contiguously (stride 0 where an input broadcasts), in
    elements. Always at least one dim."""
    rank = len(out_shape)
    per_input = []
    for shape in in_shapes:
        shape = (1,) * (rank - len(shape)) + tuple(shape)
        strides, acc = [0] * rank, 1
        for a in range(rank - 1, -1, -1):
            strides[a] = 0 if shape[a] == 1 else acc
            acc *= shape[a]
        per_input.append(strides)
    sizes: list[int] = []
    strides: list[list[int]] = []
    for a in range(rank):
        if out_shape[a] == 1:
            continue
        here = [s[a] for s in per_input]
        if sizes and all(prev == cur * out_shape[a] for prev, cur in zip(strides[-1], here)):
            sizes[-1] *= out_shape[a]
            strides[-1] = here
        else:
            sizes.append(out_shape[a])
            strides.append(here)
    if not sizes:       # one element: every input read at offset 0 (stride 1 by convention)
        sizes, strides = [1], [[1] * len(in_shapes)]
    # strides[d][k] -> per input k: [its stride along each merged dim]
    return sizes, [[s[k] for s in strides] for k in range(len(in_shapes))]


def strided_dims(out_shape, in_shapes) -> list[int] | None:
    """The dims array of a strided kernel (codegen/generic/elementwise.py's layout) for an
    output of `out_shape` from inputs of `in_shapes`; None when the output is empty; raises
    ValueError when the merged dims exceed the kernel's OUTER + 1."""
    if any(d == 0 for d in out_shape):
        return None
    sizes, strides = broadcast_layout(out_shape, in_shapes)
    if len(sizes) > K.OUTER + 1:
        raise ValueError(f"{len(sizes)} dims after merging (the kernel takes {K.OUTER + 1})")
    if any(s[-1] not in (0, 1) for s in strides):     # contiguous inputs never have one
        raise ValueError(f"inner strides {[s[-1] for s in strides]} (the kernel takes 0 or 1)")
    pad = K.OUTER + 1 - len(sizes)
    sizes = [1] * pad + sizes
    strides = [[0] * pad + s for s in strides]
    outer, n = sizes[:K.OUTER], sizes[K.OUTER]
    block = n if n <= PIECE else PIECE
    blocks = -(-n // block)
    run = max(1, min(outer[-1], PIECE // block))
    runs = -(-outer[-1] // run)
    pieces = int(np.prod(outer[:-1])) * runs * blocks
    total = int(np.prod(sizes))
    group = pieces if total < SERIAL_BELOW else max(1, PIECE // (run * block))
    dims = [*outer, n, block, blocks, run, runs, pieces, group, -(-pieces // group)]
    for s in strides:
        dims += s
    return dims


def _strided_call(ctx, kernel: str, arrays):
    out = ctx.output(0)
    try:
        dims = strided_dims(out.shape, [a.shape for a in arrays])
    except ValueError as exc:
        raise Unsupported(ctx.describe(str(exc))) from None
    if dims is not None:
        ctx.call(f"elementwise.{kernel}", [*arrays, out], dims)


_ARITH = {"add", "sub", "mul", "div", "max", "min"}
_COMPARE = set(K.COMPARE)
_LOGICAL = set(K.LOGICAL)


def _same_dtype(node, ctx, allowed) -> str:
    a, b = node.inputs[0].dtype, node.inputs[1].dtype
    if a != b or a not in allowed:
        raise Unsupported(ctx.describe(f"inputs {a} and {b}; the generic kernels take two of "
                                       f"{', '.join(allowed)}"))
    return a


@lowers(*_ARITH, *_COMPARE)
def _binary(node, ctx):
    allowed = K.FLOAT_INT + (("bool",) if node.op == "equal" else ())
    dtype = _same_dtype(node, ctx, allowed)
    _strided_call(ctx, f"binary.{node.op}.{dtype}", [ctx.input(0), ctx.input(1)])


@lowers("prelu")
def _prelu(node, ctx):
    _same_dtype(node, ctx, ("float32",))
    _strided_call(ctx, "binary.prelu.float32", [ctx.input(0), ctx.input(1)])


@lowers(*_LOGICAL)
def _logical(node, ctx):
    _same_dtype(node, ctx, ("bool",))
    _strided_call(ctx, f"binary.{node.op}.bool", [ctx.input(0), ctx.input(1)])


# pow(x, c) for a scalar constant c the TE kernels compute as products (codegen/intrinsics.py
# _small_exponent): the same products here
_POWERS = {2.0: "unary.square", 3.0: "unary.cube"}


@lowers("pow")
def _pow(node, ctx):
    base, exponent = node.inputs[0].dtype, node.inputs[1].dtype
    if base != "float32":
        raise Unsupported(ctx.describe(f"a {base} base; the generic pow takes float32"))
    const = ctx.constant(1)
    if const is not None and np.size(const) == 1 and float(np.ravel(const)[0]) in _POWERS:
        if node.outputs[0].shape == node.inputs[0].shape:
            return _unary_call(ctx, _POWERS[float(np.ravel(const)[0])])
    b = ctx.input(1)
    if exponent != "float32":
        if const is None:
            raise Unsupported(ctx.describe(f"a run-time {exponent} exponent; the generic pow "
                                           "takes float32"))
        b = ctx.temp(b.shape, "float32")
        b[...] = const
    _strided_call(ctx, "binary.pow.float32", [ctx.input(0), b])


@lowers("where")
def _where(node, ctx):
    cond, a, b = (v.dtype for v in node.inputs)
    if cond != "bool" or a != b or a not in (*K.FLOAT_INT, "bool"):
        raise Unsupported(ctx.describe(f"where({cond}, {a}, {b}); the generic kernels take a "
                                       "bool condition and two float32, int64 or bool values"))
    _strided_call(ctx, f"where.{a}", [ctx.input(0), ctx.input(1), ctx.input(2)])
