"""The int8 conv of matmul_int8x4_perm's weight read straight from padded NHWC words (no
im2col copy): an implicit GEMM.

matmul_int8x4_perm (te/ops/int8/perm.py) multiplies pixel-major im2col columns
[N * OH * OW, KH * KW * C4] by a weight whose byte pairs are chosen per (column panel, group
of 4 words) so that AVX2's saturating vpmaddubsw is exact. The columns are a copy: each
activation word written and read KH * KW times (ResNet-18's 56 x 56 x 64 3x3 convs: 1.8 MB of
columns per conv, out of L2). With C4 a multiple of 4, a group of 4 K words never straddles
two taps, so its 16 bytes are 4 consecutive words of one pixel of the padded input: the GEMM
can read them there, computing the pixel of each row and the tap of each group as it goes
(integer index arithmetic on the scalar pipes, hoisted out of the vector work by LLVM).
"""
from __future__ import annotations

from ... import expr as E
from ...errors import TEError
from ...tensor import Tensor, compute, reduce_axis
from ...tensor import sum as te_sum
from .._common import check_tensor, int_tuple
from .core import check_panel_columns
from ..tags import MATMUL


def word_conv_args(op: str, words: dict, kernel, stride, dilation, out_hw):
    """The int32 word operands of an implicit-GEMM int8 conv checked (`words`: what -> tensor)
    and its (kernel, stride, dilation, out_hw) pairs, with errors that name `op`."""
    for what, t in words.items():
        check_tensor(op, t)
        if t.dtype != "int32":
            raise TEError(f"{op}(): the {what} '{t.name}' must be int32, got {t.dtype}")
    return tuple(int_tuple(op, name, v, 2) for name, v in (
        ("kernel", kernel), ("stride", stride), ("dilation", dilation), ("out_hw", out_hw)))


def conv_int8x4_perm(x: Tensor, sel: Tensor, w: Tensor, n: int, kernel, out_hw,
                     stride=1, dilation=1, name: str | None = None) -> Tensor:
    """int32 out[r, j] with r = (b * OH + y) * OW + xx: the conv of the padded packed uint8
    words x[N, Hp, Wp, C4] (C4 a multiple of 4; the padding already in x) with the weight of
    pair_weight_groups over the K order of im2col_nhwc_int8x4 (tap-major, then channel
    words: selectors [P, G, 4] and words [P, G, 4, block] with G = KH * KW * C4 / 4), equal
    to matmul_int8x4_perm over im2col_nhwc_int8x4(x, KH, KW, stride, dilation) viewed as
    [N * OH * OW, KH * KW * C4]. Tagged matmul_prepacked (column panels)."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = word_conv_args(
        "conv_int8x4_perm", {"activation words": x, "selectors": sel, "weight words": w},
        kernel, stride, dilation, out_hw)
    if x.ndim != 4 or x.shape[3] % 4 or sel.ndim != 3 or w.ndim != 4 or sel.shape[2] != 4 \
            or w.shape[:3] != sel.shape or sel.shape[1] * 4 != kh * kw * x.shape[3]:
        raise TEError(f"conv_int8x4_perm(): expects x[N, Hp, Wp, C4] with C4 a multiple of 4, "
                      f"sel[P, KH * KW * C4 / 4, 4] and w[P, G, 4, block] (kernel {kh}x{kw}), "
                      f"got '{x.name}'{list(x.shape)}, '{sel.name}'{list(sel.shape)} and "
                      f"'{w.name}'{list(w.shape)}")
    nb, hp, wp, c4 = x.shape
    if (oh - 1) * sh + (kh - 1) * dh >= hp or (ow - 1) * sw + (kw - 1) * dw >= wp:
        raise TEError(f"conv_int8x4_perm(): output {oh}x{ow} with kernel {kh}x{kw}, stride "
                      f"{(sh, sw)} and dilation {(dh, dw)} reads past the padded input "
                      f"'{x.name}'{list(x.shape)}")
    block = w.shape[3]
    check_panel_columns("conv_int8x4_perm", w, block, n)
    per_tap = c4 // 4
    # the taps as their own reduce axes: a tap's pixel address is computed once per tap,
    # not per group of words (a flat group axis with div/mods cost 5-30% on 7x7 .. 28x28)
    ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
    c = reduce_axis(per_tap, "c")
    t = reduce_axis(4, "t")

    def body(r, j):
        pixel = r % (oh * ow) if nb > 1 else r
        b = r // (oh * ow) if nb > 1 else 0
        y, xx = pixel // ow, pixel % ow
        row, col = y * sh + ry.var * dh, xx * sw + rx.var * dw
        words = [x(b, row, col, 4 * c.var + u) for u in range(4)]
        g = (ry.var * kw + rx.var) * per_tap + c.var
        p = j // block
        return te_sum(E.dot4_u8s8perm(*words, sel(p, g, t.var), w(p, g, t.var, j % block)),
                      axis=[ry, rx, c, t])

    return compute((nb * oh * ow, n), body, name=name or "conv_int8x4_perm",
                   tag=f"{MATMUL},prepacked")
