"""Interval analysis of integer index expressions (bound inference for compute_at and guards).

`interval(e, ranges)` returns symbolic (lo, hi) expressions, inclusive, valid for every value of
the varying variables in `ranges`; variables not in `ranges` are held fixed (they stay symbolic).
It returns None when it cannot bound the expression (a load, a product of two varying terms).
"""
from __future__ import annotations

from ..te import dtype as dt
from ..te.expr import (Add, Cast, Expr, FloorDiv, FloorMod, IntImm, Max, Min, Mul, Select, Sub,
                       Var, maximum, minimum)
from .simplify import simplify

Interval = tuple[Expr, Expr]


def interval(e: Expr, ranges: dict[Var, tuple[int, int]]) -> Interval | None:
    """Inclusive bounds of integer expression `e` when each var in `ranges` spans [lo, hi]."""
    result = _Bounds(ranges).bound(e)
    if result is None:
        return None
    return simplify(result[0]), simplify(result[1])


def const_interval(e: Expr, ranges: dict[Var, tuple[int, int]]) -> tuple[int, int] | None:
    """Integer bounds of `e`, or None if some variable is unbounded or the form is too complex."""
    result = interval(e, ranges)
    if result is None or not all(isinstance(x, IntImm) for x in result):
        return None
    return result[0].value, result[1].value


def _is_point(iv: Interval) -> bool:
    return iv[0] == iv[1]


class _Bounds:
    def __init__(self, ranges):
        self.ranges = ranges
        self.memo: dict[Expr, Interval | None] = {}

    def bound(self, e: Expr) -> Interval | None:
        if e not in self.memo:
            self.memo[e] = self._bound(e)
        return self.memo[e]

    def _bound(self, e: Expr) -> Interval | None:
        t = type(e)
        if t is IntImm:
            return e, e
        if t is Var:
            if e in self.ranges:
                lo, hi = self.ranges[e]
                return IntImm(e.dtype, lo), IntImm(e.dtype, hi)
            return e, e
        if t is Cast:
            if dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
                inner = self.bound(e.value)
                return None if inner is None else (Cast(e.dtype, inner[0]),
                                                   Cast(e.dtype, inner[1]))
            return None
        if t in (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max):
            a, b = self.bound(e.a), self.bound(e.b)
            if a is None or b is None:
                return None
            if _is_point(a) and _is_point(b):
                return e.__class__(e.dtype, a[0], b[0]), e.__class__(e.dtype, a[0], b[0])
            return self._arith(t, e, a, b)
        if t is Select:
            a, b = self.bound(e.t), self.bound(e.f)
            if a is None or b is None:
                return None
            return minimum(a[0], b[0]), maximum(a[1], b[1])
        return None

    def _arith(self, t, e: Expr, a: Interval, b: Interval) -> Interval | None:
        if t is Add:
            return a[0] + b[0], a[1] + b[1]
        if t is Sub:
            return a[0] - b[1], a[1] - b[0]
        if t is Min:
            return minimum(a[0], b[0]), minimum(a[1], b[1])
        if t is Max:
            return maximum(a[0], b[0]), maximum(a[1], b[1])
        if t is Mul:
            for x, c in ((a, b), (b, a)):
                if _is_point(c) and isinstance(c[0], IntImm):
                    k = c[0].value
                    return (x[0] * k, x[1] * k) if k >= 0 else (x[1] * k, x[0] * k)
            return None
        if not (_is_point(b) and isinstance(b[0], IntImm) and b[0].value > 0):
            return None
        c = b[0].value
        if t is FloorDiv:
            return a[0] // c, a[1] // c
        # FloorMod: exact when the whole range sits inside one period
        lo_q, hi_q = simplify(a[0] // c), simplify(a[1] // c)
        if lo_q == hi_q:
            return a[0] % c, a[1] % c
        return IntImm(e.dtype, 0), IntImm(e.dtype, c - 1)


def prove_less(e: Expr, bound: int, ranges: dict[Var, tuple[int, int]]) -> bool:
    """True when e < bound for every value of the ranged variables (False if unknown)."""
    result = const_interval(e, ranges)
    return result is not None and result[1] < bound


def prove_nonnegative(e: Expr, ranges: dict[Var, tuple[int, int]]) -> bool:
    result = const_interval(e, ranges)
    return result is not None and result[0] >= 0
