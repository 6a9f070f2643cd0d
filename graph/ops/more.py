"""More graph ops: math functions, activations, bitwise and integer ops, element gathers and
scatters, cumulative sums and arg-reductions.

Each op is defined once here with its fusion class, its shape/dtype inference, its TE lowering
and its numpy reference, and registered into the same tables as the core ops (graph/ops/core.py
OPS, graph/lower_te.py LOWERINGS, graph/reference.py IMPLS). The ONNX converters that emit
them live in onnx_ops_more.py.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy import special

from ...te import expr as E
from ...te import ops as te_ops
from ...te.ops import indexing, sampling, tags
from ...te.tensor import Tensor, compute
from .. import lower_te, reference
from . import core as ops
from ..ir import OpClass
from .core import broadcast_shapes


def define(name: str, opclass: OpClass, infer, lower, ref) -> None:
    """Register graph op `name` in the op table, the TE lowerings and the reference."""
    ops.OPS[name] = ops.OpDef(name, opclass, infer)
    lower_te.LOWERINGS[name] = lower
    reference.IMPLS[name] = ref


def _same(ins, attrs):
    return [(ins[0].shape, ins[0].dtype)]


def _to_bool(ins, attrs):
    return [(ins[0].shape, "bool")]


def _broadcast_same(ins, attrs):
    return [(broadcast_shapes(*(v.shape for v in ins)), ins[0].dtype)]


def _broadcast_bool(ins, attrs):
    return [(broadcast_shapes(*(v.shape for v in ins)), "bool")]


def _elementwise(name: str, x: Tensor, fn: Callable[[E.Expr], E.Expr]) -> Tensor:
    return compute(x.shape, lambda *i: fn(x(*i)), name=name, tag=tags.ELEMWISE)


def _binary(name: str, a, b, fn) -> Tensor:
    shape = te_ops._common.broadcast_shape(name, a, b)
    return compute(shape, lambda *i: fn(lower_te._read(a, i), lower_te._read(b, i)), name=name,
                   tag=tags.BROADCAST)


# -- unary math (float) ------------------------------------------------------------------------

_MATH = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
         "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
         "acosh": np.arccosh, "atanh": np.arctanh, "floor": np.floor, "ceil": np.ceil,
         "round": np.rint}


def _math_op(name: str, fn) -> None:
    define(name, OpClass.ELEMWISE, _same,
           lambda node, args: [_elementwise(name, args[0], lambda v: E.call(name, v))],
           lambda node, x: fn(x).astype(x.dtype, copy=False))


for _name, _fn in _MATH.items():
    _math_op(_name, _fn)


# -- activations: (TE body of v and the node's attrs, numpy of x and attrs) --------------------

def _c(v: E.Expr, value: float) -> E.Expr:
    return E.const(float(value), v.dtype)


def _softplus(v):
    # max(v, 0) + log1p(exp(-|v|)): no overflow for large |v|
    return E.maximum(v, _c(v, 0)) + E.call("log1p", E.exp(-E.abs(v)))


_ACTIVATIONS: dict[str, tuple[Callable, Callable]] = {
    "elu": (lambda v, a: E.select(v < 0, _c(v, a["alpha"]) * E.call("expm1", v), v),
            lambda x, a: np.where(x < 0, a["alpha"] * np.expm1(x), x)),
    "selu": (lambda v, a: _c(v, a["gamma"]) * E.select(
        v <= 0, _c(v, a["alpha"]) * E.call("expm1", v), v),
        lambda x, a: a["gamma"] * np.where(x <= 0, a["alpha"] * np.expm1(x), x)),
    "celu": (lambda v, a: E.maximum(v, _c(v, 0)) + E.minimum(
        _c(v, 0), _c(v, a["alpha"]) * E.call("expm1", v / _c(v, a["alpha"]))),
        lambda x, a: np.maximum(x, 0) + np.minimum(0, a["alpha"] * np.expm1(x / a["alpha"]))),
    "thresholded_relu": (lambda v, a: E.select(_c(v, a["alpha"]) < v, v, _c(v, 0)),
                         lambda x, a: np.where(x > a["alpha"], x, 0)),
    "softplus": (lambda v, a: _softplus(v),
                 lambda x, a: np.logaddexp(0, x)),
    "softsign": (lambda v, a: v / (_c(v, 1) + E.abs(v)), lambda x, a: x / (1 + np.abs(x))),
    "mish": (lambda v, a: v * E.tanh(_softplus(v)),
             lambda x, a: x * np.tanh(np.logaddexp(0, x))),
    "shrink": (lambda v, a: E.select(v < _c(v, -a["lambd"]), v + _c(v, a["bias"]), E.select(
        _c(v, a["lambd"]) < v, v - _c(v, a["bias"]), _c(v, 0))),
        lambda x, a: np.where(x < -a["lambd"], x + a["bias"],
                              np.where(x > a["lambd"], x - a["bias"], 0))),
    "swish": (lambda v, a: v * E.sigmoid(_c(v, a["alpha"]) * v),
              lambda x, a: x * special.expit(a["alpha"] * x)),
}


def _activation(name: str, te_fn, np_fn) -> None:
    define(name, OpClass.ELEMWISE, _same,
           lambda node, args: [_elementwise(name, args[0], lambda v: te_fn(v, node.attrs))],
           lambda node, x: np.asarray(np_fn(x, node.attrs)).astype(x.dtype, copy=False))


for _name, (_te, _np) in _ACTIVATIONS.items():
    _activation(_name, _te, _np)


def _sign(v: E.Expr) -> E.Expr:
    zero = E.const(0, v.dtype)
    return E.select(zero < v, E.const(1, v.dtype), E.select(v < zero, E.const(-1, v.dtype),
                                                            zero))


define("sign", OpClass.ELEMWISE, _same,
       lambda node, args: [_elementwise("sign", args[0], _sign)],
       lambda node, x: np.sign(x).astype(x.dtype))
define("bit_not", OpClass.ELEMWISE, _same,
       lambda node, args: [_elementwise("bit_not", args[0], lambda v: E.call("bit_not", v))],
       lambda node, x: np.invert(x))


def _is_inf(v: E.Expr, attrs) -> E.Expr:
    inf = E.const(math.inf, v.dtype)
    pos, neg = v.eq(inf), v.eq(-inf)
    if attrs["detect_positive"] and attrs["detect_negative"]:
        return pos | neg
    if attrs["detect_positive"]:
        return pos
    if attrs["detect_negative"]:
        return neg
    return E.const(False, "bool")


def _np_is_inf(x, attrs):
    return (np.isposinf(x) & bool(attrs["detect_positive"])) | (
        np.isneginf(x) & bool(attrs["detect_negative"]))


define("is_nan", OpClass.ELEMWISE, _to_bool,
       lambda node, args: [_elementwise("is_nan", args[0], lambda v: v.ne(v))],
       lambda node, x: np.isnan(x))
define("is_inf", OpClass.ELEMWISE, _to_bool,
       lambda node, args: [_elementwise("is_inf", args[0], lambda v: _is_inf(v, node.attrs))],
       lambda node, x: _np_is_inf(x, node.attrs))


# -- binary ------------------------------------------------------------------------------------

def _int_mod(a: E.Expr, b: E.Expr, fmod: bool) -> E.Expr:
    """Integer Mod: floor mod (the sign of b), or with fmod C's remainder (the sign of a)."""
    r = E.floormod(a, b)
    if not fmod:
        return r
    zero = E.const(0, a.dtype)
    return E.select(r.ne(zero) & (a < zero).ne(b < zero), r - b, r)


