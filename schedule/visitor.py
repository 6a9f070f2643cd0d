"""Base classes for loop-IR passes: a read-only StmtVisitor and a rebuilding StmtMutator.

Dispatch is by method name (visit_For, visit_Store, ...), cached per (class, node class).
A mutator returns the same object for a subtree nobody changed.
"""
from __future__ import annotations

import functools
from dataclasses import fields, replace

from ..te.expr import Expr
from ..te.visit import ExprMutator
from ..te.visit import _method_for  # one cached visit_<Node> dispatch for both IR layers
from .ir import Stmt


@functools.cache
def _node_fields(node_cls) -> tuple[str, ...]:
    return tuple(f.name for f in fields(node_cls) if f.compare and f.name != "buffer")


class StmtMutator:
    """Rebuilds statements bottom-up; expressions go through `visit_expr` (identity by default)."""

    def __call__(self, stmt: Stmt) -> Stmt:
        return self.visit(stmt)

    def visit(self, node):
        return _method_for(type(self), type(node))(self, node)

    def visit_expr(self, expr: Expr) -> Expr:
        return expr

    def _visit_child(self, value):
        if isinstance(value, Stmt):
            return self.visit(value)
        if isinstance(value, Expr):
            return self.visit_expr(value)
        if isinstance(value, tuple):
            new = tuple(self._visit_child(v) for v in value)
            return value if all(a is b for a, b in zip(new, value)) else new
        return value

    def generic_visit(self, node):
        changes = {}
        for name in _node_fields(type(node)):
            old = getattr(node, name)
            new = self._visit_child(old)
            if new is not old:
                changes[name] = new
        return replace(node, **changes) if changes else node


class StmtExprMutator(StmtMutator):
    """A StmtMutator that rewrites every expression with an ExprMutator."""

    def __init__(self, expr_mutator: ExprMutator):
        self.expr_mutator = expr_mutator

    def visit_expr(self, expr: Expr) -> Expr:
        return self.expr_mutator(expr)


class StmtVisitor:
    """Read-only traversal (collect, count, check); override visit_<Node>."""

    def __call__(self, stmt: Stmt) -> None:
        self.visit(stmt)

    def visit(self, node) -> None:
        _method_for(type(self), type(node))(self, node)

    def visit_expr(self, expr: Expr) -> None:
        pass

    def generic_visit(self, node) -> None:
        for name in _node_fields(type(node)):
            value = getattr(node, name)
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, Stmt):
                    self.visit(v)
                elif isinstance(v, Expr):
                    self.visit_expr(v)
