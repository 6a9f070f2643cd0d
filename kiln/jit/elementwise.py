"""Elementwise numpy functions on traced values: ufuncs, comparisons, where, clip, astype.

Each function resolves dtypes as numpy does (jit/dtypes.py), checks broadcasting (naming both
shapes and the operation), casts the operands and emits Kiln's graph ops (graph/ops.py,
graph/ops_more.py); functions numpy has and Kiln has no op for are written with those ops
(expm1 = exp - 1, log2 = log * 1/ln 2, ...). Called with no traced argument, a function is
numpy's own (eager).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..graph.ir import Value
from .dtypes import check_dtype, result_type, ufunc_dtypes
from .errors import JitError, shape_error, unsupported, user_line
from .trace import Trace, Tracer, check_same_trace, find_trace

try:                                  # scipy's erf/expit are ufuncs: traced through them too
    from scipy import special as _special
except ImportError:                   # pragma: no cover - scipy is a dependency of kiln
    _special = None


# -- operands ----------------------------------------------------------------------------------

def value(trace: Trace, x, dtype: np.dtype) -> Value:
    """`x` (a Tracer, a Python scalar or an array) as a graph Value of `dtype`."""
    if isinstance(x, Tracer):
        check_same_trace(trace, x)
        v = x.value
        return v if v.dtype == dtype.name else trace.emit("cast", [v], {"to": dtype.name})
    if isinstance(x, (list, tuple)) and find_trace(x) is not None:
        return _stacked(trace, x, dtype)
    arr = np.asarray(x)
    if arr.dtype == object:
        raise JitError(f"cannot use a {type(x).__name__} as an array operand, at {user_line()}")
    return trace.const(arr.astype(dtype))


def _stacked(trace: Trace, items, dtype: np.dtype) -> Value:
    """A list holding traced values as numpy reads it: one array, the items stacked."""
    parts = [value(trace, item, dtype) for item in items]
    shapes = {p.shape for p in parts}
    if len(shapes) != 1:
        raise shape_error("numpy.asarray", "a list of arrays of shapes " + ", ".join(
            str(list(p.shape)) for p in parts) + " is not one array")
    rows = [trace.emit("reshape", [p], {"shape": (1,) + p.shape}) for p in parts]
    return rows[0] if len(rows) == 1 else trace.emit("concat", rows, {"axis": 0})


def is_weak(x) -> bool:
    return (isinstance(x, Tracer) and x.weak) or (
        isinstance(x, (bool, int, float)) and not isinstance(x, np.generic))


def wrap(trace: Trace, v: Value, weak: bool = False) -> Tracer:
    return trace.tracer(v, weak)


def shape_of(x) -> tuple[int, ...]:
    if isinstance(x, (list, tuple)) and find_trace(x) is not None:
        return (len(x),) + tuple(np.broadcast_shapes(*(shape_of(i) for i in x)))
    return x.shape if isinstance(x, Tracer) else np.shape(x)


def broadcast(op: str, *xs) -> tuple[int, ...]:
    shapes = [shape_of(x) for x in xs]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(list(s)) for s in shapes)
        raise shape_error(op, f"shapes {listed} cannot be broadcast together (numpy's rule: "
                              "aligned from the right, each dimension equal or 1)") from None


# -- ufuncs ------------------------------------------------------------------------------------

UFUNCS: dict[str, Callable] = {}     # numpy ufunc name -> traced implementation


def _register(*names: str):
    def deco(fn):
        for name in names:
            UFUNCS[name] = fn
        return fn
    return deco


def _binary_ufunc(ufunc: np.ufunc, build: Callable[[Trace, Value, Value], Value]):
    name = ufunc.__name__

    def fn(a, b, /):
        trace = find_trace((a, b))
        if trace is None:
            return ufunc(a, b)
        ta, tb, out = ufunc_dtypes(ufunc, (a, b))
        broadcast(f"numpy.{name}", a, b)
        y = build(trace, value(trace, a, ta), value(trace, b, tb))
        if y.dtype != out.name:
            y = trace.emit("cast", [y], {"to": out.name})
        return wrap(trace, y, is_weak(a) and is_weak(b))
    fn.__name__ = name
    UFUNCS[name] = fn
    return fn


def _unary_ufunc(ufunc, build: Callable[[Trace, Value], Value], name: str | None = None):
    name = name or ufunc.__name__

    def fn(x, /):
        trace = find_trace((x,))
        if trace is None:
            return ufunc(x)
        t_in, out = ufunc_dtypes(ufunc, (x,))
        y = build(trace, value(trace, x, t_in))
        if y.dtype != out.name:
            y = trace.emit("cast", [y], {"to": out.name})
        return wrap(trace, y, is_weak(x))
    fn.__name__ = name
    UFUNCS[name] = fn
    return fn


def _op(graph_op: str, **attrs):
    return lambda trace, *vs: trace.emit(graph_op, list(vs), attrs)


def _scalar(trace: Trace, like: Value, number) -> Value:
    return trace.const(np.array(number, dtype=like.dtype))


def _to_bool(trace: Trace, v: Value) -> Value:
    if v.dtype == "bool":
        return v
    eq = trace.emit("equal", [v, _scalar(trace, v, 0)])
    return trace.emit("logical_not", [eq])


def _floor_divide(trace, a, b):
    if a.dtype.startswith(("int", "uint")):
        # (a - a mod b) is a multiple of b: the truncating division is exact
        rem = trace.emit("mod", [a, b], {"fmod": 0})
        return trace.emit("div", [trace.emit("sub", [a, rem]), b])
    return trace.emit("floor", [trace.emit("div", [a, b])])


def _bitwise(logical: str, bits: str):
    def build(trace, a, b):
        return trace.emit(logical if a.dtype == "bool" else bits, [a, b])
    return build


def _logical(op: str):
    return lambda trace, a, b: trace.emit(op, [_to_bool(trace, a), _to_bool(trace, b)])


def _logaddexp(trace, a, b):
    m = trace.emit("max", [a, b])
    ea = trace.emit("exp", [trace.emit("sub", [a, m])])
    eb = trace.emit("exp", [trace.emit("sub", [b, m])])
    return trace.emit("add", [m, trace.emit("log", [trace.emit("add", [ea, eb])])])


def _hypot(trace, a, b):
    s = trace.emit("add", [trace.emit("mul", [a, a]), trace.emit("mul", [b, b])])
    return trace.emit("sqrt", [s])


add = _binary_ufunc(np.add, _bitwise("logical_or", "add"))
subtract = _binary_ufunc(np.subtract, _op("sub"))
multiply = _binary_ufunc(np.multiply, _bitwise("logical_and", "mul"))
true_divide = divide = _binary_ufunc(np.true_divide, _op("div"))
UFUNCS["divide"] = divide
floor_divide = _binary_ufunc(np.floor_divide, _floor_divide)
remainder = mod = _binary_ufunc(np.remainder, _op("mod", fmod=0))
UFUNCS["mod"] = mod
fmod = _binary_ufunc(np.fmod, _op("mod", fmod=1))
power = _binary_ufunc(np.power, _op("pow"))
UFUNCS["pow"] = power
maximum = _binary_ufunc(np.maximum, _op("max"))
minimum = _binary_ufunc(np.minimum, _op("min"))
fmax = _binary_ufunc(np.fmax, _op("max"))
fmin = _binary_ufunc(np.fmin, _op("min"))
equal = _binary_ufunc(np.equal, _op("equal"))
not_equal = _binary_ufunc(np.not_equal, lambda t, a, b: t.emit(
    "logical_not", [t.emit("equal", [a, b])]))
less = _binary_ufunc(np.less, _op("less"))
less_equal = _binary_ufunc(np.less_equal, _op("less_equal"))
greater = _binary_ufunc(np.greater, _op("greater"))
greater_equal = _binary_ufunc(np.greater_equal, _op("greater_equal"))
logical_and = _binary_ufunc(np.logical_and, _logical("logical_and"))
logical_or = _binary_ufunc(np.logical_or, _logical("logical_or"))
logical_xor = _binary_ufunc(np.logical_xor, _logical("logical_xor"))
bitwise_and = _binary_ufunc(np.bitwise_and, _bitwise("logical_and", "bit_and"))
bitwise_or = _binary_ufunc(np.bitwise_or, _bitwise("logical_or", "bit_or"))
bitwise_xor = _binary_ufunc(np.bitwise_xor, _bitwise("logical_xor", "bit_xor"))
logaddexp = _binary_ufunc(np.logaddexp, _logaddexp)
hypot = _binary_ufunc(np.hypot, _hypot)


def _times_const(graph_op: str | None, factor: float, before: bool = False):
    """x -> op(x) * factor (or op(x * factor) with `before`)."""
    def build(trace, x):
        if before:
            return trace.emit(graph_op, [trace.emit("mul", [x, _scalar(trace, x, factor)])])
        return trace.emit("mul", [trace.emit(graph_op, [x]), _scalar(trace, x, factor)])
    return build


def _expm1(trace, x):
    return trace.emit("sub", [trace.emit("exp", [x]), _scalar(trace, x, 1)])


def _log1p(trace, x):
    return trace.emit("log", [trace.emit("add", [x, _scalar(trace, x, 1)])])


def _trunc(trace, x):
    neg = trace.emit("less", [x, _scalar(trace, x, 0)])
    return trace.emit("where", [neg, trace.emit("ceil", [x]), trace.emit("floor", [x])])


def _isfinite(trace, x):
    bad = trace.emit("logical_or", [trace.emit("is_nan", [x]), trace.emit(
        "is_inf", [x], {"detect_positive": 1, "detect_negative": 1})])
    return trace.emit("logical_not", [bad])


def _abs(trace, x):
    return x if x.dtype == "bool" or x.dtype.startswith("uint") else trace.emit("abs", [x])


def _invert(trace, x):
    return trace.emit("logical_not" if x.dtype == "bool" else "bit_not", [x])


def _negative(trace, x):
    if x.dtype == "bool":
        raise JitError(f"numpy.negative of a bool array is not allowed (use ~ or "
                       f"knp.logical_not), at {user_line()}")
    return trace.emit("neg", [x])


_SIMPLE = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "sin": "sin",
           "cos": "cos", "tan": "tan", "arcsin": "asin", "arccos": "acos", "arctan": "atan",
           "sinh": "sinh", "cosh": "cosh", "arcsinh": "asinh", "arccosh": "acosh",
           "arctanh": "atanh", "floor": "floor", "ceil": "ceil", "rint": "round",
           "sign": "sign", "reciprocal": "reciprocal"}
for _np_name, _graph_op in _SIMPLE.items():
    globals()[_np_name] = _unary_ufunc(getattr(np, _np_name), _op(_graph_op))

absolute = _unary_ufunc(np.absolute, _abs)
UFUNCS["abs"] = abs_ = absolute
fabs = _unary_ufunc(np.fabs, _abs)
negative = _unary_ufunc(np.negative, _negative)
positive = _unary_ufunc(np.positive, lambda trace, x: x)
expm1 = _unary_ufunc(np.expm1, _expm1)
log1p = _unary_ufunc(np.log1p, _log1p)
log2 = _unary_ufunc(np.log2, _times_const("log", 1 / math.log(2)))
log10 = _unary_ufunc(np.log10, _times_const("log", 1 / math.log(10)))
exp2 = _unary_ufunc(np.exp2, _times_const("exp", math.log(2), before=True))
square = _unary_ufunc(np.square, lambda trace, x: trace.emit("mul", [x, x]))
trunc = _unary_ufunc(np.trunc, _trunc)
fix = trunc
isnan = _unary_ufunc(np.isnan, _op("is_nan"))
isinf = _unary_ufunc(np.isinf, _op("is_inf", detect_positive=1, detect_negative=1))
isfinite = _unary_ufunc(np.isfinite, _isfinite)
logical_not = _unary_ufunc(np.logical_not, lambda trace, x: trace.emit(
    "logical_not", [_to_bool(trace, x)]))
invert = _unary_ufunc(np.invert, _invert)
UFUNCS["bitwise_not"] = bitwise_not = invert
if _special is not None:
    erf = _unary_ufunc(_special.erf, _op("erf"))
    expit = _unary_ufunc(_special.expit, _op("sigmoid"))


def where(condition, x=None, y=None, /):
    """numpy.where(condition, x, y) (the one-argument form's output size depends on data)."""
    if x is None or y is None:
        if find_trace((condition,)) is None and x is None and y is None:
            return np.where(condition)
        raise unsupported("where", "the one-argument form: its output size depends on the "
                                   "data; use where(condition, x, y)")
    trace = find_trace((condition, x, y))
    if trace is None:
        return np.where(condition, x, y)
    broadcast("numpy.where", condition, x, y)
    dtype = result_type(x, y)
    cond = _to_bool(trace, value(trace, condition, result_type(condition)))
    out = trace.emit("where", [cond, value(trace, x, dtype), value(trace, y, dtype)])
    return wrap(trace, out)


def clip(a, a_min=None, a_max=None, /, **kwargs):
    """numpy.clip: minimum(maximum(a, a_min), a_max) (either bound may be None)."""
    a_min, a_max = kwargs.pop("min", a_min), kwargs.pop("max", a_max)
    if kwargs:
        raise unsupported("clip", f"keyword arguments {sorted(kwargs)}")
    if find_trace((a, a_min, a_max)) is None:
        return np.clip(a, a_min, a_max)
    y = a
    if a_min is not None:
        y = maximum(y, a_min)
    if a_max is not None:
        y = minimum(y, a_max)
    return y


def astype(x, dtype, copy: bool = True):
    """x.astype(dtype): float -> int truncates toward zero, nonzero -> True, as numpy."""
    trace = find_trace((x,))
    if trace is None:
        return np.asarray(x).astype(dtype)
    dtype = check_dtype(dtype, "astype")
    v = x.value
    if dtype.name == v.dtype:
        return x
    if dtype == np.bool_:
        return wrap(trace, _to_bool(trace, v))
    return wrap(trace, trace.emit("cast", [v], {"to": dtype.name}))


def round_(x, decimals: int = 0):
    """numpy.round: half to even; `decimals` scales by 10**decimals around the rounding."""
    trace = find_trace((x,))
    if trace is None:
        return np.round(x, decimals)
    if x.dtype.kind in "biu":
        return x if decimals >= 0 else unsupported("round", "negative decimals of integers")
    if decimals == 0:
        return rint(x)  # noqa: F821 - defined by the _SIMPLE loop
    scale = 10.0 ** decimals
    return divide(rint(multiply(x, scale)), scale)  # noqa: F821
