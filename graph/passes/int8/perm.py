"""int8 GEMMs whose weight pairs are proven not to saturate AVX2's vpmaddubsw (targets with
vpmaddwd but no VNNI; te/ops/int8/perm.py).

The exact int16-pair kernels (int8_widen.py, int8_pairs.py) issue one vpmaddwd + one add per
2 multiply-adds of an int32 lane; onnxruntime's vpmaddubsw + vpmaddwd + add does 4, but its
int16 pair sums saturate. A matmul_int8x4 with a constant byte-word weight becomes
matmul_int8x4_perm where, for every column panel (16 columns, else 8) and group of 4 K words,
the 16 weight bytes have a matching into pairs that is pair-safe in every column of the
panel: then the saturating step is exact for any uint8 activations. The activations keep
their packed uint8 words (half the bytes of the int16 pairs: the im2col writes bytes). A
weight with a panel and group that has no such matching at 8 columns, a K that is not a
multiple of 4 words, or a target with VNNI (vpdpbusd is exact anyway) keep what the later
passes give them.

Per-channel quantized Gaussian weights (ResNet-18 as benchmarks/int8.py builds it): 0.15% of
(16-column panel, group) have no safe matching, 0.01% at 8 columns; 1.4-24% of single
(column, word) pairs are unsafe in their natural order, so no fixed order of K would do.
"""
from __future__ import annotations

import numpy as np

from ...ir import FrozenDict, Graph, Node, Value
from . import widen as int8_widen
from ..dce import eliminate_dead_code
from ..rewrite import Namer
from ....te.ops.int8.perm import GROUP_BYTES, pair_weight_groups

PANEL, NARROW_PANEL = 16, 8    # column panel widths: a register tile's two vectors, one


def weight_bytes(words: np.ndarray) -> np.ndarray:
    """Packed weight words [K4, N] (pack_weight_int8x4 along K) -> the int8 bytes [4 K4, N]."""
    w = np.ascontiguousarray(words, np.int32)
    k4, n = w.shape
    return np.ascontiguousarray(w[..., None].view(np.int8).transpose(0, 2, 1)
                                .reshape(4 * k4, n))


def perm_weight(words: np.ndarray):
    """(block, selectors, weight words) of pair_weight_groups: 16-column panels where they
    have a safe matching everywhere and fit the columns (int8_widen.panel_width: not 24 as
    16 + 8, whose guarded half panel runs and compiles slowly), else 8-column ones; None
    when neither has."""
    w8 = weight_bytes(words)
    if w8.shape[0] % GROUP_BYTES:
        return None
    n = w8.shape[1]
    wide = int8_widen.panel_width(n) == PANEL and n > NARROW_PANEL
    for block in ((PANEL, NARROW_PANEL) if wide else (NARROW_PANEL,)):
        found = pair_weight_groups(w8, block)
        if found is not None:
            return (block,) + found
    return None


def to_saturation_safe_pairs(graph: Graph, target=None) -> Graph:
    """Rewrite each eligible matmul_int8x4 into matmul_int8x4_perm (module docstring); the
    graph as it is when the target keeps byte words or nothing qualifies."""
    if not int8_widen.widens_int8(target):
        return graph
    namer = Namer(graph)
    constants = dict(graph.constants)
    made: dict[str, tuple | None] = {}
    swap: dict[str, Node] = {}
    for node in graph.nodes:
        if node.op != "matmul_int8x4" or len(node.inputs) != 2:
            continue
        w = node.inputs[1]
        arr = graph.constants.get(w.name)
        if arr is None or np.asarray(arr).ndim != 2:
            continue
        if w.name not in made:
            found = perm_weight(np.asarray(arr))
            if found is not None:
                block, sel, words = found
                sv = Value(namer(f"{w.name}/perm_sel"), sel.shape, "int32")
                wv = Value(namer(f"{w.name}/perm{block}"), words.shape, "int32")
                constants[sv.name], constants[wv.name] = sel, words
                found = (sv, wv)
            made[w.name] = found
        if made[w.name] is None:
            continue
        sv, wv = made[w.name]
        swap[node.name] = Node("matmul_int8x4_perm", (node.inputs[0], sv, wv), node.outputs,
                               FrozenDict({"n": int(w.shape[-1])}), node.name)
    if not swap:
        return graph
    nodes = tuple(swap.get(n.name, n) for n in graph.nodes)
    return eliminate_dead_code(graph.replace(nodes=nodes, constants=constants))
