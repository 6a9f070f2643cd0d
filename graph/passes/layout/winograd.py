"""Winograd convolution for the 3x3, stride-1 convs of the channel-blocked layout.

A `conv2d_nchwc` with a 3x3 window, stride 1, dilation 1, a blocked input and at least
MIN_CHANNELS input and output channels becomes three ops (te.ops.winograd), each its own kernel and
tuning task:

    winograd_input_transform(x)        -> V[a, a, P, C]       (opaque: runs alone)
    winograd_batch_matmul(V, U)        -> M[a, a, F/b, P, b]  (U: the weight, transformed here)
    winograd_output_transform(M)       -> y                   (absorbs bias, residual, relu)

with a = m + 2 for output tiles of m x m. The tile size comes from `winograd_tile_size`;
layers it returns None for stay direct convs. Runs after the blocked-layout pass, whose
conv2d_nchwc nodes carry their weight as a constant (pack_conv_weight_blocked).
"""
from __future__ import annotations


import numpy as np

from ....te.ops import unpack_conv_weight_blocked
from ....te.ops.winograd import pack_winograd_weight, winograd_tiles
from ...deferred import DeferredArray
from ...ir import FrozenDict, Graph, Node, Value

# Below this many input or output channels the transforms (work ~ C + F per tile) outweigh
# the GEMM's saving (~ C * F): the default CNN's 16-channel 3x3 convs at 32x32, tuned both
# ways on znver4, ran the whole model in 0.145 ms as Winograd chains and 0.127 ms direct
# (1 thread; 0.147 vs 0.130 at 2). 32 channels is the first width kept; it is unmeasured.
MIN_CHANNELS = 32


def winograd_tile_size(out_h: int, out_w: int, channels: int, filters: int) -> int | None:
    """The output tile size m for a 3x3 stride-1 conv, or None to keep the direct conv.

    Measured at 1 thread on Zen 3 (ResNet-18's layers, default schedules, the three stages
    interleaved in one process): m = 4 beats m = 2 at 56x56x64 (1.96 vs 2.77 ms) and
    28x28x128 (2.23 vs 2.91 ms), m = 2 beats m = 4 at 14x14x256 (2.0-2.6 vs 2.1-3.0 ms)
    and 7x7x512 (4.05 vs 4.50 ms): on small planes m = 4's cropped last tile wastes GEMM
    work, its output transform runs guarded per output (the guards stop the unrolled
    branches from sharing their loads and inner sums: 3-6x slower per output), and its few
    tiles make power-of-two strides between the transform planes. Both beat the tuned
    direct conv on all four (benchmarks/resnet_convs.py --winograd)."""
    if channels < MIN_CHANNELS or filters < MIN_CHANNELS:
        return None
    return 4 if min(out_h, out_w) >= 28 else 2


def _eligible(node: Node, constants) -> np.ndarray | None:
    """The packed blocked weight of a conv2d_nchwc node Winograd can compute, else None."""
    if node.op != "conv2d_nchwc" or not node.attrs["in_block"] or len(node.inputs) != 2:
        return None
    weight = constants.get(node.inputs[1].name)
    if weight is None or str(weight.dtype) != "float32" or weight.shape[2:4] != (3, 3):
        return None
    if tuple(node.attrs["strides"]) != (1, 1) or tuple(node.attrs["dilations"]) != (1, 1):
        return None
    return weight


def _transformed_weight(packed: np.ndarray, m: int, block: int) -> np.ndarray:
    return pack_winograd_weight(unpack_conv_weight_blocked(packed), m, block)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """a and b (same dtype and shape) hold the same bytes (-0.0 is not 0.0, a nan equals
    itself: what a hash of their bytes decided)."""
    if a is b:
        return True
    flat = lambda x: np.ascontiguousarray(x).reshape(-1).view(np.uint8)  # noqa: E731
    return bool(np.array_equal(flat(a), flat(b)))


