"""Pixel-major int8 convs as implicit GEMMs with column-panel weights (targets whose byte dot
product is VNNI's vpdpbusd; te/ops/int8/vnni_conv.py).

graph/passes/int8/nhwc.py gives a dense int8 conv as [im2col_nhwc_int8x4 ->] reshape to
[pixels, K4] -> matmul_int8x4 with the weight words [K4, F]. On a VNNI target (the AVX2
passes after it leave it as it is) two things cost:

- the im2col copy, a kernel of its own that writes every word KH * KW times (ResNet-18's
  56 x 56 x 64 3x3 convs: 0.21 ms of columns before a 0.71 ms GEMM, 1 thread);
- the row-major weight: a register tile's vector axis is F, and with F not a multiple of
  the vector (MobileNetV2's 24-channel project convs on AVX-512: 16 + 8 lanes) the GEMM ran
  12x slower than onnxruntime's conv (3136 x 24 words -> 24: 0.73 ms against 0.06).

Each such matmul_int8x4 with a constant weight becomes [pad ->] conv_int8x4_panels: the
GEMM reads the (padded) words in place, and its weight comes as column panels of
`panel_block(F)` columns, so the matmul_prepacked defaults give it a register tile one panel
wide (8 columns for F = 24). A 1x1 conv (the matmul reads the words through a view) takes
the same kernel with a 1x1 window, a stem (C4 = 1: its split-tap columns) the same over
the words its pack padded (MobileNetV2's 3x3/2 stem, 1 thread: im2col 0.22 + GEMM 0.12 ms ->
0.12 ms; up to MAX_STEM_TAPS taps). Grouped convs' word slices keep the im2col. A width
no panel divides (ShuffleNet-V2's 58, 116) gets half-vector panels, the last zero-padded,
when it is wider than a vector; a narrower one keeps the GEMM.
"""
from __future__ import annotations

import numpy as np

from ....codegen.dot4 import dot4_strategies, target_features
from ....codegen.target import Target
from ...ir import FrozenDict, Graph, Node, Value
from ..dce import eliminate_dead_code
from ..rewrite import Namer


# a stem (C4 = 1) with a larger window keeps its columns: ResNet's 7x7/2 stem, 112 x 112 x 49
# words -> 64, AVX-512 VNNI, 1 thread: im2col 0.15 + GEMM 0.81 ms against 1.12 ms read in
# place (one word per tap and row; the columns give the GEMM 49-word runs)
MAX_STEM_TAPS = 9


def takes_vnni(target) -> bool:
    """Whether `target` (a Target or a target string; None: no) multiplies int8 bytes with
    VNNI (its first dot4 strategy)."""
    if target is None:
        return False
    tgt = Target.from_string(target)
    strategies = dot4_strategies(target_features(tgt))
    return bool(strategies) and strategies[0][1] == "vnni"


