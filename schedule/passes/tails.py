"""Tail splitting: a guarded tile loop becomes a whole-tile copy and one tail copy.

Lowering guards every point of a tile that overhangs its axis: a register tile of 6 rows
over 28 columns is

    for t in unrolled(6):
        if base + t < 28:          # base = i3.outer * 12 + xx.outer * 6
            body

six guarded copies of `body`, which LLVM then unswitches and unrolls again (the guarded
update, prologue and epilogue of a conv's register tile were a quarter of its IR). When
every term of `base` that varies is a multiple of the tile's extent n, `28 - base` modulo n
is a constant c, so a tile is either whole, or has exactly c points, or none:

    if base + 5 < 28:
        for t in unrolled(6): body
    else if base < 28:
        for t in unrolled(c): body     # c = 4 here

`split_tails` makes that rewrite for UNROLLED and SERIAL loops of constant extent whose
whole body is one such guard, and for VECTORIZED ones (the tail a narrower vector). Where
codegen masks a partial vector (codegen/masked_tail.py, `masked_vector_tails`), a vector loop
is split only inside at least MIN_COPIES_TO_SPLIT_VECTORS unrolled copies: a guard per lane
inside a register tile's unrolled reduction taps cost a generic conv over 19 columns 97 s of
LLVM (split: 4 s), while a short masked vector is as cheap to compile and ran 20% faster than
a split one in small attention matmuls (benchmarks/kernel_ab.py on a Swin). Without masking,
a partial vector runs as a scalar loop over its lanes, the register tile's whole reduction
included, so every such vector loop is split: 16 x (64x64 @ 64x17) 0.39 -> 0.04 ms, 1 thread
(benchmarks/RESULTS.md, "GEMM column tails"). Other terms of the guard's conjunction, free of
t, go to both conditions. Under a branch that already decided the whole-tile test (register
promotion emits `if whole: <unguarded tile> else: <guarded tile>`), the dead copy is left
out. Loops it cannot prove this for keep their guards.
"""
from __future__ import annotations

from ..ir import For, ForKind, IfThenElse, Stmt, seq
from ..simplify import simplify
from ..visitor import StmtMutator
from ...te import expr as E
from ..analysis import free_vars
from .promote import _buffer_loads, _conjuncts, _linear_coefficients

# A SERIAL loop longer than this keeps its guard: its body is emitted once either way and
# the copy would double it for a branch per iteration (LLVM unrolls short ones fully).
MAX_SERIAL_SPLIT = 16
# with masked partial vectors, a guarded vector loop is split only inside this many unrolled
# copies of it (see above)
MIN_COPIES_TO_SPLIT_VECTORS = 32


def split_tails(stmt: Stmt, masked_vector_tails: bool = False) -> Stmt:
    """`stmt` with every provable tile tail split off (see the module docstring);
    `masked_vector_tails`: codegen runs a partial vector masked, not lane by lane."""
    return _Splitter(masked_vector_tails)(stmt)


class _Splitter(StmtMutator):
    def __init__(self, masked_vector_tails: bool):
        self.known: dict[E.Expr, bool] = {}     # conditions decided by enclosing branches
        self.copies = 1                         # product of the enclosing unrolled extents
        # a partial vector left guarded: masked (cheap) or lane by lane (not)
        self.min_vector_copies = MIN_COPIES_TO_SPLIT_VECTORS if masked_vector_tails else 1

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        if _buffer_loads(node.cond):        # may change between two tests: not a fact
            return self.generic_visit(node)
        cond = simplify(node.cond)
        if cond in self.known:
            taken = node.then_case if self.known[cond] else node.else_case
            return self.visit(taken) if taken is not None else seq()
        then_case = self._under(cond, True, node.then_case)
        else_case = (None if node.else_case is None
                     else self._under(cond, False, node.else_case))
        if then_case is node.then_case and else_case is node.else_case:
            return node
        return IfThenElse(node.cond, then_case, else_case)

    def _under(self, cond: E.Expr, value: bool, stmt: Stmt) -> Stmt:
        self.known[cond] = value
        try:
            return self.visit(stmt)
        finally:
            del self.known[cond]

    def visit_For(self, loop: For) -> Stmt:
        split = None if (loop.kind is ForKind.VECTORIZED and
                         self.copies < self.min_vector_copies) else _split(loop)
        if split is not None:
            return self.visit(split)
        if loop.kind is not ForKind.UNROLLED or not isinstance(loop.extent, E.IntImm):
            return self.generic_visit(loop)
        outer = self.copies
        self.copies = outer * loop.extent.value
        try:
            return self.generic_visit(loop)
        finally:
            self.copies = outer


def _split(loop: For) -> Stmt | None:
    """The rewrite of `loop` as whole-tile / tail / nothing, or None when it does not apply."""
    if loop.kind not in (ForKind.UNROLLED, ForKind.SERIAL, ForKind.VECTORIZED):
        return None
    if not (isinstance(loop.min, E.IntImm) and loop.min.value == 0
            and isinstance(loop.extent, E.IntImm)):
        return None
    n = loop.extent.value
    if n < 2 or (loop.kind is ForKind.SERIAL and n > MAX_SERIAL_SPLIT):
        return None
    guard = loop.body
    if not isinstance(guard, IfThenElse) or guard.else_case is not None:
        return None
    t = loop.loop_var
    outer, tile = [], []
    for term in _conjuncts(guard.cond):
        (tile if t in free_vars(term) else outer).append(term)
    if len(tile) != 1 or not isinstance(tile[0], E.LT):
        return None
    term = tile[0]
    if t in free_vars(term.b) or _linear_coefficients(term.a, {t}) != {t: 1}:
        return None
    base = simplify(term.a - t)
    if t in free_vars(base):
        return None
    room = simplify(term.b - base)              # points of this tile in range: min(n, room)
    tail = _constant_residue(room, n)
    if tail is None:
        return None
    whole = simplify(E.all_of(*outer, E.LT(term.dtype, simplify(base + (n - 1)), term.b)))
    body = guard.then_case
    full = For(t, loop.min, loop.extent, loop.kind, body)
    if tail == 0:                               # a tile is whole or wholly out of range
        return IfThenElse(whole, full)
    some = simplify(E.all_of(*outer, E.LT(term.dtype, base, term.b)))
    part = For(t, loop.min, E.const(tail, loop.extent.dtype), loop.kind, body)
    return IfThenElse(whole, full, IfThenElse(some, part))


def _constant_residue(expr: E.Expr, n: int) -> int | None:
    """`expr` modulo n when that is the same for every value of its variables (each variable
    term's coefficient a multiple of n), else None."""
    if expr.dtype not in ("int32", "int64"):
        return None
    variables = set(free_vars(expr))
    coeffs = _linear_coefficients(expr, variables) if variables else {}
    if coeffs is None or set(coeffs) != variables or any(c % n for c in coeffs.values()):
        return None
    constant = simplify(_substitute_zero(expr, variables))
    if not isinstance(constant, E.IntImm):
        return None
    return constant.value % n


def _substitute_zero(expr: E.Expr, variables: set) -> E.Expr:
    from ...te.visit import substitute
    return substitute(expr, {v: E.const(0, v.dtype) for v in variables})
