"""ONNX Cast, CastLike, QuantizeLinear and DequantizeLinear for the low-bit element types
(graph/ops/lowbit.py), int16/uint16 quantization and blocked quantization (block_size). The
forms Kiln had before (uint8/int8 per-tensor or per-axis Q/DQ, casts between ordinary dtypes)
keep their converters; these wrap them.

The frontend records which values hold a low-bit format (ConvertContext.lowbit: Kiln value
name -> format name) and refuses every other op that reads or writes one (frontend.py).
"""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ..ops import lowbit
from ..ir import Value
from .core import unsupported_error, convert_cast
from .more import convert_cast_like, convert_is_inf, convert_is_nan
from .quant import (MS, check_axis_len, per_axis, convert_dequantize_linear,
                    convert_quantize_linear)
from .registry import register

# the converters of the forms Kiln had before, which these wrap
_cast = convert_cast
_cast_like = convert_cast_like
_quantize = convert_quantize_linear
_dequantize = convert_dequantize_linear


def fmt_of(ctx, v: Value | None) -> str | None:
    return None if v is None else ctx.lowbit.get(v.name)


def _mark(ctx, v: Value, fmt: str) -> Value:
    ctx.lowbit[v.name] = fmt
    return v


def _convert(ctx, x: Value, src: str | None, dst_fmt: str | None, dst_dtype: str,
             saturate: int, round_mode: str) -> Value:
    """Cast `x` (format `src` or its plain dtype) to format `dst_fmt` or plain `dst_dtype`."""
    if src is not None:
        if dst_fmt is None and src in lowbit.INT_RANGES:     # sub-byte int -> plain: exact
            return ctx.emit("cast", [x], {"to": dst_dtype}, final=True)
        to = dst_dtype if dst_fmt is None else "float32"
        if dst_fmt is not None and src in lowbit.INT_RANGES:
            to = "int32"
        x = ctx.emit("lowbit_decode", [x], {"fmt": src, "dtype": to}, final=dst_fmt is None)
        if dst_fmt is None:
            return x
    if x.dtype == "bool":
        x = ctx.emit("cast", [x], {"to": "int32"})
    y = ctx.emit("lowbit_encode", [x], {"fmt": dst_fmt, "saturate": bool(saturate),
                                        "round_mode": round_mode}, final=True)
    return _mark(ctx, y, dst_fmt)


def _cast_any(ctx, x, to, saturate=1, round_mode="up"):
    src, dst = fmt_of(ctx, x), lowbit.ONNX_FORMATS.get(to)
    if src is None and dst is None:
        return _cast(ctx, x, to, saturate, round_mode)
    if dst is not None and dst[0] == src:
        return _mark(ctx, ctx.emit("identity", [x], final=True), src)
    return _convert(ctx, x, src, dst and dst[0], ctx.onnx_dtype(to), saturate, round_mode)


def _cast_like_any(ctx, x, like, saturate=1, round_mode="up"):
    src, dst = fmt_of(ctx, x), fmt_of(ctx, like)
    if src is None and dst is None:
        return _cast_like(ctx, x, like, saturate, round_mode)
    if src == dst:
        return _mark(ctx, ctx.emit("identity", [x], final=True), src)
    return _convert(ctx, x, src, dst, like.dtype, saturate, round_mode)


