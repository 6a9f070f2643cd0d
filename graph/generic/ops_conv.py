"""Lowerings of conv2d and 2-D pooling onto codegen/generic/conv.py's kernels.

The plan does the shape arithmetic: output sizes come from the graph, and the interior of an
output row (the pixels whose every tap lies inside the input row, so the kernel runs them
without guards) is computed here. A constant conv weight is re-laid out once here into the
16-output-channel blocks conv.dense reads (data preparation, like the weight packing of the
specialised tier); a weight known only at run time is Unsupported.
"""
from __future__ import annotations

import numpy as np

from ...codegen.generic.conv import BLOCK
from .lowering import Unsupported, aligned_empty, lowers


def interior(size: int, out: int, k: int, stride: int, dilation: int, pad: int) -> tuple[int, int]:
    """[lo, hi): the outputs whose taps o*stride - pad + j*dilation (j < k) all lie in
    [0, size); (0, 0) when there are none."""
    lo = -(-pad // stride)
    hi = (size - 1 + pad - (k - 1) * dilation) // stride + 1 if size - 1 + pad >= (
        k - 1) * dilation else 0
    lo, hi = min(max(lo, 0), out), min(max(hi, 0), out)
    return (lo, hi) if lo < hi else (0, 0)


def _geometry(ctx, x, out, kh, kw):
    a = ctx.node.attrs
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilations"], a["pads"]
    if min(sh, sw, dh, dw) < 1:
        raise Unsupported(ctx.describe(f"strides {a['strides']} / dilations "
                                       f"{a['dilations']} must be positive"))
    oh, ow = out.shape[2], out.shape[3]
    lo, hi = interior(x.shape[3], ow, kw, sw, dw, pl)
    return (kh, kw, sh, sw, pt, pl, dh, dw), (lo, hi), (pb, pr)


def pack_weight(w: np.ndarray, groups: int) -> np.ndarray:
    """[O, Cg, KH, KW] -> [G, OB, Cg, KH, KW, 16]: each group's output channels in blocks of
    16 (the last zero-filled past the group's)."""
    o, cg, kh, kw = w.shape
    og = o // groups
    ob = -(-og // BLOCK)
    padded = np.zeros((groups, ob * BLOCK, cg, kh, kw), np.float32)
    padded[:, :og] = w.reshape(groups, og, cg, kh, kw)
    packed = padded.reshape(groups, ob, BLOCK, cg, kh, kw).transpose(0, 1, 3, 4, 5, 2)
    out = aligned_empty(packed.shape, np.float32)
    out[...] = packed
    return out


@lowers("conv2d")
def _conv2d(node, ctx):
    ctx.require_dtype("float32")
    x, y = ctx.input(0), ctx.output(0)
    w = ctx.constant(1)
    if w is None:
        raise Unsupported(ctx.describe("the weight is not a constant (the generic conv "
                                       "re-lays it out at plan time)"))
    w = np.asarray(w, np.float32)
    if x.ndim != 4 or w.ndim != 4:
        raise Unsupported(ctx.describe(f"x {list(x.shape)} and weight {list(w.shape)} must "
                                       "be 4-D (NCHW, OIHW)"))
    if y.size == 0:
        return
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = node.attrs["groups"]
    og = o // g
    geo, (lo, hi), _ = _geometry(ctx, x, y, kh, kw)
    head = [n, c, h, wd, o, y.shape[2], y.shape[3]]
    if cg == 1 and og < BLOCK:
        ctx.call("conv.depthwise_tiles", [x, np.ascontiguousarray(w.reshape(o, kh * kw)), y],
                 head + list(geo) + [og, lo, hi])
        return
    ctx.call("conv.dense", [x, pack_weight(w, g), y],
             head + list(geo) + [g, cg, og, -(-og // BLOCK), lo, hi])


@lowers("max_pool2d", "avg_pool2d")
def _pool(node, ctx):
    ctx.require_dtype("float32")
    x, y = ctx.input(0), ctx.output(0)
    if x.ndim != 4:
        raise Unsupported(ctx.describe(f"x {list(x.shape)} is not NCHW"))
    if y.size == 0:
        return
    n, c, h, wd = x.shape
    kh, kw = node.attrs["kernel"]
    geo, (lo, hi), (pb, pr) = _geometry(ctx, x, y, kh, kw)
    incl = int(bool(node.attrs.get("count_include_pad", 0)))
    kind = "max" if node.op == "max_pool2d" else "avg"
    ctx.call(f"conv.pool_{kind}", [x, x, y],
             [n * c, h, wd, y.shape[2], y.shape[3]] + list(geo) + [lo, hi, incl, h + pb,
                                                                    wd + pr])
