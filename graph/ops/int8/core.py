"""The quantized graph ops: their fusion class, shape/dtype inference, numpy reference and TE
lowering, registered into the tables of graph/ops/core.py, graph/reference.py and graph/lower_te.py.

- `quantize_linear(x, scale, zero_point?)`, attrs dtype: float -> uint8/int8 (ONNX
  QuantizeLinear); scale and zero point broadcast numpy-style (per-axis ones arrive reshaped).
- `dequantize_linear(x, scale, zero_point?)`: int -> float32.
- `requantize(acc, multiplier, zero_point?)`, attrs dtype, lo, hi: the int32 accumulator of an
  integer kernel -> uint8/int8, the epilogue of a quantized conv/matmul.
- `matmul_integer(a, b)`: int32 sum of int32(a) * int32(b) with numpy matmul batching; zero
  points are compensated by ordinary int32 graph ops around it.
- `conv2d_integer(x, w, pad_value?)`: int32 NCHW conv whose padding holds `pad_value` (the
  activation zero point), attrs like conv2d.
The float operation order is te/ops/int8/core.py's; the reference follows it exactly.
"""
from __future__ import annotations

import numpy as np

from ....te.ops.int8 import core as tq
from ...ir import OpClass
from ...lower_te import LOWERINGS
from ..core import OPS, OpDef, broadcast_shapes, conv_output_shape
from ...reference import IMPLS, conv_nchw, pad_hw

QUANT_DTYPES = tq.QUANT_DTYPES


def _op(name: str, opclass: OpClass):
    def deco(fn):
        OPS[name] = OpDef(name, opclass, fn)
        return fn
    return deco


def _shape_of(ins) -> tuple[int, ...]:
    return broadcast_shapes(*(v.shape for v in ins if v is not None))


@_op("quantize_linear", OpClass.BROADCAST)
def _infer_quantize(ins, attrs):
    if attrs["dtype"] not in QUANT_DTYPES or not ins[0].dtype.startswith("float"):
        raise ValueError(f"quantize_linear maps float to {QUANT_DTYPES}, got {ins[0].dtype} -> "
                         f"{attrs['dtype']}")
    return [(_shape_of(ins), attrs["dtype"])]


@_op("dequantize_linear", OpClass.BROADCAST)
def _infer_dequantize(ins, attrs):
    if ins[0].dtype not in QUANT_DTYPES + ("int32",):
        raise ValueError(f"dequantize_linear reads uint8, int8 or int32, got {ins[0].dtype}")
    return [(_shape_of(ins), "float32")]


@_op("requantize", OpClass.BROADCAST)
def _infer_requantize(ins, attrs):
    if ins[0].dtype != "int32" or attrs["dtype"] not in QUANT_DTYPES:
        raise ValueError(f"requantize maps an int32 accumulator to {QUANT_DTYPES}, got "
                         f"{ins[0].dtype} -> {attrs['dtype']}")
    return [(_shape_of(ins), attrs["dtype"])]


@_op("matmul_integer", OpClass.OUT_ELEMWISE_FUSABLE)
def _infer_matmul_integer(ins, attrs):
    a, b = ins
    if a.dtype not in QUANT_DTYPES or b.dtype not in QUANT_DTYPES:
        raise ValueError(f"matmul_integer multiplies uint8/int8, got {a.dtype} and {b.dtype}")
    if len(a.shape) < 2 or len(b.shape) < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"expects a[..., M, K] and b[..., K, N], got {list(a.shape)} and "
                         f"{list(b.shape)}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return [(batch + (a.shape[-2], b.shape[-1]), "int32")]


@_op("conv2d_integer", OpClass.OUT_ELEMWISE_FUSABLE)
def _infer_conv2d_integer(ins, attrs):
    x, w = ins[0], ins[1]
    if x.dtype not in QUANT_DTYPES or w.dtype not in QUANT_DTYPES:
        raise ValueError(f"conv2d_integer multiplies uint8/int8, got {x.dtype} and {w.dtype}")
    return [(conv_output_shape(x.shape, w.shape, w.shape, attrs), "int32")]


# -- numpy reference (same float order as te/ops/int8/core.py) ---------------------------------

def _saturate(value: np.ndarray, dtype: str, lo=None, hi=None) -> np.ndarray:
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return np.clip(value, np.float32(lo), np.float32(hi)).astype(dtype)