def panel_block(n: int, lanes: int) -> int | None:
    """The column-panel width for `n` output channels with `lanes` int32 lanes a vector:
    two vectors when they divide n, then one, then half a vector; when none does and n is
    wider than a vector, half a vector with the last panel zero-padded (the fewest padded
    columns; its register tile stores a guarded tail); else None (the [K4, F] GEMM).
    AVX-512, 1 thread, one-conv models: ShuffleNet-V2's 1x1 convs 16 x 16 x 58 -> 58
    0.112 -> 0.049 ms, 8 x 8 x 116 -> 116 0.047 -> 0.025, 28 x 28 x 64 -> 100 0.297 ->
    0.179, 56 x 56 x 96 -> 20 0.889 -> 0.547; but 28 x 28 x 64 -> 13 (two panels, 3 of 16
    columns padding) 0.046 -> 0.111.
    Three vectors (48 int32 columns) is no vector type LLVM's x86 backend handles well:
    196 pixels x 24 words -> 144 channels, AVX-512, 1 thread: 16-wide panels 0.020 ms,
    48-wide 0.190."""
    for block in (2 * lanes, lanes, lanes // 2):
        if block >= 1 and n % block == 0:
            return block
    return lanes // 2 if n > lanes and lanes >= 2 else None


def weight_panels(words: np.ndarray, block: int) -> np.ndarray:
    """Weight words [K4, F] -> column panels [ceil(F / block), K4, block], the last
    zero-padded."""
    k4, f = words.shape
    panels = -(-f // block)
    padded = np.zeros((k4, panels * block), np.int32)
    padded[:, :f] = words
    return np.ascontiguousarray(padded.reshape(k4, panels, block).transpose(1, 0, 2))


def grouped_panel_block(fg: int, n: int, lanes: int) -> int | None:
    """The panel width for a grouped conv of `fg` columns a group and `n` in all: the
    widest of two, one, half a vector inside one group (dividing fg), else the narrowest
    of them holding whole groups (ResNeXt-50's 4- and 8-channel groups: 8 columns, one or
    two groups a panel, a block-diagonal weight); None when neither fits."""
    for block in (2 * lanes, lanes, lanes // 2):
        if block >= 1 and fg % block == 0:
            return block
    for block in (lanes // 2, lanes):
        if block >= 1 and block % fg == 0 and n % block == 0:
            return block
    return None


def grouped_weight_panels(words: np.ndarray, groups: int, block: int) -> np.ndarray:
    """A grouped conv's weight words [T, Cg4, F] (tap, the group's word, column) -> panels
    [F / block, T * kc4, block] as te conv_int8x4_panels(groups=...) reads them: a panel's
    rows are its tap-major words of the kc4 words it spans, zero where a column's group
    does not own the word."""
    taps, cg4, f = words.shape
    fg = f // groups
    if f % groups or f % block or (fg % block and block % fg):
        raise ValueError(f"grouped_weight_panels(): {block}-column panels do not fit {f} "
                         f"columns in {groups} groups")
    per = max(1, block // fg)           # whole groups a panel holds
    out = np.zeros((f // block, taps, per * cg4, block), np.int32)
    for j in range(f):
        p, jj = divmod(j, block)
        local = j // fg - p * block // fg
        out[p, :, local * cg4:(local + 1) * cg4, jj] = words[:, :, j]
    return out.reshape(f // block, taps * per * cg4, block)


def _source(producers: dict, a: Value):
    """(words x[N, H, W, C4], im2col node or None) that the GEMM operand `a` views: plain
    im2col columns of x, or x itself (a 1x1 conv); None for anything else."""
    view = producers.get(a.name)
    if view is None or view.op != "reshape" or len(a.shape) != 2:
        return None
    src = view.inputs[0]
    node = producers.get(src.name)
    if node is not None and node.op == "im2col_nhwc_int8x4":
        # split_taps (a stem's C4 = 1 columns over words its pack padded) is the same K order
        if node.attr("pairs") or node.attr("words") or (
                node.attr("split_taps") and np.prod(node.attrs["kernel"]) > MAX_STEM_TAPS):
            return None
        x = node.inputs[0]
        return (x, node) if len(x.shape) == 4 and x.dtype == "int32" else None
    if (len(src.shape) == 4 and src.dtype == "int32" and src.shape[3] == a.shape[1]
            and int(np.prod(src.shape[:3])) == a.shape[0]):
        return src, None
    return None


def to_vnni_int8_convs(graph: Graph, target: Target | None = None) -> Graph:
    """Rewrite each pixel-major conv GEMM (module docstring) into [pad ->]
    conv_int8x4_panels on a VNNI target; the graph as it is elsewhere or when nothing
    qualifies."""
    if not takes_vnni(target):
        return graph
    tgt = target
    lanes = tgt.vector_lanes("int32")
    producers = {o.name: n for n in graph.nodes for o in n.outputs}
    namer = Namer(graph)
    constants = dict(graph.constants)
    out: list[Node] = []
    changed = False
    panels_of: dict[tuple[str, int], Value] = {}
    for node in graph.nodes:
        found = None
        if (node.op == "matmul_int8x4" and node.inputs[1].name in graph.constants
                and len(node.inputs[1].shape) == 2):
            found = _source(producers, node.inputs[0])
        block = panel_block(node.inputs[1].shape[1], lanes) if found else None
        if block is None:
            out.append(node)
            continue
        x, cols = found
        n = int(node.inputs[1].shape[1])
        if cols is None:
            attrs = {"kernel": (1, 1), "strides": (1, 1), "dilations": (1, 1),
                     "out_hw": tuple(x.shape[1:3])}
        else:
            a = cols.attrs
            top, left, bottom, right = a["pads"]
            if any(a["pads"]):
                nb, h, w, c4 = x.shape
                padded = Value(namer(f"{x.name}/padded"),
                               (nb, h + top + bottom, w + left + right, c4), "int32")
                out.append(Node("pad", (x,), (padded,), FrozenDict(
                    {"pads": (0, top, left, 0, 0, bottom, right, 0), "mode": "constant",
                     "value": int(a["pad_word"])}), namer(f"{node.name}/pad")))
                x = padded
            attrs = {"kernel": tuple(a["kernel"]), "strides": tuple(a["strides"]),
                     "dilations": tuple(a["dilations"]),
                     "out_hw": tuple(cols.outputs[0].shape[1:3])}
        wname = node.inputs[1].name
        if (wname, block) not in panels_of:
            arr = weight_panels(np.asarray(graph.constants[wname]), block)
            v = Value(namer(f"{wname}/panels"), arr.shape, "int32")
            constants[v.name] = arr
            panels_of[(wname, block)] = v
        attrs.update(n=n, seven_bit=bool(node.attr("seven_bit")),
                     symmetric=bool(node.attr("symmetric")))
        out.append(Node("conv_int8x4_panels", (x, panels_of[(wname, block)]), node.outputs,
                        FrozenDict(attrs), node.name))
        changed = True
    if not changed:
        return graph
    return eliminate_dead_code(graph.replace(nodes=tuple(out), constants=constants))
