"""Common subexpression elimination: one node per (op, inputs, attrs); equal small constants
are shared first so that nodes reading copies of one constant also merge."""
from __future__ import annotations

from ..ir import Graph, Value
from .rewrite import replace_uses

MAX_DEDUP_CONST_BYTES = 1 << 16


def _dedup_constants(graph: Graph) -> dict[str, Value]:
    seen: dict[tuple, str] = {}
    mapping: dict[str, Value] = {}
    values = {v.name: v for n in graph.nodes for v in n.inputs if v is not None}
    outputs = {v.name for v in graph.outputs}
    for name, arr in graph.constants.items():
        if arr.nbytes > MAX_DEDUP_CONST_BYTES or name not in values or name in outputs:
            continue
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key in seen:
            mapping[name] = values[seen[key]]
        else:
            seen[key] = name
    return mapping


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    mapping = _dedup_constants(graph)
    outputs = {v.name for v in graph.outputs}
    seen: dict[tuple, tuple[Value, ...]] = {}
    kept = []
    for node in graph.nodes:
        node = replace_uses([node], mapping)[0]
        key = (node.op, tuple(None if v is None else v.name for v in node.inputs), node.attrs)
        first = seen.get(key)
        if first is not None and not any(o.name in outputs for o in node.outputs):
            mapping.update({o.name: f for o, f in zip(node.outputs, first)})
            continue
        seen.setdefault(key, node.outputs)
        kept.append(node)
    if len(kept) == len(graph.nodes) and not mapping:
        return graph
    consts = {k: a for k, a in graph.constants.items() if k not in mapping}
    return graph.replace(nodes=tuple(kept), constants=consts)
