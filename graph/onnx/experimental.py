"""The experimental operators of ONNX's first opsets that onnxruntime still runs and older
public models still use (Tiny YOLOv2 of the ONNX model zoo starts with an ImageScaler):
ImageScaler, Scale, Crop, Affine, ScaledTanh, ParametricSoftplus. onnx itself no longer
registers them (its checker and reference do not know them), so their meaning here is
onnxruntime's: elementwise maps, and a crop of the last two axes."""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from .core import converter


def _scalar(ctx, x, value: float):
    return ctx.const(np.array(float(value), dtype=x.dtype))


def _affine(ctx, x, alpha: float, beta: float):
    """alpha * x + beta, with the identity parts left out."""
    y = x
    if alpha != 1.0:
        y = ctx.emit("mul", [y, _scalar(ctx, x, alpha)], final=beta == 0.0)
    if beta != 0.0:
        y = ctx.emit("add", [y, _scalar(ctx, x, beta)], final=True)
    return y if y is not x else ctx.emit("identity", [x], final=True)


@converter("ImageScaler")
def _image_scaler(ctx, x, bias=None, scale=1.0):
    """scale * x + bias[c] over an NCHW image."""
    if len(x.shape) != 4:
        raise ModelFormatError(f"node '{ctx.node_name}' (ImageScaler): input {list(x.shape)} "
                               "must be an NCHW image")
    channels = x.shape[1]
    bias = [0.0] * channels if bias is None else [float(b) for b in bias]
    if len(bias) != channels:
        raise ModelFormatError(f"node '{ctx.node_name}' (ImageScaler): {len(bias)} biases "
                               f"for {channels} channels")
    y = ctx.emit("mul", [x, _scalar(ctx, x, scale)])
    per_channel = ctx.const(np.array(bias, dtype=x.dtype).reshape(channels, 1, 1))
    return ctx.emit("add", [y, per_channel], final=True)


@converter("Scale")
def _scale(ctx, x, scale=1.0):
    return _affine(ctx, x, float(scale), 0.0)


@converter("Affine")
def _affine_op(ctx, x, alpha=1.0, beta=0.0):
    return _affine(ctx, x, float(alpha), float(beta))


@converter("ScaledTanh")
def _scaled_tanh(ctx, x, alpha=1.0, beta=1.0):
    """alpha * tanh(beta * x)"""
    inner = ctx.emit("tanh", [ctx.emit("mul", [x, _scalar(ctx, x, beta)])])
    return ctx.emit("mul", [inner, _scalar(ctx, x, alpha)], final=True)


@converter("ParametricSoftplus")
def _parametric_softplus(ctx, x, alpha=1.0, beta=1.0):
    """alpha * ln(1 + exp(beta * x))"""
    inner = ctx.emit("softplus", [ctx.emit("mul", [x, _scalar(ctx, x, beta)])])
    return ctx.emit("mul", [inner, _scalar(ctx, x, alpha)], final=True)


@converter("Crop")
def _crop(ctx, x, border=None, scale=None):
    """border = (left, top, right, bottom); with scale = (height, width) the output is that
    size from (top, left), else what the borders leave."""
    where = f"node '{ctx.node_name}' (Crop)"
    if len(x.shape) != 4:
        raise ModelFormatError(f"{where}: input {list(x.shape)} must be NCHW")
    if border is None or len(border) != 4 or min(border) < 0:
        raise ModelFormatError(f"{where}: border {border} must be 4 non-negative ints (left, "
                               "top, right, bottom)")
    left, top, right, bottom = (int(b) for b in border)
    n, c, h, w = x.shape
    if scale is not None:
        if len(scale) != 2:
            raise ModelFormatError(f"{where}: scale {list(scale)} must be (height, width)")
        bottom_end, right_end = top + int(scale[0]), left + int(scale[1])
    else:
        bottom_end, right_end = h - bottom, w - right
    if not (0 <= top < bottom_end <= h and 0 <= left < right_end <= w):
        raise ModelFormatError(f"{where}: border {list(border)}"
                               f"{'' if scale is None else f' and scale {list(scale)}'} do "
                               f"not fit the {h}x{w} input")
    return ctx.emit("slice", [x], {"starts": (0, 0, top, left),
                                   "ends": (n, c, bottom_end, right_end),
                                   "steps": (1, 1, 1, 1)}, final=True)
