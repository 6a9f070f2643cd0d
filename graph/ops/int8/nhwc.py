"""The pixel-major (NHWC) int8 graph ops of graph/passes/int8/nhwc.py: fusion class, shape
inference, numpy reference and TE lowering (te/ops/int8/nhwc.py).

- `im2col_nhwc_int8x4(x4)`, attrs kernel (KH, KW), strides, dilations, pads, pad_word: packed
  NHWC words x4[N, H, W, C4] -> columns [N, OH, OW, KH * KW, C4] (a kernel of its own: see
  below).
- `bitcast_int8x4(x)`: uint8/int8 x[..., C] (C a multiple of 4) -> its bytes read as int32
  words [..., C / 4], byte t of word k being x[..., 4k + t]: pack_int8x4 along the last axis,
  which for a buffer in memory is a view (graph/compile/tasks.py ALIAS_OPS), no kernel. OPAQUE, so
  fusion leaves it alone and never inlines it into a consumer, which would assemble every word
  from four byte loads.
- `im2col_nhwc_int8x4` with attr words (start, count): the columns of that range of the
  input's words only (one group of a grouped conv), C4 = count.
- `im2col_nhwc_int8x4` with attr split_taps: the columns as [N, OH, OW, KH, KW * C4] (the
  same bytes): a stem's copy (C4 = 1) then runs along each tap row without div/mod.
- `im2col_nhwc_int8x4` with attr pairs: the columns as int16 pairs [N, OH, OW, KH * KW, 2,
  C4] (te/ops/int8/pairs.py), for matmul_int16x2.
- `widen_int8x4_pairs(x4)`, attr block: packed uint8 words [..., K4] -> their int16 pairs
  [..., 2 * K4] in the order (K4 / block, 2, block) (INJECTIVE: fuses into the kernel that
  packs the words).
- `matmul_int16x2(a2, w2)`, attr n (panels): int32 [..., M, N] of the int16 activation pairs
  a2[..., M, K2] and the weight pairs w2 (int16 words of two int8: [K2, N] or column panels
  [P, K2, block]); graph/passes/int8/pairs.py makes them.
- `depthwise_conv2d_integer_nhwc(x, w)`, attrs strides, dilations, pads, pad_value: int32
  [N, OH, OW, C] of uint8/int8 x[N, H, W, C] and the int8 weight w[KH, KW, C], the padding
  holding `pad_value` (the activation zero point, a compile-time constant).
"""
from __future__ import annotations

import numpy as np

from ....te.ops.int8 import core as tq
from ....te.ops.int8 import nhwc as tqn
from ....te.ops.int8 import pairs as tqp
from ....te.ops.int8.pairs import BYTE_PAIR_MASK
from ...ir import OpClass
from ...lower_te import LOWERINGS
from ..core import OPS, OpDef, pool_output_dim
from ...reference import IMPLS


def _op(name: str, opclass: OpClass):
    def deco(fn):
        OPS[name] = OpDef(name, opclass, fn)
        return fn
    return deco


def _out_hw(h: int, w: int, kernel, attrs) -> tuple[int, int]:
    s, d, p = attrs["strides"], attrs["dilations"], attrs["pads"]
    return (pool_output_dim(h, kernel[0], s[0], d[0], p[0], p[2], False),
            pool_output_dim(w, kernel[1], s[1], d[1], p[1], p[3], False))


def _pad_nhwc(x: np.ndarray, pads, fill) -> np.ndarray:
    t, l, b, r = pads
    return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=fill)


def window_taps(xp: np.ndarray, kernel, attrs, out_hw):
    """(ry, rx, the window's tap of every output pixel [N, OH, OW, C]) over padded xp."""
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    oh, ow = out_hw
    for ry in range(kernel[0]):
        for rx in range(kernel[1]):
            yield ry, rx, xp[:, ry * dh: ry * dh + sh * (oh - 1) + 1: sh,
                             rx * dw: rx * dw + sw * (ow - 1) + 1: sw, :]


