"""3-D convolutions (Conv over [N, C, D, H, W], video models such as R3D and R(2+1)D) as 2-D
ones with the depth folded away, so they use every 2-D conv path: blocked layouts, tuned
records, Winograd, the default schedules.

A 3-D window is a sum over its depth taps of 2-D windows. Gathering, for each output depth,
the KD input depth planes its window sees (padding and stride applied) as extra input
channels turns it into one 2-D conv over a batch of N * D_out images with C * KD channels:

    x [N, C, D, H, W] -> taps [N, D_out, C, KD, H, W] -> [N * D_out, C * KD, H, W]
    w [O, C/g, KD, KH, KW] -> [O, C/g * KD, KH, KW]   (channel c * KD + kd on both sides)

A group's input channels stay contiguous (c-major, tap-minor), so grouped and depthwise 3-D
convs keep their groups. The gather costs KD copies of the input (none for a depth-1
window), small beside the conv. Registered into onnx_ops.CONVERTERS, wrapping the converter
of Conv (1-D and 2-D inputs pass through unchanged).
"""
from __future__ import annotations

from ..te.errors import ModelFormatError
from .onnx_ops import CONVERTERS, _unsupported
from .onnx_ops_pool3d import _pads_nd


def _triple(ctx, name: str, value, least: int) -> tuple[int, int, int]:
    items = tuple(int(v) for v in (value if value is not None else (1, 1, 1)))
    if len(items) != 3 or min(items) < least:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): {name} "
                               f"{list(items)} must be 3 ints >= {least} for a 3-D window")
    return items


def depth_taps(ctx, x, kd: int, stride: int, dilation: int, begin: int, end: int):
    """[N, C, D, H, W] -> [N * D_out, C * KD, H, W]: each output depth's KD input planes
    (zero padded by `begin`/`end` along depth) as channels, channel c * KD + tap."""
    n, c, d, h, w = x.shape
    if begin or end:
        x = ctx.emit("pad", [x], {"pads": (0, 0, begin, 0, 0, 0, 0, end, 0, 0),
                                  "mode": "constant", "value": 0.0})
        d = d + begin + end
    d_out = (d - dilation * (kd - 1) - 1) // stride + 1
    if d_out < 1:
        raise ModelFormatError(f"node '{ctx.node_name}' (Conv): the depth window ({kd} taps, "
                               f"dilation {dilation}) is longer than the padded depth {d}")
    taps = []
    for k in range(kd):
        first = k * dilation
        tap = ctx.emit("slice", [x], {"starts": (0, 0, first, 0, 0),
                                      "ends": (n, c, first + stride * (d_out - 1) + 1, h, w),
                                      "steps": (1, 1, stride, 1, 1)})
        taps.append(ctx.emit("reshape", [tap], {"shape": (n, c, 1, d_out, h, w)}))
    stacked = taps[0] if kd == 1 else ctx.emit("concat", taps, {"axis": 2})
    stacked = ctx.emit("transpose", [stacked], {"perm": (0, 3, 1, 2, 4, 5)})
    return ctx.emit("reshape", [stacked], {"shape": (n * d_out, c * kd, h, w)}), d_out


def _conv_3d(original):
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
            raise _unsupported(ctx, f"a 3-D conv over a dynamic shape {list(x.shape)}")
        n, c, d, h, wd = x.shape
        o, cg, kd, kh, kw = w.shape
        if kernel_shape is not None and tuple(kernel_shape) != (kd, kh, kw):
            raise ModelFormatError(f"node '{ctx.node_name}' (Conv): kernel_shape "
                                   f"{list(kernel_shape)} differs from the weight's "
                                   f"{[kd, kh, kw]}")
        strides = _triple(ctx, "strides", strides, 1)
        dilations = _triple(ctx, "dilations", dilations, 1)
        begin, end = _pads_nd(ctx, auto_pad, pads, (d, h, wd), (kd, kh, kw), strides,
                              dilations)
        group = int(group)
        if group < 1 or c != cg * group or o % group:
            raise ModelFormatError(f"node '{ctx.node_name}' (Conv): {c} input channels, "
                                   f"weight {list(w.shape)} and group {group} do not agree "
                                   "(need C = weight.shape[1] * group, group dividing O)")
        planes, d_out = depth_taps(ctx, x, kd, strides[0], dilations[0], begin[0], end[0])
        w2 = ctx.emit("reshape", [w], {"shape": (o, cg * kd, kh, kw)})
        names = ctx.output_names
        ctx.output_names = [""] * len(names)     # the 2-D result is not the node's output
        try:
            y = original(ctx, planes, w2, None, auto_pad="NOTSET", dilations=dilations[1:],
                         group=group, kernel_shape=(kh, kw), pads=begin[1:] + end[1:],
                         strides=strides[1:])
        finally:
            ctx.output_names = names
        oh, ow = y.shape[2:]
        y = ctx.emit("reshape", [y], {"shape": (n, d_out, o, oh, ow)})
        y = ctx.emit("transpose", [y], {"perm": (0, 2, 1, 3, 4)}, final=b is None)
        if b is None:
            return y
        bias = ctx.emit("reshape", [b], {"shape": (o, 1, 1, 1)})
        return ctx.emit("add", [y, bias], final=True)
    return conv


CONVERTERS["Conv"] = _conv_3d(CONVERTERS["Conv"])
