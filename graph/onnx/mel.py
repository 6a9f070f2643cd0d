"""ONNX MelWeightMatrix as graph ops. num_mel_bins and dft_length decide the output's shape
and are read at compile time; sample_rate and the edge frequencies stay run-time scalars, so
the triangular filters are computed by a kernel (in float64, as onnx's reference does)."""
from __future__ import annotations

import math

import numpy as np

from ...te.errors import ModelFormatError
from .core import converter


def _scalar(ctx, v):
    v = v if v.shape == () else ctx.emit("reshape", [v], {"shape": ()})
    return ctx.emit("cast", [v], {"to": "float64"})


@converter("MelWeightMatrix")
def _mel_weight_matrix(ctx, num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                       upper_edge_hertz, output_datatype=1):
    mels = int(ctx.static(num_mel_bins, "num_mel_bins").reshape(-1)[0])
    length = int(ctx.static(dft_length, "dft_length").reshape(-1)[0])
    if mels < 1 or length < 1:
        raise ModelFormatError(f"node '{ctx.node_name}' (MelWeightMatrix): num_mel_bins "
                               f"{mels} and dft_length {length} must be positive")
    emit = ctx.emit

    def c(value):   # named, so that ctx.const keeps float64 (it narrows unnamed ones)
        return ctx.const(np.array(value, dtype=np.float64),
                         name=ctx._fresh(f"{ctx.node_name}/f64"))

    def to_mel(hz):   # 2595 * log10(1 + hz / 700)
        return emit("mul", [emit("log", [emit("add", [c(1.0), emit("div", [hz, c(700.0)])])]),
                            c(2595.0 / math.log(10.0))])

    low, high = to_mel(_scalar(ctx, lower_edge_hertz)), to_mel(_scalar(ctx, upper_edge_hertz))
    step = emit("div", [emit("sub", [high, low]), c(float(mels + 2))])
    mel = emit("add", [emit("mul", [c(np.arange(mels + 2)), step]),
                       low])
    hz = emit("mul", [emit("sub", [emit("exp", [emit("mul", [mel, c(math.log(10.0) / 2595.0)])]),
                                   c(1.0)]), c(700.0)])
    bins = emit("floor", [emit("div", [emit("mul", [hz, c(float(length + 1))]),
                                       _scalar(ctx, sample_rate)])])
    left, center, right = (emit("reshape", [emit("slice", [bins], {
        "starts": (k,), "ends": (k + mels,), "steps": (1,)})], {"shape": (1, mels)})
        for k in range(3))
    j = c(np.arange(length // 2 + 1).reshape(-1, 1))
    def safe(a, b):   # a - b, or 1 where they are equal (a triangle side of width 0)
        return emit("where", [emit("equal", [a, b]), c(1.0), emit("sub", [a, b])])

    rising = emit("where", [emit("equal", [center, left]),
                            emit("cast", [emit("equal", [j, center])], {"to": "float64"}),
                            emit("div", [emit("sub", [j, left]), safe(center, left)])])
    in_rise = emit("logical_and", [emit("less_equal", [left, j]),
                                   emit("less_equal", [j, center])])
    falling = emit("div", [emit("sub", [right, j]), safe(right, center)])
    in_fall = emit("logical_and", [emit("less_equal", [center, j]), emit("less", [j, right])])
    zero = c(0.0)
    out = emit("where", [in_fall, falling, emit("where", [in_rise, rising, zero])])
    return emit("cast", [out], {"to": ctx.onnx_dtype(output_datatype)}, final=True)
