"""Reductions over any set of axes, with numpy's axis/keepdims conventions."""
from __future__ import annotations

import math

from .. import expr as E
from .. import tensor as T
from ..tensor import Tensor, compute, reduce_axis
from ._common import check_tensor, normalize_axes, require_float, shrink
from .tags import ELEMWISE, REDUCTION


def reduce(op_name: str, reducer, x: Tensor, axis=None, keepdims: bool = False,
           name: str | None = None, source=None) -> Tensor:
    """One reduction stage: reducer(source(x[...]), over `axis`); `source` maps each element
    first (e.g. v*v for an L2 norm). Used by the named reductions and by nn ops."""
    check_tensor(op_name, x)
    axes = normalize_axes(op_name, x.name, axis, x.ndim)
    shape = shrink(x.shape, axes, keepdims)
    source = source or (lambda v: v)
    if not axes:
        return compute(shape, lambda *i: source(x(*i)), name=name or op_name, tag=ELEMWISE)
    if any(x.shape[d] == 0 for d in axes):   # an empty set: the reducer's identity
        identity = _identity(reducer, source(x(*[0] * x.ndim)))
        return compute(shape, lambda *i: identity, name=name or op_name, tag=ELEMWISE)
    raxes = {d: reduce_axis(x.shape[d], f"r{d}") for d in axes}

    def body(*idx):
        it = iter(idx)
        reads = []
        for d in range(x.ndim):
            if d in raxes:
                if keepdims:
                    next(it)
                reads.append(raxes[d])
            else:
                reads.append(next(it))
        return reducer(source(x(*reads)), axis=[raxes[d] for d in axes])

    return compute(shape, body, name=name or op_name, tag=REDUCTION)


def _identity(reducer, sample: E.Expr) -> E.Expr:
    """The value `reducer` gives over no elements of `sample`'s dtype (0 for a sum, 1 for a
    product, the dtype's lowest value for a max...)."""
    reduced = reducer(sample, axis=[reduce_axis(1, "r")])
    if isinstance(reduced, E.Cast):   # a half reduction accumulates in float32
        return E.cast(reduced.value.combiner.identity, reduced.dtype)
    return reduced.combiner.identity


def sum(x: Tensor, axis=None, keepdims: bool = False,  # noqa: A001 - numpy's name
        name: str | None = None) -> Tensor:
    return reduce("sum", T.sum, x, axis, keepdims, name)


def max(x: Tensor, axis=None, keepdims: bool = False,  # noqa: A001 - numpy's name
        name: str | None = None) -> Tensor:
    return reduce("max", T.max, x, axis, keepdims, name)


def min(x: Tensor, axis=None, keepdims: bool = False,  # noqa: A001 - numpy's name
        name: str | None = None) -> Tensor:
    return reduce("min", T.min, x, axis, keepdims, name)


def prod(x: Tensor, axis=None, keepdims: bool = False, name: str | None = None) -> Tensor:
    return reduce("prod", T.prod, x, axis, keepdims, name)


def mean(x: Tensor, axis=None, keepdims: bool = False, name: str | None = None) -> Tensor:
    """sum / count as two stages (a reduction, then an elementwise scale)."""
    check_tensor("mean", x)
    require_float("mean", x)
    axes = normalize_axes("mean", x.name, axis, x.ndim)
    total = reduce("sum", T.sum, x, axes, keepdims, name=f"{name or 'mean'}_sum")
    count = math.prod(x.shape[d] for d in axes)
    return compute(total.shape, lambda *i: total(*i) * (1.0 / count), name=name or "mean",
                   tag=ELEMWISE)


def l2_norm(x: Tensor, axis=None, keepdims: bool = False, name: str | None = None) -> Tensor:
    """sqrt(sum(x * x)) (ONNX ReduceL2)."""
    check_tensor("l2_norm", x)
    require_float("l2_norm", x)
    squares = reduce("l2_norm", T.sum, x, axis, keepdims, name=f"{name or 'l2_norm'}_sum",
                     source=lambda v: v * v)
    return compute(squares.shape, lambda *i: E.sqrt(squares(*i)), name=name or "l2_norm",
                   tag=ELEMWISE)
