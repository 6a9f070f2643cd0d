"""Operator fusion: partition the graph's nodes into groups, each of which becomes one kernel.

Rules (TVM's fusion classes, grown over DAGs rather than chains):
- A group starts at a seed node, in graph order. An OUT_ELEMWISE_FUSABLE seed (conv2d,
  matmul) absorbs ELEMWISE/BROADCAST nodes that keep its output shape (bias add, relu, GELU's
  diamond, residual add, ...); an ELEMWISE/BROADCAST/INJECTIVE seed absorbs
  ELEMWISE/BROADCAST/INJECTIVE nodes. REDUCTION and OPAQUE nodes stay alone.
- Growth follows consumer edges; an unassigned producer whose readers are all in the group
  joins too (GELU's `x * 0.5` beside `erf(x / sqrt 2)`).
- The grown set is then cut to one exit: the largest subset holding the seed in which every
  member but one (the sink) is read only inside the group and is no graph output. A value
  with several readers is thus fused exactly when all its readers end up in the group.
Why the group graph is acyclic: every non-sink member reaches its sink inside the group, and
only sinks are read outside, so a cycle of groups would be a cycle of sinks in the (acyclic)
node graph. For the same reason ordering groups by sink position is a valid execution order;
`check_groups` verifies it on every result. Constants are group inputs, never members.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Sequence

from ...te.errors import InternalError
from ..ir import Graph, Node, OpClass, Value
from ..ops.core import op_class

_EPILOGUE = frozenset({OpClass.ELEMWISE, OpClass.BROADCAST})
_INJECTIVE_GROUP = frozenset({OpClass.ELEMWISE, OpClass.BROADCAST, OpClass.INJECTIVE})


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


class _Partition:
    """Node -> group assignment during fusion, plus the graph's edges by node name."""

    def __init__(self, graph: Graph):
        self.nodes = {n.name: n for n in graph.nodes}
        self.position = {n.name: k for k, n in enumerate(graph.nodes)}
        consumers = graph.consumers()
        self.succ = {n.name: tuple(dict.fromkeys(c.name for o in n.outputs
                                                 for c in consumers.get(o.name, ())))
                     for n in graph.nodes}
        self.producer = {o.name: n.name for n in graph.nodes for o in n.outputs}
        self.outputs = {v.name for v in graph.outputs}
        self.group_of: dict[str, int] = {}
        self.members: dict[int, list[str]] = {}

    def assign(self, gid: int, names: list[str]) -> None:
        """Make `names` the members of group `gid` (earlier members not listed are freed)."""
        for name in self.members.pop(gid, []):
            self.group_of.pop(name, None)
        self.members[gid] = []
        for name in names:
            self.add(gid, name)

    def add(self, gid: int, name: str) -> None:
        self.members[gid].append(name)
        self.group_of[name] = gid


def _can_join(node: Node, allowed: frozenset[OpClass], shape: tuple[int, ...] | None) -> bool:
    return (len(node.outputs) == 1 and op_class(node.op) in allowed
            and (shape is None or node.outputs[0].shape == shape))


def _absorb_producers(part: _Partition, gid: int, name: str, allowed, shape) -> None:
    """Pull in unassigned producers of `name` that only feed the group (GELU's `x * 0.5`
    beside `erf(x / sqrt 2)` when x is a graph input), and theirs in turn."""
    stack = [name]
    while stack:
        for v in part.nodes[stack.pop()].inputs:
            producer = part.producer.get(v.name) if v is not None else None
            if producer is None or producer in part.group_of:
                continue
            node = part.nodes[producer]
            if (_can_join(node, allowed, shape) and node.outputs[0].name not in part.outputs
                    and all(part.group_of.get(c) == gid for c in part.succ[producer])
                    and not (OpClass.INJECTIVE in allowed and _pending_epilogue(part, node))):
                part.add(gid, producer)
                stack.append(producer)


def _pending_epilogue(part: _Partition, node: Node, depth: int = 8) -> bool:
    """Whether `node` is the elementwise epilogue of an anchor (conv/matmul) not yet
    grouped: its own group will take it (an anchor's group starts later in graph order).
    A concat seeded from one int8 conv's output view would otherwise pull the next conv's
    requantize into the concat and leave that conv writing its int32 accumulator
    (SqueezeNet's fire modules, graph/passes/int8/concat.py). Asked for injective groups
    only: an anchor's group taking another anchor's bias add beside its residual add is how
    the float ResNets were grouped and tuned (the shipped records' keys)."""
    shape = node.outputs[0].shape
    while depth > 0 and op_class(node.op) in _EPILOGUE:
        ins = [part.producer.get(v.name) for v in node.inputs if v is not None]
        ins = [p for p in ins if p is not None and p not in part.group_of]
        if not ins:
            return False
        up = part.nodes[ins[0]]
        if op_class(up.op) is OpClass.OUT_ELEMWISE_FUSABLE:
            return len(up.outputs) == 1 and up.outputs[0].shape == shape \
                and len(part.succ[up.name]) == 1
        node, depth = up, depth - 1
    return False


