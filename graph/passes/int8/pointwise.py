"""Packed int8 convs as GEMMs over flattened pixels: a conv2d_int8x4 whose window is one pixel
(1x1, stride 1, no padding: MobileNetV2's expand/project convs, ResNet's 1x1s after im2col)
reads x[N, C4, H, W] as x[N, C4, 1, H*W] (a view), so its default schedule takes output
channels as register-tile rows and vectorises along all H*W pixels, not along one row of W.
A 7- or 14-pixel row fills one vector poorly and shares nothing across channels: 1x1
24 -> 576 words at 7x7 ran at 7.4 GOPS as [1, 24, 7, 7], 42 as [1, 24, 1, 49].

The int32 accumulator stays in the flat shape through its elementwise epilogue (offset add,
requantize, a residual DQ -> add -> Q: operands per channel, scalars, or full-size tensors,
which are viewed flat too), and one reshape after the chain restores [N, F, H, W]: every
reshape here is a view (graph/compile/tasks.py ALIAS_OPS), and the epilogue stays fused into the
conv, so activations stay int8 between kernels.

The default pipeline runs graph/passes/int8/nhwc.py first, which takes every packed conv fed
by an NCHW pack (pixel-major GEMMs, 1.4-1.8x faster in the models): these NCHW forms remain
for convs it leaves, and with that pass skipped.
"""
from __future__ import annotations

import numpy as np

from ....te.ops.int8.core import im2col_weight_int8x4
from ...ir import FrozenDict, Graph, Node, OpClass, Value
from ...ops.core import OPS
from ..dce import eliminate_dead_code
from ..rewrite import Namer

_EPILOGUE = (OpClass.ELEMWISE, OpClass.BROADCAST)


def _pointwise(node: Node) -> bool:
    if node.op != "conv2d_int8x4":
        return False
    w = node.inputs[1]
    x = node.inputs[0]
    return (len(x.shape) == 4 and w.shape[2:] == (1, 1) and x.shape[2] > 1
            and tuple(node.attrs["strides"]) == (1, 1) and not any(node.attrs["pads"]))


def _flat(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:2] + (1, shape[2] * shape[3])


def _operand_fits(v: Value | None, full: tuple[int, ...]) -> str | None:
    """How an epilogue operand follows the flat view: "same" (broadcasts as it is: its last
    two dims are 1, or it has fewer than 2 dims of which the last is 1), "view" (full-size:
    viewed flat), or None (anything else stops the chain)."""
    if v is None:
        return "same"
    shape = tuple(v.shape)
    if all(d == 1 for d in shape[-2:]) or not shape:
        return "same"
    if shape == full:
        return "view"
    return None


class _Flattener:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.namer = Namer(graph)
        self.consumers = graph.consumers()
        self.outputs = {v.name for v in graph.outputs}
        self.replaced: dict[str, list[Node]] = {}     # node name -> nodes emitted instead

    def view(self, v: Value, shape: tuple[int, ...], hint: str, out: Value | None = None):
        out = out or Value(self.namer(f"{v.name}/{hint}"), shape, v.dtype)
        return out, Node("reshape", (v,), (out,), FrozenDict(shape=tuple(shape)),
                         self.namer(f"{v.name}:{hint}"))

    def _reader(self, v: Value) -> Node | None:
        readers = self.consumers.get(v.name, [])
        if len(readers) != 1 or v.name in self.outputs:
            return None
        node = readers[0]
        ok = (OPS[node.op].opclass in _EPILOGUE and len(node.outputs) == 1
              and node.name not in self.replaced)
        return node if ok else None

    def rewrite(self, conv: Node) -> None:
        """Each rewritten node lands where the node it replaces was (the views of its
        operands just before it), so the order fusion seeds groups in is the original one."""
        full = conv.outputs[0].shape
        x = conv.inputs[0]
        x_flat, x_view = self.view(x, _flat(x.shape), "flat")
        acc = Value(self.namer(f"{conv.outputs[0].name}/flat"), _flat(full), "int32")
        emitted = [x_view, Node(conv.op, (x_flat, conv.inputs[1]), (acc,), conv.attrs,
                                conv.name)]
        self.replaced[conv.name] = emitted
        cur, orig = acc, conv.outputs[0]
        node = self._reader(orig)
        while node is not None and node.outputs[0].shape == full:
            fits = [_operand_fits(v, full) if v is None or v.name != orig.name else "cur"
                    for v in node.inputs]
            if None in fits:
                break
            emitted, ins = [], []
            for v, how in zip(node.inputs, fits):
                if how == "cur":
                    ins.append(cur)
                elif how == "view":
                    flat, reshape = self.view(v, _flat(full), "flat")
                    emitted.append(reshape)
                    ins.append(flat)
                else:
                    ins.append(v)
            out = node.outputs[0]
            cur = Value(self.namer(f"{out.name}/flat"), _flat(full), out.dtype)
            emitted.append(Node(node.op, tuple(ins), (cur,), node.attrs, node.name))
            self.replaced[node.name] = emitted
            orig = out
            node = self._reader(orig)
        emitted.append(self.view(cur, full, "unflat", out=orig)[1])


