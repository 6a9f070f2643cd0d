"""Sampling at data-dependent coordinates: ONNX GridSample (nearest, linear, cubic; zeros,
border and reflection padding; 2-D and 3-D), as one compute whose every output point sums
its interpolation taps (2^D linear, 4^D cubic) with the weights computed in registers."""
from __future__ import annotations

import itertools

from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute
from ._common import check_tensor, require_float
from .tags import INJECTIVE

GRID_MODES = ("nearest", "linear", "cubic")
GRID_PADDING = ("zeros", "border", "reflection")
_CUBIC_A = -0.75   # Keys' cubic convolution, as ONNX and PyTorch use


def _reflect(v: E.Expr, lo: float, hi: float) -> E.Expr:
    """Fold float `v` into [lo, hi] by reflecting at the borders (any number of times)."""
    span = hi - lo
    if span <= 0:
        return E.const(lo, v.dtype)

    def fold(dx, near, far):
        n = E.floor(dx / span)
        r = dx - n * span
        even = E.floormod(E.cast(n, "int32"), 2).eq(0)
        return E.select(even, near(r), far(r))

    below = fold(lo - v, lambda r: lo + r, lambda r: hi - r)
    above = fold(v - hi, lambda r: hi - r, lambda r: lo + r)
    return E.select(v < lo, below, E.select(hi < v, above, v))


def _cubic_weights(t: E.Expr) -> list[E.Expr]:
    a = _CUBIC_A

    def near(x):   # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):    # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sample(x: Tensor, grid: Tensor, mode: str = "linear", padding_mode: str = "zeros",
                align_corners: bool = False, name: str | None = None) -> Tensor:
    """y[n, c, *o] = x[n, c] sampled at grid[n, *o, :] (coordinates in [-1, 1], the last
    axis ordered (x, y[, z]), i.e. from the last spatial axis of x back)."""
    op = "grid_sample"
    check_tensor(op, x)
    check_tensor(op, grid, "grid")
    require_float(op, x)
    if mode not in GRID_MODES or padding_mode not in GRID_PADDING:
        raise TEError(f"{op}(): mode {mode!r} / padding_mode {padding_mode!r}; use one of "
                      f"{GRID_MODES} / {GRID_PADDING}")
    dims = x.shape[2:]
    nd = len(dims)
    if grid.ndim != nd + 2 or grid.shape[-1] != nd or grid.shape[0] != x.shape[0]:
        raise TEError(f"{op}(): grid {list(grid.shape)} must be [N, *out, {nd}] for x "
                      f"{list(x.shape)}")
    dtype = x.dtype
    lows = [0.0 if align_corners else -0.5 for _ in dims]
    highs = [d - 1.0 if align_corners else d - 0.5 for d in dims]

    def coord(n, o, i):
        g = grid(n, *o, nd - 1 - i)
        if grid.dtype != dtype:
            g = E.cast(g, dtype)
        size = dims[i]
        v = (g + 1) * ((size - 1) / 2.0) if align_corners else ((g + 1) * size - 1) / 2.0
        if mode == "nearest":
            v = E.round(v)
        if padding_mode == "border":
            v = E.minimum(E.maximum(v, E.const(0.0, dtype)), E.const(size - 1.0, dtype))
        elif padding_mode == "reflection":
            v = _reflect(v, lows[i], highs[i])
        return v

    def pixel(n, c, idx):
        """x at integer taps `idx` per padding_mode; (value, in-bounds condition)."""
        reads, inside = [], []
        for i, k in enumerate(idx):
            size = dims[i]
            if padding_mode == "reflection":
                k = E.cast(_reflect(E.cast(k, dtype), lows[i], highs[i]), "int32")
            elif padding_mode == "zeros":
                inside.append(E.all_of(k >= 0, k < size))
            reads.append(E.minimum(E.maximum(k, 0), size - 1))
        value = x(n, c, *reads)
        if inside:
            value = E.select(E.all_of(*inside), value, E.const(0.0, dtype))
        return value

    def body(*idx):
        n, c, o = idx[0], idx[1], idx[2:]
        vs = [coord(n, o, i) for i in range(nd)]
        if mode == "nearest":
            return pixel(n, c, [E.cast(v, "int32") for v in vs])
        taps = 2 if mode == "linear" else 4
        bases, weights = [], []
        for v in vs:
            base = E.floor(v)
            t = v - base
            bases.append(E.cast(base, "int32") - (0 if mode == "linear" else 1))
            weights.append([1 - t, t] if mode == "linear" else _cubic_weights(t))
        total = None
        for combo in itertools.product(range(taps), repeat=nd):
            w = weights[0][combo[0]]
            for i in range(1, nd):
                w = w * weights[i][combo[i]]
            term = w * pixel(n, c, [b + k for b, k in zip(bases, combo)])
            total = term if total is None else total + term
        return total

    out_shape = (x.shape[0], x.shape[1]) + tuple(grid.shape[1:-1])
    return compute(out_shape, body, name=name or op, tag=INJECTIVE)


