"""Lowerings of conv2d and 2-D pooling onto codegen/generic/conv.py's kernels.

The plan does the shape arithmetic: output sizes come from the graph, and the interior of an
output row (the pixels whose every tap lies inside the input row, so the kernel runs them
without guards) is computed here. A constant conv weight is re-laid out once here into the
16-output-channel blocks conv.dense reads (data preparation, like the weight packing of the
specialised tier); a weight known only at run time is Unsupported.
"""
from __future__ import annotations

import numpy as np

from ...codegen.generic.conv import BLOCK, PAD_TYPES
from ...codegen.generic.registry import MAX_ELEMENTS
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
    """The window's (KH, KW, SH, SW, PT, PL, DH, DW), the output row's interior, (PB, PR)."""
    a = ctx.node.attrs
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilations"], a["pads"]
    if min(sh, sw, dh, dw) < 1:
        raise Unsupported(ctx.describe(f"strides {a['strides']} / dilations "
                                       f"{a['dilations']} must be positive"))
    lo, hi = interior(x.shape[3], out.shape[3], kw, sw, dw, pl)
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
    blocks = g * -(-og // BLOCK) * BLOCK * cg * kh * kw
    if blocks > MAX_ELEMENTS:
        raise Unsupported(ctx.describe(f"the packed weight has {blocks} elements, more than "
                                       f"the generic kernels index ({MAX_ELEMENTS})"))
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
    # conv.depthwise_tiles' dims (one channel per group, O = C) + the avg count's region
    ctx.call(f"conv.pool_{kind}", [x, x, y],
             [n, c, h, wd, c, y.shape[2], y.shape[3]] + list(geo) + [1, lo, hi, incl, h + pb,
                                                                     wd + pr])


# ---------------------------------------------------------------------------- resize
def _coords(out_len: int, in_len: int, scale: float, coord: str) -> np.ndarray:
    """The float32 input coordinate of each output index along one axis (the formulas of
    te/ops/sampling._source_coord)."""
    x = np.arange(out_len, dtype=np.float32)
    scale = np.float32(scale)
    resized = in_len * float(scale)
    if coord == "half_pixel":
        return (x + np.float32(0.5)) / scale - np.float32(0.5)
    if coord == "half_pixel_symmetric":
        adjust = out_len / resized
        offset = np.float32(in_len / 2.0 * (1 - adjust))
        return offset + (x + np.float32(0.5)) / scale - np.float32(0.5)
    if coord == "pytorch_half_pixel":
        return ((x + np.float32(0.5)) / scale - np.float32(0.5) if resized > 1
                else np.zeros_like(x))
    if coord == "align_corners":
        return (x * np.float32((in_len - 1) / (resized - 1)) if resized != 1
                else np.zeros_like(x))
    if coord == "asymmetric":
        return x / scale
    if coord == "tf_half_pixel_for_nn":
        return (x + np.float32(0.5)) / scale
    raise ValueError(coord)


_ROUND = {"round_prefer_floor": lambda v: np.ceil(v - np.float32(0.5)),
          "round_prefer_ceil": lambda v: np.floor(v + np.float32(0.5)),
          "floor": np.floor, "ceil": np.ceil}


def _table(ctx, values, dtype):
    out = ctx.temp(values.shape, dtype)
    out[...] = values
    return out


@lowers("resize")
def _resize(node, ctx):
    ctx.require_dtype("float32")
    a = node.attrs
    x, y = ctx.input(0), ctx.output(0)
    if x.ndim != 4 or a["mode"] not in ("nearest", "linear") or a["coord"] not in (
            "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
            "asymmetric", "tf_half_pixel_for_nn"):
        raise Unsupported(ctx.describe(f"resize of a {x.ndim}-D tensor, mode {a['mode']!r}, "
                                       f"coordinates {a['coord']!r} (the generic kernels "
                                       "take NCHW nearest/linear without crop)"))
    if y.shape[:2] != x.shape[:2] or any(float(s) != 1.0 for s in a["scales"][:2]):
        raise Unsupported(ctx.describe("resize over the batch or channel axis"))
    if y.size == 0:
        return
    if x.size == 0:
        raise Unsupported(ctx.describe("resize of an empty input to a non-empty output"))
    tables = []
    for axis in (2, 3):
        n_in, n_out, scale = x.shape[axis], y.shape[axis], a["scales"][axis]
        if n_out == n_in and float(scale) == 1.0:     # the op leaves this axis alone
            v = np.arange(n_out, dtype=np.float32)
        else:
            v = _coords(n_out, n_in, scale, a["coord"])
        if a["mode"] == "nearest":
            k = _ROUND[a["nearest_mode"]](v) if v.dtype == np.float32 else v
            tables.append([_table(ctx, np.clip(k, 0, n_in - 1), np.int32)])
        else:
            base = np.floor(v)
            t = (v - base).astype(np.float32)
            tables.append([_table(ctx, np.clip(base, 0, n_in - 1), np.int32),
                           _table(ctx, np.clip(base + 1, 0, n_in - 1), np.int32),
                           _table(ctx, t, np.float32)])
    dims = [x.shape[0] * x.shape[1], x.shape[2], x.shape[3], y.shape[2], y.shape[3]]
    ctx.call(f"conv.resize_{a['mode']}", [x, y] + tables[0] + tables[1], dims)


# ---------------------------------------------------------------------------- pad
PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2}


