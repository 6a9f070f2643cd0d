"""DeformConv (2-D, group 1) from graph ops: each kernel tap's sampling position (the regular
grid plus the run-time offset) is bilinearly sampled with GridSample (zeros outside, corners
aligned, as onnx defines it), scaled by the optional mask, and the columns are contracted with
the weight by a matmul (an im2col whose columns are sampled, not gathered).
"""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ..ir import Value
from .core import unsupported_error, converter


def _channels(ctx, x: Value, start: int, stop: int) -> Value:
    starts, ends = [0] * len(x.shape), list(x.shape)
    starts[1], ends[1] = start, stop
    return ctx.emit("slice", [x], {"starts": tuple(starts), "ends": tuple(ends),
                                   "steps": (1,) * len(x.shape)})


@converter("DeformConv")
def _deform_conv(ctx, x, w, offset, b=None, mask=None, dilations=None, group=1,
                 kernel_shape=None, offset_group=1, pads=None, strides=None):
    if len(x.shape) != 4:
        raise unsupported_error(ctx, f"a {len(x.shape) - 2}-D DeformConv (only 2-D)")
    if int(group) != 1:
        raise unsupported_error(ctx, f"DeformConv with group={group}")
    n, ic, height, width = x.shape
    oc, icg, kh, kw = w.shape
    taps, groups = kh * kw, int(offset_group)
    oh, ow = offset.shape[2:]
    if icg != ic or ic % groups or offset.shape[1] != 2 * groups * taps or (
            kernel_shape and tuple(kernel_shape) != (kh, kw)):
        raise ModelFormatError(f"node '{ctx.node_name}' (DeformConv): X {list(x.shape)}, W "
                               f"{list(w.shape)}, offset {list(offset.shape)} and offset_group "
                               f"{groups} do not fit together")
    if height < 2 or width < 2:
        raise unsupported_error(ctx, "DeformConv over an image of height or width 1")
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    ph, pw, ph_end, pw_end = pads or (0, 0, 0, 0)
    want = ((height + ph + ph_end - (kh - 1) * dh - 1) // sh + 1,
            (width + pw + pw_end - (kw - 1) * dw - 1) // sw + 1)
    if (oh, ow) != want:
        raise ModelFormatError(f"node '{ctx.node_name}' (DeformConv): offset's output size "
                               f"{[oh, ow]} does not match the window's {list(want)}")
    k = np.arange(taps)
    rows = np.broadcast_to(np.arange(oh)[None, :, None] * sh - ph
                           + (k // kw)[:, None, None] * dh, (taps, oh, ow))
    cols = np.broadcast_to(np.arange(ow)[None, None, :] * sw - pw
                           + (k % kw)[:, None, None] * dw, (taps, oh, ow))
    dtype = x.dtype
    shifts = ctx.emit("reshape", [offset], {"shape": (n, groups, taps, 2, oh, ow)})
    per_group = ic // groups
    columns = []
    for g in range(groups):
        coords = []
        for axis, base, size in ((1, cols, width), (0, rows, height)):   # grid is (x, y)
            starts = (0, g, 0, axis, 0, 0)
            ends = (n, g + 1, taps, axis + 1, oh, ow)
            shift = ctx.emit("slice", [shifts], {"starts": starts, "ends": ends,
                                                 "steps": (1,) * 6})
            shift = ctx.emit("reshape", [shift], {"shape": (n, taps * oh, ow, 1)})
            pos = ctx.emit("add", [shift, ctx.const(base.reshape(1, taps * oh, ow, 1)
                                                    .astype(dtype))])
            # [-1, 1] with corners aligned: GridSample maps it back to pos
            norm = ctx.emit("sub", [ctx.emit("mul", [ctx.emit("div", [
                pos, ctx.const(np.array(size - 1, dtype))]), ctx.const(np.array(2, dtype))]),
                ctx.const(np.array(1, dtype))])
            coords.append(norm)
        grid = ctx.emit("concat", coords, {"axis": 3})
        part = _channels(ctx, x, g * per_group, (g + 1) * per_group) if groups > 1 else x
        sampled = ctx.emit("grid_sample", [part, grid], {"mode": "linear",
                                                         "padding_mode": "zeros",
                                                         "align_corners": 1})
        sampled = ctx.emit("reshape", [sampled], {"shape": (n, per_group, taps, oh, ow)})
        if mask is not None:
            m = _channels(ctx, mask, g * taps, (g + 1) * taps)
            m = ctx.emit("reshape", [m], {"shape": (n, 1, taps, oh, ow)})
            sampled = ctx.emit("mul", [sampled, m])
        columns.append(ctx.emit("reshape", [sampled], {"shape": (n, per_group * taps,
                                                                 oh * ow)}))
    stacked = columns[0] if groups == 1 else ctx.emit("concat", columns, {"axis": 1})
    weight = ctx.emit("reshape", [w], {"shape": (oc, ic * taps)})
    y = ctx.emit("matmul", [weight, stacked])                       # [N, OC, OH * OW]
    if b is not None:
        y = ctx.emit("add", [y, ctx.emit("reshape", [b], {"shape": (1, oc, 1)})])
    return ctx.emit("reshape", [y], {"shape": (n, oc, oh, ow)}, final=True)