@_op("bitcast_int8x4", OpClass.OPAQUE)
def _infer_bitcast(ins, attrs):
    x = ins[0]
    if x.dtype not in tqn.QUANT_DTYPES or not x.shape or x.shape[-1] % 4:
        raise ValueError(f"bitcast_int8x4 reads uint8/int8 x[..., C] with C a multiple of 4, "
                         f"got {x.dtype}{list(x.shape)}")
    return [(tuple(x.shape[:-1]) + (x.shape[-1] // 4,), "int32")]


def _bitcast_reference(node, x):
    return np.ascontiguousarray(x).view(np.int32)


def _infer_im2col_nhwc(ins, attrs):
    x = ins[0]
    if x.dtype != "int32" or len(x.shape) != 4:
        raise ValueError(f"im2col_nhwc_int8x4 expects packed words x[N, H, W, C4], got "
                         f"{x.dtype}{list(x.shape)}")
    n, h, w, c4 = x.shape
    kh, kw = attrs["kernel"]
    if attrs.get("words"):
        start, c4 = attrs["words"]
        if start < 0 or c4 < 1 or start + c4 > x.shape[3]:
            raise ValueError(f"im2col_nhwc_int8x4: words {tuple(attrs['words'])} outside the "
                             f"{x.shape[3]} words of its input")
    if attrs.get("split_taps"):
        if attrs.get("pairs"):
            raise ValueError("im2col_nhwc_int8x4: split_taps and pairs do not combine")
        return [((n,) + _out_hw(h, w, (kh, kw), attrs) + (kh, kw * c4), "int32")]
    pairs = (2,) if attrs.get("pairs") else ()
    return [((n,) + _out_hw(h, w, (kh, kw), attrs) + (kh * kw,) + pairs + (c4,), "int32")]


# im2col_nhwc_int8x4 is OPAQUE, a kernel of its own that copies runs of C4 words made once:
# fused, a reshape of its columns in the same group indexed them by div/mod (3136 x 144
# words: 0.63 ms fused, 0.18 ms alone, 1 thread). A stem's columns (C4 = 1: its 3 channels in
# one word) read words padded by the kernel that quantizes and packs them, with split_taps:
# as [KH * KW, 1] its copy ran as one flattened loop of div/mods and padding selects
# (ResNet-18's 7x7 stem, 614K words: 3.9 ms; 1.9-2.2 ms fused with the input's quantize,
# each word then quantized once per tap), as [KH, KW] runs of a padded input 0.26 ms.
OPS["im2col_nhwc_int8x4"] = OpDef("im2col_nhwc_int8x4", OpClass.OPAQUE, _infer_im2col_nhwc)


def _im2col_nhwc_reference(node, x):
    attrs = node.attrs
    if attrs.get("words"):
        start, count = attrs["words"]
        x = x[..., start:start + count]
    xp = _pad_nhwc(x, attrs["pads"], np.array(attrs["pad_word"], np.int32))
    taps = [t for _, _, t in window_taps(xp, attrs["kernel"], attrs, node.outputs[0].shape[1:3])]
    cols = np.ascontiguousarray(np.stack(taps, axis=3)).astype(np.int32)
    if attrs.get("pairs"):
        cols = np.stack([cols & BYTE_PAIR_MASK, (cols >> 8) & BYTE_PAIR_MASK], axis=-2)
    return np.ascontiguousarray(cols).reshape(node.outputs[0].shape)


@_op("depthwise_conv2d_integer_nhwc", OpClass.OUT_ELEMWISE_FUSABLE)
def _infer_depthwise_nhwc(ins, attrs):
    x, w = ins[0], ins[1]
    if len(x.shape) != 4 or len(w.shape) != 3 or w.shape[2] != x.shape[3] \
            or x.dtype not in tqn.QUANT_DTYPES or w.dtype not in tqn.QUANT_DTYPES:
        raise ValueError(f"depthwise_conv2d_integer_nhwc expects uint8/int8 x[N, H, W, C] and "
                         f"w[KH, KW, C], got {x.dtype}{list(x.shape)} and "
                         f"{w.dtype}{list(w.shape)}")
    n, h, wd, c = x.shape
    return [((n,) + _out_hw(h, wd, w.shape[:2], attrs) + (c,), "int32")]


def _depthwise_nhwc_reference(node, x, w):
    xp = _pad_nhwc(x, node.attrs["pads"], int(node.attrs["pad_value"])).astype(np.int64)
    out = np.zeros(node.outputs[0].shape, np.int64)
    for ry, rx, tap in window_taps(xp, w.shape[:2], node.attrs, node.outputs[0].shape[1:3]):
        out += tap * w[ry, rx].astype(np.int64)
    return out.astype(np.int32)


def _lower_depthwise_nhwc(node, args):
    a = node.attrs
    return [tqn.depthwise_conv2d_integer_nhwc(args[0], args[1], int(a["pad_value"]),
                                              tuple(a["strides"]), tuple(a["pads"]),
                                              tuple(a["dilations"]))]


IMPLS["bitcast_int8x4"] = _bitcast_reference
# compiled only when it cannot be a view (a graph output): the pack along the last axis
LOWERINGS["bitcast_int8x4"] = lambda node, args: [tq.pack_int8x4(args[0], -1)]
IMPLS["depthwise_conv2d_integer_nhwc"] = _depthwise_nhwc_reference
for _name in ("im2col_nhwc_int8x4",):
    IMPLS[_name] = _im2col_nhwc_reference
    LOWERINGS[_name] = lambda node, args: [tqn.im2col_nhwc_int8x4(
        args[0], *node.attrs["kernel"], int(node.attrs["pad_word"]),
        tuple(node.attrs["strides"]), tuple(node.attrs["pads"]), tuple(node.attrs["dilations"]),
        pairs=bool(node.attr("pairs")), split_taps=bool(node.attr("split_taps")),
        words=node.attr("words"))]
LOWERINGS["depthwise_conv2d_integer_nhwc"] = _lower_depthwise_nhwc


@_op("widen_int8x4_pairs", OpClass.INJECTIVE)
def _infer_widen_pairs(ins, attrs):
    x = ins[0]
    block = attrs["block"]
    if x.dtype != "int32" or not x.shape or block < 1 or x.shape[-1] % block:
        raise ValueError(f"widen_int8x4_pairs expects int32 words x[..., K4] with K4 a multiple "
                         f"of block={block}, got {x.dtype}{list(x.shape)}")
    return [(tuple(x.shape[:-1]) + (2 * x.shape[-1],), "int32")]


def _widen_pairs_reference(node, x):
    block = node.attrs["block"]
    w = np.ascontiguousarray(x, np.int32).reshape(x.shape[:-1] + (-1, 1, block))
    pairs = np.concatenate([w & BYTE_PAIR_MASK, (w >> 8) & BYTE_PAIR_MASK], axis=-2)
    return np.ascontiguousarray(pairs.reshape(x.shape[:-1] + (2 * x.shape[-1],)))


def _lower_widen_pairs(node, args):
    return [tqp.widen_words_int16x2(args[0], int(node.attrs["block"]))]


@_op("matmul_int16x2", OpClass.OUT_ELEMWISE_FUSABLE)
def _infer_matmul_int16x2(ins, attrs):
    a, w = ins
    panels = len(w.shape) == 3 and "n" in attrs
    k2 = w.shape[1] if panels else w.shape[0]
    if (len(w.shape) != 2 and not panels) or a.shape[-1] != k2 or a.dtype != "int32" \
            or w.dtype != "int16":
        raise ValueError(f"expects int16 activation pairs a[..., M, K2] (int32) and int8 weight "
                         f"pairs w[K2, N] (int16; or panels w[P, K2, block] with attr n), got "
                         f"{a.dtype}{list(a.shape)} and {w.dtype}{list(w.shape)}")
    return [(tuple(a.shape[:-1]) + (attrs["n"] if panels else w.shape[-1],), "int32")]


def _matmul_int16x2_reference(node, a, w):
    a16 = np.ascontiguousarray(a, np.int32)[..., None].view(np.int16).astype(np.int64)
    if w.ndim == 3:        # panels [P, K2, block] -> [K2, n]
        w = w.transpose(1, 0, 2).reshape(w.shape[1], -1)[:, :node.attrs["n"]]
    w8 = np.ascontiguousarray(w, np.int16)[..., None].view(np.int8).astype(np.int64)
    a_flat = a16.reshape(a16.shape[:-2] + (-1,))                   # [..., M, 2 * K2]
    w_flat = np.moveaxis(w8, -1, 1).reshape(-1, w8.shape[1])        # [2 * K2, N]
    return np.matmul(a_flat, w_flat).astype(np.int32)


IMPLS["widen_int8x4_pairs"] = _widen_pairs_reference
LOWERINGS["widen_int8x4_pairs"] = _lower_widen_pairs
IMPLS["matmul_int16x2"] = _matmul_int16x2_reference
LOWERINGS["matmul_int16x2"] = lambda node, args: [tqp.matmul_int16x2(
    args[0], args[1], n=node.attr("n"))]
