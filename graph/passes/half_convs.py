"""Convolutions over float16 compute in float32 (ONNX convs take no bfloat16).

A conv over float16 already accumulates in float32 (te's conv reads each element
widened); what it lacked was the fast path: the channel-blocked layout, Winograd and the
prepacked weights take float32 convs only, and the plain NCHW nest they fell back to, with
every load widened, cost LLVM minutes (a 3 x 3 conv over 17 x 19 pixels: 133 s, 43K lines of
IR; the float32 one 2 s). So each such conv becomes cast -> float32 conv -> cast back, its
constant weights widened here once. The result is the same float32 sum rounded once to the
float16 type, as before; the casts fuse into the neighbouring kernels."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from .rewrite import Namer

HALF_TYPES = frozenset({"float16"})
CONV_OPS = frozenset({"conv2d", "conv2d_transpose"})


def _widen_constant(graph: Graph, value: Value, namer: Namer, consts: dict) -> Value:
    wide = Value(namer(f"{value.name}/f32"), value.shape, "float32")
    consts[wide.name] = np.asarray(graph.constants[value.name]).astype(np.float32)
    return wide


def convs_in_float32(graph: Graph) -> Graph:
    if not any(n.op in CONV_OPS and n.outputs[0].dtype in HALF_TYPES for n in graph.nodes):
        return graph
    namer = Namer(graph)
    consts = dict(graph.constants)
    nodes: list[Node] = []
    for n in graph.nodes:
        out = n.outputs[0]
        if n.op not in CONV_OPS or out.dtype not in HALF_TYPES or len(n.outputs) != 1:
            nodes.append(n)
            continue
        inputs = []
        for v in n.inputs:
            if v is None or v.dtype not in HALF_TYPES:
                inputs.append(v)
            elif v.name in graph.constants:
                inputs.append(_widen_constant(graph, v, namer, consts))
            else:
                wide = Value(namer(f"{v.name}/f32"), v.shape, "float32")
                nodes.append(Node("cast", (v,), (wide,), {"to": "float32"},
                                  namer(f"{n.name}/widen")))
                inputs.append(wide)
        result = Value(namer(f"{out.name}/f32"), out.shape, "float32")
        nodes.append(Node(n.op, tuple(inputs), (result,), n.attrs, n.name))
        nodes.append(Node("cast", (result,), (out,), {"to": out.dtype},
                          namer(f"{n.name}/narrow")))
    return graph.replace(nodes=tuple(nodes), constants=consts)
