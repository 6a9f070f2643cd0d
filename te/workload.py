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


def _q(value) -> str:
    """A JSON scalar as json.dumps writes it (strings quoted and escaped, ints as digits)."""
    if type(value) is str:
        text = _QUOTED.get(value)
        if text is None:
            text = _QUOTED[value] = json.dumps(value)
        return text
    return str(value) if type(value) is int else json.dumps(value)


_QUOTED: dict[str, str] = {}


class _CanonText(_Canon):
    """_Canon writing the JSON text directly: the same text as
    json.dumps(canonical_form(outputs), separators=(",", ":")), byte for byte (the keys of
    committed tuning records depend on it; tests/te/test_workload.py compares the two), without
    building the nested lists first (ResNet-50's keys: ~0.3 s of the parent's serial start)."""

    def expr(self, e) -> str:
        found = self.memo.get(id(e))
        if found is not None:
            return found[1]
        text = self._text(e)
        self.memo[id(e)] = (e, text)
        return text

    def _text(self, e) -> str:
        t = type(e)
        if t is E.Var:
            return f'["var",{_q(e.dtype)},{_q(self.var(e))}]'
        if t in (E.IntImm, E.FloatImm):
            return f'[{_q(t.__name__)},{_q(e.dtype)},{_q(repr(e.value))}]'
        if t is TensorLoad:
            return (f'["load",{_q(self.ops[e.tensor.op])},['
                    + ",".join([self.expr(i) for i in e.indices]) + "]]")
        if t is E.Reduce:
            c = e.combiner
            head = (f'["reduce",[{_q(self.var(c.lhs))},{_q(self.var(c.rhs))},'
                    f'{self.expr(c.combined)},{self.expr(c.identity)}],[')
            axes = ",".join([f"[{_q(self.var(a.var))},{_q(a.extent)}]" for a in e.axis])
            source = self.expr(e.source)
            cond = "null" if e.condition is None else self.expr(e.condition)
            return f"{head}{axes}],{source},{cond}]"
        if t is E.Call:
            return (f'["call",{_q(e.name)},{_q(e.dtype)},['
                    + ",".join([self.expr(a) for a in e.args]) + "]]")
        if t is E.Cast:
            return f'["cast",{_q(e.dtype)},{self.expr(e.value)}]'
        if t is E.Select:
            cond = self.expr(e.cond)
            tv = self.expr(e.t)
            return f'["select",{_q(e.dtype)},{cond},{tv},{self.expr(e.f)}]'
        if t is E.Not:
            return f'["not",{self.expr(e.a)}]'
        a = self.expr(e.a)
        return f"[{_q(t.__name__)},{_q(e.dtype)},{a},{self.expr(e.b)}]"


def _shape_text(shape) -> str:
    return "[" + ",".join(_q(d) for d in shape) + "]"


def canonical_text(outputs) -> str:
    """json.dumps(canonical_form(outputs), separators=(",", ":")), written directly."""
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    canon = _CanonText()
    items = []
    for op in topo_ops(outputs):
        canon.ops[op] = f"op{len(canon.ops)}"
        if isinstance(op, PlaceholderOp):
            items.append(f'["placeholder",{_shape_text(op.shape)},{_q(op.dtype)}]')
        else:
            assert isinstance(op, ComputeOp)
            axes = ",".join([f"[{_q(canon.var(a.var))},{_q(a.extent)}]" for a in op.axis])
            items.append(f'["compute",{_shape_text(op.shape)},{_q(op.dtype)},[{axes}],'
                         f"{canon.expr(op.body)}]")
    items.append('["outputs",[' + ",".join(_q(canon.ops[t.op]) for t in outputs) + "]]")
    return "[" + ",".join(items) + "]"


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
    return hashlib.sha256(canonical_text(outputs).encode()).hexdigest()


def describe(outputs) -> str:
    """A short human-readable description: `C=matmul(A[1024,1024], B[1024,1024])`."""
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    ops = topo_ops(outputs)
    inputs = [op for op in ops if isinstance(op, PlaceholderOp)]
    args = ", ".join(f"{op.name}{list(op.shape)}" for op in inputs)
    outs = ", ".join(f"{t.name}{list(t.shape)}" for t in outputs)
    return f"{outs} <- ({args}) [{len(ops) - len(inputs)} stages]"


__all__ = ["workload_key", "canonical_form", "canonical_text", "topo_ops", "describe", "Tensor"]
