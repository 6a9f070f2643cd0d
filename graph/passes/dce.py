"""Dead code elimination: drop nodes and constants that no graph output depends on."""
from __future__ import annotations

from ..ir import Graph


def eliminate_dead_code(graph: Graph) -> Graph:
    live = {v.name for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if any(o.name in live for o in node.outputs):
            kept.append(node)
            live.update(v.name for v in node.inputs if v is not None)
    consts = {k: a for k, a in graph.constants.items() if k in live}
    if len(kept) == len(graph.nodes) and len(consts) == len(graph.constants):
        return graph
    return graph.replace(nodes=tuple(reversed(kept)), constants=consts)
