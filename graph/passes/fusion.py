"""Operator fusion: partition the graph's nodes into groups, each of which becomes one kernel.

Rules (TVM's, simplified to chains so that the group graph is always acyclic):
- An OUT_ELEMWISE_FUSABLE anchor (conv2d, matmul) absorbs the chain of ELEMWISE/BROADCAST
  consumers after it (bias add, relu, clip, residual add, ...) while the value flowing along
  the chain has a single consumer, is not a graph output, and keeps the anchor's output shape.
- A chain starting at an ELEMWISE/BROADCAST/INJECTIVE node absorbs following
  ELEMWISE/BROADCAST/INJECTIVE consumers under the same single-consumer rule.
- REDUCTION (reduce_*, softmax, layer_norm, pooling) and OPAQUE nodes form their own groups.
Since only the tail of a chain has consumers outside it, ordering groups by their last node
is a valid execution order. Constants are group inputs, never group members.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from ..ir import Graph, Node, OpClass, Value
from ..ops import op_class

_EPILOGUE = {OpClass.ELEMWISE, OpClass.BROADCAST}
_INJECTIVE_CHAIN = {OpClass.ELEMWISE, OpClass.BROADCAST, OpClass.INJECTIVE}


@dataclass(frozen=True)
class FusedGroup:
    """Nodes run as one kernel; `inputs` are external (graph inputs, constants, other groups'
    outputs) in first-use order; `outputs` are the values read outside the group."""

    name: str
    nodes: tuple[Node, ...]
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    constant_inputs: frozenset[str]
    kind: OpClass
    anchor: Node | None
    signature: str

    @property
    def key(self) -> str:
        """sha256 of the signature: equal for groups that can share one tuning task."""
        return hashlib.sha256(self.signature.encode()).hexdigest()

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(n.op for n in self.nodes)

    def __str__(self) -> str:
        ins = ", ".join(("const " if v.name in self.constant_inputs else "") + str(v)
                        for v in self.inputs)
        body = "\n".join(f"    {n}" for n in self.nodes)
        outs = ", ".join(f"%{v.name}" for v in self.outputs)
        return f"group {self.name} [{self.kind.name}] ({ins}) {{\n{body}\n    -> {outs}\n}}"


def _grow(start: Node, allowed: set[OpClass], same_shape: bool, consumers, outputs,
          taken: set[str]) -> list[Node]:
    members = [start]
    shape = start.outputs[0].shape
    while True:
        tail = members[-1]
        if len(tail.outputs) != 1 or tail.outputs[0].name in outputs:
            return members
        users = consumers.get(tail.outputs[0].name, [])
        if len(users) != 1:
            return members
        nxt = users[0]
        if nxt.name in taken or op_class(nxt.op) not in allowed or len(nxt.outputs) != 1 \
                or (same_shape and nxt.outputs[0].shape != shape):
            return members
        members.append(nxt)
        taken.add(nxt.name)


def _signature(nodes: list[Node], inputs: list[Value], consts: set[str],
               outputs: list[Value]) -> str:
    """Canonical text: ops, attrs, shapes, dtypes; values renumbered; constants by shape."""
    ids: dict[str, str] = {}
    for k, v in enumerate(inputs):
        ids[v.name] = f"in{k}"
    spec = {"inputs": [[v.dtype, list(v.shape), v.name in consts] for v in inputs],
            "nodes": []}
    for n in nodes:
        for o in n.outputs:
            ids[o.name] = f"t{len(ids)}"
        spec["nodes"].append([
            n.op, sorted((k, repr(a)) for k, a in n.attrs.items()),
            [None if v is None else ids[v.name] for v in n.inputs],
            [[o.dtype, list(o.shape)] for o in n.outputs]])
    spec["outputs"] = [ids[v.name] for v in outputs]
    return json.dumps(spec, separators=(",", ":"))


def _make_group(index: int, members: list[Node], graph: Graph, consumers, outputs) -> FusedGroup:
    inside = {o.name for n in members for o in n.outputs}
    member_names = {n.name for n in members}
    inputs: dict[str, Value] = {}
    for n in members:
        for v in n.inputs:
            if v is not None and v.name not in inside:
                inputs.setdefault(v.name, v)
    outs = [o for n in members for o in n.outputs
            if o.name in outputs or any(c.name not in member_names
                                        for c in consumers.get(o.name, []))]
    consts = {name for name in inputs if name in graph.constants}
    kinds = [op_class(n.op) for n in members]
    anchor = next((n for n, k in zip(members, kinds) if k is OpClass.OUT_ELEMWISE_FUSABLE),
                  None)
    label = "_".join(dict.fromkeys(n.op for n in members))[:48]
    return FusedGroup(f"g{index}_{label}", tuple(members), tuple(inputs.values()), tuple(outs),
                      frozenset(consts), max(kinds), anchor,
                      _signature(members, list(inputs.values()), consts, outs))


def fuse_operators(graph: Graph) -> list[FusedGroup]:
    """Partition `graph.nodes` into fused groups, returned in a valid execution order."""
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}
    position = {n.name: k for k, n in enumerate(graph.nodes)}
    taken: set[str] = set()
    chains: list[list[Node]] = []
    for node in graph.nodes:
        if node.name in taken:
            continue
        taken.add(node.name)
        cls = op_class(node.op)
        if cls is OpClass.OUT_ELEMWISE_FUSABLE:
            chains.append(_grow(node, _EPILOGUE, True, consumers, outputs, taken))
        elif cls in _INJECTIVE_CHAIN:
            chains.append(_grow(node, _INJECTIVE_CHAIN, False, consumers, outputs, taken))
        else:
            chains.append([node])
    chains.sort(key=lambda c: position[c[-1].name])
    return [_make_group(k, c, graph, consumers, outputs) for k, c in enumerate(chains)]
