"""Simplifier for index arithmetic: integer expressions to a canonical linear form.

Integer Add/Sub/Mul trees become sum(coef * atom) + const with atoms in first-appearance
order, which cancels terms like (io*32 + ii) - io*32 -> ii. Rules that need no range facts:
  floordiv(c*x + r, c) -> x + floordiv(r, c)       (the terms divisible by c > 0 move out)
  floormod(c*x + r, c) -> floormod(r, c)           (drop terms divisible by c > 0)
With loop ranges, for g dividing c and 0 <= r < g (r from the ranges):
  floordiv(g*y + r, c) -> floordiv(y, c/g);  floormod(g*y + r, c) -> g*floormod(y, c/g) + r
  m*c*floordiv(x, c) + m*floormod(x, c) -> m*x     (a split index joined again: a reshape
                                                    of a reshape reads contiguous memory)
  min(a, b) / max(a, b) -> a or b                  (sign of a - b known)
  a < b -> true/false                              (sign of a - b known from constants or
                                                    the loop ranges given to simplify)
  select(true, a, b) -> a; comparisons and logic of constants fold.
"""
from __future__ import annotations

from ..te import dtype as dt
from ..te.expr import (EQ, LE, LT, NE, Add, And, Cast, Expr, FloorDiv, FloorMod, IntImm, Max,
                       Min, Mul, Not, Or, Select, Sub, const)
from ..te.visit import ExprMutator

Linear = tuple[dict, int]  # ({atom: coef}, constant)


def _linear(e: Expr, simp: "_Simplifier") -> Linear:
    """Linear form of an integer expression (atoms are simplified non-linear subexprs)."""
    t = type(e)
    if t is IntImm:
        return {}, e.value
    if t is Add or t is Sub:
        (ta, ka), (tb, kb) = _linear(e.a, simp), _linear(e.b, simp)
        sign = 1 if t is Add else -1
        terms = dict(ta)
        for atom, c in tb.items():
            terms[atom] = terms.get(atom, 0) + sign * c
        return {a: c for a, c in terms.items() if c != 0}, ka + sign * kb
    if t is Mul:
        (ta, ka), (tb, kb) = _linear(e.a, simp), _linear(e.b, simp)
        if not tb:
            return ({a: c * kb for a, c in ta.items() if c * kb != 0}, ka * kb)
        if not ta:
            return ({a: c * ka for a, c in tb.items() if c * ka != 0}, ka * kb)
    atom = simp.visit_atom(e)
    if isinstance(atom, IntImm):
        return {}, atom.value
    if type(atom) in (Add, Sub, Mul) and atom is not e:
        return _linear(atom, simp)
    return {atom: 1}, 0


def _rebuild(terms: dict, k: int, dtype: str) -> Expr:
    result = None
    for atom, c in terms.items():
        if c > 0:
            term = atom if c == 1 else Mul(dtype, atom, const(c, dtype))
            result = term if result is None else Add(dtype, result, term)
    for atom, c in terms.items():
        if c < 0:
            term = atom if c == -1 else Mul(dtype, atom, const(-c, dtype))
            result = Sub(dtype, const(0, dtype) if result is None else result, term)
    if result is None:
        return const(k, dtype)
    if k > 0:
        return Add(dtype, result, const(k, dtype))
    if k < 0:
        return Sub(dtype, result, const(-k, dtype))
    return result


def _join_div_mod(terms: dict, k: int, simp) -> Linear:
    """m*c*floordiv(x, c) + m*floormod(x, c) -> m*x, for every such pair in `terms`."""
    mods = [(a, v) for a, v in terms.items() if type(a) is FloorMod and
            isinstance(a.b, IntImm) and a.b.value > 0]
    for mod, m in mods:
        div = FloorDiv(mod.dtype, mod.a, mod.b)
        if terms.get(div) != m * mod.b.value or terms.get(mod) != m:
            continue
        del terms[div], terms[mod]
        x_terms, x_k = _linear(mod.a, simp)
        k += m * x_k
        for a, v in x_terms.items():
            terms[a] = terms.get(a, 0) + m * v
        terms = {a: v for a, v in terms.items() if v != 0}
    return terms, k


