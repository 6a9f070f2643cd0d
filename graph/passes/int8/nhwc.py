"""int8 convs in pixel-major (NHWC) layout: dense packed convs as GEMMs with the pixels as rows
and the output channels as the vector axis, depthwise integer convs with the channels innermost.

The NCHW forms vectorise along pixels: a 3x3 conv after im2col took 8 output channels as
broadcast rows over one 7- or 8-pixel vector, two weight-pair broadcasts per row and k word
(17 loads per 256 multiply-adds), its 7-lane pixel vectors gathered from scalar loads; the
depthwise conv ran along rows of 7 to 112 pixels. Here a dense conv2d_int8x4 becomes

    x[N, C, H, W] -transpose-> [N, H, W, C] -bitcast_int8x4 (a view; pack_int8x4 along axis 3
      for int8 x or C not a multiple of 4)-> words [N, H, W, C4]
      -im2col_nhwc_int8x4 (a window, stride or padding; a 1x1 conv reads the words as they
      are)-> [N * OH * OW, KH * KW * C4] -matmul_int8x4 with the weight [KH * KW * C4, F]->
      int32 [N * OH * OW, F]

which int8_widen.py gives the int16-pair panels of the 1024^3 int8 GEMM; a depthwise
conv2d_integer becomes depthwise_conv2d_integer_nhwc over the transposed activations. The
conv's elementwise epilogue (offset adds, requantize, a residual DQ -> add -> Q) follows in
the same layout (per-channel operands as [F], full-size ones transposed), and a transpose
back to NCHW ends the chain. Between two rewritten convs the transposes back and forth
cancel (simplify.cancel_transposes), so the activations stay pixel-major int8 from conv to
conv; an NCHW reader (a pool, the classifier) gets the transpose.
"""
from __future__ import annotations

import numpy as np

from ....codegen.target import Target
from ...ir import FrozenDict, Graph, Node, OpClass, Value
from ...ops.core import OPS
from ....te.ops.int8 import core as tq
from ..dce import eliminate_dead_code
from .vnni_conv import grouped_panel_block, grouped_weight_panels, takes_vnni
from .quantize import byte_word
from ..rewrite import Namer
from ..simplify import cancel_transposes
from ..layout.sink import sink_layout_moves

_EPILOGUE = (OpClass.ELEMWISE, OpClass.BROADCAST)
_INTS = ("uint8", "int8")
TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def nhwc_weight_words(words: np.ndarray) -> np.ndarray:
    """Packed conv weight words [F, C4, KH, KW] -> the matmul weight [KH * KW * C4, F] whose
    row (ry * KW + rx) * C4 + c4 meets im2col_nhwc_int8x4's column of the same index."""
    f, c4, kh, kw = words.shape
    return np.ascontiguousarray(words.transpose(2, 3, 1, 0).reshape(kh * kw * c4, f))


