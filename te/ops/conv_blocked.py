"""Convolution in the channel-blocked layout NCHWc: x[N, C / b, H, W, b].

A block of b channels is innermost, so a conv vectorises over a block of output channels and
a depthwise conv over a block of channels, whatever the spatial extent or stride: every load
of an input pixel's channel block is one contiguous vector, never a strided gather. Graph
passes keep activations in this layout between convs (graph.passes.blocked_layout), so only
the model's edges convert (to_blocked / from_blocked, injective stages).

Weights are re-laid out once, at compile time, by the numpy helpers below.
"""
from __future__ import annotations

import numpy as np

from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute, reduce_axis
from ..tensor import sum as te_sum
from ._common import check_tensor, clamp
from .conv import padded_window
from .tags import CONV2D_NCHW, INJECTIVE


# -- layout conversion stages -----------------------------------------------------------------

def to_blocked(x: Tensor, block: int, name: str | None = None) -> Tensor:
    """x[N, C, H, W] -> [N, ceil(C / block), H, W, block]; when block does not divide C, the
    last block's lanes past C are zero."""
    op = name or "to_blocked"
    check_tensor(op, x)
    if x.ndim != 4 or block < 1:
        raise TEError(f"{op}(): expects x[N, C, H, W] and a block >= 1, got "
                      f"'{x.name}'{list(x.shape)} with block={block}")
    n, c, h, w = x.shape
    blocks = -(-c // block)
    if blocks * block == c:
        return compute((n, blocks, h, w, block),
                       lambda b, co, y, xx, ci: x(b, co * block + ci, y, xx), name=op,
                       tag=INJECTIVE)
    zero = E.const(0, x.dtype)

    def body(b, co, y, xx, ci):
        ch = co * block + ci
        return E.select(ch < c, x(b, clamp(ch, c), y, xx), zero)
    return compute((n, blocks, h, w, block), body, name=op, tag=INJECTIVE)


def from_blocked(x: Tensor, channels: int | None = None, name: str | None = None) -> Tensor:
    """x[N, C / b, H, W, b] -> [N, C, H, W]; with `channels`, the first `channels` of them
    (a padded last block cropped)."""
    op = name or "from_blocked"
    check_tensor(op, x)
    if x.ndim != 5:
        raise TEError(f"{op}(): expects x[N, C / b, H, W, b], got '{x.name}'{list(x.shape)}")
    n, co, h, w, block = x.shape
    c = co * block if channels is None else channels
    if not 0 < c <= co * block or c <= (co - 1) * block:
        raise TEError(f"{op}(): {channels} channels do not fit the {co} blocks of {block} of "
                      f"'{x.name}'{list(x.shape)}")
    return compute((n, c, h, w),
                   lambda b, ch, y, xx: x(b, ch // block, y, xx, ch % block), name=op,
                   tag=INJECTIVE)


# -- compile-time weight layouts (numpy) ------------------------------------------------------

def pack_conv_weight_blocked(weight, in_block: int, out_block: int):
    """[F, C, KH, KW] -> [F / out_block, C / in_block, KH, KW, in_block, out_block]: for one
    input channel, a contiguous vector of out_block filter taps."""
    weight = np.asarray(weight)
    if (weight.ndim != 4 or in_block < 1 or out_block < 1 or weight.shape[0] % out_block
            or weight.shape[1] % in_block):
        raise TEError(f"pack_conv_weight_blocked(): expects weight[F, C, KH, KW] with F "
                      f"divisible by out_block={out_block} and C by in_block={in_block}, got "
                      f"shape {list(weight.shape)}")
    f, c, kh, kw = weight.shape
    w = weight.reshape(f // out_block, out_block, c // in_block, in_block, kh, kw)
    return np.ascontiguousarray(w.transpose(0, 2, 4, 5, 3, 1))


def unpack_conv_weight_blocked(packed):
    """The inverse of pack_conv_weight_blocked."""
    packed = np.asarray(packed)
    if packed.ndim != 6:
        raise TEError(f"unpack_conv_weight_blocked(): expects weight[F / bo, C / bi, KH, KW, "
                      f"bi, bo], got shape {list(packed.shape)}")
    fo, co, kh, kw, bi, bo = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 5, 1, 4, 2, 3).reshape(fo * bo, co * bi,
                                                                           kh, kw))


def pack_depthwise_weight(weight, block: int):
    """[C, 1, KH, KW] -> [C / block, KH, KW, block]."""
    weight = np.asarray(weight)
    if weight.ndim != 4 or weight.shape[1] != 1 or block < 1 or weight.shape[0] % block:
        raise TEError(f"pack_depthwise_weight(): expects weight[C, 1, KH, KW] with C divisible "
                      f"by block={block}, got shape {list(weight.shape)}")
    c, _, kh, kw = weight.shape
    return np.ascontiguousarray(weight.reshape(c // block, block, kh, kw).transpose(0, 2, 3, 1))


def unpack_depthwise_weight(packed):
    """The inverse of pack_depthwise_weight."""
    packed = np.asarray(packed)
    if packed.ndim != 4:
        raise TEError(f"unpack_depthwise_weight(): expects weight[C / b, KH, KW, b], got shape "
                      f"{list(packed.shape)}")
    co, kh, kw, b = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 3, 1, 2).reshape(co * b, 1, kh, kw))


# -- the convolutions -------------------------------------------------------------------------

def _read(out_dtype):
    def read(tensor, *indices):
        value = tensor(*indices)
        return value if out_dtype is None else E.cast(value, out_dtype)
    return read


def _check_dtypes(op, x, weight, out_dtype):
    if out_dtype is None and x.dtype != weight.dtype:
        raise TEError(f"{op}(): '{x.name}' is {x.dtype} but '{weight.name}' is {weight.dtype}; "
                      "cast one of them or pass out_dtype=")


def conv2d_nchwc(x: Tensor, weight: Tensor, stride=1, padding=0, dilation=1,
                 out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """Dense conv with a channel-blocked output [N, F / bo, OH, OW, bo].

    x is blocked [N, C / bi, H, W, bi] with weight [F / bo, C / bi, KH, KW, bi, bo]
    (pack_conv_weight_blocked), or plain NCHW [N, C, H, W] with weight [F / bo, C, KH, KW, bo]
    (te.ops.pack_conv_weight): the first conv of a network, whose 3 channels make no block.
    Padding pads H and W only.
    """
    op = name or "conv2d_nchwc"
    check_tensor(op, x)
    check_tensor(op, weight, "weight")
    blocked_in = x.ndim == 5
    if not ((x.ndim == 4 and weight.ndim == 5) or (blocked_in and weight.ndim == 6)):
        raise TEError(f"{op}(): expects x[N, C / bi, H, W, bi] with weight[F / bo, C / bi, KH, "
                      f"KW, bi, bo], or x[N, C, H, W] with weight[F / bo, C, KH, KW, bo]; got "
                      f"'{x.name}'{list(x.shape)} and '{weight.name}'{list(weight.shape)}")
    fo, cw, kh, kw = weight.shape[:4]
    bo = weight.shape[-1]
    if cw != x.shape[1] or (blocked_in and weight.shape[4] != x.shape[4]):
        raise TEError(f"{op}(): the channels of '{x.name}'{list(x.shape)} do not match the "
                      f"packed weight '{weight.name}'{list(weight.shape)}")
    _check_dtypes(op, x, weight, out_dtype)
    padded, (sh, sw), (dh, dw), (oh, ow) = padded_window(op, x, kh, kw, stride, padding,
                                                          dilation)
    read = _read(out_dtype)
    rc, ry, rx = reduce_axis(cw, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
    if blocked_in:
        rb = reduce_axis(x.shape[4], "rb")

        def body(b, ko, y, xx, ki):
            return te_sum(read(padded, b, rc.var, y * sh + ry.var * dh, xx * sw + rx.var * dw,
                               rb.var) * read(weight, ko, rc, ry, rx, rb, ki),
                          axis=[rc, ry, rx, rb])
    else:
        def body(b, ko, y, xx, ki):
            return te_sum(read(padded, b, rc.var, y * sh + ry.var * dh, xx * sw + rx.var * dw)
                          * read(weight, ko, rc, ry, rx, ki), axis=[rc, ry, rx])
    return compute((x.shape[0], fo, oh, ow, bo), body, name=op, tag=CONV2D_NCHW)


def depthwise_conv2d_nchwc(x: Tensor, weight: Tensor, stride=1, padding=0, dilation=1,
                           out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """Depthwise conv of x[N, C / b, H, W, b] with weight [C / b, KH, KW, b]
    (pack_depthwise_weight); the output is blocked like x."""
    op = name or "depthwise_conv2d_nchwc"
    check_tensor(op, x)
    check_tensor(op, weight, "weight")
    if (x.ndim != 5 or weight.ndim != 4 or weight.shape[0] != x.shape[1]
            or weight.shape[3] != x.shape[4]):
        raise TEError(f"{op}(): expects x[N, C / b, H, W, b] and weight[C / b, KH, KW, b], got "
                      f"'{x.name}'{list(x.shape)} and '{weight.name}'{list(weight.shape)}")
    _check_dtypes(op, x, weight, out_dtype)
    _, kh, kw, block = weight.shape
    padded, (sh, sw), (dh, dw), (oh, ow) = padded_window(op, x, kh, kw, stride, padding,
                                                          dilation)
    read = _read(out_dtype)
    ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")

    def body(b, c, y, xx, ci):
        return te_sum(read(padded, b, c, y * sh + ry.var * dh, xx * sw + rx.var * dw, ci)
                      * read(weight, c, ry, rx, ci), axis=[ry, rx])
    return compute((x.shape[0], x.shape[1], oh, ow, block), body, name=op, tag=CONV2D_NCHW)


# -- grouped convs (groups > 1, not depthwise) in the blocked layout ---------------------------

def grouped_conv_blocking(channels: int, filters: int, groups: int, block: int):
    """How a grouped conv of `channels` -> `filters` in `groups` groups runs on channel blocks
    of `block`: (out_blocks_per_group, in_blocks_per_out_block), or None when it cannot.

    - A group spans whole blocks (its input and output widths divide by `block`): output
      block ko reads the in_blocks = (C / groups) / block input blocks of its group,
      starting at block (ko // out_blocks_per_group) * in_blocks.
    - A block spans whole groups, as many input as output channels per group (RegNet's
      width-8 groups in 16-channel blocks): output block ko reads input block ko alone,
      through a weight that is zero between different groups of the block (block / group
      width times the multiply-adds, all of them full vectors); taken while that factor is
      at most MAX_GROUPED_WASTE.
    """
    if groups < 1 or channels % groups or filters % groups or channels % block \
            or filters % block:
        return None
    cg_in, cg_out = channels // groups, filters // groups
    if cg_in % block == 0 and cg_out % block == 0:
        return cg_out // block, cg_in // block
    if cg_in == cg_out and block % cg_out == 0 and block // cg_out <= MAX_GROUPED_WASTE:
        return 1, 1
    return None


MAX_GROUPED_WASTE = 4


def pack_grouped_conv_weight(weight, groups: int, block: int):
    """[F, C / groups, KH, KW] -> ([F / b, in_blocks, KH, KW, b, b], out_blocks_per_group)
    for grouped_conv2d_nchwc (see grouped_conv_blocking); entries that pair an input and an
    output channel of different groups are zero."""
    weight = np.asarray(weight)
    if weight.ndim != 4:
        raise TEError(f"pack_grouped_conv_weight(): expects weight[F, C / groups, KH, KW], got "
                      f"shape {list(weight.shape)}")
    f, cg_in, kh, kw = weight.shape
    plan = grouped_conv_blocking(cg_in * groups, f, groups, block)
    if plan is None:
        raise TEError(f"pack_grouped_conv_weight(): weight {list(weight.shape)} in {groups} "
                      f"groups does not run on blocks of {block} channels")
    per_group, in_blocks = plan
    packed = np.zeros((f // block, in_blocks, kh, kw, block, block), weight.dtype)
    fi, ki = _grouped_index(f, cg_in, groups, block, per_group, in_blocks)
    # weight[f, k] -> packed[f // b, rc, :, :, c % b, f % b], c the input channel of (f, k)
    ko, j = np.divmod(fi, block)
    rc, i = ki
    packed[ko, rc, :, :, i, j] = weight[fi, np.arange(cg_in)[None, :].repeat(f, 0)]
    return packed, per_group


def _grouped_index(f: int, cg_in: int, groups: int, block: int, per_group: int, in_blocks: int):
    """For every (output channel, in-group input channel): the packed weight's input block
    (relative to the output block's first) and lane."""
    cg_out = f // groups
    fi = np.arange(f)[:, None].repeat(cg_in, 1)
    c = (fi // cg_out) * cg_in + np.arange(cg_in)[None, :]      # absolute input channel
    rc = c // block - (fi // block // per_group) * in_blocks
    return fi, (rc, c % block)


def unpack_grouped_conv_weight(packed, groups: int, channels: int, per_group: int):
    """The inverse of pack_grouped_conv_weight: [F, C / groups, KH, KW]."""
    packed = np.asarray(packed)
    if packed.ndim != 6:
        raise TEError(f"unpack_grouped_conv_weight(): expects weight[F / b, in_blocks, KH, KW, "
                      f"b, b], got shape {list(packed.shape)}")
    fo, in_blocks, kh, kw, block, _ = packed.shape
    f, cg_in = fo * block, channels // groups
    fi, (rc, i) = _grouped_index(f, cg_in, groups, block, per_group, in_blocks)
    ko, j = np.divmod(fi, block)
    return np.ascontiguousarray(packed[ko, rc, :, :, i, j])


def grouped_conv2d_nchwc(x: Tensor, weight: Tensor, per_group: int, stride=1, padding=0,
                         dilation=1, out_dtype: str | None = None,
                         name: str | None = None) -> Tensor:
    """Grouped conv of blocked x[N, C / b, H, W, b] with weight [F / b, in_blocks, KH, KW, b,
    b] (pack_grouped_conv_weight): output block ko reads input blocks
    (ko // per_group) * in_blocks + [0, in_blocks). The output is [N, F / b, OH, OW, b], its
    block of output channels the vector, as in conv2d_nchwc."""
    op = name or "grouped_conv2d_nchwc"
    check_tensor(op, x)
    check_tensor(op, weight, "weight")
    if x.ndim != 5 or weight.ndim != 6 or weight.shape[4] != x.shape[4] \
            or weight.shape[5] != x.shape[4]:
        raise TEError(f"{op}(): expects x[N, C / b, H, W, b] and weight[F / b, in_blocks, KH, "
                      f"KW, b, b], got '{x.name}'{list(x.shape)} and '{weight.name}'"
                      f"{list(weight.shape)}")
    fo, in_blocks, kh, kw, block, _ = weight.shape
    if per_group < 1 or fo % per_group or (fo // per_group) * in_blocks > x.shape[1]:
        raise TEError(f"{op}(): {fo} output blocks in groups of {per_group}, reading "
                      f"{in_blocks} input block(s) each, do not fit the {x.shape[1]} input "
                      f"blocks of '{x.name}'{list(x.shape)}")
    _check_dtypes(op, x, weight, out_dtype)
    padded, (sh, sw), (dh, dw), (oh, ow) = padded_window(op, x, kh, kw, stride, padding,
                                                          dilation)
    read = _read(out_dtype)
    rc, ry, rx = reduce_axis(in_blocks, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
    rb = reduce_axis(block, "rb")

    def body(b, ko, y, xx, ki):
        first = ko if per_group == 1 and in_blocks == 1 else (ko // per_group) * in_blocks
        return te_sum(read(padded, b, first + rc.var, y * sh + ry.var * dh,
                           xx * sw + rx.var * dw, rb.var)
                      * read(weight, ko, rc, ry, rx, rb, ki), axis=[rc, ry, rx, rb])
    return compute((x.shape[0], fo, oh, ow, block), body, name=op, tag=CONV2D_NCHW)
