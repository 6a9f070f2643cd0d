"""Quantized elementwise chains as 256-entry tables: a DQ -> float elementwise ops -> Q
subgraph whose only runtime input is one uint8/int8 tensor x is a function of x's byte, so
it becomes `lookup_table(x)` with the table computed here at compile time.

EfficientNet's SiLU as onnxruntime's QDQ quantizer writes it,

    y_q -DQ-> y -Sigmoid-> s -Q-> s_q -DQ-> s' ;  Mul(y, s') -Q-> z_q

ran per element in float inside the conv epilogues (dequantize, a polynomial exp and a
division, quantize, dequantize, multiply, quantize); the table is one byte lookup
(codegen/lookup.py: 4 instructions for 64 bytes on AVX-512 VBMI). The same holds for a
Sigmoid/HardSwish/HardSigmoid/Clip/... between a DQ and a Q of any scale and zero point, and
for chains through inner Q -> DQ pairs (the SiLU's s_q) whose readers are all in the chain.

The table follows the QDQ spec as closely as float32 allows: each DQ and Q is evaluated in
float32 as graph/ops/int8/core.py's reference does (dequantize: (x - zp) * scale; quantize:
round half to even of x / scale, plus zp, saturated), and each float op between them is
computed in float64 from its float32 inputs and rounded once to float32 (a correctly rounded
float32 sigmoid, where a kernel's polynomial or onnxruntime's MLAS approximation may be an ulp
off). onnxruntime's own QLinearSigmoid is a table too, from MLAS's float32 logistic; the two
can differ where x / scale lands within an ulp of a rounding tie (tests compare both with
the exact value).

A bare DQ -> Q between two parameter sets is a chain too (a requantization: the inputs of a
concat of differently quantized tensors, graph/passes/int8/concat.py). Only chains whose
constants are scalars (per-tensor parameters) and whose every value has x's shape are taken;
anything else keeps the float path.
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np

from ...ir import Graph, Node, Value
from ...reference import run_node
from ..dce import eliminate_dead_code
from .quantize import GraphIndex

log = logging.getLogger(__name__)

_QTYPES = ("uint8", "int8")
# pure elementwise float ops a chain may hold (deterministic, one output)
_FLOAT_OPS = frozenset({
    "sigmoid", "hard_sigmoid", "hard_swish", "tanh", "relu", "leaky_relu", "clip", "elu",
    "selu", "celu", "softplus", "softsign", "gelu", "erf", "exp", "abs", "neg", "sqrt",
    "mul", "add", "sub", "div", "max", "min", "identity", "mish", "thresholded_relu"})
_QDQ = ("quantize_linear", "dequantize_linear")


class _Chains(GraphIndex):
    def _scalar_params(self, node: Node) -> bool:
        for v in node.inputs[1:]:
            arr = None if v is None else self.static(v)
            if v is not None and (arr is None or arr.size != 1):
                return False
        return True

    def _constant_scalar(self, v) -> bool:
        """A size-1 constant, or a node of constants only (a folded reshape/cast of one);
        the walk never asks _Static about activations (it would recurse up the graph)."""
        if int(np.prod(v.shape)) != 1:
            return False
        if v.name in self.graph.constants:
            return True
        producer = self.producers.get(v.name)
        return producer is not None and all(u is None or u.name in self.graph.constants
                                            for u in producer.inputs) \
            and self.static(v) is not None

    def _walk(self, start: Node, members: dict[str, Node], leaves: set[str],
              shape) -> bool:
        """Add `start` and its producers up to DQ inputs (leaves) to `members`."""
        stack = [start]
        while stack:
            node = stack.pop()
            if node.name in members:
                continue
            if len(node.outputs) != 1 or tuple(node.outputs[0].shape) != shape:
                return False
            if node.op in _QDQ:
                if not self._scalar_params(node) or node.inputs[0] is None:
                    return False
            elif node.op not in _FLOAT_OPS or node.outputs[0].dtype != "float32":
                return False
            members[node.name] = node
            for k, v in enumerate(node.inputs):
                if v is None:
                    continue
                if node.op in _QDQ and k > 0:
                    continue                       # scalar parameters, checked above
                if node.op == "dequantize_linear":
                    if v.dtype not in _QTYPES or tuple(v.shape) != shape:
                        return False
                    leaves.add(v.name)
                    continue
                if self._constant_scalar(v):
                    continue
                producer = self.producers.get(v.name)
                if producer is None:
                    return False
                stack.append(producer)
        return True

    def chain(self, q: Node):
        """(members in graph order, the leaf value name) of the table chain ending in the
        quantize_linear `q`, or None."""
        if q.op != "quantize_linear" or q.outputs[0].dtype not in _QTYPES:
            return None
        shape = tuple(q.outputs[0].shape)
        members: dict[str, Node] = {}
        leaves: set[str] = set()
        if not self._walk(q, members, leaves, shape):
            return None
        while len(leaves) > 1:
            # an inner Q -> DQ pair (the SiLU's sigmoid output) whose readers are all inside
            for name in sorted(leaves):
                inner = self.producers.get(name)
                if inner is not None and inner.op == "quantize_linear" \
                        and name not in self.outputs \
                        and all(r.name in members for r in self.consumers.get(name, ())):
                    leaves.discard(name)
                    if not self._walk(inner, members, leaves, shape):
                        return None
                    break
            else:
                return None
        if len(leaves) != 1:
            return None
        for node in members.values():
            out = node.outputs[0].name
            if node is q:
                continue
            if out in self.outputs or not all(r.name in members
                                              for r in self.consumers.get(out, ())):
                return None
        leaf = next(iter(leaves))
        if leaf in {n.outputs[0].name for n in members.values()}:
            return None
        order = {n.name: k for k, n in enumerate(self.graph.nodes)}
        return sorted(members.values(), key=lambda n: order[n.name]), leaf

    def table(self, members: list[Node], leaf: str, dtype: str) -> np.ndarray:
        """The chain's output for every byte of the leaf, indexed by the byte (module doc)."""
        values = {leaf: np.arange(256, dtype=np.uint8).view(dtype)}
        for node in members:
            args = []
            for v in node.inputs:
                if v is None:
                    args.append(None)
                elif v.name in values:
                    args.append(values[v.name])
                else:
                    args.append(self.static(v).reshape(()))
            out = node.outputs[0]
            if node.op in _QDQ:
                flat = replace(node, outputs=(Value(out.name, (256,), out.dtype),))
                values[out.name] = run_node(flat, args)[0]
            else:
                wide = [a.astype(np.float64) if a is not None and a.dtype == np.float32
                        else a for a in args]
                flat = replace(node, outputs=(Value(out.name, (256,), "float64"),))
                values[out.name] = run_node(flat, wide)[0].astype(np.float32)
        return values[members[-1].outputs[0].name]


