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
from ._common import check_tensor
from .conv import _padded_window
from .tags import CONV2D_NCHW, INJECTIVE


# -- layout conversion stages -----------------------------------------------------------------

def to_blocked(x: Tensor, block: int, name: str | None = None) -> Tensor:
    """x[N, C, H, W] -> [N, C / block, H, W, block]."""
    op = name or "to_blocked"
    check_tensor(op, x)
    if x.ndim != 4 or block < 1 or x.shape[1] % block:
        raise TEError(f"{op}(): expects x[N, C, H, W] with C divisible by block={block}, got "
                      f"'{x.name}'{list(x.shape)}")
    n, c, h, w = x.shape
    return compute((n, c // block, h, w, block),
                   lambda b, co, y, xx, ci: x(b, co * block + ci, y, xx), name=op, tag=INJECTIVE)


def from_blocked(x: Tensor, name: str | None = None) -> Tensor:
    """x[N, C / b, H, W, b] -> [N, C, H, W]."""
    op = name or "from_blocked"
    check_tensor(op, x)
    if x.ndim != 5:
        raise TEError(f"{op}(): expects x[N, C / b, H, W, b], got '{x.name}'{list(x.shape)}")
    n, co, h, w, block = x.shape
    return compute((n, co * block, h, w),
                   lambda b, c, y, xx: x(b, c // block, y, xx, c % block), name=op,
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
    padded, (sh, sw), (dh, dw), (oh, ow) = _padded_window(op, x, kh, kw, stride, padding,
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
    padded, (sh, sw), (dh, dw), (oh, ow) = _padded_window(op, x, kh, kw, stride, padding,
                                                          dilation)
    read = _read(out_dtype)
    ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")

    def body(b, c, y, xx, ci):
        return te_sum(read(padded, b, c, y * sh + ry.var * dh, xx * sw + rx.var * dw, ci)
                      * read(weight, c, ry, rx, ci), axis=[ry, rx])
    return compute((x.shape[0], x.shape[1], oh, ow, block), body, name=op, tag=CONV2D_NCHW)