def flatten_pointwise_int8(graph: Graph) -> Graph:
    """Rewrite 1x1 stride-1 unpadded conv2d_int8x4 nodes (and their elementwise epilogue)
    to run over [N, C, 1, H*W] views (module docstring); others stay as they are."""
    convs = [n for n in graph.nodes if _pointwise(n)]
    if not convs:
        return graph
    flattener = _Flattener(graph)
    for conv in convs:
        if conv.name not in flattener.replaced:
            flattener.rewrite(conv)
    nodes = []
    for node in graph.nodes:
        nodes.extend(flattener.replaced.get(node.name, [node]))
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes)))


# -- windowed convs: im2col + the pointwise conv above ---------------------------------------

MAX_IM2COL_FACTOR = 49     # columns at most this many times the packed input (7x7 windows)
# The direct conv is kept when its output rows are whole vectors of this many int32 words
# (AVX2's; AVX-512's 16-lane kernels fall back to half vectors on such rows, see
# autotune/space/defaults.py _vector_tile) and each tap reduces at least DIRECT_MIN_WORDS
# words: 3x3 64 -> 64 at 56 x 56 (7 vectors a row, 16 words) ran at 9.0 ms direct, 13.1 ms
# through 9x larger columns; at 28 / 14 / 7 (tails, partial vectors) im2col was 1.7x / 6.5x /
# 6.9x faster, and the 3-channel stem (1 word a tap) 1.5x (1 thread, one loaded run).
DIRECT_ROW_LANES = 8
DIRECT_MIN_WORDS = 8


def _windowed(node: Node, graph: Graph) -> bool:
    if node.op != "conv2d_int8x4" or node.inputs[1].name not in graph.constants:
        return False
    _, c4, kh, kw = node.inputs[1].shape
    if (kh, kw) == (1, 1) and tuple(node.attrs["strides"]) == (1, 1) \
            and not any(node.attrs["pads"]):
        return False
    direct = node.outputs[0].shape[3] % DIRECT_ROW_LANES == 0 and c4 >= DIRECT_MIN_WORDS
    return not direct and kh * kw <= MAX_IM2COL_FACTOR


def im2col_int8_convs(graph: Graph) -> Graph:
    """Rewrite other packed convs (a window, a stride or padding; but those the direct conv
    runs well, see DIRECT_ROW_LANES) into im2col_int8x4 (its
    windows as [N, KH * KW * C4, OH, OW] columns) and a 1x1 conv2d_int8x4 with the weight
    reordered at compile time, which flatten_pointwise_int8 then runs as a GEMM over the
    output pixels. The columns hold each input word KH * KW / (sh * sw) times; the
    direct conv vectorises along one output row with a weight word broadcast, which 7- to
    28-wide rows fill poorly."""
    convs = [n for n in graph.nodes if _windowed(n, graph)]
    if not convs:
        return graph
    namer = Namer(graph)
    constants = dict(graph.constants)
    swap: dict[str, list[Node]] = {}
    for conv in convs:
        x, w = conv.inputs
        _, c4, kh, kw = w.shape
        a = conv.attrs
        out = conv.outputs[0]
        cols = Value(namer(f"{conv.name}/cols"), (x.shape[0], kh * kw * c4) + out.shape[2:],
                     "int32")
        words = im2col_weight_int8x4(np.asarray(graph.constants[w.name]))
        w2 = Value(namer(f"{w.name}/im2col"), words.shape, "int32")
        constants[w2.name] = words
        attrs = FrozenDict(kernel=(kh, kw), strides=tuple(a["strides"]),
                           dilations=tuple(a["dilations"]), pads=tuple(a["pads"]),
                           pad_word=int(a["pad_word"]))
        conv_attrs = dict(a)
        conv_attrs.update(strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0))
        swap[conv.name] = [Node("im2col_int8x4", (x,), (cols,), attrs,
                                namer(f"{conv.name}:im2col")),
                           Node(conv.op, (cols, w2), conv.outputs, FrozenDict(conv_attrs),
                                conv.name)]
    nodes = [m for n in graph.nodes for m in swap.get(n.name, [n])]
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes), constants=constants))
