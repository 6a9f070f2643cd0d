"""3-D pooling windows (MaxPool, AveragePool and, through AveragePool, LpPool over
[N, C, D, H, W]) as two 2-D pools: the window is a box, so its maximum is the maximum over
depth of the maxima over (height, width), and its mean is the mean over depth of the means
over (height, width) (the count of taps a box window sees, with or without padding and in
ceil mode, is the product of the counts along each axis). Registered into
onnx_ops.CONVERTERS, wrapping the 2-D converters.
"""
from __future__ import annotations

from ...te.errors import ModelFormatError


def pads_nd(ctx, auto_pad: str, pads, sizes, kernel, strides, dilations):
    """(begin per axis, end per axis) from ONNX pads or auto_pad."""
    n = len(sizes)
    if auto_pad in ("NOTSET", ""):
        p = tuple(pads) if pads else (0,) * (2 * n)
        if len(p) != 2 * n:
            raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): pads {p} must "
                                   f"have {2 * n} entries for a {n}-D window")
        return p[:n], p[n:]
    if auto_pad == "VALID":
        return (0,) * n, (0,) * n
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ModelFormatError(f"node '{ctx.node_name}': unknown auto_pad {auto_pad!r}; "
                               "expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begin), tuple(end)


def windowed_3d(original):
    """Wrap a 2-D pooling converter: a rank-5 input runs as a (height, width) pool over
    [N, C * D, H, W], then a (depth, 1) pool over [N, C, D, OH * OW]."""
    def conv(ctx, x, *rest, auto_pad="NOTSET", kernel_shape=None, strides=None,
             dilations=None, pads=None, **attrs):
        if len(x.shape) != 5 or (len(ctx.output_names) > 1 and ctx.output_names[1]):
            return original(ctx, x, *rest, auto_pad=auto_pad, kernel_shape=kernel_shape,
                            strides=strides, dilations=dilations, pads=pads, **attrs)
        if not kernel_shape or len(kernel_shape) != 3:
            raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): kernel_shape "
                                   f"{kernel_shape} must have 3 entries for a 3-D input")
        n, c, d, h, w = x.shape
        kernel = tuple(kernel_shape)
        strides = tuple(strides or (1, 1, 1))
        dilations = tuple(dilations or (1, 1, 1))
        begin, end = pads_nd(ctx, auto_pad, pads, (d, h, w), kernel, strides, dilations)
        names = ctx.output_names
        ctx.output_names = [""] * len(names)   # the partial pools are not the node's outputs
        try:
            planes = ctx.emit("reshape", [x], {"shape": (n, c * d, h, w)})
            y = original(ctx, planes, *rest, kernel_shape=kernel[1:], strides=strides[1:],
                         dilations=dilations[1:], pads=begin[1:] + end[1:], **attrs)
            oh, ow = y.shape[2:]
            y = ctx.emit("reshape", [y], {"shape": (n, c, d, oh * ow)})
            y = original(ctx, y, *rest, kernel_shape=(kernel[0], 1), strides=(strides[0], 1),
                         dilations=(dilations[0], 1), pads=(begin[0], 0, end[0], 0), **attrs)
        finally:
            ctx.output_names = names
        return ctx.emit("reshape", [y], {"shape": (n, c, y.shape[2], oh, ow)}, final=True)
    return conv

