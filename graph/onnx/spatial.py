"""ONNX spatial operators: 1-D windows (as 2-D ones over [N, C, 1, L]), LpPool, GridSample,
Resize. (Clip's run-time bounds are onnx_ops.py's: graph inputs stay kernel arguments.)
Registered into onnx_ops.CONVERTERS (wrapping the 2-D
converters of onnx_ops.py where they extend them)."""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from .core import checked_axis, unsupported_error
from .registry import CONVERTERS, converter

# -- 1-D windows as 2-D ones -----------------------------------------------------------------------

def lift_1d(attrs: dict) -> dict:
    """Window attributes of a 1-D op as those of the same op over [N, C, 1, L]."""
    out = dict(attrs)
    for name, fill in (("kernel_shape", 1), ("strides", 1), ("dilations", 1),
                       ("output_padding", 0)):
        if out.get(name) is not None:
            out[name] = (fill,) + tuple(out[name])
    if out.get("pads") is not None:
        b, e = out["pads"]
        out["pads"] = (0, b, 0, e)
    if out.get("output_shape") is not None:
        out["output_shape"] = (1,) + tuple(out["output_shape"])
    return out


def windowed_1d(original):
    """Wrap a 2-D window converter: a rank-3 input [N, C, L] runs as [N, C, 1, L]."""
    def conv(ctx, x, *rest, **attrs):
        if len(x.shape) != 3:
            return original(ctx, x, *rest, **attrs)
        x4 = ctx.emit("reshape", [x], {"shape": (x.shape[0], x.shape[1], 1, x.shape[2])})
        if rest and rest[0] is not None and ctx.op_type in ("Conv", "ConvTranspose"):
            w = rest[0]
            rest = (ctx.emit("reshape", [w], {"shape": w.shape[:2] + (1, w.shape[2])}),
                    ) + rest[1:]
        names = ctx.output_names
        ctx.output_names = [""] * len(names)   # the 4-D result is not the node's output
        try:
            y4 = original(ctx, x4, *rest, **lift_1d(attrs))
        finally:
            ctx.output_names = names
        n, c, _, length = y4.shape
        return ctx.emit("reshape", [y4], {"shape": (n, c, length)}, final=True)
    return conv


@converter("LpPool")
def _lp_pool(ctx, x, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None,
             p=2, pads=None, strides=None):
    """(sum over the window of |x|^p)^(1/p): an average pool counting the zero padding,
    times the window size."""
    if not kernel_shape:
        raise ModelFormatError(f"node '{ctx.node_name}' (LpPool) has no kernel_shape")
    power = ctx.const(np.array(float(p), dtype=x.dtype))
    powered = ctx.emit("pow", [ctx.emit("abs", [x]), power])
    names = ctx.output_names
    ctx.output_names = [""]
    try:
        mean = CONVERTERS["AveragePool"](ctx, powered, auto_pad=auto_pad, ceil_mode=ceil_mode,
                                         count_include_pad=1, dilations=dilations,
                                         kernel_shape=kernel_shape, pads=pads, strides=strides)
    finally:
        ctx.output_names = names
    window = ctx.const(np.array(float(np.prod(kernel_shape)), dtype=x.dtype))
    total = ctx.emit("mul", [mean, window])
    return ctx.emit("pow", [total, ctx.const(np.array(1.0 / float(p), dtype=x.dtype))],
                    final=True)


@converter("GlobalLpPool")
def _global_lp_pool(ctx, x, p=2):
    """(sum over every spatial position of |x|^p)^(1/p), per batch and channel."""
    if len(x.shape) < 3:
        raise ModelFormatError(f"node '{ctx.node_name}' (GlobalLpPool): input {list(x.shape)} "
                               "needs a batch, a channel and at least one spatial axis")
    attrs = {"axes": tuple(range(2, len(x.shape))), "keepdims": 1}
    magnitude = ctx.emit("abs", [x])
    if int(p) == 1:
        return ctx.emit("reduce_sum", [magnitude], attrs, final=True)
    if int(p) == 2:
        return ctx.emit("sqrt", [ctx.emit("reduce_sum", [ctx.emit("mul", [x, x])], attrs)],
                        final=True)
    powered = ctx.emit("pow", [magnitude, ctx.const(np.array(float(p), dtype=x.dtype))])
    total = ctx.emit("reduce_sum", [powered], attrs)
    return ctx.emit("pow", [total, ctx.const(np.array(1.0 / float(p), dtype=x.dtype))],
                    final=True)


@converter("GridSample")
def _grid_sample(ctx, x, grid, align_corners=0, mode=None, padding_mode="zeros"):
    mode = mode or ("linear" if ctx.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic") or padding_mode not in (
            "zeros", "border", "reflection"):
        raise ModelFormatError(f"node '{ctx.node_name}' (GridSample): mode {mode!r}, "
                               f"padding_mode {padding_mode!r}; expected nearest/linear/cubic "
                               "and zeros/border/reflection")
    if len(x.shape) not in (4, 5):
        raise unsupported_error(ctx, f"GridSample over {len(x.shape) - 2} spatial axes")
    return ctx.emit("grid_sample", [x, grid], {"mode": mode, "padding_mode": padding_mode,
                                               "align_corners": int(align_corners)},
                    final=True)