def quantize_reference(x, scale, zero_point, dtype: str) -> np.ndarray:
    """q = clamp(round_half_even(x / scale) + zero_point) in float32 (np.round is half-even)."""
    zp = np.float32(0) if zero_point is None else zero_point.astype(np.float32)
    value = np.round(x.astype(np.float32) / scale.astype(np.float32)) + zp
    return _saturate(value, dtype)


def dequantize_reference(x, scale, zero_point) -> np.ndarray:
    zp = np.int32(0) if zero_point is None else zero_point.astype(np.int32)
    return (x.astype(np.int32) - zp).astype(np.float32) * scale.astype(np.float32)


def requantize_reference(acc, multiplier, zero_point, dtype: str, lo=None, hi=None):
    zp = np.float32(0) if zero_point is None else zero_point.astype(np.float32)
    value = np.round(acc.astype(np.float32) * multiplier.astype(np.float32)) + zp
    return _saturate(value, dtype, lo, hi)


IMPLS["quantize_linear"] = lambda node, x, s, zp=None: quantize_reference(
    x, s, zp, node.attrs["dtype"])
IMPLS["dequantize_linear"] = lambda node, x, s, zp=None: dequantize_reference(x, s, zp)
IMPLS["requantize"] = lambda node, acc, m, zp=None: requantize_reference(
    acc, m, zp, node.attrs["dtype"], node.attr("lo"), node.attr("hi"))
IMPLS["matmul_integer"] = lambda node, a, b: np.matmul(a.astype(np.int64),
                                                       b.astype(np.int64)).astype(np.int32)


def _conv2d_integer_reference(node, x, w, pad_value=None):
    fill = 0 if pad_value is None else int(np.asarray(pad_value).reshape(-1)[0])
    attrs = dict(node.attrs)
    xp = pad_hw(x.astype(np.int64), attrs["pads"], fill)
    attrs["pads"] = (0, 0, 0, 0)
    return conv_nchw(xp, w.astype(np.int64), attrs, node.outputs[0].shape[2:4]).astype(
        np.int32)


IMPLS["conv2d_integer"] = _conv2d_integer_reference


# -- TE lowering -------------------------------------------------------------------------------

def _lower_quantize(node, args):
    x, scale, zp = (list(args) + [None] * 3)[:3]
    return [tq.quantize(x, scale, 0 if zp is None else zp, node.attrs["dtype"])]


def _lower_dequantize(node, args):
    x, scale, zp = (list(args) + [None] * 3)[:3]
    return [tq.dequantize(x, scale, 0 if zp is None else zp)]


def _lower_requantize(node, args):
    acc, mult, zp = (list(args) + [None] * 3)[:3]
    return [tq.requantize(acc, mult, 0 if zp is None else zp, node.attrs["dtype"],
                          node.attr("lo"), node.attr("hi"))]


def _lower_conv2d_integer(node, args):
    a = node.attrs
    x, w = args[0], args[1]
    pad_value = args[2] if len(args) > 2 and args[2] is not None else 0
    return [tq.conv2d_integer(x, w, pad_value, tuple(a["strides"]), tuple(a["pads"]),
                              tuple(a["dilations"]), int(a["groups"]))]


LOWERINGS["quantize_linear"] = _lower_quantize
LOWERINGS["dequantize_linear"] = _lower_dequantize
LOWERINGS["requantize"] = _lower_requantize
LOWERINGS["matmul_integer"] = lambda node, args: [tq.matmul_integer(args[0], args[1])]
LOWERINGS["conv2d_integer"] = _lower_conv2d_integer


# -- packed int8 kernels (graph/passes/int8/quantize.py: pack_integer_kernels) -----------------
# `pack_int8x4(x)`, attrs axis, flip: uint8/int8 -> int32 words of 4 elements along `axis`
# (an int8 x stored as x + 128 when flip). `matmul_int8x4(a4, w4)` and `conv2d_int8x4(x4,
# w4)` (attrs like conv2d plus pad_word) sum dot4 products of the words (attr seven_bit:
# every weight byte in [-64, 63]; symmetric: in [-127, 127]); they equal matmul_integer/conv2d_integer of the unpacked
# operands.

@_op("pack_int8x4", OpClass.INJECTIVE)
def _infer_pack(ins, attrs):
    x = ins[0]
    if x.dtype not in QUANT_DTYPES:
        raise ValueError(f"pack_int8x4 packs uint8/int8, got {x.dtype}")
    axis = attrs["axis"]
    shape = list(x.shape)
    shape[axis] = (shape[axis] + 3) // 4
    return [(tuple(shape), "int32")]


