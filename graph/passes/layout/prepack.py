"""Layout rewrite of constant matmul weights: matmul(x, W) -> matmul_prepacked(x, Wp).

A matmul whose right operand is a constant float32 W[K, N] (a linear layer's weight, also
the Gemm transB form once constant folding has transposed it) gets W re-laid out once, at
compile time, as column panels Wp[ceil(N / block), K, block] (te.ops.pack_matmul_weight).
Row-major W puts consecutive k of a register tile's columns a whole row (4 KB for N = 1024)
apart, all in the same L1 sets; a panel makes them one contiguous run, which the in-kernel
`pack` knob otherwise copies on every run. The batch-broadcast form x[B, M, K] @ W[K, N]
(BERT's linears) is rewritten too; runtime weights, other ranks, narrow outputs (at most
one panel: the layout would not change) and GEMVs whose weight exceeds
GEMV_MAX_WEIGHT_BYTES (streamed from DRAM, where panels measured slower) are left alone.
"""
from __future__ import annotations

import math

from ....te.ops import pack_matmul_weight
from ...ir import Graph, Node, Value
from ..rewrite import Namer

GEMM_BLOCK = 16     # two AVX2 vectors: the columns of a 6 x 16 register tile
GEMV_BLOCKS = range(48, 15, -8)   # a GEMV panel: up to 6 vectors of independent accumulators
# A GEMV reads each weight once: packing pays only while the weight stays cache-resident
# between runs. In-model, 1 thread, old (row-major, streaming schedule) vs panels: MLP's
# 784 -> 256 (0.8 MB) 0.028 -> 0.019 ms; MobileNetV2's 1280 -> 1000 (5 MB, from DRAM)
# 0.42 -> 0.54 ms (at 2 threads 0.50 -> 0.50), so larger GEMV weights stay row-major.
GEMV_MAX_WEIGHT_BYTES = 1 << 20


def matmul_weight_block(rows: int, columns: int) -> int:
    """The panel width for a matmul with `rows` output rows (all leading dims of x) and
    `columns` output columns. A GEMM (rows > 1) takes GEMM_BLOCK, the register tile's width
    (a tail panel when it does not divide). A GEMV streams each panel once into accumulators
    held in registers, so it takes the widest panel of 2-6 vectors that divides the columns
    (1000 -> 40: 25 panels, dealt out to the threads), else GEMM_BLOCK with a tail panel.

    A GEMM whose columns 16 does not divide but 8 does takes panels of 8 (one AVX2 vector,
    half an AVX-512 one): a tail panel's column guard sits in every register tile's inner
    loop. 1 thread, AVX-512, panels of 16 vs 8: EdgeNeXt's 1024x96 @ 96x24 0.77 -> 0.08 ms
    (onnxruntime 0.06), 256x96 @ 96x120 0.23 -> 0.08, 256x64 @ 64x72 0.16 -> 0.04, 128x256 @
    256x1000 0.82 -> 0.76. Columns 8 does not divide keep the tail panel, zero-padded; its
    partial vector runs as a narrower one (schedule/passes/tails.py): 16 x 64x64 @ 64x17
    0.40 -> 0.035 ms (onnxruntime 0.04)."""
    if rows > 1:
        if columns % GEMM_BLOCK and columns % (GEMM_BLOCK // 2) == 0:
            return GEMM_BLOCK // 2
        return GEMM_BLOCK
    return next((b for b in GEMV_BLOCKS if columns % b == 0), GEMM_BLOCK)


def _eligible(node: Node, graph: Graph) -> bool:
    if node.op != "matmul":
        return False
    x, w = node.inputs
    const = graph.constants.get(w.name)
    if (const is None or const.ndim != 2 or str(const.dtype) != "float32"
            or x.dtype != "float32" or len(x.shape) < 2 or const.shape[1] <= GEMM_BLOCK):
        return False
    return math.prod(x.shape[:-1]) > 1 or const.nbytes <= GEMV_MAX_WEIGHT_BYTES


def prepack_matmul_weights(graph: Graph) -> Graph:
    """Rewrite every matmul with a constant 2-D float32 weight into matmul_prepacked."""
    if not any(_eligible(n, graph) for n in graph.nodes):
        return graph
    constants = dict(graph.constants)
    namer = Namer(graph)
    packed: dict[tuple[str, int], Value] = {}
    nodes = []
    for node in graph.nodes:
        if not _eligible(node, graph):
            nodes.append(node)
            continue
        x, w = node.inputs
        n = w.shape[1]
        block = matmul_weight_block(math.prod(x.shape[:-1]), n)
        if (w.name, block) not in packed:
            name = namer(f"{w.name}/panels{block}")
            constants[name] = pack_matmul_weight(graph.constants[w.name], block)
            packed[w.name, block] = Value(name, constants[name].shape, w.dtype)
        nodes.append(Node("matmul_prepacked", (x, packed[w.name, block]), node.outputs,
                          {"n": n}, node.name))
    used = {v.name for n in nodes for v in n.inputs if v is not None} \
        | {v.name for v in graph.outputs}
    constants = {k: v for k, v in constants.items() if k in used}
    return graph.replace(nodes=tuple(nodes), constants=constants)
