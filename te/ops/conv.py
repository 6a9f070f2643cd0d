"""2-D convolution in NCHW layout: a separate pad stage (inline or compute_at it) + the conv."""
from __future__ import annotations

import numpy as np

from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute, reduce_axis
from ..tensor import sum as te_sum
from ._common import check_tensor, int_tuple, padding4
from .tags import CONV2D_NCHW, INJECTIVE
from .transform import pad


def conv_output_extent(op_name: str, extent: int, kernel: int, stride: int, dilation: int,
                       pad_lo: int, pad_hi: int) -> int:
    """Output extent of a sliding window (floor mode); raises when the window does not fit."""
    span = extent + pad_lo + pad_hi - dilation * (kernel - 1) - 1
    if span < 0 or stride <= 0 or dilation <= 0:
        raise TEError(f"{op_name}(): a window of {kernel} (dilation {dilation}) does not fit "
                      f"an input extent of {extent} padded by ({pad_lo}, {pad_hi}), or stride/"
                      f"dilation is not positive (stride {stride})")
    return span // stride + 1


def padded_window(op: str, x: Tensor, kh: int, kw: int, stride, padding, dilation):
    """The padded input (a separate pad stage, or x itself) and the stride, dilation and
    output extents of a kh x kw window sliding over x[N, C, H, W] (or x[N, C/b, H, W, b])."""
    h, w = x.shape[2], x.shape[3]
    sh, sw = int_tuple(op, "stride", stride, 2)
    dh, dw = int_tuple(op, "dilation", dilation, 2)
    top, left, bottom, right = padding4(op, padding)
    oh = conv_output_extent(op, h, kh, sh, dh, top, bottom)
    ow = conv_output_extent(op, w, kw, sw, dw, left, right)
    padded = x
    if top or left or bottom or right:
        rest = (0,) * (x.ndim - 4)          # a channel-blocked x[N, C/b, H, W, b]
        padded = pad(x, (0, 0, top, left) + rest, (0, 0, bottom, right) + rest, 0,
                     name=f"{op}_pad")
    return padded, (sh, sw), (dh, dw), (oh, ow)


