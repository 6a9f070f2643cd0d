"""The int8 conv as an implicit GEMM over padded NHWC words with column-panel byte weights
(targets with VNNI).

With VNNI, graph/passes/int8/nhwc.py runs a windowed int8 conv as im2col_nhwc_int8x4 (every
activation word copied KH * KW times) -> matmul_int8x4 with the weight words [K4, F], one
vpdpbusd per broadcast activation word and weight vector. The copy is a kernel of its own
(ResNet-18's 56 x 56 x 64 3x3 convs: 1.8 MB of columns, 0.21 ms each, 1 thread) and the
weight rows are F words apart, so a register tile reads its weight vectors from K rows of
one wide matrix. Here the GEMM reads each row's word from the padded input where the
columns would have copied it from (the taps as their own reduce axes, so a tap's pixel
address is computed once per tap), and the weight comes as column panels [P, K4, block]
(one contiguous run per k for a register tile of `block` columns): the matmul_prepacked
defaults of autotune/space/defaults.py apply.
"""
from __future__ import annotations

from ... import expr as E
from ...errors import TEError
from ...tensor import Tensor, compute, reduce_axis
from ...tensor import sum as te_sum
from .core import _dot4, check_panel_columns
from .perm_conv import word_conv_args
from ..tags import MATMUL


def group_words(c4: int, n: int, groups: int, block: int) -> int:
    """Words of x a column panel reads per tap in a conv of `groups` groups (C4 words and n
    columns in all, `block` columns a panel): its group's C4 / groups when a panel lies in
    one group (block divides n / groups), the block / (n / groups) groups' words it spans
    when it holds whole groups (n / groups divides block); else TEError."""
    if groups < 1 or c4 % groups or n % groups:
        raise TEError(f"conv_int8x4_panels(): {groups} groups do not divide the {c4} words "
                      f"and {n} columns")
    cg4, fg = c4 // groups, n // groups
    if groups == 1:
        return c4
    if fg % block == 0:
        return cg4
    if block % fg == 0 and n % block == 0:
        return cg4 * (block // fg)
    raise TEError(f"conv_int8x4_panels(): {block}-column panels neither lie in one group of "
                  f"{fg} columns nor hold whole groups ({n} columns, {groups} groups)")


def conv_int8x4_panels(x: Tensor, w: Tensor, n: int, kernel, out_hw, stride=1, dilation=1,
                       seven_bit: bool = False, symmetric: bool = False,
                       name: str | None = None, groups: int = 1) -> Tensor:
    """int32 out[r, j] with r = (b * OH + y) * OW + xx: sum over the taps (ry, rx) and
    channel words c of dot4(x[b, y * sh + ry * dh, xx * sw + rx * dw, c],
    w[j // block, (ry * KW + rx) * C4 + c, j % block]), the conv of the padded packed uint8
    words x[N, Hp, Wp, C4] (the padding already in x) with the packed int8 weight words
    as column panels w[P, KH * KW * C4, block] (`n` columns, the last panel zero-padded):
    matmul_int8x4 over im2col_nhwc_int8x4(x, KH, KW, stride, dilation) viewed as
    [N * OH * OW, KH * KW * C4], the weight in the same K order. `seven_bit` / `symmetric`
    promise weight bytes in [-64, 63] / [-127, 127] as for matmul_int8x4. Tagged
    matmul_prepacked (column panels).

    With `groups` > 1 (a grouped conv: output column j reads group j // (n / groups)'s
    C4 / groups words) panel p reads the kc4 = group_words(...) words from word
    (p * block // (n / groups)) * (C4 / groups) on, and w is [P, KH * KW * kc4, block]:
    a panel inside one group reads that group's words; a panel of several whole groups
    (ResNeXt's 4- and 8-channel groups) reads all their words against a block-diagonal
    weight (zeros across groups). The word offset is constant over a panel, so a
    register tile one panel wide still broadcasts one activation word per k."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = word_conv_args(
        "conv_int8x4_panels", {"activation words": x, "weight words": w}, kernel, stride,
        dilation, out_hw)
    kc4 = group_words(x.shape[3], n, groups, w.shape[2]) if x.ndim == 4 and w.ndim == 3 \
        else None
    if x.ndim != 4 or w.ndim != 3 or w.shape[1] != kh * kw * kc4:
        raise TEError(f"conv_int8x4_panels(): expects x[N, Hp, Wp, C4] and weight panels "
                      f"w[P, KH * KW * C4, block] (kernel {kh}x{kw}; C4 / groups * "
                      f"panel groups words a tap with groups), got '{x.name}'"
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
    c = reduce_axis(kc4, "c")
    dot = _dot4(seven_bit, symmetric)
    fg, cg4 = n // groups, c4 // groups

    def body(r, j):
        pixel = r % (oh * ow) if nb > 1 else r
        b = r // (oh * ow) if nb > 1 else 0
        y, xx = pixel // ow, pixel % ow
        start = (j // block * block // fg) * cg4 if groups > 1 else 0
        word = x(b, y * sh + ry.var * dh, xx * sw + rx.var * dw, start + c.var)
        g = (ry.var * kw + rx.var) * kc4 + c.var
        return te_sum(dot(word, w(j // block, g, j % block)), axis=[ry, rx, c])

    return compute((nb * oh * ow, n), body, name=name or "conv_int8x4_panels",
                   tag=f"{MATMUL},prepacked")