# Either may take its weight as int16 pairs instead of byte words (graph/passes/int8/widen.py:
# matmul w[K4, 2, N], conv w[F, C4, KH, KW, 2]; te/ops/int8/core.py widen_weight_words); a
# matmul's words or pairs may come as column panels with attr n (graph/passes/int8/panels.py,
# int8_widen.py).

@_op("matmul_int8x4", OpClass.OUT_ELEMWISE_FUSABLE)
def _infer_matmul_int8x4(ins, attrs):
    a, w = ins
    pairs = len(w.shape) == 3 and w.shape[1] == 2
    panels = len(w.shape) == 4 and w.shape[2] in (1, 2) and "n" in attrs
    k4 = w.shape[1] if panels else w.shape[0]
    if (len(w.shape) != 2 and not pairs and not panels) or a.shape[-1] != k4 \
            or "int32" != a.dtype or "int32" != w.dtype:
        raise ValueError(f"expects packed words a[..., M, K4] and w[K4, N] (or their panels "
                         f"w[P, K4, 1, block], int16 pairs w[K4, 2, N], or their panels "
                         f"w[P, K4, 2, block]; panels with attr n), got "
                         f"{a.dtype}{list(a.shape)} and {w.dtype}{list(w.shape)}")
    return [(tuple(a.shape[:-1]) + (attrs["n"] if panels else w.shape[-1],), "int32")]


@_op("conv2d_int8x4", OpClass.OUT_ELEMWISE_FUSABLE)
def _infer_conv2d_int8x4(ins, attrs):
    x, w = ins
    pairs = len(w.shape) == 5 and w.shape[4] == 2
    if (len(w.shape) != 4 and not pairs) or x.shape[1] != w.shape[1] \
            or x.dtype != "int32" or w.dtype != "int32":
        raise ValueError(f"expects packed words x[N, C4, H, W] and w[F, C4, KH, KW] (or int16 "
                         f"pairs w[F, C4, KH, KW, 2]), got {x.dtype}{list(x.shape)} and "
                         f"{w.dtype}{list(w.shape)}")
    kernel = tuple(w.shape[:4])
    return [(conv_output_shape(x.shape, kernel, kernel, {**attrs, "groups": 1}), "int32")]


def _unpack_words(words: np.ndarray, axis: int, dtype) -> np.ndarray:
    """int32 words -> their bytes along `axis` (4 per word) as `dtype`."""
    b = np.ascontiguousarray(words, np.int32)[..., None].view(dtype)   # [..., 4]
    b = np.moveaxis(b, -1, axis + 1)
    shape = list(words.shape)
    shape[axis] *= 4
    return b.reshape(shape)


def _pack_reference(node, x):
    axis, k = node.attrs["axis"], x.shape[node.attrs["axis"]]
    x8 = (x.astype(np.int16) + 128).astype(np.uint8) if node.attrs["flip"] else x.view(np.uint8)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, -k % 4)
    x8 = np.moveaxis(np.pad(x8, pad), axis, -1)
    words = np.ascontiguousarray(x8).view(np.int32)
    return np.ascontiguousarray(np.moveaxis(words, -1, axis))


def _unpack_pairs(pairs: np.ndarray, pair_axis: int, axis: int) -> np.ndarray:
    """int16 weight pairs (te/ops/int8/core.py widen_weight_words) -> the int64 weights, 4 a
    word along `axis` (counted without the pair axis)."""
    halves = np.ascontiguousarray(pairs, np.int32)[..., None].view(np.int16)  # [..., 2]
    even = np.take(halves, 0, axis=pair_axis)
    odd = np.take(halves, 1, axis=pair_axis)
    b = np.stack([even[..., 0], odd[..., 0], even[..., 1], odd[..., 1]], axis=-1)
    b = np.moveaxis(b, -1, axis + 1).astype(np.int64)
    shape = list(even.shape[:-1])
    shape[axis] *= 4
    return b.reshape(shape)


