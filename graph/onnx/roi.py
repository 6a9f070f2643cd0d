"""RoiAlign (Mask R-CNN): for each region of interest (run-time boxes and batch indices), an
average or maximum of bilinear samples on a fixed grid of sampling_ratio^2 points per output
bin, as one TE reduction over the grid (then a divide for the average). The grid must be
fixed: sampling_ratio 0 (a grid sized by each box at run time) is refused.

Matches onnx's definition: a sample outside [-1, H] x [-1, W] counts as 0; the maximum takes,
per sample, the largest of its four weighted corner values.
"""
from __future__ import annotations

import numpy as np

from ...te import expr as E
from ...te import tensor as T
from ...te.errors import ModelFormatError
from ...te.ops import tags
from ...te.tensor import compute, reduce_axis
from ..ir import OpClass
from .core import unsupported_error, converter
from ..ops.more import define


def _infer(ins, attrs):
    x, rois = ins[0], ins[1]
    return [((rois.shape[0], x.shape[1], attrs["out_h"], attrs["out_w"]), x.dtype)]


def _lower(node, args):
    x, rois, index = args
    a = node.attrs
    n, _, height, width = x.shape
    out_h, out_w, grid, scale = a["out_h"], a["out_w"], a["grid"], a["scale"]
    offset = 0.5 if a["half_pixel"] else 0.0
    dtype = x.dtype
    iy, ix = reduce_axis(grid, "iy"), reduce_axis(grid, "ix")

    def f(v):
        return E.const(float(v), dtype)

    def sample(r, c, ph, pw):
        start = [rois(r, k) * f(scale) - f(offset) for k in range(4)]   # x1, y1, x2, y2
        roi_w, roi_h = start[2] - start[0], start[3] - start[1]
        if not a["half_pixel"]:
            roi_w, roi_h = E.maximum(roi_w, f(1)), E.maximum(roi_h, f(1))
        bin_h, bin_w = roi_h / f(out_h), roi_w / f(out_w)
        y = (start[1] + E.cast(ph, dtype) * bin_h
             + (E.cast(iy.var, dtype) + f(0.5)) * bin_h / f(grid))
        xx = (start[0] + E.cast(pw, dtype) * bin_w
              + (E.cast(ix.var, dtype) + f(0.5)) * bin_w / f(grid))
        outside = (y < f(-1)) | (y > f(height)) | (xx < f(-1)) | (xx > f(width))
        b = E.minimum(E.maximum(E.cast(index(r), "int32"), 0), n - 1)
        corners, weights = [], []
        # a coordinate past the last row/column reads that row/column with weight 1
        ys, xs = E.minimum(E.maximum(y, f(0)), f(height - 1)), E.minimum(
            E.maximum(xx, f(0)), f(width - 1))
        y_lo, x_lo = E.cast(E.floor(ys), "int32"), E.cast(E.floor(xs), "int32")
        y_hi, x_hi = E.minimum(y_lo + 1, height - 1), E.minimum(x_lo + 1, width - 1)
        ly, lx = ys - E.cast(y_lo, dtype), xs - E.cast(x_lo, dtype)
        hy, hx = f(1) - ly, f(1) - lx
        for yy, wy in ((y_lo, hy), (y_hi, ly)):
            for xi, wx in ((x_lo, hx), (x_hi, lx)):
                corners.append(wy * wx * x(b, c, yy, xi))
        if a["max"]:
            value = E.maximum(E.maximum(corners[0], corners[1]),
                              E.maximum(corners[2], corners[3]))
        else:
            value = corners[0] + corners[1] + corners[2] + corners[3]
        return E.select(outside, f(0), value)

    shape = (rois.shape[0], x.shape[1], out_h, out_w)
    reducer = T.max if a["max"] else T.sum
    pooled = compute(shape, lambda r, c, ph, pw: reducer(sample(r, c, ph, pw), axis=[iy, ix]),
                     name="roi_align_sum", tag=tags.REDUCTION)
    if a["max"]:
        return [pooled]
    return [compute(shape, lambda *i: pooled(*i) / f(grid * grid), name="roi_align",
                    tag=tags.ELEMWISE)]


def _reference(node, x, rois, index):
    a = node.attrs
    _, _, height, width = x.shape
    offset = 0.5 if a["half_pixel"] else 0.0
    g = a["grid"]
    out = np.zeros((rois.shape[0], x.shape[1], a["out_h"], a["out_w"]), x.dtype)
    for r in range(rois.shape[0]):
        x1, y1, x2, y2 = rois[r] * a["scale"] - offset
        rw, rh = x2 - x1, y2 - y1
        if not a["half_pixel"]:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        for ph in range(a["out_h"]):
            for pw in range(a["out_w"]):
                vals = []
                for i in range(g):
                    for j in range(g):
                        y = y1 + ph * rh / a["out_h"] + (i + 0.5) * rh / a["out_h"] / g
                        xx = x1 + pw * rw / a["out_w"] + (j + 0.5) * rw / a["out_w"] / g
                        if y < -1 or y > height or xx < -1 or xx > width:
                            vals.append(np.zeros(x.shape[1]))
                            continue
                        y, xx = min(max(y, 0), height - 1), min(max(xx, 0), width - 1)
                        yl, xl = int(y), int(xx)
                        yh, xh = min(yl + 1, height - 1), min(xl + 1, width - 1)
                        ly, lx = y - yl, xx - xl
                        img = x[int(index[r])]
                        c = [(1 - ly) * (1 - lx) * img[:, yl, xl], (1 - ly) * lx * img[:, yl, xh],
                             ly * (1 - lx) * img[:, yh, xl], ly * lx * img[:, yh, xh]]
                        vals.append(np.max(c, axis=0) if a["max"] else np.sum(c, axis=0))
                out[r, :, ph, pw] = np.max(vals, axis=0) if a["max"] else np.mean(vals, axis=0)
    return out


define("roi_align", OpClass.REDUCTION, _infer, _lower, _reference)


@converter("RoiAlign")
def _roi_align(ctx, x, rois, batch_indices, coordinate_transformation_mode="half_pixel",
               mode="avg", output_height=1, output_width=1, sampling_ratio=0,
               spatial_scale=1.0):
    if len(x.shape) != 4 or len(rois.shape) != 2 or rois.shape[1] != 4:
        raise ModelFormatError(f"node '{ctx.node_name}' (RoiAlign): X {list(x.shape)} must be "
                               f"[N, C, H, W] and rois {list(rois.shape)} [R, 4]")
    if int(sampling_ratio) <= 0:
        raise unsupported_error(ctx, "sampling_ratio 0 (a sampling grid sized per box at run time)")
    if mode not in ("avg", "max") or coordinate_transformation_mode not in (
            "half_pixel", "output_half_pixel"):
        raise ModelFormatError(f"node '{ctx.node_name}' (RoiAlign): mode {mode!r} / "
                               f"coordinate_transformation_mode {coordinate_transformation_mode!r}")
    if rois.dtype != x.dtype:
        rois = ctx.emit("cast", [rois], {"to": x.dtype})
    return ctx.emit("roi_align", [x, rois, batch_indices], {
        "out_h": int(output_height), "out_w": int(output_width), "grid": int(sampling_ratio),
        "scale": float(spatial_scale), "max": mode == "max",
        "half_pixel": coordinate_transformation_mode == "half_pixel"}, final=True)
