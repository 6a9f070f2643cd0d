"""Facts about loop-IR expressions that the loop-IR passes (schedule/passes) and codegen
both ask: the variables an expression reads and its stride along a vector lane."""
from __future__ import annotations

import functools

from ..te import expr as E
from ..te.visit import child_exprs


@functools.lru_cache(maxsize=1 << 16)
def free_vars(e: E.Expr) -> frozenset:
    """te.visit.free_vars as a frozenset, remembered and built from the children's (a walk
    per node was quadratic on the shared sub-expressions of a Winograd transform): every load
    and store asks it about its index, lane_stride about each sub-index and emission-time
    sharing about every node. Expressions hash once (cached), so the look-up is cheap."""
    if isinstance(e, E.Var):
        return frozenset((e,))
    out = frozenset()
    for c in child_exprs(e):
        out = out | free_vars(c)
    return out


def lane_stride(index: E.Expr, var: E.Var) -> int | None:
    """c when `index` is (terms free of var) + c*var, else None (a non-linear use)."""
    if var not in free_vars(index):
        return 0
    if isinstance(index, E.Var):
        return 1
    if isinstance(index, (E.Add, E.Sub)):
        a, b = lane_stride(index.a, var), lane_stride(index.b, var)
        if a is None or b is None:
            return None
        return a + b if isinstance(index, E.Add) else a - b
    if isinstance(index, E.Mul):
        for x, y in ((index.a, index.b), (index.b, index.a)):
            if isinstance(y, E.IntImm):
                s = lane_stride(x, var)
                return None if s is None else s * y.value
    return None
