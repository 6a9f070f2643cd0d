"""Reductions on traced values: sum/mean/prod/max/min/any/all/argmax/argmin/var/std/cumsum
with numpy's `axis` (int, tuple, negative, None) and `keepdims`, and numpy's result dtypes
(sum of int32 is int64, mean of ints is float64: the input is cast before reducing)."""
from __future__ import annotations

import builtins

import numpy as np

from . import elementwise as ew
from . import shapes
from .dtypes import check_dtype, reduction_dtype
from .elementwise import _to_bool, value, wrap
from .errors import shape_error
from .trace import Tracer, find_trace


def normalize_axes(op: str, shape: tuple[int, ...], axis) -> tuple[int, ...]:
    """`axis` (None, an int or a tuple of ints; negative counts from the end) as sorted
    non-negative axes; a JitShapeError names the axis, the shape and the operation."""
    rank = len(shape)
    if axis is None:
        return tuple(range(rank))
    items = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in items:
        if isinstance(a, Tracer) or not isinstance(a, (int, np.integer)):
            raise shape_error(op, f"axis must be a Python int or a tuple of ints, got {a!r}")
        if not -rank <= a < rank:
            raise shape_error(op, f"axis {a} is out of range for an array of shape "
                                  f"{list(shape)} (rank {rank})")
        out.append(int(a) % rank)
    if len(set(out)) != len(out):
        raise shape_error(op, f"axis {axis} repeats an axis")
    return tuple(sorted(out))


def _reduce(name: str, graph_op: str, x, axis, keepdims: bool, dtype=None):
    trace = find_trace((x,))
    if trace is None:
        kwargs = {} if dtype is None else {"dtype": dtype}
        return getattr(np, name)(x, axis=axis, keepdims=keepdims, **kwargs)
    op = f"numpy.{name}"
    axes = normalize_axes(op, x.shape, axis)
    acc = check_dtype(dtype, op) if dtype is not None else reduction_dtype(name, x.dtype)
    v = value(trace, x, acc)
    if graph_op in ("reduce_max", "reduce_min") and builtins.any(x.shape[a] == 0 for a in axes):
        raise shape_error(op, f"reducing a zero-size axis of shape {list(x.shape)}: the "
                              "maximum/minimum of nothing has no value")
    if not axes:
        return wrap(trace, v)
    return wrap(trace, trace.emit(graph_op, [v], {"axes": axes, "keepdims": int(keepdims)}))


def sum(a, axis=None, dtype=None, keepdims=False):
    return _reduce("sum", "reduce_sum", a, axis, keepdims, dtype)


def mean(a, axis=None, dtype=None, keepdims=False):
    return _reduce("mean", "reduce_mean", a, axis, keepdims, dtype)


def prod(a, axis=None, dtype=None, keepdims=False):
    return _reduce("prod", "reduce_prod", a, axis, keepdims, dtype)


def _extreme(name: str, graph_op: str, a, axis, keepdims):
    trace = find_trace((a,))
    if trace is None or a.dtype != np.bool_:
        return _reduce(name, graph_op, a, axis, keepdims)
    as_int = wrap(trace, trace.emit("cast", [a.value], {"to": "int32"}))
    return astype_bool(_reduce(name, graph_op, as_int, axis, keepdims))


def astype_bool(x):
    return wrap(x.trace, _to_bool(x.trace, x.value))


def max(a, axis=None, keepdims=False):
    return _extreme("max", "reduce_max", a, axis, keepdims)


def min(a, axis=None, keepdims=False):
    return _extreme("min", "reduce_min", a, axis, keepdims)


amax, amin = max, min


def _logical(name: str, graph_op: str, a, axis, keepdims):
    trace = find_trace((a,))
    if trace is None:
        return getattr(np, name)(a, axis=axis, keepdims=keepdims)
    flags = wrap(trace, trace.emit("cast", [_to_bool(trace, a.value)], {"to": "int32"}))
    axes = normalize_axes(f"numpy.{name}", a.shape, axis)
    if builtins.any(a.shape[k] == 0 for k in axes):      # any() of nothing is False, all() True
        return shapes.full_like_reduced(flags, axes, keepdims, name == "all")
    return astype_bool(_reduce("max" if name == "any" else "min", graph_op, flags, axis,
                               keepdims))


def any(a, axis=None, keepdims=False):
    return _logical("any", "reduce_max", a, axis, keepdims)


def all(a, axis=None, keepdims=False):
    return _logical("all", "reduce_min", a, axis, keepdims)


def _arg(name: str, a, axis, keepdims):
    trace = find_trace((a,))
    if trace is None:
        return getattr(np, name)(a, axis=axis, keepdims=keepdims)
    op = f"numpy.{name}"
    if a.size == 0:
        raise shape_error(op, f"attempt to get {name} of an empty sequence (shape "
                              f"{list(a.shape)})")
    if axis is None:
        flat = shapes.reshape(a, (-1,))
        out = _arg(name, flat, 0, False)
        return shapes.reshape(out, (1,) * a.ndim) if keepdims else out
    (ax,) = normalize_axes(op, a.shape, axis)
    v = a.value if a.dtype != np.bool_ else trace.emit("cast", [a.value], {"to": "int32"})
    return wrap(trace, trace.emit(name, [v], {"axis": ax, "keepdims": int(keepdims),
                                              "select_last_index": 0}))


def argmax(a, axis=None, keepdims=False):
    return _arg("argmax", a, axis, keepdims)


def argmin(a, axis=None, keepdims=False):
    return _arg("argmin", a, axis, keepdims)


def var(a, axis=None, dtype=None, ddof=0, keepdims=False):
    """mean(|a - mean(a)|**2) * n / (n - ddof)."""
    trace = find_trace((a,))
    if trace is None:
        return np.var(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    m = mean(a, axis, dtype, keepdims=True)
    d = ew.subtract(a, m)
    out = mean(ew.multiply(d, d), axis, dtype, keepdims)
    if ddof:
        axes = normalize_axes("numpy.var", a.shape, axis)
        n = int(np.prod([a.shape[k] for k in axes]))
        out = ew.multiply(out, n / (n - ddof) if n > ddof else float("nan"))
    return out


def std(a, axis=None, dtype=None, ddof=0, keepdims=False):
    if find_trace((a,)) is None:
        return np.std(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    return ew.sqrt(var(a, axis, dtype, ddof, keepdims))


def cumsum(a, axis=None, dtype=None):
    trace = find_trace((a,))
    if trace is None:
        return np.cumsum(a, axis=axis, dtype=dtype)
    if axis is None:
        a, axis = shapes.reshape(a, (-1,)), 0
    (ax,) = normalize_axes("numpy.cumsum", a.shape, axis)
    acc = check_dtype(dtype, "numpy.cumsum") if dtype is not None else \
        reduction_dtype("cumsum", a.dtype)
    v = value(trace, a, acc)
    return wrap(trace, trace.emit("cumsum", [v], {"axis": ax, "exclusive": 0, "reverse": 0}))

