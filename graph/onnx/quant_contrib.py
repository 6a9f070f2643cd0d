"""Converters of the com.microsoft QOperator ops that onnxruntime's quantizer writes besides
the core ones (QuantFormat.QOperator): QGemm, QLinearSigmoid, QLinearLeakyRelu,
QLinearAveragePool, QLinearSoftmax and QLinearWhere.

QGemm accumulates exactly in int32 (the zero-point compensation of onnx_quant_ops) and
requantizes once. The others are defined by onnxruntime as "dequantize, compute in float32,
quantize" (its kernels evaluate that through 256-entry tables or float loops), and convert to
exactly that: the float op between a dequantize_linear and a quantize_linear, which the
int8 passes fuse into one kernel.
"""
from __future__ import annotations

import numpy as np

from ..ir import Value
from .core import checked_axis, require_2d, unsupported_error
from .registry import CONVERTERS, converter, register
from .quant import MS, dq, i32, integer_matmul, per_axis, q, \
    emit_requantize


def _as_intermediate(ctx, converter, *args, opset: int | None = None, **attrs) -> Value:
    """A float converter's result under a fresh name (not the ONNX node's output, which
    the quantize after it takes), optionally as of another opset's semantics."""
    saved = ctx.output_names, ctx.opset
    ctx.output_names = [""]
    if opset is not None:
        ctx.opset = opset
    try:
        return converter(ctx, *args, **attrs)
    finally:
        ctx.output_names, ctx.opset = saved


@converter(MS + "QGemm")
def _qgemm(ctx, a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None,
           alpha=1.0, transA=0, transB=0):
    """alpha * a_scale * b_scale * (sum_k (A - za)(B - zb) + C), C an int32 bias at the
    accumulator's scale; requantized to y_scale/y_zp when they are given, else float32."""
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise unsupported_error(ctx, f"QGemm of rank {len(a.shape)} x {len(b.shape)} (2-D only)")
    if transA:
        a = ctx.emit("transpose", [a], {"perm": (1, 0)})
    if transB:                          # per-column zero points stay per column (N)
        b = ctx.emit("transpose", [b], {"perm": (1, 0)})
    acc = integer_matmul(ctx, a, b, a_zp, b_zp, final=False)
    if c is not None:
        acc = ctx.emit("add", [acc, i32(ctx, c)])
    scale = ctx.emit("mul", [per_axis(ctx, a_scale, 0, 1, "a scale"),
                             per_axis(ctx, b_scale, -1, 1, "b scale")])
    if alpha != 1.0:
        scale = ctx.emit("mul", [scale, ctx.const(np.array(alpha, np.float32))])
    if y_scale is None:
        return ctx.emit("mul", [ctx.emit("cast", [acc], {"to": "float32"}), scale],
                        final=True)
    mult = ctx.emit("div", [scale, per_axis(ctx, y_scale, 0, 1, "y scale")])
    return emit_requantize(ctx, acc, mult, y_zp, y_zp.dtype if y_zp is not None else a.dtype)


def _qlinear_unary(float_op: str):
    def conv(ctx, x, x_scale, x_zp, y_scale, y_zp=None, **attrs):
        y = _as_intermediate(ctx, CONVERTERS[float_op], dq(ctx, x, x_scale, x_zp), **attrs)
        return q(ctx, y, y_scale, y_zp, x.dtype)
    return conv


register(MS + "QLinearSigmoid", _qlinear_unary("Sigmoid"), __name__)
register(MS + "QLinearLeakyRelu", _qlinear_unary("LeakyRelu"), __name__)


@converter(MS + "QLinearAveragePool")
def _qlinear_average_pool(ctx, x, x_scale, x_zp, y_scale, y_zp=None, channels_last=0,
                          **attrs):
    require_2d(ctx, x)
    xf = dq(ctx, x, x_scale, x_zp)
    if channels_last:                   # NHWC in and out: pool in NCHW between transposes
        xf = ctx.emit("transpose", [xf], {"perm": (0, 3, 1, 2)})
    y = _as_intermediate(ctx, CONVERTERS["AveragePool"], xf, **attrs)
    if channels_last:
        y = ctx.emit("transpose", [y], {"perm": (0, 2, 3, 1)})
    return q(ctx, y, y_scale, y_zp, x.dtype)


@converter(MS + "QLinearSoftmax")
def _qlinear_softmax(ctx, x, x_scale, x_zp, y_scale, y_zp=None, axis=-1, opset=13):
    """`opset` is the Softmax the quantizer replaced: before 13, softmax over the input
    flattened to 2-D at `axis`."""
    checked_axis(ctx, axis, len(x.shape))
    y = _as_intermediate(ctx, CONVERTERS["Softmax"], dq(ctx, x, x_scale, x_zp), axis=axis,
                         opset=int(opset))
    return q(ctx, y, y_scale, y_zp, x.dtype)


@converter(MS + "QLinearWhere")
def _qlinear_where(ctx, cond, x, x_scale, x_zp, y, y_scale, y_zp, z_scale, z_zp):
    picked = ctx.emit("where", [cond, dq(ctx, x, x_scale, x_zp), dq(ctx, y, y_scale, y_zp)])
    return q(ctx, picked, z_scale, z_zp, x.dtype)
