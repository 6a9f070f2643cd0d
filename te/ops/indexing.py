"""Data-dependent indexing operators: element gathers and scatters, cumulative sums, arg-reductions.

A scatter is written as a gather over its updates: every output point reduces over the update
positions whose index lands on it (a `Reduce` with a `where` condition), so it stays a pure
compute DAG (no stores in data-dependent order) and any schedule is legal. That costs
O(outputs x updates along the scatter axis), fine for the sizes these ops see in models.
Indices may be negative (counted from the end); out-of-range indices are clamped for the read
(nothing outside a buffer is touched); compiled models report them as errors from a separate
check (graph/index_checks.py), so these loops stay branch-free.
"""
from __future__ import annotations

import math

from .. import expr as E
from .. import tensor as T
from ..errors import TEError
from ..tensor import Tensor, compute, reduce_axis
from ._common import check_tensor, normalize_axis
from .tags import INJECTIVE, REDUCTION

SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


def wrap_index(value: E.Expr, extent: int) -> E.Expr:
    """An index that may count from the end, as an in-bounds int32 (clamped)."""
    v = E.cast(value, "int32")
    return E.minimum(E.maximum(E.select(v < 0, v + extent, v), 0), extent - 1)


def _raw_index(value: E.Expr, extent: int) -> E.Expr:
    """An index that may count from the end, as int32, not clamped (for match tests)."""
    v = E.cast(value, "int32")
    return E.select(v < 0, v + extent, v)


def gather_elements(data: Tensor, indices: Tensor, axis: int, name: str | None = None) -> Tensor:
    """ONNX GatherElements: out[p] = data[p with p[axis] = indices[p]] (out.shape =
    indices.shape)."""
    check_tensor("gather_elements", data)
    check_tensor("gather_elements", indices, "indices")
    axis = normalize_axis("gather_elements", data.name, axis, data.ndim)
    if indices.ndim != data.ndim:
        raise TEError(f"gather_elements(): indices {list(indices.shape)} and data "
                      f"{list(data.shape)} must have the same rank")
    extent = data.shape[axis]

    def body(*p):
        reads = [wrap_index(indices(*p), extent) if d == axis else E.minimum(
            p[d], data.shape[d] - 1) for d in range(data.ndim)]
        return data(*reads)

    return compute(indices.shape, body, name=name or "gather_elements", tag=INJECTIVE)


def _check_reduction(op_name: str, reduction: str) -> None:
    if reduction not in SCATTER_REDUCTIONS:
        raise TEError(f"{op_name}(): unknown reduction {reduction!r}; use one of "
                      f"{', '.join(SCATTER_REDUCTIONS)}")


def _combine(reduction: str, data_value: E.Expr, gathered: E.Expr) -> E.Expr:
    if reduction == "add":
        return data_value + gathered
    if reduction == "mul":
        return data_value * gathered
    return (E.maximum if reduction == "max" else E.minimum)(data_value, gathered)


_REDUCERS = {"add": T.sum, "mul": T.prod, "max": T.max, "min": T.min}


def scatter_elements(data: Tensor, indices: Tensor, updates: Tensor, axis: int,
                     reduction: str = "none", name: str | None = None) -> Tensor:
    """ONNX ScatterElements: out = data, then out[j with j[axis] = indices[j]] (op)=
    updates[j] for every j; with reduction "none" the last update to a point wins."""
    op = "scatter_elements"
    for t, what in ((data, "data"), (indices, "indices"), (updates, "updates")):
        check_tensor(op, t, what)
    _check_reduction(op, reduction)
    axis = normalize_axis(op, data.name, axis, data.ndim)
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise TEError(f"{op}(): indices {list(indices.shape)} and updates "
                      f"{list(updates.shape)} must have one shape, of data's rank {data.ndim}")
    extent, count = data.shape[axis], indices.shape[axis]
    r = reduce_axis(count, "r")

    def position(p, at):
        return [at if d == axis else E.minimum(p[d], indices.shape[d] - 1)
                for d in range(data.ndim)]

    def match(p):
        inside = [p[d] < indices.shape[d] for d in range(data.ndim)
                  if d != axis and indices.shape[d] < data.shape[d]]
        return E.all_of(_raw_index(indices(*position(p, r)), extent).eq(p[axis]), *inside)

    base = name or op
    if reduction == "none":
        last = compute(data.shape, lambda *p: T.max(E.select(match(p), r, -1), axis=r,
                                                     where=None), name=f"{base}_last",
                       tag=REDUCTION)
        return compute(data.shape, lambda *p: E.select(
            last(*p) >= 0, updates(*position(p, E.maximum(last(*p), 0))), data(*p)),
            name=base, tag=INJECTIVE)
    gathered = compute(data.shape, lambda *p: _REDUCERS[reduction](
        updates(*position(p, r)), axis=r, where=match(p)), name=f"{base}_{reduction}",
        tag=REDUCTION)
    return compute(data.shape, lambda *p: _combine(reduction, data(*p), gathered(*p)),
                   name=base, tag=INJECTIVE)


