"""int8 GEMMs over activations widened to int16 pairs by the kernel that makes them (AVX2
without VNNI; te/ops/int8/pairs.py).

After int8_widen.py a matmul_int8x4 holds its weight as int16 pairs and splits every
broadcast activation word into even and odd bytes in its inner loop (dot4_u8s16). Where the
activation words come from a kernel that computes them anyway, that kernel writes the pairs
instead, and the GEMM becomes matmul_int16x2 (dot2_s16s8: one vpmaddwd per accumulator, the
weights kept int8 in memory and widened by one vpmovsxbw per weight vector):

- an im2col (graph/passes/int8/nhwc.py: ResNet's 3x3 convs, the stems) writes its columns
  as pairs (attr pairs), block C4: the split is a vectorised and/shift over each tap's C4
  words;
- a pack (MatMulInteger's dynamically quantized activations, a QGemm's) gets a
  widen_int8x4_pairs, which fuses into the same kernel.

Activations read in place (bitcast_int8x4, a view of the previous conv's uint8 output: the
1x1 convs) keep dot4_u8s16: widening them would add a kernel and a pass over memory. So do
GEMMs with fewer than MIN_COLUMNS columns (below).

1 thread, thread CPU time, one interleaved run (benchmarks/RESULTS.md has the model
figures), GOPS of dot4_u8s16 -> matmul_int16x2 (onnxruntime MatMulInteger): 784 x 1152 x
128 92 -> 104 (110), 196 x 2304 x 256 86 -> 111 (117), 49 x 4608 x 512 68 -> 99 (114),
128 x 256 x 1024 91 -> 106 (105). The weight bytes matter for the few-row GEMMs of the
last stages: the same kernel with int32 weight pairs (dot2_s16) made 72 at 49 x 4608 x 512.
"""
from __future__ import annotations

import numpy as np

from ....te.ops.int8.pairs import narrow_weight_pairs, pair_weight_rows
from ...ir import FrozenDict, Graph, Node, Value
from ..dce import eliminate_dead_code
from .widen import PANEL, panel_width, widens_int8
from ..rewrite import Namer

_IM2COL = ("im2col_nhwc_int8x4",)         # (a stem's, split_taps, is left alone)
# GEMMs narrower than this keep dot4_u8s16: the in-loop split is shared by N / 16 register
# tiles only, and the pairs double the activation bytes. 1 thread, dot4_u8s16 time /
# matmul_int16x2 time: 3136 x 576 x 64 0.95, ResNet-18's 7x7 stem (12544 x 196 x 64, the
# pairs written by its quantize + im2col) 0.35 for both kernels; 784 x 1152 x 128 1.13.
MIN_COLUMNS = 128


def _weight_pairs(graph: Graph, node: Node) -> np.ndarray | None:
    """The [K4, 2, N] int16 pairs of a matmul_int8x4's constant weight (panels undone), or
    None when it holds byte words."""
    w = node.inputs[1]
    if w.name not in graph.constants:
        return None
    arr = np.asarray(graph.constants[w.name])
    if arr.ndim == 3 and arr.shape[1] == 2:
        return arr
    if arr.ndim == 4 and arr.shape[2] == 2:            # panels [P, K4, 2, block]
        p, k4, _, block = arr.shape
        return arr.transpose(1, 2, 0, 3).reshape(k4, 2, p * block)[..., :node.attrs["n"]]
    return None


def to_int16_pairs(graph: Graph, target=None) -> Graph:
    """Turn each matmul_int8x4 over weight pairs whose activation words an im2col or a pack
    makes into matmul_int16x2 over pairs that kernel writes (module docstring); a graph
    without such GEMMs, or a target that keeps the byte words (VNNI), is returned as is."""
    if not widens_int8(target):
        return graph
    producers, consumers = graph.producers(), graph.consumers()
    namer = Namer(graph)
    constants = dict(graph.constants)
    replace: dict[str, list[Node]] = {}       # node name -> the nodes emitted in its place
    dropped: set[str] = set()                 # nodes the replacements make unused
    for node in graph.nodes:
        if node.op != "matmul_int8x4":
            continue
        pairs = _weight_pairs(graph, node)
        a = node.inputs[0]
        src = producers.get(a.name)
        if pairs is None or src is None or pairs.shape[-1] < MIN_COLUMNS:
            continue
        emitted: list[Node] = []
        k4 = a.shape[-1]
        if (src.op == "reshape" and src.inputs[0].name in producers
                and producers[src.inputs[0].name].op in _IM2COL
                and not producers[src.inputs[0].name].attr("split_taps")
                and len(consumers[src.inputs[0].name]) == 1 and len(consumers[a.name]) == 1
                and src.name not in replace and producers[src.inputs[0].name].name not in replace):
            im2col = producers[src.inputs[0].name]
            cols = im2col.outputs[0]
            block = cols.shape[-1]                                  # C4
            widened = Value(namer(f"{cols.name}/pairs"),
                            cols.shape[:-1] + (2, block), "int32")
            emitted.append(Node(im2col.op, im2col.inputs, (widened,),
                                FrozenDict({**im2col.attrs, "pairs": True}),
                                namer(f"{im2col.name}/pairs")))
            shape = a.shape[:-1] + (2 * k4,)
            flat = Value(namer(f"{a.name}/pairs"), shape, "int32")
            emitted.append(Node("reshape", (widened,), (flat,), FrozenDict({"shape": shape}),
                                namer(f"{src.name}/pairs")))
            replace[im2col.name], replace[src.name] = [], []
            dropped.update((im2col.name, src.name))
        elif src.op == "pack_int8x4" and src.attrs["axis"] % len(src.outputs[0].shape) \
                == len(a.shape) - 1:
            block = k4
            flat = Value(namer(f"{a.name}/pairs"), a.shape[:-1] + (2 * k4,), "int32")
            emitted.append(Node("widen_int8x4_pairs", (a,), (flat,),
                                FrozenDict({"block": block}), namer(f"{a.name}/widen")))
        else:
            continue
        rows = narrow_weight_pairs(pair_weight_rows(pairs, block))      # [K2, N] int16
        n = rows.shape[1]
        attrs = {}
        if n > PANEL:
            width = panel_width(n)
            panels = -(-n // width)
            padded = np.zeros((rows.shape[0], panels * width), np.int16)
            padded[:, :n] = rows
            rows = np.ascontiguousarray(padded.reshape(rows.shape[0], panels, width)
                                        .transpose(1, 0, 2))
            attrs = {"n": n}
        weight = Value(namer(f"{node.inputs[1].name}/int8x2"), rows.shape, "int16")
        constants[weight.name] = rows
        emitted.append(Node("matmul_int16x2", (flat, weight), node.outputs, FrozenDict(attrs),
                            node.name))
        replace[node.name] = emitted
    if not any(replace.get(n.name) for n in graph.nodes):
        return graph
    out: list[Node] = []
    for n in graph.nodes:
        if n.name in replace:
            out.extend(replace[n.name])
        elif n.name not in dropped:
            out.append(n)
    return eliminate_dead_code(graph.replace(nodes=tuple(out), constants=constants))