def _float_mod(a: E.Expr, b: E.Expr, fmod: bool) -> E.Expr:
    """C's fmod (exact, the sign of a), or Python's mod (the sign of b): fmod + b when the
    remainder is non-zero and its sign differs from b's."""
    r = E.call("fmod", a, b)
    if fmod:
        return r
    zero = E.const(0.0, a.dtype)
    return E.select(r.ne(zero) & (r < zero).ne(b < zero), r + b, r)


def _mod_lower(node, args):
    a, b = args
    fmod = bool(node.attr("fmod", 0))
    if node.outputs[0].dtype.startswith(("float", "bfloat")):
        return [_binary("mod", a, b, lambda x, y: _float_mod(x, y, fmod))]
    return [_binary("mod", a, b, lambda x, y: _int_mod(x, y, fmod))]


def _mod_ref(node, a, b):
    if node.attr("fmod", 0):
        return np.fmod(a, b)
    return np.mod(a, b)


define("mod", OpClass.BROADCAST, _broadcast_same, _mod_lower, _mod_ref)

def _shift_ref(fn, a, b):
    """numpy shifts, a shift past the bit width giving 0 (unsigned, as ONNX BitShift)."""
    bits = a.dtype.itemsize * 8
    out = fn(a, np.minimum(b, bits - 1).astype(a.dtype))
    return np.where(np.asarray(b) >= bits, np.zeros_like(a), out)