def _matmul_int8x4_reference(node, a, w):
    a8 = _unpack_words(a, a.ndim - 1, np.uint8).astype(np.int64)
    if w.ndim == 4:        # panels [P, K4, W, block] -> pairs [K4, 2, n] or words [K4, n]
        w = w.transpose(1, 2, 0, 3).reshape(w.shape[1], w.shape[2], -1)[..., :node.attrs["n"]]
        if w.shape[1] == 1:
            w = w[:, 0]
    w8 = (_unpack_pairs(w, 1, 0) if w.ndim == 3 else
          _unpack_words(w, 0, np.int8).astype(np.int64))
    return np.matmul(a8, w8).astype(np.int32)


def _conv2d_int8x4_reference(node, x, w):
    attrs = dict(node.attrs)
    word = np.array(attrs["pad_word"], np.int32)
    x8 = _unpack_words(pad_hw(x, attrs["pads"], word), 1, np.uint8).astype(np.int64)
    w8 = (_unpack_pairs(w, 4, 1) if w.ndim == 5 else
          _unpack_words(w, 1, np.int8).astype(np.int64))
    attrs.update(pads=(0, 0, 0, 0), groups=1)
    return conv_nchw(x8, w8, attrs, node.outputs[0].shape[2:4]).astype(np.int32)


IMPLS["pack_int8x4"] = _pack_reference
IMPLS["matmul_int8x4"] = _matmul_int8x4_reference
IMPLS["conv2d_int8x4"] = _conv2d_int8x4_reference
LOWERINGS["pack_int8x4"] = lambda node, args: [tq.pack_int8x4(
    args[0], node.attrs["axis"], bool(node.attrs["flip"]))]
LOWERINGS["matmul_int8x4"] = lambda node, args: [tq.matmul_int8x4(
    args[0], args[1], bool(node.attrs["seven_bit"]), symmetric=bool(node.attr("symmetric")),
    n=node.attr("n"))]


def _lower_conv2d_int8x4(node, args):
    a = node.attrs
    return [tq.conv2d_int8x4(args[0], args[1], int(a["pad_word"]), tuple(a["strides"]),
                             tuple(a["pads"]), tuple(a["dilations"]), bool(a["seven_bit"]),
                             symmetric=bool(node.attr("symmetric")))]


LOWERINGS["conv2d_int8x4"] = _lower_conv2d_int8x4


# `im2col_int8x4(x4)`, attrs kernel (KH, KW), strides, dilations, pads, pad_word: the packed
# windows as columns [N, KH * KW * C4, OH, OW] (te/ops/int8/core.py im2col_int8x4).

@_op("im2col_int8x4", OpClass.INJECTIVE)
def _infer_im2col(ins, attrs):
    x = ins[0]
    kh, kw = attrs["kernel"]
    if x.dtype != "int32" or len(x.shape) != 4:
        raise ValueError(f"im2col_int8x4 expects packed words x[N, C4, H, W], got "
                         f"{x.dtype}{list(x.shape)}")
    n, c4 = x.shape[:2]
    out = conv_output_shape(x.shape, (1, c4, kh, kw), (1, c4, kh, kw), {**attrs, "groups": 1})
    return [((n, kh * kw * c4) + tuple(out[2:]), "int32")]


def _im2col_reference(node, x):
    attrs = node.attrs
    kh, kw = attrs["kernel"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    xp = pad_hw(x, attrs["pads"], np.array(attrs["pad_word"], np.int32))
    oh, ow = node.outputs[0].shape[2:]
    cols = [xp[:, :, ry * dh: ry * dh + sh * (oh - 1) + 1: sh,
               rx * dw: rx * dw + sw * (ow - 1) + 1: sw]
            for ry in range(kh) for rx in range(kw)]
    return np.ascontiguousarray(np.concatenate(cols, axis=1)).astype(np.int32)


IMPLS["im2col_int8x4"] = _im2col_reference
LOWERINGS["im2col_int8x4"] = lambda node, args: [tq.im2col_int8x4(
    args[0], *node.attrs["kernel"], int(node.attrs["pad_word"]), tuple(node.attrs["strides"]),
    tuple(node.attrs["pads"]), tuple(node.attrs["dilations"]))]
from . import nhwc as quant_ops_nhwc  # noqa: E402,F401 - registers the pixel-major int8 ops
from . import perm as quant_ops_perm  # noqa: E402,F401 - registers matmul_int8x4_perm
from . import perm_conv as quant_ops_perm_conv  # noqa: E402,F401 - registers conv_int8x4_perm
from . import vnni_conv as quant_ops_vnni_conv  # noqa: E402,F401 - registers conv_int8x4_panels
from . import table as quant_ops_table  # noqa: E402,F401 - registers lookup_table
