"""The canonical, process-independent workload key of a compute DAG.

sha256 over a canonical serialisation: operations in topological order, variables and
operations renumbered by first appearance, shapes and dtypes spelled out. No id(), no hash().
"""
from __future__ import annotations

import hashlib
import json

from . import expr as E
from .tensor import ComputeOp, PlaceholderOp, Tensor, TensorLoad


def topo_ops(outputs) -> list:
    """Operations reachable from `outputs`, producers before consumers (deterministic)."""
    order, state = [], {}
    stack = [(t.op, False) for t in reversed(list(outputs))]
    while stack:
        op, done = stack.pop()
        if done:
            if state.get(op) != "done":
                state[op] = "done"
                order.append(op)
            continue
        if op in state:
            continue
        state[op] = "open"
        stack.append((op, True))
        for t in reversed(op.input_tensors):
            if t.op not in state:
                stack.append((t.op, False))
    return order


class _Canon:
    def __init__(self):
        self.vars: dict = {}
        self.ops: dict = {}
        # id(node) -> (node, its form): a subexpression object shared in the DAG is serialised
        # once and its list reused (json.dumps writes it out at every use, so the text and
        # the key are unchanged). A Winograd input transform's body is 44k nodes as a tree,
        # 2.9k distinct objects: ResNet-50's keys took 0.8 s of CPU, most of it these.
        self.memo: dict = {}

    def var(self, v: E.Var) -> str:
        return self.vars.setdefault(v, f"v{len(self.vars)}")

    def expr(self, e) -> list:
        found = self.memo.get(id(e))
        if found is not None:
            return found[1]
        form = self._expr(e)
        self.memo[id(e)] = (e, form)
        return form

    def _expr(self, e) -> list:
        t = type(e)
        if t is E.Var:
            return ["var", e.dtype, self.var(e)]
        if t in (E.IntImm, E.FloatImm):
            return [t.__name__, e.dtype, repr(e.value)]
        if t is TensorLoad:
            return ["load", self.ops[e.tensor.op], [self.expr(i) for i in e.indices]]
        if t is E.Reduce:
            c = e.combiner
            return ["reduce", [self.var(c.lhs), self.var(c.rhs), self.expr(c.combined),
                               self.expr(c.identity)],
                    [[self.var(a.var), a.extent] for a in e.axis], self.expr(e.source),
                    None if e.condition is None else self.expr(e.condition)]
        if t is E.Call:
            return ["call", e.name, e.dtype, [self.expr(a) for a in e.args]]
        if t is E.Cast:
            return ["cast", e.dtype, self.expr(e.value)]
        if t is E.Select:
            return ["select", e.dtype, self.expr(e.cond), self.expr(e.t), self.expr(e.f)]
        if t is E.Not:
            return ["not", self.expr(e.a)]
        return [t.__name__, e.dtype, self.expr(e.a), self.expr(e.b)]


def canonical_form(outputs) -> list:
    """A JSON-able structure equal for structurally equal DAGs."""
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    canon = _Canon()
    items = []
    for op in topo_ops(outputs):
        canon.ops[op] = f"op{len(canon.ops)}"
        if isinstance(op, PlaceholderOp):
            items.append(["placeholder", list(op.shape), op.dtype])
        else:
            assert isinstance(op, ComputeOp)
            axes = [[canon.var(a.var), a.extent] for a in op.axis]
            items.append(["compute", list(op.shape), op.dtype, axes, canon.expr(op.body)])
    items.append(["outputs", [canon.ops[t.op] for t in outputs]])
    return items


def workload_key(outputs) -> str:
    """sha256 hex digest of the canonical form of the DAG that computes `outputs`."""
    text = json.dumps(canonical_form(outputs), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def describe(outputs) -> str:
    """A short human-readable description: `C=matmul(A[1024,1024], B[1024,1024])`."""
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    ops = topo_ops(outputs)
    inputs = [op for op in ops if isinstance(op, PlaceholderOp)]
    args = ", ".join(f"{op.name}{list(op.shape)}" for op in inputs)
    outs = ", ".join(f"{t.name}{list(t.shape)}" for t in outputs)
    return f"{outs} <- ({args}) [{len(ops) - len(inputs)} stages]"


__all__ = ["workload_key", "canonical_form", "topo_ops", "describe", "Tensor"]
