"""Generic traversal of expression nodes: walk, a memoising mutator, substitution.

Traversal stops at tensor boundaries: a TensorLoad's indices are visited, the producing
operation is not (it is a separate stage).
"""
from __future__ import annotations

import functools
from dataclasses import fields, replace

from .expr import CommReducer, Expr, IterVar, Reduce, Var


@functools.cache
def _child_fields(node_cls) -> tuple[str, ...]:
    skip = {"dtype", "_hash", "tensor", "name", "uid", "combiner", "buffer", "value"}
    return tuple(f.name for f in fields(node_cls) if f.compare and f.name not in skip)


def child_exprs(node):
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Expr):
            yield value
        elif isinstance(value, tuple):
            for v in value:
                if isinstance(v, Expr):
                    yield v
    if type(node).__name__ == "Cast":
        yield node.value


def walk(expr: Expr):
    """Every node of `expr` once (pre-order, iterative: deep trees do not recurse)."""
    seen = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(reversed(list(child_exprs(node))))


@functools.cache
def _method_for(mutator_cls, node_cls):
    for klass in node_cls.__mro__:
        method = getattr(mutator_cls, "visit_" + klass.__name__, None)
        if method is not None:
            return method
    return mutator_cls.generic_visit


class ExprMutator:
    """Rebuilds bottom-up with a memo table; unchanged subtrees come back as the same object."""

    def __init__(self):
        self.memo: dict[Expr, Expr] = {}

    def __call__(self, expr: Expr) -> Expr:
        return self.visit(expr)

    def visit(self, expr: Expr) -> Expr:
        hit = self.memo.get(expr)
        if hit is None:
            hit = _method_for(type(self), type(expr))(self, expr)
            self.memo[expr] = hit
        return hit

    def visit_child(self, value):
        if isinstance(value, Expr):
            return self.visit(value)
        if isinstance(value, tuple):
            new = tuple(self.visit_child(v) for v in value)
            return value if all(a is b for a, b in zip(new, value)) else new
        return value

    def generic_visit(self, node: Expr) -> Expr:
        changes = {}
        names = _child_fields(type(node)) + (("value",) if type(node).__name__ == "Cast" else ())
        for name in names:
            old = getattr(node, name)
            new = self.visit_child(old)
            if new is not old:
                changes[name] = new
        return replace(node, **changes) if changes else node

    def visit_IterVar(self, node):  # iter vars are binders, not rewritten
        return node

    def visit_Reduce(self, node: Reduce) -> Expr:
        source = self.visit(node.source)
        cond = None if node.condition is None else self.visit(node.condition)
        if source is node.source and cond is node.condition:
            return node
        return replace(node, source=source, condition=cond)


class _Substitute(ExprMutator):
    def __init__(self, mapping):
        super().__init__()
        self.mapping = mapping

    def visit_Var(self, node: Var) -> Expr:
        return self.mapping.get(node, node)


def substitute(expr: Expr, mapping: dict[Var, Expr]) -> Expr:
    """Replace variables by expressions (by identity of the Var)."""
    if not mapping:
        return expr
    return _Substitute(mapping)(expr)


def free_vars(expr: Expr) -> set[Var]:
    return {n for n in walk(expr) if isinstance(n, Var)}


def apply_combiner(combiner: CommReducer, lhs: Expr, rhs: Expr) -> Expr:
    """combiner(lhs, rhs) as an expression."""
    return substitute(combiner.combined, {combiner.lhs: lhs, combiner.rhs: rhs})


__all__ = ["walk", "ExprMutator", "substitute", "free_vars", "apply_combiner", "IterVar"]