def _resize_10(ctx, x, scales, mode):
    if scales is None:
        raise ModelFormatError(f"node '{ctx.node_name}' (Resize, opset {ctx.opset}) has no "
                               "scales input")
    given = [float(v) for v in ctx.static(scales, "scales").reshape(-1)]
    if len(given) != len(x.shape) or min(given, default=1.0) <= 0:
        raise ModelFormatError(f"node '{ctx.node_name}' (Resize): scales {given} must be "
                               f"positive, one per axis of {list(x.shape)}")
    if mode not in ("nearest", "linear"):
        raise ModelFormatError(f"node '{ctx.node_name}' (Resize, opset {ctx.opset}): mode "
                               f"{mode!r}; expected nearest or linear")
    return asymmetric_resize(ctx, x, given, mode)


def asymmetric_resize(ctx, x, given, mode: str):
    """Resize by `given` scales with the asymmetric map (source = output index / scale), as
    Upsample and Resize-10 define it. onnxruntime (the de-facto definition: the opset-10 text
    does not say) rounds a nearest source index down where an axis grows and up where it
    shrinks; nearest is separable, so mixed axes run as two resizes."""
    down = [s < 1 for s in given]
    passes = ([("ceil", down), ("floor", [not d for d in down])] if mode == "nearest"
              and any(down) and not all(down) else [("ceil" if all(down) else "floor",
                                                     [True] * len(given))])
    value = x
    for k, (rounding, axes) in enumerate(passes):
        scales = tuple(s if on else 1.0 for s, on in zip(given, axes))
        out = tuple(int(np.floor(d * s)) for d, s in zip(value.shape, scales))
        attrs = {"out_shape": out, "scales": scales, "mode": mode, "coord": "asymmetric",
                 "nearest_mode": rounding, "cubic_a": -0.75, "exclude_outside": 0,
                 "roi": ((0.0, 1.0),) * len(x.shape), "extrapolation_value": 0.0}
        value = ctx.emit("resize", [value], attrs, final=k == len(passes) - 1)
    return value


@converter("Resize")
def _resize(ctx, x, roi=None, scales=None, sizes=None, antialias=0, axes=None,
            coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75,
            exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch",
            mode="nearest", nearest_mode="round_prefer_floor"):
    """Scales or sizes (and roi) are read at compile time: they decide the output shape."""
    if ctx.opset < 11:  # Resize-10: (X, scales), Upsample's asymmetric map, down as well
        return _resize_10(ctx, x, roi, mode)
    if antialias and (mode == "nearest" or
                      coordinate_transformation_mode == "tf_crop_and_resize"):
        raise unsupported_error(ctx, f"Resize with antialias=1 in {mode} mode / "
                                f"{coordinate_transformation_mode}")
    rank = len(x.shape)
    ax = list(range(rank)) if axes is None else [checked_axis(ctx, int(a), rank) for a in axes]
    full_scales = [1.0] * rank
    out = list(x.shape)
    if sizes is not None:
        want = [int(v) for v in ctx.static(sizes, "sizes").reshape(-1)]
        if len(want) != len(ax):
            raise ModelFormatError(f"node '{ctx.node_name}' (Resize): sizes {want} do not "
                                   f"match axes {ax}")
        ratios = [w / x.shape[a] for w, a in zip(want, ax)]
        if keep_aspect_ratio_policy in ("not_larger", "not_smaller"):
            r = min(ratios) if keep_aspect_ratio_policy == "not_larger" else max(ratios)
            ratios = [r] * len(ax)
            want = [int(np.round(r * x.shape[a])) for a in ax]
        for a, w, r in zip(ax, want, ratios):
            out[a], full_scales[a] = w, r
    elif scales is not None:
        given = [float(v) for v in ctx.static(scales, "scales").reshape(-1)]
        if len(given) != len(ax) or min(given, default=1.0) <= 0:
            raise ModelFormatError(f"node '{ctx.node_name}' (Resize): scales {given} must "
                                   f"be positive, one per axis of {ax}")
        for a, s in zip(ax, given):
            out[a], full_scales[a] = int(np.floor(x.shape[a] * s)), s
    else:
        raise ModelFormatError(f"node '{ctx.node_name}' (Resize) needs scales or sizes")
    pairs = [(0.0, 1.0)] * rank
    if coordinate_transformation_mode == "tf_crop_and_resize":
        if roi is None:
            raise ModelFormatError(f"node '{ctx.node_name}' (Resize): tf_crop_and_resize "
                                   "needs roi")
        r = [float(v) for v in ctx.static(roi, "roi").reshape(-1)]
        for k, a in enumerate(ax):
            pairs[a] = (r[k], r[k + len(ax)])
    mode = {"linear": "linear", "cubic": "cubic", "nearest": "nearest"}.get(mode)
    if mode is None:
        raise ModelFormatError(f"node '{ctx.node_name}' (Resize): unknown mode; expected "
                               "nearest, linear or cubic")
    if antialias:
        from .resize_aa import resize_antialias
        return resize_antialias(ctx, x, out, full_scales, mode, coordinate_transformation_mode,
                                float(cubic_coeff_a), bool(exclude_outside))
    attrs = {"out_shape": tuple(out), "scales": tuple(full_scales), "mode": mode,
             "coord": coordinate_transformation_mode, "nearest_mode": nearest_mode,
             "cubic_a": float(cubic_coeff_a), "exclude_outside": int(exclude_outside),
             "roi": tuple(pairs), "extrapolation_value": float(extrapolation_value)}
    return ctx.emit("resize", [x], attrs, final=True)
