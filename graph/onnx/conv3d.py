"""3-D convolutions (Conv over [N, C, D, H, W], video models such as R3D and R(2+1)D) as 2-D
ones with the depth folded away, so they use every 2-D conv path: blocked layouts, tuned
records, Winograd, the default schedules.

A 3-D window is a sum over its depth taps of 2-D windows. Seen frames-major (each of the N
clips' D frames an image of a batch of N * D), a 3-D conv is one 2-D conv over, for each
output frame, the KD input frames its window sees side by side as channels (the graph op
`frame_taps`, te/ops/frames.py):

    x [N, C, D, H, W] -> frames [N * D, C, H, W] -> taps [N * D_out, G * KD * C/G, H, W]
    w [O, C/G, KD, KH, KW] -> [O, KD * C/G, KH, KW]    (channel (group, tap, c) on both sides)
    y [N * D_out, O, OH, OW] (+ bias) -> [N, D_out, O, OH, OW] -> [N, O, D_out, OH, OW]

A group's input channels stay contiguous, so grouped and depthwise 3-D convs keep their
groups. The moves between the ONNX layout and frames-major (a reshape and a transpose on
each side) cancel between consecutive 3-D convs once the sink_layout_moves pass has moved
them past the elementwise ops in between (bias, ReLU, residual adds): the activations then
stay frames-major, channel-blocked from conv to conv, and the taps are block copies. The
gather costs KD copies of the input (none for a depth-1 window). Registered into
onnx_ops.CONVERTERS, wrapping the converter of Conv (1-D and 2-D inputs pass through
unchanged), and the graph op `frame_taps` into the op tables (ops_more.define).
"""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ...te.ops.frames import frame_taps, frame_taps_shape
from ..ir import OpClass
from .core import unsupported_error
from .pool3d import pads_nd
from ..ops.more import define

_TAP_ATTRS = ("frames", "taps", "stride", "dilation", "begin", "end", "groups")


def triple(ctx, name: str, value, least: int) -> tuple[int, int, int]:
    items = tuple(int(v) for v in (value if value is not None else (1, 1, 1)))
    if len(items) != 3 or min(items) < least:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): {name} "
                               f"{list(items)} must be 3 ints >= {least} for a 3-D window")
    return items


def depth_taps(ctx, x, kd: int, stride: int, dilation: int, begin: int, end: int,
               groups: int = 1):
    """[N, C, D, H, W] -> ([N * D_out, C * KD, H, W], D_out): each output frame's KD input
    frames (zero padded by `begin`/`end` along depth) as channels (group, tap, channel)."""
    n, c, d, h, w = x.shape
    d_out = (d + begin + end - dilation * (kd - 1) - 1) // stride + 1
    if d_out < 1:
        raise ModelFormatError(f"node '{ctx.node_name}' (Conv): the depth window ({kd} taps, "
                               f"dilation {dilation}) is longer than the padded depth "
                               f"{d + begin + end}")
    frames = ctx.emit("transpose", [x], {"perm": (0, 2, 1, 3, 4)})
    frames = ctx.emit("reshape", [frames], {"shape": (n * d, c, h, w)})
    if kd == 1 and stride == 1 and begin == end == 0:
        return frames, d
    attrs = dict(zip(_TAP_ATTRS, (d, kd, stride, dilation, begin, end, groups)))
    return ctx.emit("frame_taps", [frames], attrs), d_out


def _infer_taps(ins, attrs):
    return [(frame_taps_shape(tuple(ins[0].shape), *(int(attrs[k]) for k in _TAP_ATTRS)),
             ins[0].dtype)]


def _lower_taps(node, args):
    return [frame_taps(args[0], *(int(node.attrs[k]) for k in _TAP_ATTRS))]


def reference_frame_taps(x: np.ndarray, frames: int, taps: int, stride: int, dilation: int,
                         begin: int, end: int, groups: int) -> np.ndarray:
    """numpy frame_taps on x[N * D, C, ...] (any trailing dims)."""
    n, c, rest = x.shape[0] // frames, x.shape[1], x.shape[2:]
    clips = x.reshape((n, frames, groups, c // groups) + rest)
    pads = [(0, 0), (begin, end)] + [(0, 0)] * (clips.ndim - 2)
    clips = np.pad(clips, pads)
    d_out = (frames + begin + end - dilation * (taps - 1) - 1) // stride + 1
    picked = [clips[:, k * dilation: k * dilation + stride * (d_out - 1) + 1: stride]
              for k in range(taps)]
    out = np.stack(picked, axis=3)         # [n, d_out, groups, taps, c / groups, ...]
    return np.ascontiguousarray(out.reshape((n * d_out, c * taps) + rest))


define("frame_taps", OpClass.INJECTIVE, _infer_taps, _lower_taps,
       lambda node, x: reference_frame_taps(x, *(int(node.attrs[k]) for k in _TAP_ATTRS)))


def conv_3d(original):
    def conv(ctx, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1,
             kernel_shape=None, pads=None, strides=None):
        if len(x.shape) != 5:
            return original(ctx, x, w, b, auto_pad=auto_pad, dilations=dilations,
                            group=group, kernel_shape=kernel_shape, pads=pads,
                            strides=strides)
        if len(w.shape) != 5:
            raise ModelFormatError(f"node '{ctx.node_name}' (Conv): a 3-D input "
                                   f"{list(x.shape)} needs a 5-D weight, got {list(w.shape)}")
        if not all(isinstance(v, int) for v in x.shape + w.shape):
            raise unsupported_error(ctx, f"a 3-D conv over a dynamic shape {list(x.shape)}")
        n, c, d, h, wd = x.shape
        o, cg, kd, kh, kw = w.shape
        if kernel_shape is not None and tuple(kernel_shape) != (kd, kh, kw):
            raise ModelFormatError(f"node '{ctx.node_name}' (Conv): kernel_shape "
                                   f"{list(kernel_shape)} differs from the weight's "
                                   f"{[kd, kh, kw]}")
        strides = triple(ctx, "strides", strides, 1)
        dilations = triple(ctx, "dilations", dilations, 1)
        begin, end = pads_nd(ctx, auto_pad, pads, (d, h, wd), (kd, kh, kw), strides,
                              dilations)
        group = int(group)
        if group < 1 or c != cg * group or o % group:
            raise ModelFormatError(f"node '{ctx.node_name}' (Conv): {c} input channels, "
                                   f"weight {list(w.shape)} and group {group} do not agree "
                                   "(need C = weight.shape[1] * group, group dividing O)")
        planes, d_out = depth_taps(ctx, x, kd, strides[0], dilations[0], begin[0], end[0],
                                   group)
        if kd > 1:
            w = ctx.emit("transpose", [w], {"perm": (0, 2, 1, 3, 4)})
        w2 = ctx.emit("reshape", [w], {"shape": (o, cg * kd, kh, kw)})
        names = ctx.output_names
        # the 2-D result (its bias added there, joining the conv's epilogue) is not the
        # node's output
        ctx.output_names = [""] * len(names)
        try:
            y = original(ctx, planes, w2, b, auto_pad="NOTSET", dilations=dilations[1:],
                         group=group, kernel_shape=(kh, kw), pads=begin[1:] + end[1:],
                         strides=strides[1:])
        finally:
            ctx.output_names = names
        oh, ow = y.shape[2:]
        y = ctx.emit("reshape", [y], {"shape": (n, d_out, o, oh, ow)})
        return ctx.emit("transpose", [y], {"perm": (0, 2, 1, 3, 4)}, final=True)
    return conv