def pad_plan(shape, pads, mode):
    """(out, ins, strides, begins, offset) of a pad of a C-contiguous `shape` in
    PAD_RANK dims: negative pads cropped (an offset and shorter extents), runs of unpadded
    dims merged, unit dims in front; None when more than PAD_RANK dims remain."""
    r = len(shape)
    strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(r)]
    begin, end = list(pads[:r]), list(pads[r:])
    offset, ins = 0, []
    for k in range(r):
        crop_b, crop_e = max(-begin[k], 0), max(-end[k], 0)
        offset += crop_b * strides[k]
        ins.append(max(shape[k] - crop_b - crop_e, 0))
        begin[k], end[k] = max(begin[k], 0), max(end[k], 0)
    dims = [[ins[k], strides[k], begin[k], end[k]] for k in range(r)] or [[1, 1, 0, 0]]
    merged = [dims[0]]
    for n, st, b, e in dims[1:]:
        pn, pst, pb, pe = merged[-1]
        if pb == pe == b == e == 0 and pst == n * st:
            merged[-1] = [pn * n, st, 0, 0]
        else:
            merged.append([n, st, b, e])
    if len(merged) > 6:
        return None
    merged = [[1, 1, 0, 0]] * (6 - len(merged)) + merged
    out = [n + b + e for n, _, b, e in merged]
    return out, [m[0] for m in merged], [m[1] for m in merged], [m[2] for m in merged], offset


@lowers("pad")
def _pad(node, ctx):
    a = node.attrs
    x, y = ctx.input(0), ctx.output(0)
    mode = a["mode"]
    if mode not in PAD_MODES:
        raise Unsupported(ctx.describe(f"pad mode {mode!r}"))
    size = x.dtype.itemsize
    if size not in PAD_TYPES:
        raise Unsupported(ctx.describe(f"pad of {x.dtype} ({size}-byte elements)"))
    if y.size == 0:
        return
    plan = pad_plan(x.shape, a["pads"], mode)
    if plan is None:
        raise Unsupported(ctx.describe(f"pad of a {x.ndim}-D tensor whose padded dims do "
                                       "not merge into 6"))
    out, ins, strides, begins, offset = plan
    ends = [o - n - b for o, n, b in zip(out, ins, begins)]
    if mode != "constant":
        for n, b, e in zip(ins, begins, ends):
            if (b or e) and (n == 0 or (mode == "reflect" and max(b, e) >= n)):
                raise Unsupported(ctx.describe(f"{mode} pad of {max(b, e)} on an axis of "
                                               f"{n} (onnx wants the pad below the size)"))
    if min(ins) == 0:           # nothing to read: every row takes the fill
        ins[0] = 0
    kind = np.dtype(PAD_TYPES[size])
    if ctx.has_input(1) and mode == "constant":
        fill = ctx.input(1).reshape(1)
    else:
        fill = ctx.temp((1,), x.dtype)
        fill[0] = a.get("value", 0) if mode == "constant" else 0
    ctx.call(f"conv.pad_{kind.name}", [x.view(kind), y.view(kind), fill.view(kind)],
             out + ins + strides + begins + [PAD_MODES[mode], offset])
