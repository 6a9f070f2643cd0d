"""Loops of extent 1 inlined: their variable bound to the loop's start."""
from __future__ import annotations

from ...te import expr as E
from ...te.visit import substitute
from ..analysis import free_vars as _free_vars
from ..ir import For, Stmt
from ..simplify import simplify
from ..visitor import StmtMutator


class _UnitLoopRemover(StmtMutator):
    """Inlines the body of every loop of extent 1, its variable bound to the loop's start.
    Tiling leaves many such loops (a split by the whole extent, a fused axis of one point);
    emitted as LLVM loops they deepen the nest that every SCEV-based loop pass
    (IndVarSimplify, LICM, LoopIdiomRecognize, full unrolling) walks per level, for code that
    runs once.

    PARALLEL ones too: kept, such a loop became an outlined body looping over the runtime's
    [begin, end) range, whose buffer pointers (loaded from the closure) carry no noalias. A
    reduction of a whole small tensor (ReduceMax of 5x5 to 1x1, fully unrolled) then sat in
    that loop as a chain of loop-invariant compare/select steps that LICM could not hoist
    past the output's store, and LLVM's loop vectoriser (VPlan's vputils::isSingleScalar,
    which revisits shared operands) walked it in time exponential in its length: 16 elements
    0.8 s, 20 elements 22 s, 25 elements 25+ minutes (tests/codegen/test_compile_time.py)."""

    def __init__(self):
        self.mapping: dict[E.Var, E.Expr] = {}
        # rewritten expressions under the current mapping (cleared when it changes): the
        # same index expressions recur in every statement of a tile
        self.done: dict[E.Expr, E.Expr] = {}

    def visit_expr(self, expr: E.Expr) -> E.Expr:
        if not self.mapping:
            return expr
        found = self.done.get(expr)
        if found is not None:
            return found
        if self.mapping.keys().isdisjoint(_free_vars(expr)):
            new = expr
        else:
            new = substitute(expr, self.mapping)
            new = expr if new is expr else simplify(new)
        self.done[expr] = new
        return new

    def visit_For(self, loop: For) -> Stmt:
        if not isinstance(loop.extent, E.IntImm) or loop.extent.value != 1:
            return self.generic_visit(loop)
        self.mapping[loop.loop_var] = self.visit_expr(loop.min)
        self.done = {}
        try:
            return self.visit(loop.body)
        finally:
            del self.mapping[loop.loop_var]
            self.done = {}


def remove_unit_loops(stmt: Stmt) -> Stmt:
    """`stmt` without its loops of extent 1, of any kind (see _UnitLoopRemover);
    the same object when it has none."""
    return _UnitLoopRemover()(stmt)
