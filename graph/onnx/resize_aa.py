"""Resize with antialias=1 (linear or cubic, downsampling): along each resized axis the output
is a fixed linear map of the input (a filter widened by 1 / scale, normalised, its taps
clamped to the edge), so each axis becomes a matmul with a constant [in, out] matrix built
here at compile time from ONNX's definition; the matmuls run as Kiln kernels.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import Value


def _source_coords(coord: str, out_n: int, in_n: int, scale: float) -> np.ndarray:
    """x_original of each output index (ONNX coordinate_transformation_mode); the resized
    length is in_n * scale before rounding, out_n after (as onnx's reference)."""
    y = np.arange(out_n, dtype=np.float64)
    length = in_n * scale
    if coord == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if coord == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if length != 1 else np.full(out_n, -0.5)
    if coord == "align_corners":
        return y * (in_n - 1) / (length - 1) if length != 1 else np.zeros(out_n)
    if coord == "asymmetric":
        return y / scale
    if coord == "half_pixel_symmetric":
        return in_n / 2 * (1 - out_n / length) + (y + 0.5) / scale - 0.5
    raise ValueError(f"coordinate_transformation_mode {coord!r}")


def _linear_taps(ratio: float, scale: float) -> np.ndarray:
    scale = min(scale, 1.0)
    start = int(math.floor(-1 / scale) + 1)
    args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
    taps = np.clip(1 - np.abs(args), 0, 1)
    return taps / taps.sum()


def _cubic_taps(ratio: float, scale: float, a: float) -> np.ndarray:
    scale = min(scale, 1.0)
    start = int(math.floor(-2 / scale) + 1)
    t = np.abs(scale * (np.arange(start, 2 - start) - ratio))
    taps = np.where(t <= 1, (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1,
                    np.where(t < 2, a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a, 0.0))
    return taps / taps.sum()


def antialias_matrix(in_n: int, out_n: int, scale: float, mode: str, coord: str,
                     cubic_a: float, exclude_outside: bool) -> np.ndarray:
    """M[o, i]: output o = sum_i M[o, i] * input i along one axis."""
    m = np.zeros((out_n, in_n))
    for o, x in enumerate(_source_coords(coord, out_n, in_n, scale)):
        base = math.floor(x)
        ratio = 1.0 if x == base else x - base
        taps = _linear_taps(ratio, scale) if mode == "linear" else _cubic_taps(ratio, scale,
                                                                              cubic_a)
        n = len(taps)
        pad = math.ceil(n / 2)   # the n input indices nearest x, ties to the smaller
        p = math.floor(x + pad)
        frac = x + pad - p
        if n % 2 == 0:
            first = p - n // 2 + (0 if frac == 0 else 1)
        else:
            first = p - (n - 1) // 2 + (0 if frac <= 0.5 else 1)
        index = first + np.arange(n) - pad
        if exclude_outside:
            taps = np.where((index < 0) | (index >= in_n), 0.0, taps)
            total = taps.sum()
            taps = taps / (total if total else 1.0)
        np.add.at(m[o], np.clip(index, 0, in_n - 1), taps)
    return m


def resize_antialias(ctx, x: Value, out_shape, scales, mode: str, coord: str, cubic_a: float,
                     exclude_outside: bool) -> Value:
    """Resize `x` axis by axis (each resized axis moved last, times the axis' matrix)."""
    y = x
    rank = len(x.shape)
    for axis in range(rank):
        if out_shape[axis] == x.shape[axis] and scales[axis] == 1.0:
            continue
        m = antialias_matrix(x.shape[axis], out_shape[axis], scales[axis], mode, coord,
                             cubic_a, exclude_outside)
        perm = tuple(d for d in range(rank) if d != axis) + (axis,)
        moved = ctx.emit("transpose", [y], {"perm": perm}) if axis != rank - 1 else y
        moved = ctx.emit("matmul", [moved, ctx.const(m.T.astype(x.dtype))])
        back = tuple(int(v) for v in np.argsort(perm))
        y = ctx.emit("transpose", [moved], {"perm": back}) if axis != rank - 1 else moved
    return ctx.emit("identity", [y], final=True)