class _Simplifier(ExprMutator):
    """`ranges` maps loop variables to inclusive integer bounds, enabling range-based rules."""

    def __init__(self, ranges: dict | None = None):
        super().__init__()
        self.ranges = ranges if ranges is not None else {}

    def visit_atom(self, e: Expr) -> Expr:
        """Simplify a non-linear node's children (and the node itself by its rule)."""
        return super().visit(e) if type(e) not in (Add, Sub, Mul) else self.generic_visit(e)

    def _linear_visit(self, e: Expr) -> Expr:
        if not dt.is_int(e.dtype):
            return self.generic_visit(e)
        terms, k = _join_div_mod(*_linear(e, self), self)
        return _rebuild(terms, k, e.dtype)

    visit_Add = visit_Sub = visit_Mul = _linear_visit

    def visit_FloorDiv(self, e: FloorDiv) -> Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        if isinstance(b, IntImm) and b.value > 0:
            c = b.value
            if c == 1:
                return a
            terms, k = _linear(a, self)
            if isinstance(a, IntImm):
                return const(a.value // c, e.dtype)
            if all(v % c == 0 for v in terms.values()):
                return _rebuild({t: v // c for t, v in terms.items()}, k // c, e.dtype)
            split = (self._split_remainder(terms, k, c, e.dtype)
                     or self._split_coarse(terms, k, c, e.dtype))
            if split is not None:
                return split[0]
            outside = {t: v // c for t, v in terms.items() if v % c == 0}
            if outside or k // c:       # floor((c*q + r) / c) = q + floor(r / c), any r
                rest = {t: v for t, v in terms.items() if v % c != 0}
                inner = FloorDiv(e.dtype, _rebuild(rest, k % c, e.dtype), b)
                inner_terms, inner_k = _linear(self.visit(inner), self)
                for atom, v in inner_terms.items():
                    outside[atom] = outside.get(atom, 0) + v
                return _rebuild({t: v for t, v in outside.items() if v}, k // c + inner_k,
                                e.dtype)
        return e if (a is e.a and b is e.b) else FloorDiv(e.dtype, a, b)

    def _split_remainder(self, terms: dict, k: int, c: int, dtype: str):
        """(quotient, remainder) when terms = c*q + r with r provably in [0, c) (needs ranges).

        floordiv(c*q + r, c) -> q and floormod(c*q + r, c) -> r when 0 <= r < c.
        """
        if not self.ranges:
            return None
        quotient = {t: v // c for t, v in terms.items() if v % c == 0}
        rest = {t: v for t, v in terms.items() if v % c != 0}
        q_const, r_const = divmod(k, c)
        remainder = _rebuild(rest, r_const, dtype)
        from .bound import const_interval
        bounds = const_interval(remainder, self.ranges)
        if bounds is None or bounds[0] < 0 or bounds[1] >= c:
            return None
        return _rebuild(quotient, q_const, dtype), remainder

    def _split_coarse(self, terms: dict, k: int, c: int, dtype: str):
        """(floordiv(y, c/g), g*floormod(y, c/g) + r) for x = g*y + r, g a proper divisor
        of c shared by the large terms and 0 <= r < g (needs ranges): an index fused and
        split by a factor that divides the reshape's extents (i + 48*f over rows of 96).

        floordiv(g*y + r, c) = floordiv(y, c/g) and floormod(g*y + r, c) =
        g*floormod(y, c/g) + r, since floor((g*y + r)/g) = y when 0 <= r < g."""
        if not self.ranges:
            return None
        from math import gcd
        candidates, common = {gcd(c, v) for v in terms.values()}, c
        for v in sorted(terms.values(), key=abs, reverse=True):  # the large terms' divisor
            common = gcd(common, v)
            candidates.add(common)
        for g in sorted(candidates - {c, 1}, reverse=True):
            split = self._split_remainder(terms, k, g, dtype)
            if split is None:
                continue
            y, r = split
            n = const(c // g, dtype)
            div = self.visit(FloorDiv(dtype, y, n))
            mod = self.visit(Add(dtype, Mul(dtype, FloorMod(dtype, y, n), const(g, dtype)), r))
            return div, mod
        return None

    def visit_FloorMod(self, e: FloorMod) -> Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        if isinstance(b, IntImm) and b.value > 0:
            c = b.value
            if c == 1:
                return const(0, e.dtype)
            terms, k = _linear(a, self)
            kept = {t: v for t, v in terms.items() if v % c != 0}
            if not kept:
                return const(k % c, e.dtype)
            split = (self._split_remainder(terms, k, c, e.dtype)
                     or self._split_coarse(terms, k, c, e.dtype))
            if split is not None:
                return split[1]
            if len(kept) != len(terms) or k % c != k:
                a = _rebuild(kept, k % c, e.dtype)
        return e if (a is e.a and b is e.b) else FloorMod(e.dtype, a, b)

    def _diff_bounds(self, a: Expr, b: Expr) -> tuple[int, int] | None:
        """Integer bounds of a - b: exact when constant, else from the loop ranges."""
        diff = self.visit(Sub(a.dtype, a, b))
        if isinstance(diff, IntImm):
            return diff.value, diff.value
        if not self.ranges:
            return None
        from .bound import const_interval
        return const_interval(diff, self.ranges)

    def _minmax(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        if dt.is_int(e.dtype):
            bounds = self._diff_bounds(a, b)
            if bounds is not None and (bounds[1] <= 0 or bounds[0] >= 0):
                pick_a = (bounds[1] <= 0) == (type(e) is Min)
                return a if pick_a else b
        return e if (a is e.a and b is e.b) else type(e)(e.dtype, a, b)

    visit_Min = visit_Max = _minmax

    def _compare(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        if dt.is_int(a.dtype):
            bounds = self._diff_bounds(a, b)
            if bounds is not None:
                lo, hi = bounds
                t = type(e)
                if (t is LT and hi < 0) or (t is LE and hi <= 0) or (t is EQ and lo == hi == 0) \
                        or (t is NE and (lo > 0 or hi < 0)):
                    return const(True, "bool")
                if (t is LT and lo >= 0) or (t is LE and lo > 0) or (t is NE and lo == hi == 0) \
                        or (t is EQ and (lo > 0 or hi < 0)):
                    return const(False, "bool")
        return e if (a is e.a and b is e.b) else type(e)("bool", a, b)

    visit_LT = visit_LE = visit_EQ = visit_NE = _compare

    def visit_And(self, e: And) -> Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        for x, y in ((a, b), (b, a)):
            if isinstance(x, IntImm):
                return y if x.value else x  # true && y -> y; false && y -> false
        return e if (a is e.a and b is e.b) else And("bool", a, b)

    def visit_Or(self, e: Or) -> Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        for x, y in ((a, b), (b, a)):
            if isinstance(x, IntImm):
                return x if x.value else y  # true || y -> true; false || y -> y
        return e if (a is e.a and b is e.b) else Or("bool", a, b)

    def visit_Not(self, e: Not) -> Expr:
        a = self.visit(e.a)
        if isinstance(a, IntImm):
            return const(not a.value, "bool")
        return e if a is e.a else Not("bool", a)

    def visit_Select(self, e: Select) -> Expr:
        cond = self.visit(e.cond)
        if isinstance(cond, IntImm):
            return self.visit(e.t if cond.value else e.f)
        t, f = self.visit(e.t), self.visit(e.f)
        if t == f:
            return t
        return e if (cond is e.cond and t is e.t and f is e.f) else Select(e.dtype, cond, t, f)

    def visit_Cast(self, e: Cast) -> Expr:
        v = self.visit(e.value)
        if isinstance(v, IntImm) and dt.is_int(e.dtype):
            return const(v.value, e.dtype)
        return e if v is e.value else Cast(e.dtype, v)


def simplify(expr: Expr, ranges: dict | None = None) -> Expr:
    """Canonicalise integer index arithmetic and fold constants; floats are left as written.

    With `ranges` ({Var: (lo, hi)}), floordiv/floormod by c split off a remainder known to
    lie in [0, c)."""
    return _Simplifier(ranges)(expr)


class Simplifier(_Simplifier):
    """A reusable simplifier whose memo table persists across calls (for whole functions)."""