class _Rewriter:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.namer = Namer(graph)
        self.constants = dict(graph.constants)
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.outputs = {v.name for v in graph.outputs}
        self.replaced: dict[str, list[Node]] = {}     # node name -> nodes emitted instead
        # values that emitted nodes read as they are (NCHW): a chain stops there, so they
        # stay produced
        self.pinned: set[str] = set()
        self.ends: set[str] = set()     # NCHW values a rewritten chain transposes back to

    def node(self, op: str, ins, shape, dtype: str, attrs: dict, hint: str,
             out: Value | None = None) -> tuple[Value, Node]:
        out = out or Value(self.namer(hint), tuple(shape), dtype)
        return out, Node(op, tuple(ins), (out,), FrozenDict(attrs), self.namer(hint))

    def const(self, arr: np.ndarray, hint: str) -> Value:
        v = Value(self.namer(hint), arr.shape, arr.dtype.name)
        self.constants[v.name] = arr
        return v

    def to_nhwc(self, v: Value, emitted: list[Node]) -> Value:
        self.pinned.add(v.name)
        n, c, h, w = v.shape
        out, node = self.node("transpose", (v,), (n, h, w, c), v.dtype,
                              {"perm": TO_NHWC}, f"{v.name}/nhwc")
        emitted.append(node)
        return out

    def reshape(self, v: Value, shape, emitted: list[Node], out: Value | None = None) -> Value:
        out, node = self.node("reshape", (v,), shape, v.dtype, {"shape": tuple(shape)},
                              f"{v.name}/view", out)
        emitted.append(node)
        return out

    # -- the anchors ---------------------------------------------------------------------

    def dense(self, conv: Node) -> None:
        xp, w = conv.inputs
        pack = self.producers[xp.name]
        x = pack.inputs[0]
        a = conv.attrs
        f, c4, kh, kw = w.shape
        n, _, oh, ow = conv.outputs[0].shape
        emitted: list[Node] = []
        xt = self.to_nhwc(x, emitted)
        if pack.attrs["flip"] or x.shape[1] % 4:     # int8 x is stored as x + 128
            words, node = self.node("pack_int8x4", (xt,), xt.shape[:3] + (c4,), "int32",
                                    {"axis": 3, "flip": pack.attrs["flip"]}, f"{x.name}/words")
        else:           # 4 channels of a pixel are a word already: a view, no kernel
            words, node = self.node("bitcast_int8x4", (xt,), xt.shape[:3] + (c4,), "int32",
                                    {}, f"{x.name}/words")
        emitted.append(node)
        window = (kh, kw) != (1, 1) or tuple(a["strides"]) != (1, 1) or any(a["pads"])
        if window and c4 == 1:
            # a stem (its channels in one word): the words padded in the kernel that makes
            # them (the input's quantize, transpose and pack), then the windows as a copy of
            # [KH, KW] runs (split_taps: each tap row a contiguous run, no div/mod, no
            # select). ResNet-18's 7x7/2 stem, 1 thread: the columns fused with the quantize
            # (each word quantized once per tap) 1.9 ms; this copy 0.26 ms.
            top, left, bottom, right = a["pads"]
            if any(a["pads"]):
                hp, wp = words.shape[1] + top + bottom, words.shape[2] + left + right
                words, node = self.node("pad", (words,), (n, hp, wp, 1), "int32",
                                        {"pads": (0, top, left, 0, 0, bottom, right, 0),
                                         "mode": "constant", "value": int(a["pad_word"])},
                                        f"{x.name}/words_padded")
                emitted.append(node)
            words, node = self.node(
                "im2col_nhwc_int8x4", (words,), (n, oh, ow, kh, kw), "int32",
                {"kernel": (kh, kw), "strides": tuple(a["strides"]),
                 "dilations": tuple(a["dilations"]), "pads": (0, 0, 0, 0),
                 "pad_word": int(a["pad_word"]), "split_taps": True}, f"{conv.name}/cols")
            emitted.append(node)
        elif window:
            words, node = self.node(
                "im2col_nhwc_int8x4", (words,), (n, oh, ow, kh * kw, c4), "int32",
                {"kernel": (kh, kw), "strides": tuple(a["strides"]),
                 "dilations": tuple(a["dilations"]), "pads": tuple(a["pads"]),
                 "pad_word": int(a["pad_word"])}, f"{conv.name}/cols")
            emitted.append(node)
        rows = n * oh * ow
        cols = self.reshape(words, (rows, kh * kw * c4), emitted)
        weight = self.const(nhwc_weight_words(np.asarray(self.graph.constants[w.name])),
                            f"{w.name}/nhwc")
        acc, node = self.node("matmul_int8x4", (cols, weight), (rows, f), "int32",
                              {"seven_bit": a["seven_bit"], "symmetric": a.get("symmetric",
                                                                                  False)},
                              conv.name)
        emitted.append(node)
        self.replaced[conv.name] = emitted
        self.epilogue(conv.outputs[0], acc, flat=True)

    def depthwise(self, conv: Node) -> None:
        x, w = conv.inputs[0], conv.inputs[1]
        a = conv.attrs
        emitted: list[Node] = []
        xt = self.to_nhwc(x, emitted)
        weight = np.asarray(self.graph.constants[w.name])          # [C, 1, KH, KW]
        wt = self.const(np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0)), f"{w.name}/nhwc")
        n, c, oh, ow = conv.outputs[0].shape
        acc, node = self.node("depthwise_conv2d_integer_nhwc", (xt, wt), (n, oh, ow, c),
                              "int32", {"strides": tuple(a["strides"]),
                                        "dilations": tuple(a["dilations"]),
                                        "pads": tuple(a["pads"]),
                                        "pad_value": _pad_value(conv, self.graph)}, conv.name)
        emitted.append(node)
        self.replaced[conv.name] = emitted
        self.epilogue(conv.outputs[0], acc, flat=False)

    def activation_words(self, x: Value, emitted: list[Node]) -> tuple[Value, bool]:
        """x's channels as NHWC int32 words of 4 bytes (nodes appended to `emitted`), and
        whether they are flipped: int8 x is read as x + 128, taken off after the GEMM."""
        flip = x.dtype == "int8"
        xt = self.to_nhwc(x, emitted)
        shape = xt.shape[:3] + (x.shape[1] // 4,)
        if flip:
            words, node = self.node("pack_int8x4", (xt,), shape, "int32",
                                    {"axis": 3, "flip": True}, f"{x.name}/words")
        else:
            words, node = self.node("bitcast_int8x4", (xt,), shape, "int32", {},
                                    f"{x.name}/words")
        emitted.append(node)
        return words, flip

    def grouped_panels(self, conv: Node, lanes: int) -> None:
        """A grouped integer conv on a VNNI target (`lanes` int32 lanes a vector): the NHWC
        words once, [pad ->] one conv_int8x4_panels(groups=...) that reads each panel's
        group words in place, no im2col, no per-group GEMMs or concat (te
        quantized_vnni_conv). RegNet-X-400MF's and ResNeXt-50's grouped 3x3 convs ran as
        the generic conv2d_integer (above MAX_GROUPS groups) at 55% of their time."""
        x, w = conv.inputs[0], conv.inputs[1]
        a = conv.attrs
        weight = np.asarray(self.graph.constants[w.name])      # [F, Cg, KH, KW] int8
        f, cg, kh, kw = weight.shape
        groups = int(a["groups"])
        n, _, oh, ow = conv.outputs[0].shape
        pad_byte = _pad_value(conv, self.graph)
        emitted: list[Node] = []
        words, flip = self.activation_words(x, emitted)
        c4 = words.shape[3]
        top, left, bottom, right = a["pads"]
        if any(a["pads"]):
            pad_word = byte_word((pad_byte + 128) % 256 if flip else pad_byte % 256)
            nb, h, wd, _ = words.shape
            words, node = self.node("pad", (words,), (nb, h + top + bottom,
                                                      wd + left + right, c4), "int32",
                                    {"pads": (0, top, left, 0, 0, bottom, right, 0),
                                     "mode": "constant", "value": pad_word},
                                    f"{conv.name}/pad")
            emitted.append(node)
        block = grouped_panel_block(f // groups, f, lanes)
        packed = tq.pack_weight_int8x4(weight, 1)                # [F, Cg4, KH, KW]
        taps_words = packed.transpose(2, 3, 1, 0).reshape(kh * kw, cg // 4, f)
        wv = self.const(grouped_weight_panels(taps_words, groups, block),
                        f"{w.name}/group_panels")
        acc, node = self.node("conv_int8x4_panels", (words, wv), (n * oh * ow, f), "int32",
                              {"n": f, "kernel": (kh, kw), "strides": tuple(a["strides"]),
                               "dilations": tuple(a["dilations"]), "out_hw": (oh, ow),
                               "groups": groups,
                               "seven_bit": bool(weight.min() >= -64 and weight.max() <= 63),
                               "symmetric": bool(weight.min() >= -127)}, conv.name)
        emitted.append(node)
        if flip:
            sums = weight.astype(np.int64).sum(axis=(1, 2, 3))
            fix = self.const((-128 * sums).astype(np.int32), f"{w.name}/flip_offset")
            acc, node = self.node("add", (acc, fix), (n * oh * ow, f), "int32", {},
                                  f"{conv.name}/unflip")
            emitted.append(node)
        self.replaced[conv.name] = emitted
        self.epilogue(conv.outputs[0], acc, flat=True)

    def grouped(self, conv: Node) -> None:
        """A grouped integer conv (groups > 1, not depthwise; channels per group a multiple
        of 4): the NHWC words once, then per group a slice of its words (read by its
        im2col), a GEMM with that group's weight words [KH * KW * Cg4, Fg], and the groups'
        int32 outputs concatenated along the channels before the epilogue. The GEMMs get the
        dense convs' int16-pair / saturation-safe panels; the generic conv2d_integer ran
        RegNet-X-400MF's grouped 3x3 convs at ~25 GMAC/s, 66% of its time."""
        x, w = conv.inputs[0], conv.inputs[1]
        a = conv.attrs
        weight = np.asarray(self.graph.constants[w.name])      # [F, Cg, KH, KW] int8
        f, cg, kh, kw = weight.shape
        groups = int(a["groups"])
        fg, cg4 = f // groups, cg // 4
        n, _, oh, ow = conv.outputs[0].shape
        pad_byte = _pad_value(conv, self.graph)
        emitted: list[Node] = []
        words, flip = self.activation_words(x, emitted)
        c4 = words.shape[3]
        window = (kh, kw) != (1, 1) or tuple(a["strides"]) != (1, 1) or any(a["pads"])
        pad_word = byte_word((pad_byte + 128) % 256 if flip else pad_byte % 256)
        rows = n * oh * ow
        parts = []
        for g in range(groups):
            if window:      # the group's words read by its im2col kernel (OPAQUE)
                part, node = self.node(
                    "im2col_nhwc_int8x4", (words,), (n, oh, ow, kh * kw, cg4), "int32",
                    {"kernel": (kh, kw), "strides": tuple(a["strides"]),
                     "dilations": tuple(a["dilations"]), "pads": tuple(a["pads"]),
                     "pad_word": pad_word, "words": (g * cg4, cg4)}, f"{conv.name}/cols{g}")
            else:           # a slice the GEMM reads in place
                part, node = self.node("slice", (words,), words.shape[:3] + (cg4,), "int32",
                                       {"starts": (0, 0, 0, g * cg4),
                                        "ends": words.shape[:3] + ((g + 1) * cg4,),
                                        "steps": (1, 1, 1, 1)}, f"{conv.name}/group{g}")
            emitted.append(node)
            cols = self.reshape(part, (rows, kh * kw * cg4), emitted)
            wg = weight[g * fg:(g + 1) * fg]
            words_g = tq.pack_weight_int8x4(wg, 1)
            wv = self.const(nhwc_weight_words(words_g), f"{w.name}/group{g}")
            acc, node = self.node("matmul_int8x4", (cols, wv), (rows, fg), "int32",
                                  {"seven_bit": bool(wg.min() >= -64 and wg.max() <= 63),
                                   "symmetric": bool(wg.min() >= -127)}, f"{conv.name}/g{g}")
            emitted.append(node)
            parts.append(acc)
        acc, node = self.node("concat", tuple(parts), (rows, f), "int32", {"axis": 1},
                              f"{conv.name}/groups")
        emitted.append(node)
        if flip:
            sums = weight.astype(np.int64).sum(axis=(1, 2, 3))
            fix = self.const((-128 * sums).astype(np.int32), f"{w.name}/flip_offset")
            acc, node = self.node("add", (acc, fix), (rows, f), "int32", {},
                                  f"{conv.name}/unflip")
            emitted.append(node)
        self.replaced[conv.name] = emitted
        self.epilogue(conv.outputs[0], acc, flat=True)

    def max_pool(self, pool: Node) -> None:
        """An integer max pool of a rewritten conv's output, pooled in NHWC: viewed as the
        channel-blocked [N, 1, H, W, C] that max_pool2d takes (one block of all channels),
        so the transposes around it cancel (ResNet-18's stem: 112 x 112 x 64 went to NCHW
        and back for the pool)."""
        x, out = pool.inputs[0], pool.outputs[0]
        n, c, h, w = x.shape
        _, _, oh, ow = out.shape
        emitted: list[Node] = []
        blocked = self.reshape(self.to_nhwc(x, emitted), (n, 1, h, w, c), emitted)
        pooled, node = self.node("max_pool2d", (blocked,), (n, 1, oh, ow, c), out.dtype,
                                 pool.attrs, pool.name)
        emitted.append(node)
        flat = self.reshape(pooled, (n, oh, ow, c), emitted)
        emitted.append(self.node("transpose", (flat,), out.shape, out.dtype,
                                 {"perm": TO_NCHW}, f"{out.name}/nchw", out=out)[1])
        self.replaced[pool.name] = emitted
        self.ends.add(out.name)

    # -- the epilogue --------------------------------------------------------------------

    def _reader(self, v: Value) -> Node | None:
        readers = self.consumers.get(v.name, [])
        if len(readers) != 1 or v.name in self.outputs or v.name in self.pinned:
            return None
        node = readers[0]
        ok = (OPS[node.op].opclass in _EPILOGUE and len(node.outputs) == 1
              and node.name not in self.replaced and node.outputs[0].shape == v.shape)
        return node if ok else None

    def _operand(self, v: Value, full: tuple[int, ...], flat: bool, emitted: list[Node],
                 depth: int = 0):
        """An epilogue operand in the pixel-major layout, or None when it does not follow
        (it stops the chain): scalars as they are, per-channel [F, 1, 1] as [F], full-size
        ones transposed (and viewed flat)."""
        shape = (1,) * (4 - len(v.shape)) + tuple(v.shape) if len(v.shape) <= 4 else None
        if shape is None:
            return None
        if all(d == 1 for d in shape):
            if len(v.shape) <= 1:
                return v
            # one element of rank > 1 (a 1-channel conv's [1, 1, 1] offset) would broadcast
            # the flat [pixels, F] chain up to its own rank: as [1]
            if v.name in self.constants:
                return self.const(self.constants[v.name].reshape(1), f"{v.name}/nhwc")
            return self.reshape(v, (1,), emitted)
        if shape[0] == 1 and shape[2:] == (1, 1) and shape[1] == full[1]:
            if v.name in self.constants:     # a new constant: views of constants are not
                return self.const(self.constants[v.name].reshape(full[1]), f"{v.name}/nhwc")
            return self.reshape(v, (full[1],), emitted)
        if shape == full:
            moved = self._through(v, full, flat, emitted, depth)
            if moved is not None:
                return moved
            t = self.to_nhwc(v, emitted)
            return self.reshape(t, (full[0] * full[2] * full[3], full[1]), emitted) if flat \
                else t
        return None

    def _through(self, v: Value, full, flat: bool, emitted: list[Node], depth: int):
        """A full-size operand made by an elementwise op (a residual branch's DQ): that op
        again over its operands in the pixel-major layout, so a transpose back from another
        rewritten conv cancels, and the op follows the anchor in node order (placed
        before it, as the NCHW op was, it would seed the fused group and leave the GEMM
        without its epilogue). None when it is not such an op."""
        node = self.producers.get(v.name)
        if depth >= 1 or node is None or len(node.outputs) != 1 \
                or node.name in self.replaced or OPS[node.op].opclass not in _EPILOGUE:
            return None
        trial: list[Node] = []
        ins = []
        for u in node.inputs:
            ins.append(None if u is None else self._operand(u, full, flat, trial, depth + 1))
            if u is not None and ins[-1] is None:
                return None
        shape = (full[0] * full[2] * full[3], full[1]) if flat else \
            (full[0], full[2], full[3], full[1])
        out, new = self.node(node.op, ins, shape, v.dtype, node.attrs, f"{node.name}/nhwc")
        emitted.extend(trial + [new])
        return out

    def epilogue(self, orig: Value, cur: Value, flat: bool) -> None:
        """Rewrite the single-reader elementwise chain after an anchor whose NCHW output
        `orig` is now `cur` (pixel-major), ending in a transpose back to NCHW."""
        full = tuple(orig.shape)
        last = self.replaced[self.producers[orig.name].name]
        node = self._reader(orig)
        while node is not None:
            emitted, ins = [], []
            for v in node.inputs:
                if v is not None and v.name == orig.name:
                    ins.append(cur)
                    continue
                ins.append(None if v is None else self._operand(v, full, flat, emitted))
                if v is not None and ins[-1] is None:
                    break
            else:
                out = node.outputs[0]
                cur, new = self.node(node.op, ins, cur.shape, out.dtype, node.attrs,
                                     node.name)
                emitted.append(new)
                self.replaced[node.name] = last = emitted
                orig = out
                node = self._reader(orig)
                continue
            break
        self.ends.add(orig.name)
        n, c, h, w = full
        if flat:
            cur = self.reshape(cur, (n, h, w, c), last)
        last.append(self.node("transpose", (cur,), full, orig.dtype, {"perm": TO_NCHW},
                              f"{orig.name}/nchw", out=orig)[1])


def _pad_value(conv: Node, graph: Graph) -> int:
    if len(conv.inputs) < 3 or conv.inputs[2] is None:
        return 0
    return int(np.asarray(graph.constants[conv.inputs[2].name]).reshape(-1)[0])


def _dense(node: Node, graph: Graph, producers) -> bool:
    if node.op != "conv2d_int8x4" or len(node.inputs[1].shape) != 4 \
            or node.inputs[1].name not in graph.constants:
        return False
    pack = producers.get(node.inputs[0].name)
    return (pack is not None and pack.op == "pack_int8x4" and pack.attrs["axis"] == 1
            and len(pack.inputs[0].shape) == 4)


# the groups' outputs are joined by a concat, which loads every input for every element
# (te concatenate: a chain of selects): RegNet-X-400MF (2-25 groups) ran 1.95x -> 1.46x
# onnxruntime with every grouped conv rewritten, RegNet-Y-400MF (6-55 groups) 1.29x -> 1.49x.
MAX_GROUPS = 16


def _grouped(node: Node, graph: Graph, lanes: int | None = None) -> bool:
    """A grouped (not depthwise) conv2d_integer with a constant int8 weight and zero point
    whose groups start on word boundaries, at most MAX_GROUPS of them (per-group GEMMs);
    any number on a VNNI target (`lanes`: its int32 lanes) whose panels fit the groups
    (one conv kernel, no concat)."""
    if node.op != "conv2d_integer" or len(node.inputs[0].shape) != 4:
        return False
    x, w = node.inputs[0], node.inputs[1]
    groups = int(node.attrs["groups"])
    zp_ok = len(node.inputs) < 3 or node.inputs[2] is None \
        or node.inputs[2].name in graph.constants
    weight = graph.constants.get(w.name)
    return (weight is not None and weight.dtype == np.int8 and weight.ndim == 4 and zp_ok
            and x.dtype in _INTS and 1 < groups < x.shape[1]
            and w.shape[1] % 4 == 0
            and w.shape[1] * groups == x.shape[1] and w.shape[0] % groups == 0
            and (groups <= MAX_GROUPS or (lanes is not None and grouped_panel_block(
                w.shape[0] // groups, w.shape[0], lanes) is not None)))


def _depthwise(node: Node, graph: Graph) -> bool:
    if node.op != "conv2d_integer" or len(node.inputs[0].shape) != 4:
        return False
    x, w = node.inputs[0], node.inputs[1]
    zp_ok = len(node.inputs) < 3 or node.inputs[2] is None \
        or node.inputs[2].name in graph.constants
    weight = graph.constants.get(w.name)
    return (weight is not None and weight.dtype == np.int8 and zp_ok
            and node.attrs["groups"] == x.shape[1] == w.shape[0] and w.shape[1] == 1)


def to_pixel_major_int8(graph: Graph, target: Target | None = None) -> Graph:
    """Rewrite packed dense int8 convs (conv2d_int8x4 fed by an NCHW pack) and depthwise
    integer convs with a constant int8 weight and zero point into their pixel-major forms
    (module docstring); other nodes stay as they are. On a VNNI `target` a grouped conv
    becomes one grouped conv_int8x4_panels instead of per-group GEMMs."""
    producers = graph.producers()
    lanes = None
    if takes_vnni(target):
        lanes = target.vector_lanes("int32")
    dense = {n.name for n in graph.nodes if _dense(n, graph, producers)}
    depthwise = {n.name for n in graph.nodes if _depthwise(n, graph)}
    grouped = {n.name for n in graph.nodes if _grouped(n, graph, lanes)}
    if not dense and not depthwise and not grouped:
        return graph
    rewriter = _Rewriter(graph)
    for node in graph.nodes:
        if node.name in rewriter.replaced:
            continue
        if node.name in dense:
            rewriter.dense(node)
        elif node.name in depthwise:
            rewriter.depthwise(node)
        elif node.name in grouped and lanes is not None and grouped_panel_block(
                node.inputs[1].shape[0] // node.attrs["groups"], node.inputs[1].shape[0],
                lanes) is not None:
            rewriter.grouped_panels(node, lanes)
        elif node.name in grouped:
            rewriter.grouped(node)
        elif (node.op == "max_pool2d" and len(node.inputs[0].shape) == 4
              and node.inputs[0].name in rewriter.ends and node.outputs[0].dtype in _INTS):
            rewriter.max_pool(node)
    nodes = []
    for node in graph.nodes:
        nodes.extend(rewriter.replaced.get(node.name, [node]))
    graph = graph.replace(nodes=tuple(nodes), constants=rewriter.constants)
    graph = cancel_transposes(eliminate_dead_code(graph))
    # the float detours between rewritten convs (DQ -> sigmoid/mul -> Q) move pixel-major
    return eliminate_dead_code(cancel_transposes(sink_layout_moves(graph, quantized=True)))