_BITWISE = {"bit_and": np.bitwise_and, "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor,
            "shl": lambda a, b: _shift_ref(np.left_shift, a, b),
            "shr": lambda a, b: _shift_ref(np.right_shift, a, b)}
for _name, _fn in _BITWISE.items():
    define(_name, OpClass.BROADCAST, _broadcast_same,
           (lambda n: lambda node, args: [_binary(n, args[0], args[1],
                                                  lambda x, y: E.call(n, x, y))])(_name),
           (lambda f: lambda node, a, b: np.asarray(f(a, b)).astype(a.dtype))(_fn))


_COMPARE = {"less_equal": (lambda x, y: x <= y, np.less_equal),
            "greater_equal": (lambda x, y: y <= x, np.greater_equal),
            "logical_xor": (lambda x, y: E._to_bool(x).ne(E._to_bool(y)), np.logical_xor)}
for _name, (_te, _np) in _COMPARE.items():
    define(_name, OpClass.BROADCAST, _broadcast_bool,
           (lambda n, f: lambda node, args: [_binary(n, args[0], args[1], f)])(_name, _te),
           (lambda f: lambda node, a, b: np.asarray(f(a, b)))(_np))


def _prelu(x, s):
    return E.select(x < E.const(0, x.dtype), x * s, x)


define("prelu", OpClass.BROADCAST, _broadcast_same,
       lambda node, args: [_binary("prelu", args[0], args[1], _prelu)],
       lambda node, x, s: np.where(x < 0, x * s, x).astype(x.dtype))


# -- reductions and indexing -------------------------------------------------------------------

def _reduce_prod_lower(node, args):
    return [te_ops.prod(args[0], tuple(node.attrs["axes"]), bool(node.attrs["keepdims"]))]


define("reduce_prod", OpClass.REDUCTION, ops.OPS["reduce_sum"].infer, _reduce_prod_lower,
       lambda node, x: np.prod(x, axis=tuple(node.attrs["axes"]),
                               keepdims=bool(node.attrs["keepdims"])).astype(x.dtype))


def _arg_infer(ins, attrs):
    shape = ins[0].shape
    axis = attrs["axis"]
    out = tuple(1 if d == axis else n for d, n in enumerate(shape)
                if attrs["keepdims"] or d != axis)
    return [(out, "int64")]


def _arg_lower(node, args):
    a = node.attrs
    return [indexing.arg_reduce(args[0], a["axis"], bool(a["keepdims"]),
                                bool(a["select_last_index"]), node.op == "argmax")]


def _arg_ref(node, x):
    a = node.attrs
    fn = np.argmax if node.op == "argmax" else np.argmin
    if a["select_last_index"]:
        flipped = np.flip(x, a["axis"])
        idx = x.shape[a["axis"]] - 1 - fn(flipped, axis=a["axis"])
    else:
        idx = fn(x, axis=a["axis"])
    if a["keepdims"]:
        idx = np.expand_dims(idx, a["axis"])
    return idx.astype(np.int64)


define("argmax", OpClass.OPAQUE, _arg_infer, _arg_lower, _arg_ref)
define("argmin", OpClass.OPAQUE, _arg_infer, _arg_lower, _arg_ref)


def _cumsum_ref(node, x):
    a = node.attrs
    axis = a["axis"]
    y = np.flip(x, axis) if a["reverse"] else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if a["exclusive"]:
        out = out - y
    return np.flip(out, axis) if a["reverse"] else out


define("cumsum", OpClass.OPAQUE, _same,
       lambda node, args: [indexing.cumsum(args[0], node.attrs["axis"],
                                           bool(node.attrs["exclusive"]),
                                           bool(node.attrs["reverse"]))],
       _cumsum_ref)


def _gather_elements_ref(node, data, idx):
    axis = node.attrs["axis"]
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return np.take_along_axis(data, idx.astype(np.int64), axis)


define("gather_elements", OpClass.INJECTIVE,
       lambda ins, attrs: [(ins[1].shape, ins[0].dtype)],
       lambda node, args: [indexing.gather_elements(args[0], args[1], node.attrs["axis"])],
       _gather_elements_ref)

_NP_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_elements_ref(node, data, idx, upd):
    axis, reduction = node.attrs["axis"], node.attrs["reduction"]
    out = data.copy()
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    for j in np.ndindex(*idx.shape):
        target = list(j)
        target[axis] = int(idx[j])
        target = tuple(target)
        out[target] = upd[j] if reduction == "none" else _NP_REDUCE[reduction](
            out[target], upd[j])
    return out


