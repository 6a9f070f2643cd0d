"""Lane-uniform selects become branches, so the loads they guard stay contiguous.

A concatenation along the vectorized axis reads each input through a select chain, every
read clamped so that the dead branch stays in bounds (te/ops/transform.concatenate):

    for v in vectorized(64):
        out[o*64 + v] = select(floormod(o, 4)*64 + v < 64, A[min(floormod(o, 4)*64 + v, 63) + ...],
                        select(floormod(o, 4)*64 + v < 192, B[min(max(... - 64, 0), 127) + ...],
                        ...))

A vector select evaluates both sides and the clamp hides the index's lane stride, so every
input was read lane by lane (a GoogLeNet inception concat + QuantizeLinear: 256 scalar loads,
1.2 s of LLVM). When a condition that depends on the lanes is nevertheless the same in all of
them (`base + v < C` with `C - base` a known multiple of the vector width: no vector straddles
the boundary), the select is decided once per vector: the Store becomes

    if floormod(o, 4)*64 < 64:  out[...] = A[...]   # the clamps proved redundant, dropped
    else: ...

Each branch knows its conditions for every lane (`floormod(o, 4)*64 + v` is in [64, 192) for
B), which proves the clamps min/max of its indices redundant; without them the loads are
contiguous. A condition not provably uniform stays a select, whose sides are computed for
all lanes; there a clamped load whose clamp the select's condition proves redundant in the
lanes that take that side becomes a GuardedLoad: a contiguous load of the unclamped index
masked by the condition (llvm.masked.load: a dead lane reads nothing, so it cannot leave
the buffer), e.g. the inputs on both sides of a boundary inside a vector.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..ir import BufferLoad, For, ForKind, IfThenElse, Stmt, Store, ir_node
from ..simplify import simplify
from ..visitor import StmtMutator
from ...te import expr as E
from ...te.visit import ExprMutator, child_exprs, substitute, walk
from ..analysis import free_vars as _free_vars
from ..analysis import lane_stride

# Copies of one Store at most (a branch per uniform select doubles the statement; a chain of
# k concatenated inputs gives k copies, k independent selects 2**k).
MAX_COPIES = 16
# Off (False): the pass returns its input (for A/B runs: benchmarks/concat_ab.py).
ENABLED = True


def branch_uniform_selects(stmt: Stmt) -> Stmt:
    """`stmt` with the lane-uniform selects of its vectorized Stores made branches (see the
    module docstring); an equal statement when there are none."""
    return _Brancher()(stmt) if ENABLED else stmt


@ir_node
class GuardedLoad(BufferLoad):
    """buffer[index] in the lanes where `mask` holds (index in bounds there; other lanes'
    values are unspecified and unused): a masked contiguous vector load. Codegen-internal,
    made by this pass after lowering; emitted as `safe` (the original, clamped load)
    wherever it is not a stride-1 vector load."""

    mask: E.Expr
    safe: BufferLoad


class _Brancher(StmtMutator):
    def __init__(self):
        self.lanes: For | None = None

    def visit_For(self, loop: For) -> Stmt:
        if (loop.kind is not ForKind.VECTORIZED or not isinstance(loop.extent, E.IntImm)
                or not isinstance(loop.min, E.IntImm)):
            return self.generic_visit(loop)
        outer, self.lanes = self.lanes, loop
        try:
            return self.generic_visit(loop)
        finally:
            self.lanes = outer

    def visit_Store(self, node: Store) -> Stmt:
        if self.lanes is None or not _has_select(node.value):
            return node
        out = _branch(node, self.lanes, (), [MAX_COPIES - 1])
        return node if out is None else out


def _has_select(e: E.Expr) -> bool:
    return any(isinstance(n, E.Select) for n in walk(e))


# ------------------------------------------------------------------ uniformity
def multiple_of(e: E.Expr) -> int:
    """The largest k this analysis proves divides every value of integer `e` (0: e is 0)."""
    if isinstance(e, E.IntImm):
        return abs(e.value)
    if isinstance(e, (E.Add, E.Sub, E.Min, E.Max)):
        return math.gcd(multiple_of(e.a), multiple_of(e.b))
    if isinstance(e, E.Mul):
        return multiple_of(e.a) * multiple_of(e.b)
    if isinstance(e, E.FloorMod) and isinstance(e.b, E.IntImm) and e.b.value != 0:
        return math.gcd(multiple_of(e.a), abs(e.b.value))
    if isinstance(e, E.FloorDiv) and isinstance(e.b, E.IntImm) and e.b.value != 0:
        m = multiple_of(e.a)
        return m // abs(e.b.value) if m and m % e.b.value == 0 else (0 if m == 0 else 1)
    return 1


def _negative_part(cond: E.Expr):
    """`cond` as `d < 0` with d an int expression: d, or None for other conditions."""
    if isinstance(cond, E.LT) and cond.a.dtype in ("int32", "int64"):
        return simplify(cond.a - cond.b)
    if isinstance(cond, E.LE) and cond.a.dtype in ("int32", "int64"):
        return simplify(cond.a - cond.b - 1)
    return None


def is_lane_uniform(cond: E.Expr, loop: For) -> bool:
    """True when `cond` has one value across the lanes of vectorized `loop` at every point:
    free of its variable, or `base + v < 0` with base a known multiple of the lane count
    (a vector starts on the boundary: never straddles it), or a combination of such."""
    v = loop.loop_var
    if v not in _free_vars(cond):
        return True
    if isinstance(cond, (E.And, E.Or)):
        return is_lane_uniform(cond.a, loop) and is_lane_uniform(cond.b, loop)
    if isinstance(cond, E.Not):
        return is_lane_uniform(cond.a, loop)
    d = _negative_part(cond)
    if d is None or lane_stride(d, v) != 1:
        return False
    base = simplify(substitute(d, {v: loop.min}))
    m = multiple_of(base)
    return m == 0 or m % loop.extent.value == 0


# ------------------------------------------------------------------ branching
def _first_uniform_select(e: E.Expr, loop: For):
    """The outermost select of `e` whose condition depends on the lanes and is uniform."""
    stack = [e]
    seen = set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, E.Select) and loop.loop_var in _free_vars(node.cond) and \
                is_lane_uniform(node.cond, loop):
            return node
        stack.extend(reversed(list(child_exprs(node))))
    return None


def _branch(node: Store, loop: For, facts: tuple, budget: list) -> Stmt | None:
    """`node` with its first uniform select a branch, recursively, and its loads under the
    other selects guarded; None when nothing changes."""
    sel = _first_uniform_select(node.value, loop)
    if sel is None or budget[0] <= 0:
        value = _Guard(loop, facts)(node.value)
        return None if value is node.value else replace(node, value=value)
    budget[0] -= 1
    taken = _Replace(sel, sel.t)(node.value)
    other = _Replace(sel, sel.f)(node.value)
    cases = []
    for value, extra in ((taken, _facts(sel.cond, True)), (other, _facts(sel.cond, False))):
        known = facts + extra
        value = _Unclamp(known)(value)
        store = replace(node, value=value)
        deeper = _branch(store, loop, known, budget)
        cases.append(store if deeper is None else deeper)
    scalar = simplify(substitute(sel.cond, {loop.loop_var: loop.min}))
    return IfThenElse(scalar, cases[0], cases[1])


def _facts(cond: E.Expr, value: bool) -> tuple:
    """(key, lo, hi) ranges that hold for every lane when `cond` is `value`."""
    if isinstance(cond, E.Not):
        return _facts(cond.a, not value)
    if isinstance(cond, E.And) and value:
        return _facts(cond.a, True) + _facts(cond.b, True)
    if isinstance(cond, E.Or) and not value:
        return _facts(cond.a, False) + _facts(cond.b, False)
    d = _negative_part(cond)
    if d is None:
        return ()
    return ((d, None, -1),) if value else ((d, 0, None),)


class _Replace(ExprMutator):
    def __init__(self, old: E.Expr, new: E.Expr):
        super().__init__()
        self.memo[old] = new


class _Unclamp(ExprMutator):
    """Drops min(x, c) / max(x, c) that the known ranges prove never clamp."""

    def __init__(self, facts: tuple):
        super().__init__()
        self.facts = facts

    def _range(self, x: E.Expr):
        lo = hi = None
        for key, klo, khi in self.facts:
            if key.dtype != x.dtype:
                continue
            for sign in (1, -1):            # x = key + k, or x = k - key (0 <= a: -a - 1 < 0)
                k = simplify(x - key if sign == 1 else x + key)
                if not isinstance(k, E.IntImm):
                    continue
                low, high = (klo, khi) if sign == 1 else (
                    None if khi is None else -khi, None if klo is None else -klo)
                if low is not None:
                    lo = low + k.value if lo is None else max(lo, low + k.value)
                if high is not None:
                    hi = high + k.value if hi is None else min(hi, high + k.value)
                break
        return lo, hi

    def visit_Min(self, e: E.Min) -> E.Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        for x, c in ((a, b), (b, a)):
            if isinstance(c, E.IntImm) and x.dtype in ("int32", "int64"):
                hi = self._range(x)[1]
                if hi is not None and hi <= c.value:
                    return x
        return e if (a is e.a and b is e.b) else E.Min(e.dtype, a, b)

    def visit_Max(self, e: E.Max) -> E.Expr:
        a, b = self.visit(e.a), self.visit(e.b)
        for x, c in ((a, b), (b, a)):
            if isinstance(c, E.IntImm) and x.dtype in ("int32", "int64"):
                lo = self._range(x)[0]
                if lo is not None and lo >= c.value:
                    return x
        return e if (a is e.a and b is e.b) else E.Max(e.dtype, a, b)


class _Guard(ExprMutator):
    """Under a select whose condition depends on the lanes, a load whose clamps the
    conditions on the way down (and the enclosing branches' facts) prove redundant, and
    whose index is contiguous without them, becomes a GuardedLoad masked by those
    conditions."""

    def __init__(self, loop: For, facts: tuple, path: tuple = ()):
        super().__init__()
        self.loop, self.facts, self.path = loop, facts, path

    def visit_Select(self, e: E.Select) -> E.Expr:
        v = self.loop.loop_var
        if v not in _free_vars(e.cond):
            return self.generic_visit(e)
        cond = self.visit(e.cond)
        t = _Guard(self.loop, self.facts + _facts(e.cond, True), self.path + (e.cond,))(e.t)
        f = _Guard(self.loop, self.facts + _facts(e.cond, False),
                   self.path + (E.logical_not(e.cond),))(e.f)
        if cond is e.cond and t is e.t and f is e.f:
            return e
        return E.Select(e.dtype, cond, t, f)

    def visit_BufferLoad(self, e: BufferLoad) -> E.Expr:
        v = self.loop.loop_var
        if not self.path or isinstance(e, GuardedLoad) or lane_stride(e.index, v) == 1:
            return e
        index = _Unclamp(self.facts)(e.index)
        if index is e.index or lane_stride(index, v) != 1:
            return e
        return GuardedLoad(e.dtype, e.buffer, index, E.all_of(*self.path), e)
