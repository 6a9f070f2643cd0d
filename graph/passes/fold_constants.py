"""Constant folding: evaluate every node whose inputs are all constants (shape chains,
reshapes/transposes of weights, initializer-only subgraphs) with the reference executor."""
from __future__ import annotations

from ..ir import Graph
from ..reference import run_node

MAX_FOLD_BYTES = 64 << 20  # never materialise a larger constant that grew (a huge broadcast)


def fold_constants(graph: Graph, max_bytes: int = MAX_FOLD_BYTES) -> Graph:
    """A node folds when its outputs hold at most `max_bytes`, or no more than its inputs:
    a transpose, reshape or slice of a big weight (AlexNet's 151 MB Gemm weight with
    transB) folds at any size; left in the graph it ran on every inference (10x the
    model's time)."""
    consts = dict(graph.constants)
    kept = []
    for node in graph.nodes:
        out_bytes = sum(o.nbytes for o in node.outputs)
        in_bytes = sum(v.nbytes for v in node.inputs if v is not None)
        foldable = all(v is None or v.name in consts for v in node.inputs) and \
            out_bytes <= max(max_bytes, in_bytes)
        if not foldable:
            kept.append(node)
            continue
        args = [None if v is None else consts[v.name] for v in node.inputs]
        for out, arr in zip(node.outputs, run_node(node, args)):
            consts[out.name] = arr
    if len(kept) == len(graph.nodes):
        return graph
    return graph.replace(nodes=tuple(kept), constants=consts)