class _Rewriter:
    def __init__(self, graph: Graph, tile_size):
        self.graph = graph
        self.tile_size = tile_size
        self.constants = dict(graph.constants)
        self.taken = set(self.constants) | {v.name for v in graph.inputs} \
            | {v.name for n in graph.nodes for v in n.outputs}
        # (m, dtype, shape) -> [(packed weight, its U)]: equal weights found by comparing
        # bytes with the few of the same shape (a sha256 of every weight cost the serial
        # start 0.1 s on ResNet-18)
        self.transformed: dict[tuple, list[tuple[np.ndarray, Value]]] = {}
        self.nodes: list[Node] = []

    def fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def weight(self, w: Value, packed: np.ndarray, m: int, block: int, filters: int,
               channels: int) -> Value:
        """U for weight `w`, once per distinct weight and tile size: a weight shared by
        several convs is one constant (the blocked-layout pass re-packs it per conv, so
        equal packed weights are recognised by content). Its values are computed when
        first used (graph/deferred.py: the compile does it while its workers build
        kernels)."""
        seen = self.transformed.setdefault((m, str(packed.dtype), packed.shape), [])
        for other, value in seen:
            if _same_bytes(other, packed):
                return value
        u = DeferredArray((m + 2, m + 2, filters // block, channels, block), packed.dtype,
                          _transformed_weight, packed, m, block)
        name = self.fresh(f"{w.name}/winograd{m}")
        self.constants[name] = u
        seen.append((packed, Value(name, tuple(u.shape), w.dtype)))
        return seen[-1][1]

    def rewrite(self, node: Node) -> bool:
        packed = _eligible(node, self.constants)
        if packed is None:
            return False
        x, w = node.inputs
        out = node.outputs[0]
        n, fo, oh, ow, block = out.shape
        channels, filters = x.shape[1] * x.shape[4], fo * block
        m = self.tile_size(oh, ow, channels, filters)
        if m is None:
            return False
        alpha = m + 2
        tiles = n * winograd_tiles(oh, m) * winograd_tiles(ow, m)
        v = Value(self.fresh(f"{out.name}/winograd_v"), (alpha, alpha, tiles, channels),
                  out.dtype)
        mm = Value(self.fresh(f"{out.name}/winograd_m"), (alpha, alpha, fo, tiles, block),
                   out.dtype)
        pads = tuple(node.attrs["pads"])
        self.nodes += [
            Node("winograd_input_transform", (x,), (v,), FrozenDict(m=m, pads=pads),
                 self.fresh(f"{node.name}/winograd_input")),
            Node("winograd_batch_matmul",
                 (v, self.weight(w, packed, m, block, filters, channels)), (mm,),
                 FrozenDict(), self.fresh(f"{node.name}/winograd_gemm")),
            Node("winograd_output_transform", (mm,), (out,),
                 FrozenDict(m=m, batch=n, out_hw=(oh, ow)), node.name)]
        return True

    def run(self) -> Graph:
        changed = False
        for node in self.graph.nodes:
            if self.rewrite(node):
                changed = True
            else:
                self.nodes.append(node)
        if not changed:
            return self.graph
        used = {v.name for n in self.nodes for v in n.inputs if v is not None} \
            | {v.name for v in self.graph.outputs}
        constants = {k: a for k, a in self.constants.items() if k in used}
        return self.graph.replace(nodes=tuple(self.nodes), constants=constants)


def to_winograd(graph: Graph, tile_size=None) -> Graph:
    """Rewrite eligible blocked 3x3 stride-1 convs into Winograd ops (see module doc);
    `tile_size(out_h, out_w, channels, filters)` picks m (None: keep the conv); default
    winograd_tile_size (looked up per call, so a test can swap the rule)."""
    return _Rewriter(graph, tile_size or _module_rule()).run()


def _module_rule():
    return globals()["winograd_tile_size"]
