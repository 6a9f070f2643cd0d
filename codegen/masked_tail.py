"""Masked vector code for a vector loop's partial tail: `if lane < n: buf[...] = value`.

A guard whose lanes are mixed (a split that does not divide its axis: a MatMul of 24, 40 or
88 columns in 16-lane vectors) ran its statement as a scalar loop over the lanes; a
register tile's whole reduction then ran scalar (x[1024, 96] @ w[96, 24]: 0.66 ms, against
0.05 ms for 32 columns). Here the statement runs once, as vectors, under the guard's lane
mask: contiguous loads and stores of kernel arguments and shared scratch become masked
loads and stores (a masked-off lane reads and writes no memory); a stack buffer read and
written in whole aligned vectors (a register tile's accumulators) keeps plain accesses, so
LLVM still keeps it in registers: its masked-off lanes hold values no valid lane reads.
Statements this cannot prove safe keep the scalar loop (`plan` returns None).

On unless KILN_MASKED_TAILS=0 (read once, at import; part of the model cache's key). It
was off for a while: the merged suite aborted on heap corruption. The cause was LLVM's, not
this plan's: a masked store of a narrow integer whose mask LLVM had folded to one constant
lane was stored at its pre-truncation width (codegen/emit_expr.opaque_mask says how, and
how every masked store now avoids it; tests/codegen/test_masked_tail_guards.py checks that
no kernel writes outside its arrays).
"""
from __future__ import annotations

import os

from ..schedule.analysis import free_vars, lane_stride
from ..schedule.ir import Buffer, BufferLoad, Scope, SeqStmt, Stmt, Store
from ..schedule.passes import GuardedLoad
from ..schedule.visitor import StmtVisitor
from ..te import dtype as dt
from ..te import expr as E
from ..te.visit import child_exprs, substitute
from .emit_expr import strided_load_ok

ENABLED = os.environ.get("KILN_MASKED_TAILS", "1") != "0"


def _stores(stmt: Stmt) -> list[Store] | None:
    if isinstance(stmt, Store):
        return [stmt]
    if isinstance(stmt, SeqStmt) and all(isinstance(s, Store) for s in stmt.stmts):
        return list(stmt.stmts)
    return None


def _multiple_of(e: E.Expr, n: int) -> bool:
    """Whether integer `e` is a multiple of n for every value of its variables."""
    if isinstance(e, E.IntImm):
        return e.value % n == 0
    if isinstance(e, (E.Add, E.Sub)):
        return _multiple_of(e.a, n) and _multiple_of(e.b, n)
    if isinstance(e, E.Mul):
        return _multiple_of(e.a, n) or _multiple_of(e.b, n)
    return False


def _whole_vectors(buf: Buffer, index: E.Expr, var: E.Var, base: E.Expr, count: int) -> bool:
    """A stack buffer accessed in aligned blocks of `count` lanes: every lane of the block
    is in bounds and belongs to the iteration that owns the block's valid lanes."""
    return (buf.scope is Scope.LOCAL and buf.size % count == 0 and _multiple_of(base, count)
            and _multiple_of(substitute(index, {var: E.const(0, index.dtype)}), count))


def _unsafe_division(e: E.Expr) -> bool:
    """An integer division by a value that is not a non-zero constant (a masked-off lane's
    divisor may be 0, and a vector integer division by 0 is undefined)."""
    if isinstance(e, (E.Div, E.FloorDiv, E.FloorMod)) and dt.is_int(e.dtype):
        if not (isinstance(e.b, E.IntImm) and e.b.value != 0):
            return True
    return any(_unsafe_division(c) for c in child_exprs(e))


def _loads(e: E.Expr, out: list) -> list:
    if isinstance(e, BufferLoad):
        out.append(e)
    for c in child_exprs(e):
        _loads(c, out)
    return out


def plan(stmt: Stmt, var: E.Var, base: E.Expr, count: int) -> frozenset | None:
    """The buffers accessed unmasked (aligned stack blocks) when `stmt` can run as one
    masked vector statement over the lane ramp `var`, else None. Every lane-dependent access
    must be contiguous (stride 1), or a load of a small constant stride (its span read under
    the lanes' element mask); values may not divide integers by variables."""
    stores = _stores(stmt)
    if stores is None:
        return None
    plain, masked = set(), set()
    accesses = []
    for s in stores:
        if _unsafe_division(s.value) or _unsafe_division(s.index):
            return None
        if lane_stride(s.index, var) != 1:
            return None
        accesses.append((s.buffer, s.index))
        for load in _loads(s.value, []) + _loads(s.index, []):
            if isinstance(load, GuardedLoad):
                return None
            stride = lane_stride(load.index, var)
            if stride is None or stride not in (0, 1) and not strided_load_ok(stride):
                return None
            if stride == 1:
                accesses.append((load.buffer, load.index))
            elif stride:        # a span read under an element mask (emit_expr._strided_load)
                masked.add(load.buffer)
    for buf, index in accesses:
        (plain if _whole_vectors(buf, index, var, base, count) else masked).add(buf)
    return frozenset(plain - masked)


def buffers(stmt: Stmt) -> set[Buffer]:
    """Every buffer `stmt` (a Store or a sequence of them) reads or writes."""
    out = set()
    for s in _stores(stmt) or ():
        out.add(s.buffer)
        out.update(load.buffer for load in _loads(s.value, []) + _loads(s.index, []))
    return out


class _LoopVars(StmtVisitor):
    def __init__(self):
        self.found = set()

    def visit_For(self, node) -> None:
        self.found.add(node.loop_var)
        self.generic_visit(node)


def loop_vars(stmt: Stmt) -> frozenset:
    """Every loop variable bound inside `stmt` (an Allocate's body)."""
    visitor = _LoopVars()
    visitor(stmt)
    return frozenset(visitor.found)


def steady(cond: E.Expr, var: E.Var, inner: frozenset) -> bool:
    """Whether a guard keeps each element of a stack buffer valid or masked off for the
    buffer's whole life: `cond` reads no loop variable bound inside its Allocate (`inner`)
    but the lane ramp `var`. Then no valid lane ever reads a masked-off one and its store
    needs no select to keep the old value (a matmul tile's column tail: `j0 + lane < n`);
    a scan's `if j <= i`, with i a loop inside, is not steady."""
    return not (free_vars(cond) - {var}) & inner
