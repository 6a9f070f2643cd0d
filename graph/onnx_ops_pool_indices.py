"""MaxPool's Indices output (2-D): for each window, the flat index (n*C + c)*H*W + h*W + w
(+ w*H + h in column-major storage order) of its first (smallest-index) maximum, padding
excluded: a second
TE reduction (a min over the window of the indices where the input equals the pooled value).
Registered into the graph op tables and wraps onnx_ops.CONVERTERS["MaxPool"]."""
from __future__ import annotations

import numpy as np

from ..te import expr as E
from ..te import tensor as T
from ..te.ops import tags
from ..te.tensor import compute, reduce_axis
from .ir import OpClass
from .onnx_ops import CONVERTERS, _pool_attrs
from .ops_more import define

_NONE = np.iinfo(np.int64).max


def _infer(ins, attrs):
    return [(ins[1].shape, "int64")]


def _lower(node, args):
    x, pooled = args
    a = node.attrs
    _, c, height, width = x.shape
    (kh, kw), (sh, sw), (dh, dw) = a["kernel"], a["strides"], a["dilations"]
    top, left = a["pads"][:2]
    ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")

    def body(n, ch, oy, ox):
        y = oy * sh - top + ry.var * dh
        xx = ox * sw - left + rx.var * dw
        inside = (y >= 0) & (y < height) & (xx >= 0) & (xx < width)
        yc = E.minimum(E.maximum(y, 0), height - 1)
        xc = E.minimum(E.maximum(xx, 0), width - 1)
        plane = (E.cast(n, "int64") * c + E.cast(ch, "int64")) * (height * width)
        yi, xi = E.cast(yc, "int64"), E.cast(xc, "int64")
        flat = plane + (xi * height + yi if a["column_major"] else yi * width + xi)
        hit = inside & x(n, ch, yc, xc).eq(pooled(n, ch, oy, ox))
        return T.min(E.select(hit, flat, E.const(_NONE, "int64")), axis=[ry, rx])
    return [compute(pooled.shape, body, name="max_pool_indices", tag=tags.REDUCTION)]


def _reference(node, x, pooled):
    a = node.attrs
    n, c, height, width = x.shape
    (kh, kw), (sh, sw), (dh, dw) = a["kernel"], a["strides"], a["dilations"]
    top, left = a["pads"][:2]
    out = np.full(pooled.shape, _NONE, np.int64)
    for i in np.ndindex(*pooled.shape):
        for ky in range(kh):
            for kx in range(kw):
                y, xx = i[2] * sh - top + ky * dh, i[3] * sw - left + kx * dw
                if 0 <= y < height and 0 <= xx < width and x[i[0], i[1], y, xx] == pooled[i]:
                    flat = (i[0] * c + i[1]) * height * width + (
                        xx * height + y if a["column_major"] else y * width + xx)
                    out[i] = min(out[i], flat)
    return out


define("max_pool_indices", OpClass.REDUCTION, _infer, _lower, _reference)


def _with_indices(original):
    def conv(ctx, x, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None,
             pads=None, storage_order=0, strides=None):
        names = ctx.output_names
        window = dict(auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                      kernel_shape=kernel_shape, pads=pads, strides=strides)
        if not (len(names) > 1 and names[1]) or len(x.shape) != 4:
            return original(ctx, x, storage_order=storage_order, **window)
        ctx.output_names = [names[0]]
        try:
            values = original(ctx, x, **window)
            ctx.output_names = [names[1]]
            attrs = _pool_attrs(ctx, x, auto_pad, ceil_mode, dilations, kernel_shape, pads,
                                strides)
            attrs["column_major"] = bool(storage_order)
            indices = ctx.emit("max_pool_indices", [x, values], attrs, final=True)
        finally:
            ctx.output_names = names
        return values, indices
    return conv


CONVERTERS["MaxPool"] = _with_indices(CONVERTERS["MaxPool"])
