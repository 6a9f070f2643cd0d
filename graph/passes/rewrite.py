"""Small shared helpers for graph passes: fresh names and rewiring uses of values."""
from __future__ import annotations

from typing import Iterable, Mapping

from ..ir import Graph, Node, Value


class Namer:
    """Hands out value/node names not used anywhere in a graph."""

    def __init__(self, graph: Graph):
        self.taken = {v.name for v in graph.inputs} | set(graph.constants)
        for n in graph.nodes:
            self.taken.add(n.name)
            self.taken.update(o.name for o in n.outputs)

    def __call__(self, hint: str) -> str:
        name, k = hint, 0
        while name in self.taken:
            k += 1
            name = f"{hint}.{k}"
        self.taken.add(name)
        return name


def replace_uses(nodes: Iterable[Node], mapping: Mapping[str, Value]) -> list[Node]:
    """Nodes with every input named in `mapping` replaced; unchanged nodes are kept as is."""
    out = []
    for n in nodes:
        if any(v is not None and v.name in mapping for v in n.inputs):
            ins = tuple(mapping.get(v.name, v) if v is not None else None for v in n.inputs)
            n = Node(n.op, ins, n.outputs, n.attrs, n.name)
        out.append(n)
    return out


def resolve(mapping: dict[str, Value]) -> dict[str, Value]:
    """Follow chains a -> b -> c in a replacement mapping so every entry points at the end."""
    done = {}
    for k, v in mapping.items():
        seen = {k}
        while v.name in mapping and v.name not in seen:
            seen.add(v.name)
            v = mapping[v.name]
        done[k] = v
    return done