def _grow(part: _Partition, gid: int, seed: Node, allowed, shape) -> list[str]:
    """Add allowed consumers of the group (and producers that only feed it), in graph order;
    returns the grown member names (the group is registered as it grows). The result may
    have several exits: _single_exit cuts it down."""
    part.assign(gid, [seed.name])
    if len(seed.outputs) != 1:
        return list(part.members[gid])
    frontier = set(part.succ[seed.name])
    while frontier:
        name = min(frontier, key=part.position.__getitem__)
        frontier.discard(name)
        node = part.nodes[name]
        if name in part.group_of or not _can_join(node, allowed, shape):
            continue
        part.add(gid, name)
        _absorb_producers(part, gid, name, allowed, shape)
        frontier.update(c for c in part.succ[name] if c not in part.group_of)
    return list(part.members[gid])


def _single_exit(part: _Partition, seed: str, grown: list[str]) -> list[str]:
    """The largest subset of `grown` holding `seed` whose members other than one sink are
    read only inside it and are no graph outputs; members in graph order."""
    order = sorted(grown, key=part.position.__getitem__, reverse=True)
    best = [seed]
    for k, sink in enumerate(order):
        if len(order) - k <= len(best):      # only order[k:] can join a group sunk here
            break
        group = {sink}
        for name in order[k + 1:]:           # readers come later, so they are decided
            node = part.nodes[name]
            succ = part.succ[name]
            if succ and all(c in group for c in succ) \
                    and not any(o.name in part.outputs for o in node.outputs):
                group.add(name)
        if seed in group and len(group) > len(best):
            best = sorted(group, key=part.position.__getitem__)
    return best


def _signature(nodes: Sequence[Node], inputs: list[Value], consts: set[str],
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


def _make_group(index: int, members: Sequence[Node], graph: Graph, consumers,
                outputs) -> FusedGroup:
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
    part = _Partition(graph)
    parts: list[list[str]] = []
    for node in graph.nodes:
        if node.name in part.group_of:
            continue
        gid = len(parts)
        cls = op_class(node.op)
        if cls is OpClass.OUT_ELEMWISE_FUSABLE:
            grown = _grow(part, gid, node, _EPILOGUE, node.outputs[0].shape)
        elif cls in _INJECTIVE_GROUP:
            grown = _grow(part, gid, node, _INJECTIVE_GROUP, None)
        else:
            grown = [node.name]
        members = _single_exit(part, node.name, grown)
        part.assign(gid, members)
        parts.append(members)
    parts.sort(key=lambda names: part.position[names[-1]])
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}
    groups = [_make_group(k, [part.nodes[n] for n in names], graph, consumers, outputs)
              for k, names in enumerate(parts)]
    check_groups(graph, groups)
    return groups


def check_groups(graph: Graph, groups: Sequence[FusedGroup]) -> None:
    """InternalError unless `groups` partition the graph's nodes and run in a valid order:
    every group input is a graph input, a constant or an output of an earlier group."""
    seen: dict[str, str] = {}
    ready = {v.name for v in graph.inputs} | set(graph.constants)
    for g in groups:
        for n in g.nodes:
            if n.name in seen:
                raise InternalError(f"node '{n.name}' is in groups '{seen[n.name]}' and "
                                    f"'{g.name}'; this is a bug in Kiln's fusion")
            seen[n.name] = g.name
        if not g.outputs:
            raise InternalError(f"group '{g.name}' ({'+'.join(g.ops)}) computes nothing any "
                                "other group or graph output reads (a dead node survived the "
                                "passes); this is a bug in Kiln")
        missing = [v.name for v in g.inputs if v.name not in ready]
        if missing:
            raise InternalError(f"group '{g.name}' reads {missing} before they are computed "
                                "(the group graph is cyclic or misordered); this is a bug in "
                                "Kiln's fusion")
        ready.update(v.name for v in g.outputs)
    lost = [n.name for n in graph.nodes if n.name not in seen]
    if lost:
        raise InternalError(f"nodes {lost} are in no fused group; this is a bug in Kiln")
