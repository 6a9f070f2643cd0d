"""Constant folding: evaluate every node whose inputs are all constants (shape chains,
reshapes/transposes of weights, initializer-only subgraphs) with the reference executor."""
from __future__ import annotations

from ..ir import Graph
from ..reference import run_node

MAX_FOLD_BYTES = 64 << 20  # never materialise a larger constant (e.g. a huge broadcast)


def fold_constants(graph: Graph, max_bytes: int = MAX_FOLD_BYTES) -> Graph:
    consts = dict(graph.constants)
    kept = []
    for node in graph.nodes:
        foldable = all(v is None or v.name in consts for v in node.inputs) and \
            sum(o.nbytes for o in node.outputs) <= max_bytes
        if not foldable:
            kept.append(node)
            continue
        args = [None if v is None else consts[v.name] for v in node.inputs]
        for out, arr in zip(node.outputs, run_node(node, args)):
            consts[out.name] = arr
    if len(kept) == len(graph.nodes):
        return graph
    return graph.replace(nodes=tuple(kept), constants=consts)
