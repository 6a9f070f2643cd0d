"""The int8 conv as an implicit GEMM over padded NHWC words with column-panel byte weights
(targets with VNNI).

With VNNI, graph/passes/int8_nhwc.py runs a windowed int8 conv as im2col_nhwc_int8x4 (every
activation word copied KH * KW times) -> matmul_int8x4 with the weight words [K4, F], one
vpdpbusd per broadcast activation word and weight vector. The copy is a kernel of its own
(ResNet-18's 56 x 56 x 64 3x3 convs: 1.8 MB of columns, 0.21 ms each, 1 thread) and the
weight rows are F words apart, so a register tile reads its weight vectors from K rows of
one wide matrix. Here the GEMM reads each row's word from the padded input where the
columns would have copied it from (the taps as their own reduce axes, so a tap's pixel
address is computed once per tap), and the weight comes as column panels [P, K4, block]
(one contiguous run per k for a register tile of `block` columns): the matmul_prepacked
defaults of autotune/space_defaults.py apply.
"""
from __future__ import annotations

from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute, reduce_axis
from ..tensor import sum as te_sum
from .quantized import _dot4, check_panel_columns
from .quantized_perm_conv import word_conv_args
from .tags import MATMUL


def conv_int8x4_panels(x: Tensor, w: Tensor, n: int, kernel, out_hw, stride=1, dilation=1,
                       seven_bit: bool = False, symmetric: bool = False,
                       name: str | None = None) -> Tensor:
    """int32 out[r, j] with r = (b * OH + y) * OW + xx: sum over the taps (ry, rx) and
    channel words c of dot4(x[b, y * sh + ry * dh, xx * sw + rx * dw, c],
    w[j // block, (ry * KW + rx) * C4 + c, j % block]), the conv of the padded packed uint8
    words x[N, Hp, Wp, C4] (the padding already in x) with the packed int8 weight words
    as column panels w[P, KH * KW * C4, block] (`n` columns, the last panel zero-padded):
    matmul_int8x4 over im2col_nhwc_int8x4(x, KH, KW, stride, dilation) viewed as
    [N * OH * OW, KH * KW * C4], the weight in the same K order. `seven_bit` / `symmetric`
    promise weight bytes in [-64, 63] / [-127, 127] as for matmul_int8x4. Tagged
    matmul_prepacked (column panels)."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = word_conv_args(
        "conv_int8x4_panels", {"activation words": x, "weight words": w}, kernel, stride,
        dilation, out_hw)
    if x.ndim != 4 or w.ndim != 3 or w.shape[1] != kh * kw * x.shape[3]:
        raise TEError(f"conv_int8x4_panels(): expects x[N, Hp, Wp, C4] and weight panels "
                      f"w[P, KH * KW * C4, block] (kernel {kh}x{kw}), got '{x.name}'"
                      f"{list(x.shape)} and '{w.name}'{list(w.shape)}")
    nb, hp, wp, c4 = x.shape
    if min(oh, ow) < 1 or (oh - 1) * sh + (kh - 1) * dh >= hp \
            or (ow - 1) * sw + (kw - 1) * dw >= wp:
        raise TEError(f"conv_int8x4_panels(): output {oh}x{ow} with kernel {kh}x{kw}, stride "
                      f"{(sh, sw)} and dilation {(dh, dw)} does not fit the padded input "
                      f"'{x.name}'{list(x.shape)}")
    block = w.shape[2]
    check_panel_columns("conv_int8x4_panels", w, block, n)
    ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
    c = reduce_axis(c4, "c")
    dot = _dot4(seven_bit, symmetric)

    def body(r, j):
        pixel = r % (oh * ow) if nb > 1 else r
        b = r // (oh * ow) if nb > 1 else 0
        y, xx = pixel // ow, pixel % ow
        word = x(b, y * sh + ry.var * dh, xx * sw + rx.var * dw, c.var)
        g = (ry.var * kw + rx.var) * c4 + c.var
        return te_sum(dot(word, w(j // block, g, j % block)), axis=[ry, rx, c])

    return compute((nb * oh * ow, n), body, name=name or "conv_int8x4_panels",
                   tag=f"{MATMUL},prepacked")