def to_lookup_tables(graph: Graph) -> Graph:
    """Rewrite every table chain (module doc) into one lookup_table node; the last Q of a
    chain is taken first, so a chain's inner Q joins its longest chain."""
    if not any(n.op == "quantize_linear" for n in graph.nodes):
        return graph
    chains = _Chains(graph)
    taken: set[str] = set()
    replaced: dict[str, Node] = {}
    for q in reversed(graph.nodes):
        if q.name in taken or q.op != "quantize_linear":
            continue
        found = chains.chain(q)
        if found is None:
            continue
        members, leaf = found
        if any(n.name in taken for n in members):
            continue
        dtype = q.outputs[0].dtype
        x = next(v for n in members if n.op == "dequantize_linear" for v in n.inputs[:1]
                 if v.name == leaf)
        table = chains.table(members, leaf, x.dtype)
        taken.update(n.name for n in members)
        replaced[q.name] = Node("lookup_table", (x,), q.outputs,
                                {"table": tuple(int(t) for t in table.astype(np.int64)),
                                 "dtype": dtype}, q.name + ".table")
    if not replaced:
        return graph
    log.debug("%d quantized elementwise chains as byte tables", len(replaced))
    nodes = tuple(replaced.get(n.name, n) for n in graph.nodes)
    return eliminate_dead_code(graph.replace(nodes=nodes))
