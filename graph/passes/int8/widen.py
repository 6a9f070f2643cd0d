"""Packed int8 weights widened to int16 pairs where the target multiplies bytes only through
saturating instructions (AVX2 / AVX-512BW without VNNI).

On such a CPU the exact lowerings of dot4_u8s8 (codegen/dot4.py: the byte split, the sign
trick) issue about twice the vector instructions of onnxruntime's saturating vpmaddubsw +
vpmaddwd. With the weight words given as int16 pairs instead (te/ops/int8/core.py
widen_weight_words: for each word, the pair of its even bytes and the pair of its odd bytes),
conv2d_int8x4 / matmul_int8x4 sum dot4_u8s16: two vpmaddwd per 8 int32 lanes and one add,
exact, and the split of an activation word into zero-extended int16 (an and, a shift) is
shared by every weight vector the word meets. The weights take twice the bytes (built once,
at compile time); the activations keep their packed uint8 words.

VNNI targets (vpdpbusd takes the bytes as they are) and graphs optimized without a target
keep the byte words.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ....codegen.dot4 import dot4_strategies, pmaddwd_lanes, target_features
from ....codegen.target import Target
from ....te.ops.int8.core import panel_weight_pairs, widen_weight_words
from ...ir import Graph, Node, Value
from ..dce import eliminate_dead_code
from ..rewrite import Namer

# the pair axis each packed kernel's weight takes (matmul [K4, 2, N], conv [F, C4, KH, KW, 2])
_PAIR_AXIS = {"matmul_int8x4": 1, "conv2d_int8x4": 4}
_BYTE_NDIM = {"matmul_int8x4": 2, "conv2d_int8x4": 4}
# a matmul's pairs go in column panels this wide (two AVX2 vectors: a register tile's
# columns), so a tile reads one contiguous run per k; outputs this narrow or narrower keep
# [K4, 2, N] (one panel would not change the layout)
PANEL = 16


def panel_width(n: int) -> int:
    """PANEL, or half of it when that divides the `n` columns and PANEL does not: the last
    panel of 24 columns as 16 + 8 put a column guard inside the vector loop (3136 x 24
    words -> 24, a MobileNetV2 project conv as a pixel-major GEMM: 1.08 ms with 16-wide
    panels, 0.18 ms with 8-wide ones)."""
    half = PANEL // 2
    return half if n % PANEL and n % half == 0 else PANEL


def widens_int8(target) -> bool:
    """Whether `target` (a Target or a target string; None: no) takes the int16-pair form:
    it has vpmaddwd and its preferred byte dot product is not VNNI's."""
    if target is None:
        return False
    tgt = Target.from_string(target)
    feats = target_features(tgt)
    strategies = dot4_strategies(feats)
    return bool(pmaddwd_lanes(feats)) and not (strategies and strategies[0][1] == "vnni")


def widen_int8_weights(graph: Graph, target=None) -> Graph:
    """Give every conv2d_int8x4 / matmul_int8x4 with a constant byte-word weight its int16
    pairs instead (module docstring), when `target` takes them; else the graph as it is."""
    nodes = [n for n in graph.nodes if n.op in _PAIR_AXIS
             and n.inputs[1].name in graph.constants
             and len(n.inputs[1].shape) == _BYTE_NDIM[n.op]]
    if not nodes or not widens_int8(target):
        return graph
    namer = Namer(graph)
    constants = dict(graph.constants)
    swap: dict[str, Node] = {}
    widened: dict[str, Value] = {}        # a weight read by several kernels is widened once
    for node in nodes:
        w = node.inputs[1]
        if w.name not in widened:
            pairs = widen_weight_words(np.asarray(graph.constants[w.name]), _PAIR_AXIS[node.op])
            if node.op == "matmul_int8x4" and pairs.shape[-1] > PANEL:
                pairs = panel_weight_pairs(pairs, panel_width(pairs.shape[-1]))
            v = Value(namer(f"{w.name}/int16x2"), pairs.shape, "int32")
            constants[v.name] = pairs
            widened[w.name] = v
        attrs = node.attrs
        if len(widened[w.name].shape) == 4:           # panels: the column count is an attr
            attrs = attrs.replace(n=int(w.shape[-1]))
        swap[node.name] = dataclasses.replace(
            node, inputs=(node.inputs[0], widened[w.name]) + tuple(node.inputs[2:]),
            attrs=attrs)
    out = tuple(swap.get(n.name, n) for n in graph.nodes)
    return eliminate_dead_code(graph.replace(nodes=out, constants=constants))
