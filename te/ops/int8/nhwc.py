"""Pixel-major (NHWC) int8 kernels: the im2col columns of packed NHWC activations, and the
depthwise integer conv over NHWC activations.

graph/passes/int8/nhwc.py runs the int8 convs of a CNN as GEMMs over pixel-major columns
[pixels, K4] x weight [K4, F], so the weights (int16 pairs on AVX2, byte words with VNNI) are
the vector operand along the output channels and one activation word is broadcast per row,
as in the 1024^3 int8 GEMM; the NCHW form broadcast two weight pairs per row and assembled
its pixel vectors (7 of 49 pixels) from scalar loads.
"""
from __future__ import annotations

from ... import expr as E
from ...errors import TEError
from ...tensor import Tensor, compute, reduce_axis
from ...tensor import sum as te_sum
from .._common import check_tensor, int_tuple, padding4
from ..conv import conv_output_extent
from .pairs import pair_of_word
from ..tags import CONV2D_NCHW, INJECTIVE

QUANT_DTYPES = ("uint8", "int8")


def _window(op: str, h: int, w: int, kh: int, kw: int, stride, padding, dilation):
    sh, sw = int_tuple(op, "stride", stride, 2)
    dh, dw = int_tuple(op, "dilation", dilation, 2)
    top, left, bottom, right = padding4(op, padding)
    oh = conv_output_extent(op, h, kh, sh, dh, top, bottom)
    ow = conv_output_extent(op, w, kw, sw, dw, left, right)
    return (sh, sw), (dh, dw), (top, left), (oh, ow)


def _read_padded(x: Tensor, b, y, xx, c, top: int, left: int, fill: E.Expr) -> E.Expr:
    """x[b, y - top, xx - left, c] inside the image, `fill` outside (indices clamped, so the
    load stays in bounds whichever the select picks)."""
    h, w = x.shape[1], x.shape[2]
    if not (top or left or y is None):
        return x(b, y, xx, c)
    yy, xc = y - top, xx - left
    inside = (yy >= 0) & (yy < h) & (xc >= 0) & (xc < w)
    value = x(b, E.minimum(E.maximum(yy, 0), h - 1), E.minimum(E.maximum(xc, 0), w - 1), c)
    return E.select(inside, value, fill)