RESIZE_COORDS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                 "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coord(i: E.Expr, in_len: int, out_int: int, scale: float, coord: str,
                  roi: tuple[float, float]) -> E.Expr:
    """The input coordinate (float32) that output index `i` maps to along one axis; the
    resized length is in_len * scale before rounding (onnx's reference), out_int after."""
    x = E.cast(i, "float32")
    out_len = in_len * scale
    if coord == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if coord == "half_pixel_symmetric":
        adjust = out_int / out_len
        offset = in_len / 2.0 * (1 - adjust)
        return offset + (x + 0.5) / scale - 0.5
    if coord == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else E.const(0.0, "float32")
    if coord == "align_corners":
        return x * ((in_len - 1) / (out_len - 1)) if out_len != 1 else E.const(0.0, "float32")
    if coord == "asymmetric":
        return x / scale
    if coord == "tf_half_pixel_for_nn":  # Resize-11 only: pixel centres, no -0.5 back
        return (x + 0.5) / scale
    start, end = roi
    if out_len > 1:
        return start * (in_len - 1) + x * ((end - start) * (in_len - 1) / (out_len - 1))
    return E.const(0.5 * (start + end) * (in_len - 1), "float32")


def _nearest(v: E.Expr, mode: str) -> E.Expr:
    if mode == "round_prefer_floor":
        return E.ceil(v - 0.5)
    if mode == "round_prefer_ceil":
        return E.floor(v + 0.5)
    return E.floor(v) if mode == "floor" else E.ceil(v)


def resize(x: Tensor, out_shape, scales, mode: str = "nearest",
           coord: str = "half_pixel", nearest_mode: str = "round_prefer_floor",
           cubic_a: float = -0.75, exclude_outside: bool = False, roi=None,
           extrapolation_value: float = 0.0, name: str | None = None) -> Tensor:
    """ONNX Resize without antialiasing: each axis maps output index -> input coordinate
    (`coord`), then nearest / linear / cubic taps along every axis whose size changes."""
    op = "resize"
    check_tensor(op, x)
    if mode not in GRID_MODES or coord not in RESIZE_COORDS or nearest_mode not in NEAREST_MODES:
        raise TEError(f"{op}(): mode {mode!r}, coordinate mode {coord!r}, nearest mode "
                      f"{nearest_mode!r}; use one of {GRID_MODES}, {RESIZE_COORDS}, "
                      f"{NEAREST_MODES}")
    out_shape = tuple(int(d) for d in out_shape)
    roi = roi or [(0.0, 1.0)] * x.ndim
    axes = [a for a in range(x.ndim) if out_shape[a] != x.shape[a] or scales[a] != 1.0
            or coord == "tf_crop_and_resize"]
    is_float = x.dtype.startswith(("float", "bfloat"))

    def weights_of(t: E.Expr) -> list[E.Expr]:
        if mode == "linear":
            return [1 - t, t]
        a = cubic_a

        def near(v):
            return ((a + 2) * v - (a + 3)) * v * v + 1

        def far(v):
            return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a
        return [far(t + 1), near(t), near(1 - t), far(2 - t)]

    def body(*idx):
        coords = {a: _source_coord(idx[a], x.shape[a], out_shape[a], scales[a], coord, roi[a])
                  for a in axes}
        outside = []
        if coord == "tf_crop_and_resize":
            for a, v in coords.items():
                outside.append(E.any_of(v < 0.0, (x.shape[a] - 1.0) < v))
        if mode == "nearest":
            reads = list(idx)
            for a, v in coords.items():
                k = E.cast(_nearest(v, nearest_mode), "int32")
                reads[a] = E.minimum(E.maximum(k, 0), x.shape[a] - 1)
            value = x(*reads)
        else:
            taps = 2 if mode == "linear" else 4
            per_axis = []
            for a, v in coords.items():
                base = E.floor(v)
                first = E.cast(base, "int32") - (0 if mode == "linear" else 1)
                ws = weights_of(v - base)
                ks = [first + k for k in range(taps)]
                if exclude_outside:
                    ws = [E.select(E.all_of(k >= 0, k < x.shape[a]), w, E.const(0.0, "float32"))
                          for w, k in zip(ws, ks)]
                    total = ws[0]
                    for w in ws[1:]:
                        total = total + w
                    ws = [w / total for w in ws]
                per_axis.append((a, ks, ws))
            value = None
            for combo in itertools.product(range(taps), repeat=len(per_axis)):
                reads, w = list(idx), None
                for (a, ks, ws), c in zip(per_axis, combo):
                    reads[a] = E.minimum(E.maximum(ks[c], 0), x.shape[a] - 1)
                    w = ws[c] if w is None else w * ws[c]
                src = x(*reads)
                src = src if src.dtype == "float32" else E.cast(src, "float32")
                term = src if w is None else w * src
                value = term if value is None else value + term
            if not is_float:
                value = E.round(value)
            value = E.cast(value, x.dtype) if value.dtype != x.dtype else value
        if outside:
            value = E.select(E.any_of(*outside), E.const(extrapolation_value, x.dtype), value)
        return value

    return compute(out_shape, body, name=name or op, tag=INJECTIVE)