def _scatter_nd_ref(node, data, idx, upd):
    reduction = node.attrs["reduction"]
    out = data.copy()
    for q in np.ndindex(*idx.shape[:-1]):
        target = tuple(int(v) + (data.shape[t] if v < 0 else 0) for t, v in enumerate(idx[q]))
        out[target] = upd[q] if reduction == "none" else _NP_REDUCE[reduction](
            out[target], upd[q])
    return out


define("scatter_elements", OpClass.OPAQUE, _same,
       lambda node, args: [indexing.scatter_elements(args[0], args[1], args[2],
                                                     node.attrs["axis"],
                                                     node.attrs["reduction"])],
       _scatter_elements_ref)
define("scatter_nd", OpClass.OPAQUE, _same,
       lambda node, args: [indexing.scatter_nd(args[0], args[1], args[2],
                                               node.attrs["reduction"])],
       _scatter_nd_ref)


# -- sampling ----------------------------------------------------------------------------------

def _grid_sample_infer(ins, attrs):
    x, grid = ins
    return [((x.shape[0], x.shape[1]) + tuple(grid.shape[1:-1]), x.dtype)]


def _grid_sample_ref(node, x, grid):
    """onnx's own reference implementation, run on a one-node model."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    a = node.attrs
    n = helper.make_node("GridSample", ["x", "g"], ["y"], mode=a["mode"],
                         padding_mode=a["padding_mode"], align_corners=a["align_corners"])
    info = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), None)
            for k, v in (("x", x), ("g", grid))]
    g = helper.make_graph([n], "gs", info, [helper.make_tensor_value_info("y", 0, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)])
    return ReferenceEvaluator(m).run(None, {"x": x, "g": grid})[0]


define("grid_sample", OpClass.OPAQUE, _grid_sample_infer,
       lambda node, args: [sampling.grid_sample(args[0], args[1], node.attrs["mode"],
                                                node.attrs["padding_mode"],
                                                bool(node.attrs["align_corners"]))],
       _grid_sample_ref)


def _resize_ref(node, x):
    """numpy, through onnx's own reference Resize on a one-node model."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    a = node.attrs
    if a["coord"] == "tf_half_pixel_for_nn":   # Resize-11 only; onnx's evaluator lacks it
        return _nearest_gather(x, a["out_shape"], a["scales"], a["nearest_mode"])
    roi = np.array([p[0] for p in a["roi"]] + [p[1] for p in a["roi"]], np.float32)
    scales = np.array(a["scales"], np.float32)
    by_scales = all(int(np.floor(i * s)) == o for i, s, o in zip(x.shape, scales,
                                                                 a["out_shape"]))
    inits = [numpy_helper.from_array(roi, "roi"), numpy_helper.from_array(
        scales, "scales") if by_scales else numpy_helper.from_array(
        np.array(a["out_shape"], np.int64), "sizes")]
    ins = ["x", "roi", "scales"] if by_scales else ["x", "roi", "", "sizes"]
    n = helper.make_node("Resize", ins, ["y"], mode=a["mode"],
                         coordinate_transformation_mode=a["coord"],
                         nearest_mode=a["nearest_mode"], cubic_coeff_a=a["cubic_a"],
                         exclude_outside=a["exclude_outside"],
                         extrapolation_value=a["extrapolation_value"])
    info = helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), None)
    g = helper.make_graph([n], "rs", [info], [helper.make_tensor_value_info("y", 0, None)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(m).run(None, {"x": x})[0]


def _nearest_gather(x, out_shape, scales, nearest_mode):
    """Nearest resize with source coordinate (i + 0.5) / scale, one axis at a time."""
    rounding = {"round_prefer_floor": lambda v: np.ceil(v - 0.5),
                "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                "floor": np.floor, "ceil": np.ceil}[nearest_mode]
    for axis, (n_out, scale) in enumerate(zip(out_shape, scales)):
        source = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) / np.float32(scale)
        index = np.clip(rounding(source).astype(np.int64), 0, x.shape[axis] - 1)
        x = np.take(x, index, axis=axis)
    return x


define("resize", OpClass.OPAQUE, lambda ins, attrs: [(tuple(attrs["out_shape"]), ins[0].dtype)],
       lambda node, args: [sampling.resize(
           args[0], node.attrs["out_shape"], node.attrs["scales"], node.attrs["mode"],
           node.attrs["coord"], node.attrs["nearest_mode"], node.attrs["cubic_a"],
           bool(node.attrs["exclude_outside"]), node.attrs["roi"],
           node.attrs["extrapolation_value"])],
       _resize_ref)