def im2col_nhwc_int8x4(x: Tensor, kh: int, kw: int, pad_word: int = 0, stride=1,
                       padding=(0, 0, 0, 0), dilation=1, name: str | None = None,
                       pairs: bool = False, split_taps: bool = False,
                       words: tuple[int, int] | None = None) -> Tensor:
    """The windows of packed NHWC activations x[N, H, W, C4] (4 channels a word) as
    pixel-major columns [N, OH, OW, KH * KW, C4]: element (n, y, x, t, c) is
    padded[n, y * sh + (t // KW) * dh, x * sw + (t % KW) * dw, c], the padding holding
    `pad_word`. Viewed as [N * OH * OW, KH * KW * C4], a matmul_int8x4 with the weight
    words [KH * KW * C4, F] (`nhwc_weight_words`) over it is the conv, pixels as rows.
    With `pairs`, each word is written as its int16 pairs (te/ops/int8/pairs.py, block
    C4): [N, OH, OW, KH * KW, 2, C4], the even bytes' pair at 0, the odd bytes' at 1. With
    `split_taps` the same columns as [N, OH, OW, KH, KW * C4] (a tap row's words as one
    axis: a stem's C4 = 1 copy runs along it without div/mod)."""
    check_tensor("im2col_nhwc_int8x4", x)
    if x.ndim != 4 or x.dtype != "int32":
        raise TEError(f"im2col_nhwc_int8x4(): expects packed words x[N, H, W, C4] (int32), got "
                      f"'{x.name}' {x.dtype}{list(x.shape)}")
    n, h, w, c4 = x.shape
    (sh, sw), (dh, dw), (top, left), (oh, ow) = _window("im2col_nhwc_int8x4", h, w, kh, kw,
                                                        stride, padding, dilation)
    fill = E.const(int(pad_word), "int32")
    c0 = 0
    if words is not None:
        c0, count = (int(v) for v in words)
        if c0 < 0 or count < 1 or c0 + count > c4:
            raise TEError(f"im2col_nhwc_int8x4(): words {tuple(words)} is outside the "
                          f"{c4} words of '{x.name}'")
        if split_taps or pairs:
            raise TEError("im2col_nhwc_int8x4(): words combines with neither split_taps nor "
                          "pairs")
        c4 = count

    def body(b, y, xx, t, c):
        return _read_padded(x, b, y * sh + (t // kw) * dh, xx * sw + (t % kw) * dw,
                            c + c0 if c0 else c, top, left, fill)

    if split_taps:
        if pairs:
            raise TEError("im2col_nhwc_int8x4(): split_taps and pairs do not combine")
        return compute((n, oh, ow, kh, kw * c4),
                       lambda b, y, xx, ry, q: _read_padded(
                           x, b, y * sh + ry * dh, xx * sw + (q // c4) * dw, q % c4, top, left,
                           fill), name=name or "im2col_nhwc_int8x4", tag=INJECTIVE)
    if pairs:
        return compute((n, oh, ow, kh * kw, 2, c4),
                       lambda b, y, xx, t, p, c: pair_of_word(body(b, y, xx, t, c), p),
                       name=name or "im2col_nhwc_int8x4", tag=INJECTIVE)
    return compute((n, oh, ow, kh * kw, c4), body, name=name or "im2col_nhwc_int8x4",
                   tag=INJECTIVE)


def depthwise_conv2d_integer_nhwc(x: Tensor, weight: Tensor, zero_point: int = 0, stride=1,
                                  padding=(0, 0, 0, 0), dilation=1,
                                  name: str | None = None) -> Tensor:
    """int32 out[n, y, x, c] = sum over (ry, rx) of int32(padded[n, y * sh + ry * dh,
    x * sw + rx * dw, c]) * int32(weight[ry, rx, c]): a depthwise conv over NHWC uint8/int8
    activations with the int8 weight [KH, KW, C]; the padding holds the activation
    `zero_point`, so the graph's zero-point compensation (a per-channel offset) stays exact
    at borders. Channels are the innermost axis: a vector of channels per tap, not the
    NCHW form's short rows of pixels."""
    check_tensor("depthwise_conv2d_integer_nhwc", x)
    check_tensor("depthwise_conv2d_integer_nhwc", weight, "weight")
    if (x.ndim != 4 or weight.ndim != 3 or weight.shape[2] != x.shape[3]
            or x.dtype not in QUANT_DTYPES or weight.dtype not in QUANT_DTYPES):
        raise TEError(f"depthwise_conv2d_integer_nhwc(): expects uint8/int8 x[N, H, W, C] and "
                      f"weight[KH, KW, C], got '{x.name}' {x.dtype}{list(x.shape)} and "
                      f"'{weight.name}' {weight.dtype}{list(weight.shape)}")
    n, h, w, c = x.shape
    kh, kw = weight.shape[:2]
    (sh, sw), (dh, dw), (top, left), (oh, ow) = _window("depthwise_conv2d_integer_nhwc", h, w,
                                                        kh, kw, stride, padding, dilation)
    ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
    fill = E.const(int(zero_point), x.dtype)

    def body(b, y, xx, ch):
        value = _read_padded(x, b, y * sh + ry.var * dh, xx * sw + rx.var * dw, ch, top,
                             left, fill)
        return te_sum(E.cast(value, "int32") * E.cast(weight(ry.var, rx.var, ch), "int32"),
                      axis=[ry, rx])

    return compute((n, oh, ow, c), body, name=name or "depthwise_conv2d_integer_nhwc",
                   tag=f"{CONV2D_NCHW},nhwc")   # the kind: an anchor
