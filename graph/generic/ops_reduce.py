"""Reductions, softmax, log_softmax, layer_norm, cumsum and index_range onto the generic
reduce kernels (codegen/generic/reduce.py): the axes become [outer, n, inner] at plan time."""
from __future__ import annotations

import math

import numpy as np

from ...te.ops.nn import _flush_below
from .lowering import Unsupported, lowers

_REDUCE = {"reduce_sum": "sum", "reduce_mean": "sum", "reduce_max": "max",
           "reduce_min": "min", "reduce_prod": "prod", "reduce_l2": "l2"}


def split_axes(shape, axes) -> tuple[int, int, int] | None:
    """(outer, n, inner) of `shape` reduced over `axes`, or None when the reduced axes are
    not adjacent (size-1 axes between them do not count)."""
    rank = len(shape)
    prod = lambda dims: int(np.prod(dims, dtype=np.int64))   # noqa: E731
    axes = sorted({a % rank for a in axes}) if rank else []
    if not axes:        # each element reduced on its own (a 0-d input)
        return prod(shape), 1, 1
    first, last = axes[0], axes[-1]
    if any(shape[k] != 1 for k in range(first, last + 1) if k not in axes):
        return None
    return prod(shape[:first]), prod(shape[first:last + 1]), prod(shape[last + 1:])


def _split_or_raise(ctx, shape, axes, what):
    split = split_axes(shape, axes)
    if split is None:
        raise Unsupported(ctx.describe(f"{what} {tuple(axes)} of {list(shape)} are not "
                                       "adjacent"))
    return split


@lowers(*_REDUCE)
def _reduce(node, ctx):
    ctx.require_dtype("float32")
    x, y = ctx.input(0), ctx.output(0)
    outer, n, inner = _split_or_raise(ctx, x.shape, node.attrs["axes"], "axes")
    if y.size == 0:
        return
    # the mean of nothing is 0, as onnxruntime has it (numpy: NaN)
    scale = (1.0 / n if n else 0.0) if node.op == "reduce_mean" else 1.0
    ctx.call(f"reduce.{_REDUCE[node.op]}", [x, y], [outer, n, inner], [scale])


@lowers("softmax", "log_softmax")
def _softmax(node, ctx):
    ctx.require_dtype("float32")
    x, y = ctx.input(0), ctx.output(0)
    outer, n, inner = _split_or_raise(ctx, x.shape, (node.attrs["axis"],), "axis")
    if y.size == 0:
        return
    floor = _flush_below("float32", n)
    ctx.call(f"reduce.{node.op}", [x, y], [outer, n, inner],
             [-math.inf if floor is None else floor])


def _row_param(node, ctx, k, shape, fill):
    """Input k (scale or bias) as a contiguous array of `shape` (the normalised dims):
    itself when it already has those elements in that order, else its constant broadcast
    at plan time; `fill` when the input is omitted."""
    size = int(np.prod(shape, dtype=np.int64))
    if not ctx.has_input(k):
        out = ctx.temp((size,))
        out[...] = fill
        return out
    arr = ctx.input(k)
    value = ctx.constant(k)
    try:
        full = np.broadcast_shapes(arr.shape, tuple(shape)) == tuple(shape)
    except ValueError:
        full = False
    if not full:
        raise Unsupported(ctx.describe(f"input {k} {list(arr.shape)} does not broadcast to "
                                       f"the normalised shape {list(shape)}"))
    if arr.size == size:
        return arr
    if value is None:
        raise Unsupported(ctx.describe(f"input {k} {list(arr.shape)} is broadcast at run "
                                       f"time to {list(shape)}"))
    out = ctx.temp(tuple(shape))
    out[...] = np.broadcast_to(np.asarray(value, np.float32), tuple(shape))
    return out


@lowers("layer_norm")
def _layer_norm(node, ctx):
    ctx.require_dtype("float32")
    x, y = ctx.input(0), ctx.output(0)
    axis = node.attrs["axis"] % max(x.ndim, 1)
    shape = x.shape[axis:]
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    n = int(np.prod(shape, dtype=np.int64))
    scale = _row_param(node, ctx, 1, shape, 1.0)
    bias = _row_param(node, ctx, 2, shape, 0.0)
    if y.size == 0:
        return
    ctx.call("reduce.layer_norm", [x, scale, bias, y], [outer, n],
             [float(node.attrs["epsilon"]), 1.0 / n])


@lowers("cumsum")
def _cumsum(node, ctx):
    x, y = ctx.input(0), ctx.output(0)
    kernels = {"float32": "reduce.cumsum_f32", "int64": "reduce.cumsum_i64"}
    if str(x.dtype) not in kernels or y.dtype != x.dtype:
        raise Unsupported(ctx.describe(f"cumsum of {x.dtype}; the generic kernels take "
                                       "float32 and int64"))
    if x.ndim == 0:
        raise Unsupported(ctx.describe("cumsum of a scalar"))
    outer, n, inner = _split_or_raise(ctx, x.shape, (node.attrs["axis"],), "axis")
    if y.size == 0:
        return
    a = node.attrs
    ctx.call(kernels[str(x.dtype)], [x, y],
             [outer, n, inner, int(bool(a["reverse"])), int(bool(a["exclusive"]))])


@lowers("index_range")
def _index_range(node, ctx):
    x, y = ctx.input(0), ctx.output(0)
    if x.dtype not in (np.int64, np.int32):
        raise Unsupported(ctx.describe(f"indices of {x.dtype}; the generic index_range "
                                       "takes int32 and int64"))
    k = len(node.attrs["bounds"])
    if node.attrs["columns"] and (x.ndim == 0 or x.shape[-1] != k):
        raise Unsupported(ctx.describe(f"indices {list(x.shape)} do not end in {k} columns"))
    if x.size == 0 or k == 0:
        raise Unsupported(ctx.describe("no indices to check"))
    kernel = "reduce.index_range" if x.dtype == np.int64 else "reduce.index_range_i32"
    ctx.call(kernel, [x, y], [x.size // k, k])
