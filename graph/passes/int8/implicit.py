"""Saturation-safe int8 convs without the im2col copy (AVX2 / AVX-512BW without VNNI, after
graph/passes/int8/perm.py).

int8_nhwc.py runs a windowed int8 conv as im2col_nhwc_int8x4 (a copy of every word KH * KW
times) -> view [N * OH * OW, KH * KW * C4] -> GEMM, which int8_perm.py makes a
matmul_int8x4_perm. When C4 is a multiple of 4 (at least 16 channels, in 16s), a group of 4
K words lies in one pixel of one tap, so the GEMM can read its 16 bytes from the (padded)
input words directly: conv_int8x4_perm (te/ops/int8/perm_conv.py). A padded conv gets a
pad of its words first (one copy of the image instead of KH * KW). ResNet-18's 56 x 56 x 64
3x3 convs, 1 thread: im2col 0.26-0.35 ms + GEMM 1.8-2.3 ms -> pad 0.01-0.03 ms + conv
1.5-1.7 ms (the padded image, 215 KB, stays in L2; the columns, 1.8 MB, did not).
"""
from __future__ import annotations

from ...ir import FrozenDict, Graph, Node, Value
from . import widen as int8_widen
from ..dce import eliminate_dead_code
from ..rewrite import Namer


def _columns_source(producers: dict, a: Value) -> Node | None:
    """The plain im2col_nhwc_int8x4 whose [rows, K4] view `a` is, if it is one."""
    view = producers.get(a.name)
    if view is None or view.op != "reshape":
        return None
    cols = producers.get(view.inputs[0].name)
    if (cols is None or cols.op != "im2col_nhwc_int8x4" or cols.attr("pairs")
            or cols.attr("split_taps") or cols.attr("words")):
        return None
    x = cols.inputs[0]
    if len(x.shape) != 4 or x.shape[3] % 4:
        return None
    return cols


def to_implicit_int8_convs(graph: Graph, target=None) -> Graph:
    """Rewrite each matmul_int8x4_perm over plain im2col columns with C4 a multiple of 4 (and
    whole column panels) into
    [pad ->] conv_int8x4_perm (module docstring); the graph as it is when nothing qualifies
    or the target keeps byte words (VNNI)."""
    if not int8_widen.widens_int8(target):
        return graph
    producers = {o.name: n for n in graph.nodes for o in n.outputs}
    namer = Namer(graph)
    out: list[Node] = []
    changed = False
    for node in graph.nodes:
        # whole panels only: a guarded column tail inside the tap loops compiles for tens of
        # seconds (13 of 16 columns: 31 s) and no CNN has one
        cols = (_columns_source(producers, node.inputs[0])
                if node.op == "matmul_int8x4_perm"
                and node.attrs["n"] % node.inputs[2].shape[-1] == 0 else None)
        if cols is None:
            out.append(node)
            continue
        a = cols.attrs
        x = cols.inputs[0]
        n, h, w, c4 = x.shape
        top, left, bottom, right = a["pads"]
        if any(a["pads"]):
            padded = Value(namer(f"{x.name}/padded"), (n, h + top + bottom, w + left + right, c4),
                           "int32")
            out.append(Node("pad", (x,), (padded,), FrozenDict(
                {"pads": (0, top, left, 0, 0, bottom, right, 0), "mode": "constant",
                 "value": int(a["pad_word"])}), namer(f"{node.name}/pad")))
            x = padded
        oh, ow = cols.outputs[0].shape[1:3]
        out.append(Node("conv_int8x4_perm", (x,) + tuple(node.inputs[1:]), node.outputs,
                        FrozenDict({"n": int(node.attrs["n"]), "kernel": tuple(a["kernel"]),
                                    "strides": tuple(a["strides"]),
                                    "dilations": tuple(a["dilations"]), "out_hw": (oh, ow)}),
                        node.name))
        changed = True
    if not changed:
        return graph
    return eliminate_dead_code(graph.replace(nodes=tuple(out)))
