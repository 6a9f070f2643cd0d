"""The clean-up passes that end lowering: simplify every expression knowing its loops' ranges,
then drop the guards that became constants."""
from __future__ import annotations

from ...te.expr import IntImm
from ..ir import For, IfThenElse, seq
from ..simplify import Simplifier
from ..visitor import StmtExprMutator, StmtMutator


class _SimplifyStmt(StmtExprMutator):
    """Simplify every expression, knowing the range of every enclosing loop variable."""

    def visit_For(self, loop: For):
        if isinstance(loop.min, IntImm) and isinstance(loop.extent, IntImm):
            lo = loop.min.value
            self.expr_mutator.ranges[loop.loop_var] = (lo, lo + loop.extent.value - 1)
        return self.generic_visit(loop)


def simplify_stmt(stmt):
    return _SimplifyStmt(Simplifier({}))(stmt)


class DropTrivialGuards(StmtMutator):
    def visit_IfThenElse(self, node: IfThenElse):
        node = self.generic_visit(node)
        if isinstance(node.cond, IntImm):
            return node.then_case if node.cond.value else (node.else_case or seq())
        return node