def conv2d_nchw(x: Tensor, weight: Tensor, stride=1, padding=0, dilation=1, groups: int = 1,
                out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """out[n, f, y, x] = sum over (c, ry, rx) of padded[n, c, y*sh + ry*dh, x*sw + rx*dw] *
    weight[f, c, ry, rx], with c inside f's group.

    weight is [F, C / groups, KH, KW] (ONNX layout; depthwise is groups == C).
    padding: an int, (vertical, horizontal) or (top, left, bottom, right).
    """
    op = name or ("depthwise_conv2d_nchw" if groups > 1 and groups == x.shape[1]
                  and weight.shape[1] == 1 else "conv2d_nchw")
    check_tensor("conv2d_nchw", x)
    check_tensor("conv2d_nchw", weight, "weight")
    if x.ndim != 4 or weight.ndim != 4:
        raise TEError(f"{op}(): expects x[N, C, H, W] and weight[F, C/groups, KH, KW], got "
                      f"'{x.name}'{list(x.shape)} and '{weight.name}'{list(weight.shape)}")
    n, c, h, w = x.shape
    f, c_group, kh, kw = weight.shape
    if not isinstance(groups, int) or groups < 1 or c % groups or f % groups \
            or c_group != c // groups:
        raise TEError(f"{op}(): with groups={groups}, the {c} input channels of '{x.name}' and "
                      f"the {f} filters of '{weight.name}' must divide by groups and weight "
                      f"must be [F, {c // groups if isinstance(groups, int) and groups else '?'}"
                      f", KH, KW], got {list(weight.shape)}")
    if out_dtype is None and x.dtype != weight.dtype:
        raise TEError(f"{op}(): '{x.name}' is {x.dtype} but '{weight.name}' is {weight.dtype}; "
                      "cast one of them or pass out_dtype=")
    padded, (sh, sw), (dh, dw), (oh, ow) = padded_window(op, x, kh, kw, stride, padding,
                                                          dilation)
    rc, ry, rx = reduce_axis(c_group, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
    per_group = f // groups

    def read(tensor, *indices):
        value = tensor(*indices)
        return value if out_dtype is None else E.cast(value, out_dtype)

    def body(b, k, y, xx):
        channel = rc.var if groups == 1 else (k // per_group) * c_group + rc.var
        return te_sum(read(padded, b, channel, y * sh + ry.var * dh, xx * sw + rx.var * dw)
                      * read(weight, k, rc, ry, rx), axis=[rc, ry, rx])

    return compute((n, f, oh, ow), body, name=op, tag=CONV2D_NCHW)


def depthwise_conv2d_nchw(x: Tensor, weight: Tensor, stride=1, padding=0, dilation=1,
                          out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """One filter set per input channel: weight is [C * multiplier, 1, KH, KW]."""
    check_tensor("depthwise_conv2d_nchw", x)
    check_tensor("depthwise_conv2d_nchw", weight, "weight")
    if x.ndim != 4 or weight.ndim != 4 or weight.shape[1] != 1:
        raise TEError(f"depthwise_conv2d_nchw(): expects x[N, C, H, W] and weight[C * m, 1, "
                      f"KH, KW], got '{x.name}'{list(x.shape)} and '{weight.name}'"
                      f"{list(weight.shape)}")
    return conv2d_nchw(x, weight, stride, padding, dilation, groups=x.shape[1],
                       out_dtype=out_dtype, name=name or "depthwise_conv2d_nchw")


def pack_conv_weight(weight, block: int):
    """[F, C, KH, KW] -> [F / block, C, KH, KW, block]: `block` output channels innermost, so
    the packed conv loads them as contiguous vectors (a layout rewrite done once, at compile
    time, for constant weights)."""
    weight = np.asarray(weight)
    if weight.ndim != 4 or block < 1 or weight.shape[0] % block:
        raise TEError(f"pack_conv_weight(): expects weight[F, C, KH, KW] with F divisible by "
                      f"block={block}, got shape {list(weight.shape)}")
    f, c, kh, kw = weight.shape
    return np.ascontiguousarray(
        weight.reshape(f // block, block, c, kh, kw).transpose(0, 2, 3, 4, 1))


def unpack_conv_weight(packed, block: int | None = None):
    """The inverse of pack_conv_weight: [F / block, C, KH, KW, block] -> [F, C, KH, KW]."""
    packed = np.asarray(packed)
    if packed.ndim != 5 or (block is not None and packed.shape[4] != block):
        raise TEError(f"unpack_conv_weight(): expects weight[F / block, C, KH, KW, block], got "
                      f"shape {list(packed.shape)}")
    fo, c, kh, kw, kb = packed.shape
    return np.ascontiguousarray(packed.transpose(0, 4, 1, 2, 3).reshape(fo * kb, c, kh, kw))


def conv2d_nchw_kpacked(x: Tensor, packed_weight: Tensor, stride=1, padding=0, dilation=1,
                        out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """conv2d_nchw with the weight pre-packed as [F / kb, C, KH, KW, kb] (pack_conv_weight).

    The reduction computes a channel-blocked result Oc[n, f / kb, y, x, kb], whose innermost
    axis is a contiguous run of kb output channels: a vector of accumulators fed by one
    broadcast input pixel and one contiguous weight load, which stays fast when the spatial
    extent is small or strided (late ResNet layers, 1x1 stride-2 projections). The returned
    tensor unpacks it to NCHW, an injective stage the tuner inlines into the epilogue.
    """
    op = name or "conv2d_nchw_kpacked"
    blocked = conv2d_nchw_kpacked_blocked(x, packed_weight, stride, padding, dilation,
                                          out_dtype, op)
    n, fo, oh, ow, kb = blocked.shape
    return compute((n, fo * kb, oh, ow), lambda b, f, y, xx: blocked(b, f // kb, y, xx, f % kb),
                   name=op, tag=INJECTIVE)


def conv2d_nchw_kpacked_blocked(x: Tensor, packed_weight: Tensor, stride=1, padding=0,
                                dilation=1, out_dtype: str | None = None,
                                name: str | None = None) -> Tensor:
    """The reduction of conv2d_nchw_kpacked alone: its channel-blocked result
    [N, F / kb, OH, OW, kb] (named `name`_blocked), for an op that reads it in another order
    than NCHW (a transposed conv interleaves its phases from it)."""
    op = name or "conv2d_nchw_kpacked"
    check_tensor(op, x)
    check_tensor(op, packed_weight, "weight")
    if x.ndim != 4 or packed_weight.ndim != 5:
        raise TEError(f"{op}(): expects x[N, C, H, W] and weight[F / kb, C, KH, KW, kb], got "
                      f"'{x.name}'{list(x.shape)} and '{packed_weight.name}'"
                      f"{list(packed_weight.shape)}")
    n, c, h, w = x.shape
    fo, c_w, kh, kw, kb = packed_weight.shape
    if c_w != c:
        raise TEError(f"{op}(): '{x.name}' has {c} channels but the packed weight "
                      f"'{packed_weight.name}' expects {c_w} (weight[F / kb, C, KH, KW, kb] = "
                      f"{list(packed_weight.shape)})")
    if out_dtype is None and x.dtype != packed_weight.dtype:
        raise TEError(f"{op}(): '{x.name}' is {x.dtype} but '{packed_weight.name}' is "
                      f"{packed_weight.dtype}; cast one of them or pass out_dtype=")
    padded, (sh, sw), (dh, dw), (oh, ow) = padded_window(op, x, kh, kw, stride, padding,
                                                          dilation)
    rc, ry, rx = reduce_axis(c, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx")

    def read(tensor, *indices):
        value = tensor(*indices)
        return value if out_dtype is None else E.cast(value, out_dtype)

    def body(b, ko, y, xx, ki):
        return te_sum(read(padded, b, rc.var, y * sh + ry.var * dh, xx * sw + rx.var * dw)
                      * read(packed_weight, ko, rc, ry, rx, ki), axis=[rc, ry, rx])

    return compute((n, fo, oh, ow, kb), body, name=f"{op}_blocked", tag=CONV2D_NCHW)
