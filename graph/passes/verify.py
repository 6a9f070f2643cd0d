"""Check a graph's invariants: SSA, definition before use, and shapes/dtypes that re-infer."""
from __future__ import annotations

from ...te.errors import InternalError
from ..ops import core as ops
from ..ir import Graph


def _fail(graph: Graph, msg: str) -> InternalError:
    return InternalError(f"graph '{graph.name}' is malformed: {msg}. This is a bug in the pass "
                         "that produced it; please report it with the printed graph.")


def verify_graph(graph: Graph) -> Graph:
    """Raise InternalError naming the node if `graph` breaks an invariant; return it if not."""
    defined: dict[str, object] = {}
    for v in graph.inputs:
        defined[v.name] = v
    for name, arr in graph.constants.items():
        if name in defined:
            raise _fail(graph, f"constant '{name}' is also a graph input")
        defined[name] = arr
    for node in graph.nodes:
        for v in node.inputs:
            if v is None:
                continue
            if v.name not in defined:
                raise _fail(graph, f"node '{node.name}' ({node.op}) reads '{v.name}' before "
                                   "it is defined")
            if v.name in graph.constants:
                arr = graph.constants[v.name]
                if tuple(arr.shape) != v.shape or arr.dtype.name != v.dtype:
                    raise _fail(graph, f"constant '{v.name}' is {arr.dtype}{list(arr.shape)} "
                                       f"but node '{node.name}' sees {v.dtype}{list(v.shape)}")
        expected = ops.infer(node.op, node.inputs, node.attrs, node.name)
        got = [(o.shape, o.dtype) for o in node.outputs]
        if expected != got:
            raise _fail(graph, f"node '{node.name}' ({node.op}) declares outputs {got}, "
                               f"inference gives {expected}")
        for o in node.outputs:
            if o.name in defined:
                raise _fail(graph, f"value '{o.name}' is defined twice")
            defined[o.name] = o
    for v in graph.outputs:
        if v.name not in defined:
            raise _fail(graph, f"graph output '{v.name}' is never defined")
    return graph
