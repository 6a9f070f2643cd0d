"""3-D transposed convolutions (ConvTranspose over [N, C, D, H, W]: 3-D U-Nets, video
decoders) as the stride-1 3-D conv they equal, so they reuse the 3-D conv path
(graph/onnx/conv3d.py) and through it every 2-D conv path.

Output position z along an axis gets x[i] * w[k] wherever z = i * stride + k * dilation -
pad_begin. Spread the input out by the stride (stride - 1 zeros after every element), pad
it by dilation * (k - 1) - pad_begin in front, and a stride-1 conv with the kernel flipped
and its two channel axes swapped (per group) computes exactly that sum; a negative pad is a
crop. The zeros cost stride^3 times the input in the gather and in the conv's multiplies,
so this is the general path, not the fast one the 2-D ConvTranspose has (stride-phase
sub-kernels). Registered by wrapping the ConvTranspose converter: 1-D and 2-D inputs pass
through unchanged."""
from __future__ import annotations

from ...te.errors import ModelFormatError
from .core import split_pad, unsupported_error, transpose_kernel
from .registry import CONVERTERS
from .conv3d import triple


def _spread(ctx, x, axis: int, stride: int):
    """x with stride - 1 zeros after every element along `axis` (the trailing ones too)."""
    shape = tuple(x.shape)
    unit = shape[:axis + 1] + (1,) + shape[axis + 1:]
    y = ctx.emit("reshape", [x], {"shape": unit})
    pads = [0] * (2 * len(unit))
    pads[len(unit) + axis + 1] = stride - 1
    y = ctx.emit("pad", [y], {"pads": tuple(pads), "mode": "constant", "value": 0.0})
    return ctx.emit("reshape", [y], {"shape": shape[:axis] + (shape[axis] * stride,) +
                                     shape[axis + 1:]})


def _crops(ctx, auto_pad, pads, output_shape, sizes, full, strides, out_pad):
    """(begin, end, extra) per axis: what is cut from the full output's two ends, and zero
    planes added at the end (an output_shape past the full output), as the 2-D rule."""
    where = f"node '{ctx.node_name}' (ConvTranspose)"
    if output_shape is None and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        p = tuple(int(v) for v in pads) if pads is not None and auto_pad != "VALID" else (0,) * 6
        if len(p) != 6 or min(p) < 0:
            raise ModelFormatError(f"{where}: pads {list(p)} must be 6 non-negative ints for "
                                   "a 3-D window")
        return p[:3], p[3:], (0, 0, 0)
    targets = (tuple(int(v) for v in output_shape)[-3:] if output_shape is not None
               else tuple(i * s for i, s in zip(sizes, strides)))
    begin, end, extra = [], [], []
    for target, length, s, o in zip(targets, full, strides, out_pad):
        total = length - target if output_shape is not None else max(length - target, 0)
        if -total > s - 1 - o or target < 1:
            raise ModelFormatError(f"{where}: output_shape {list(targets)} does not fit the "
                                   f"input {list(sizes)}: the transposed conv gives {length} "
                                   f"along an axis where {target} was asked; fix output_shape")
        b, e = split_pad(max(total, 0), auto_pad == "SAME_UPPER")
        begin.append(b), end.append(e), extra.append(max(-total, 0))
    return tuple(begin), tuple(end), tuple(extra)


def conv_transpose_3d(original):
    def conv(ctx, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
             output_padding=None, output_shape=None, pads=None, strides=None):
        if len(x.shape) != 5:
            return original(ctx, x, w, b, auto_pad=auto_pad, dilations=dilations, group=group,
                            kernel_shape=kernel_shape, output_padding=output_padding,
                            output_shape=output_shape, pads=pads, strides=strides)
        if not all(isinstance(v, int) for v in x.shape + w.shape):
            raise unsupported_error(
                ctx, f"a 3-D ConvTranspose over a dynamic shape {list(x.shape)}")
        n, c, *sizes = x.shape
        group = int(group)
        kernel = transpose_kernel(ctx, x, w, group, kernel_shape)
        strides = triple(ctx, "strides", strides, 1)
        dilations = triple(ctx, "dilations", dilations, 1)
        out_pad = triple(ctx, "output_padding", output_padding or (0, 0, 0), 0)
        full = tuple(s * (i - 1) + o + (k - 1) * d + 1 for i, s, o, k, d in
                     zip(sizes, strides, out_pad, kernel, dilations))
        begin, end, extra = _crops(ctx, auto_pad, pads, output_shape, sizes, full, strides,
                                   out_pad)
        spread = x
        for axis, s in zip((2, 3, 4), strides):
            if s > 1:
                spread = _spread(ctx, spread, axis, s)
        front = [d * (k - 1) - bg for d, k, bg in zip(dilations, kernel, begin)]
        outs = [f - bg - e + ex for f, bg, e, ex in zip(full, begin, end, extra)]
        back = [o - i * s - p + d * (k - 1) for o, i, s, p, d, k in
                zip(outs, sizes, strides, front, dilations, kernel)]
        spread = ctx.emit("pad", [spread], {"pads": (0, 0, *front, 0, 0, *back),
                                            "mode": "constant", "value": 0.0})
        per_group, m = c // group, w.shape[1]
        wt = ctx.emit("reshape", [w], {"shape": (group, per_group, m) + kernel})
        wt = ctx.emit("transpose", [wt], {"perm": (0, 2, 1, 3, 4, 5)})
        wt = ctx.emit("reshape", [wt], {"shape": (group * m, per_group) + kernel})
        wt = ctx.emit("slice", [wt], {"starts": (0, 0) + tuple(k - 1 for k in kernel),
                                      "ends": (group * m, per_group, -1, -1, -1),
                                      "steps": (1, 1, -1, -1, -1)})
        return CONVERTERS["Conv"](ctx, spread, wt, b, dilations=dilations, group=group,
                                  kernel_shape=kernel, pads=(0,) * 6, strides=(1, 1, 1))
    return conv