def _blocked(ctx, v: Value | None, x: Value, axis: int, block_size: int, what: str):
    """A blocked scale or zero point repeated `block_size` times along `axis` and cut to
    x's length there: a gather with constant indices (folded for constant parameters)."""
    if v is None:
        return None
    rank = len(x.shape)
    if len(v.shape) != rank:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): blocked quantization "
                               f"needs a {what} of the input's rank {rank}, got "
                               f"{list(v.shape)}")
    n = x.shape[axis]
    blocks = -(-n // block_size)
    wrong = [d for d in range(rank) if d != axis and v.shape[d] != x.shape[d]]
    if v.shape[axis] != blocks or wrong:
        raise ModelFormatError(
            f"node '{ctx.node_name}' ({ctx.op_type}): the {what} {list(v.shape)} does not fit "
            f"input {list(x.shape)} with block_size {block_size} along axis {axis} (expected "
            f"{blocks} blocks there and the input's other dimensions)")
    idx = ctx.const(np.arange(n, dtype=np.int64) // block_size)
    return ctx.emit("gather", [v, idx], {"axis": axis})


def _params(ctx, x, scale, zp, axis, block_size):
    if block_size:
        if block_size < 0:
            raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): block_size "
                                   f"{block_size} must be positive")
        axis = axis % max(len(x.shape), 1)
        return (_blocked(ctx, scale, x, axis, block_size, "scale"),
                _blocked(ctx, zp, x, axis, block_size, "zero point"))
    check_axis_len(ctx, x, scale, axis, "the scale")
    rank = max(len(x.shape), 1)
    return (per_axis(ctx, scale, axis, rank, "scale"),
            per_axis(ctx, zp, axis, rank, "zero point"))


def _quantize_any(ctx, x, scale, zero_point=None, axis=1, saturate=1, block_size=0,
                  output_dtype=0, precision=0):
    fmt = fmt_of(ctx, zero_point) or (zero_point.dtype if zero_point is not None else None)
    if fmt is None:
        dst = lowbit.ONNX_FORMATS.get(output_dtype)
        fmt = dst[0] if dst else (ctx.onnx_dtype(output_dtype) if output_dtype else "uint8")
    if fmt in ("uint8", "int8") and not block_size and not precision:
        return _quantize(ctx, x, scale, zero_point, axis, saturate, block_size, output_dtype)
    if fmt not in lowbit.INT_RANGES and fmt not in lowbit.L.FLOAT_FORMATS:
        raise unsupported_error(ctx, f"quantization to {fmt}")
    if precision:
        x = ctx.emit("cast", [x], {"to": ctx.onnx_dtype(precision)})
    s, zp = _params(ctx, x, scale, zero_point, axis, block_size)
    y = ctx.emit("lowbit_quantize", [x, s] + ([zp] if zp is not None else []),
                 {"fmt": fmt, "saturate": bool(saturate)}, final=True)
    return _mark(ctx, y, fmt) if fmt in lowbit.STORAGE else y


def _dequantize_any(ctx, x, scale, zero_point=None, axis=1, block_size=0, output_dtype=0):
    fmt = fmt_of(ctx, x) or x.dtype
    if fmt in ("uint8", "int8", "int32") and not block_size and not output_dtype:
        return _dequantize(ctx, x, scale, zero_point, axis, block_size)
    if fmt not in lowbit.INT_RANGES and fmt not in lowbit.L.FLOAT_FORMATS and \
            fmt != "int32":
        raise unsupported_error(ctx, f"dequantizing {fmt}")
    dtype = ctx.onnx_dtype(output_dtype) if output_dtype else scale.dtype
    if fmt in lowbit.L.FLOAT_FORMATS:
        zero_point = None       # 0 for float8 by the spec; ignored for FLOAT4E2M1 (reference)
    s, zp = _params(ctx, x, scale, zero_point, axis, block_size)
    return ctx.emit("lowbit_dequantize", [x, s] + ([zp] if zp is not None else []),
                    {"fmt": "int32" if fmt == "int32" else fmt, "dtype": dtype}, final=True)


def _on_decoded(convert):
    """A converter of a float op (IsInf, IsNaN) that reads a low-bit float as float32."""
    def conv(ctx, x, *args, **attrs):
        fmt = fmt_of(ctx, x)
        if fmt is not None:
            x = ctx.emit("lowbit_decode", [x], {"fmt": fmt, "dtype": "float32"})
        return convert(ctx, x, *args, **attrs)
    return conv


register("IsInf", _on_decoded(convert_is_inf), __name__)
register("IsNaN", _on_decoded(convert_is_nan), __name__)
register("Cast", _cast_any)
register("CastLike", _cast_like_any)
for _prefix in ("", MS):
    register(_prefix + "QuantizeLinear", _quantize_any)
    register(_prefix + "DequantizeLinear", _dequantize_any)