def scatter_nd(data: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none",
               name: str | None = None) -> Tensor:
    """ONNX ScatterND: out = data, then out[indices[q]] (op)= updates[q] for every index
    position q (indices[..., k] address the first k axes of data)."""
    op = "scatter_nd"
    for t, what in ((data, "data"), (indices, "indices"), (updates, "updates")):
        check_tensor(op, t, what)
    _check_reduction(op, reduction)
    k = indices.shape[-1] if indices.ndim else 0
    lead = indices.shape[:-1]
    if k > data.ndim or tuple(updates.shape) != tuple(lead) + tuple(data.shape[k:]):
        raise TEError(f"{op}(): updates {list(updates.shape)} must be indices.shape[:-1] + "
                      f"data.shape[k:] = {list(lead) + list(data.shape[k:])}")
    base = name or op
    if not lead or math.prod(lead) == 0:
        return compute(data.shape, lambda *p: data(*p), name=base, tag=INJECTIVE)
    rs = [reduce_axis(n, f"q{d}") for d, n in enumerate(lead)]

    def match(p):
        return E.all_of(*[_raw_index(indices(*rs, t), data.shape[t]).eq(p[t])
                          for t in range(k)])

    if reduction == "none":
        strides = [math.prod(lead[d + 1:]) for d in range(len(lead))]
        flat = sum((q * s for q, s in zip(rs[1:], strides[1:])), rs[0] * strides[0])
        last = compute(data.shape, lambda *p: T.max(E.select(match(p), flat, -1), axis=rs),
                       name=f"{base}_last", tag=REDUCTION)

        def pick(*p):
            j = E.maximum(last(*p), 0)
            q = [(j // s) % n if d else j // s for d, (s, n) in enumerate(zip(strides, lead))]
            return E.select(last(*p) >= 0, updates(*q, *p[k:]), data(*p))
        return compute(data.shape, pick, name=base, tag=INJECTIVE)
    gathered = compute(data.shape, lambda *p: _REDUCERS[reduction](
        updates(*rs, *p[k:]), axis=rs, where=match(p)), name=f"{base}_{reduction}",
        tag=REDUCTION)
    return compute(data.shape, lambda *p: _combine(reduction, data(*p), gathered(*p)),
                   name=base, tag=INJECTIVE)


def cumulative(kind: str, reducer, x: Tensor, axis: int, exclusive: bool = False,
               reverse: bool = False, name: str | None = None) -> Tensor:
    """A running `reducer` (T.sum, T.prod) along `axis` (exclusive: without the element
    itself; reverse: from the end), as one reduction per output point; `kind` names the op
    in errors and the stage."""
    check_tensor(kind, x)
    axis = normalize_axis(kind, x.name, axis, x.ndim)
    r = reduce_axis(x.shape[axis], "r")

    def body(*p):
        i = p[axis]
        if reverse:
            cond = (i < r) if exclusive else (i <= r)
        else:
            cond = (r < i) if exclusive else (r <= i)
        reads = [r if d == axis else p[d] for d in range(x.ndim)]
        return reducer(x(*reads), axis=r, where=cond)

    return compute(x.shape, body, name=name or kind, tag=REDUCTION)


def cumsum(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False,
           name: str | None = None) -> Tensor:
    """ONNX CumSum along `axis`."""
    return cumulative("cumsum", T.sum, x, axis, exclusive, reverse, name)


def arg_reduce(x: Tensor, axis: int, keepdims: bool = True, select_last: bool = False,
               largest: bool = True, name: str | None = None) -> Tensor:
    """ONNX ArgMax (largest) / ArgMin as int64: the first (or last) index of the extreme
    value along `axis`; two reductions (the extreme, then the index where it occurs)."""
    op = "argmax" if largest else "argmin"
    check_tensor(op, x)
    axis = normalize_axis(op, x.name, axis, x.ndim)
    r = reduce_axis(x.shape[axis], "r")
    out_shape = tuple(1 if d == axis else n for d, n in enumerate(x.shape)
                      if keepdims or d != axis)

    def reads(p):
        it = iter(p)
        out = []
        for d in range(x.ndim):
            if d == axis:
                if keepdims:
                    next(it)
                out.append(r)
            else:
                out.append(next(it))
        return out

    best = compute(out_shape, lambda *p: (T.max if largest else T.min)(x(*reads(p)), axis=r),
                   name=f"{name or op}_value", tag=REDUCTION)
    pick = T.max if select_last else T.min
    return compute(out_shape, lambda *p: pick(E.cast(r, "int64"), axis=r, where=x(
        *reads(p)).eq(best(*p))), name=name or op, tag=REDUCTION)

