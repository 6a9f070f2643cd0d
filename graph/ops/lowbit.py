"""ONNX's low-bit element types in the graph: how they are stored, the graph ops that convert
them (lowered to te/ops/lowbit.py's bit arithmetic) and the numpy references of those ops.

Storage (one element per byte, see te/ops/lowbit.py): FLOAT8E4M3FN, FLOAT8E4M3FNUZ,
FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT8E8M0 and FLOAT4E2M1 as their codes in uint8; INT4 and INT2
as their values in int8; UINT4 and UINT2 in uint8. A graph Value holding such data has the
storage dtype; the frontend remembers its format (ConvertContext.lowbit) and lets only the
ops that understand it (Cast, CastLike, QuantizeLinear, DequantizeLinear) and pure data
movement (Reshape, Transpose, Gather, ...) read it. At the model boundary, CompiledModel
converts between the storage and the ml_dtypes arrays onnx uses (`to_storage`,
`from_storage`): the packed sub-byte layout of a TensorProto is unpacked by onnx's
numpy_helper when the model is read.

Graph ops (all elementwise with numpy broadcasting of scale/zero point):
- lowbit_decode(x) attrs fmt, dtype: codes/values -> float (exact), then to `dtype`;
- lowbit_encode(x) attrs fmt, saturate, round_mode: float -> codes (RNE; E8M0 by
  round_mode); a sub-byte integer format truncates toward zero and keeps the low bits;
- lowbit_quantize(x, scale, zp?) attrs fmt, saturate: ONNX QuantizeLinear into any format
  (int16/uint16 too): round_half_even(x / scale) + zp clamped to the integer range, or
  x / scale (+ zp for FLOAT4E2M1) encoded in a float format;
- lowbit_dequantize(x, scale, zp?) attrs fmt, dtype: (x - zp) * scale computed in float32
  (a float8 zero point is 0 by the spec and ignored, as is FLOAT4E2M1's), then `dtype`.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx

from ...te import expr as E
from ...te.ops import lowbit as L
from ...te.ops import tags
from ...te.ops._common import read_broadcast
from ...te.tensor import Tensor, compute
from ..ir import OpClass
from .core import broadcast_shapes
from .more import define

T = onnx.TensorProto
# ONNX element type -> (format name, storage dtype)
ONNX_FORMATS = {
    T.FLOAT8E4M3FN: ("float8_e4m3fn", "uint8"), T.FLOAT8E4M3FNUZ: ("float8_e4m3fnuz", "uint8"),
    T.FLOAT8E5M2: ("float8_e5m2", "uint8"), T.FLOAT8E5M2FNUZ: ("float8_e5m2fnuz", "uint8"),
    T.FLOAT8E8M0: ("float8_e8m0fnu", "uint8"), T.FLOAT4E2M1: ("float4_e2m1fn", "uint8"),
    T.INT4: ("int4", "int8"), T.UINT4: ("uint4", "uint8"),
    T.INT2: ("int2", "int8"), T.UINT2: ("uint2", "uint8"),
}
STORAGE = dict(ONNX_FORMATS.values())
ONNX_NAME = {fmt: T.DataType.Name(k) for k, (fmt, _) in ONNX_FORMATS.items()}
# formats QuantizeLinear/DequantizeLinear take besides those of graph/ops/int8/core.py
INT_RANGES = {"int16": (-32768, 32767), "uint16": (0, 65535), "int8": (-128, 127),
              "uint8": (0, 255), "int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1),
              "uint2": (0, 3)}


def is_float_format(fmt: str) -> bool:
    return fmt in L.FLOAT_FORMATS or fmt == L.E8M0


def np_dtype(fmt: str) -> np.dtype:
    """The ml_dtypes numpy dtype of `fmt` (what onnx's numpy_helper gives)."""
    return np.dtype(getattr(ml_dtypes, fmt))


def to_storage(arr: np.ndarray, fmt: str) -> np.ndarray:
    """An ml_dtypes array of format `fmt` as Kiln stores it (see the module docstring)."""
    arr = np.asarray(arr)
    if arr.dtype != np_dtype(fmt):
        raise TypeError(f"expected an array of {np_dtype(fmt)}, got {arr.dtype}")
    if fmt in L.INT_FORMATS:
        return arr.astype(STORAGE[fmt])
    return np.ascontiguousarray(arr).view(np.uint8)


def from_storage(arr: np.ndarray, fmt: str) -> np.ndarray:
    """Kiln's storage of format `fmt` as the ml_dtypes array onnx expects."""
    if fmt in L.INT_FORMATS:
        return np.asarray(arr).astype(np_dtype(fmt))
    return np.ascontiguousarray(arr).view(np_dtype(fmt))


# -- scalar conversions shared by the lowerings --------------------------------------------------

def _operand(v, i, dtype: str) -> E.Expr:
    """`v` (a Tensor read with broadcasting at output point `i`, or a number) as an Expr."""
    return read_broadcast(v, i) if isinstance(v, Tensor) else E.const(v, dtype)


def decode_expr(v: E.Expr, fmt: str) -> E.Expr:
    """float32 of a stored element of `fmt` (an integer format: its value, exactly)."""
    if fmt == L.E8M0:
        return L.decode_e8m0(v)
    if fmt in L.FLOAT_FORMATS:
        return L.decode(v, L.FLOAT_FORMATS[fmt])
    return E.cast(v, "float32")


def encode_expr(v: E.Expr, fmt: str, saturate: bool, round_mode: str) -> E.Expr:
    """Stored element of `fmt` from `v` (Cast semantics; see the module docstring)."""
    if fmt == L.E8M0:
        return L.encode_e8m0(E.cast(v, "float32"), saturate, round_mode)
    if fmt in L.FLOAT_FORMATS:
        return L.encode(E.cast(v, "float32"), L.FLOAT_FORMATS[fmt], saturate)
    bits, signed = L.INT_FORMATS[fmt]
    if v.dtype.startswith(("float", "bfloat")):
        v = E.cast(E.cast(v, "float32"), "int32")       # truncates toward zero
    return L.wrap_int(v, bits, signed)


# -- graph ops ----------------------------------------------------------------------------------

def _infer_decode(ins, attrs):
    return [(ins[0].shape, attrs["dtype"])]


def _lower_decode(node, args):
    x, fmt, dtype = args[0], node.attrs["fmt"], node.attrs["dtype"]
    return [compute(x.shape, lambda *i: E.cast(decode_expr(x(*i), fmt), dtype),
                    name="lowbit_decode", tag=tags.ELEMWISE)]


def _ref_decode(node, x):
    return from_storage(x, node.attrs["fmt"]).astype(np.float32).astype(node.attrs["dtype"])


def _infer_encode(ins, attrs):
    return [(ins[0].shape, STORAGE[attrs["fmt"]])]


def _lower_encode(node, args):
    x, a = args[0], node.attrs
    return [compute(x.shape, lambda *i: encode_expr(x(*i), a["fmt"], a["saturate"],
                                                    a["round_mode"]),
                    name="lowbit_encode", tag=tags.ELEMWISE)]


def _wide(x: np.ndarray) -> np.ndarray:
    """`x` as float32, from which ml_dtypes rounds (it narrows float64 to float32 first)."""
    return x.astype(np.float32)


def cast_reference(x: np.ndarray, fmt: str, saturate: bool, round_mode: str) -> np.ndarray:
    """ONNX Cast of `x` to `fmt`, by ml_dtypes and onnx.numpy_helper, as storage."""
    t = np_dtype(fmt)
    if fmt == L.E8M0:
        out = onnx.numpy_helper.to_float8e8m0(x.astype(np.float32), saturate, round_mode)
    elif fmt in L.FLOAT_FORMATS and saturate and L.FLOAT_FORMATS[fmt].kind != "plain":
        info = ml_dtypes.finfo(t)
        with np.errstate(invalid="ignore"):
            out = np.clip(_wide(x), info.min, info.max).astype(t)
    elif fmt in L.FLOAT_FORMATS:
        with np.errstate(invalid="ignore", over="ignore"):
            out = _wide(x).astype(t)
    else:
        wide = x.astype(np.float32).astype(np.int32) if x.dtype.kind == "f" else x
        out = wide.astype(np.int64).astype(t)
    return to_storage(out, fmt)


def _ref_encode(node, x):
    a = node.attrs
    return cast_reference(x, a["fmt"], a["saturate"], a["round_mode"])


def _infer_quantize(ins, attrs):
    return [(broadcast_shapes(*(v.shape for v in ins if v is not None)),
             STORAGE.get(attrs["fmt"], attrs["fmt"]))]


def _lower_quantize(node, args):
    x, scale, zp = (list(args) + [None] * 3)[:3]
    fmt, saturate = node.attrs["fmt"], node.attrs["saturate"]
    shape = node.outputs[0].shape

    def body(*i):
        v = E.cast(_operand(x, i, "float32") / E.cast(_operand(scale, i, "float32"), x.dtype),
                   "float32")
        if fmt in INT_RANGES:
            v = E.round(v)
            if zp is not None:
                v = v + E.cast(_operand(zp, i, "int32"), "float32")
            lo, hi = INT_RANGES[fmt]
            v = E.minimum(E.maximum(v, E.const(float(lo), "float32")),
                          E.const(float(hi), "float32"))
            return E.cast(E.cast(v, "int32"), STORAGE.get(fmt, fmt))
        if zp is not None and fmt == "float4_e2m1fn":
            v = v + decode_expr(_operand(zp, i, "uint8"), fmt)
        return encode_expr(v, fmt, saturate, "up")
    return [compute(shape, body, name="lowbit_quantize", tag=tags.BROADCAST)]


def quantize_reference(x, scale, zp, fmt: str, saturate: bool) -> np.ndarray:
    """ONNX QuantizeLinear (onnx's reference semantics) into storage of `fmt`."""
    v = (x / scale.astype(x.dtype)).astype(np.float32)
    if fmt in INT_RANGES:
        v = np.rint(v)
        if zp is not None:
            v = v + zp.astype(np.float32)
        lo, hi = INT_RANGES[fmt]
        return np.clip(v, lo, hi).astype(np.int32).astype(STORAGE.get(fmt, fmt))
    if zp is not None and fmt == "float4_e2m1fn":
        v = v + from_storage(zp, fmt).astype(np.float32)
    return cast_reference(v, fmt, saturate, "up")


def _ref_quantize(node, x, scale, zp=None):
    return quantize_reference(x, scale, zp, node.attrs["fmt"], node.attrs["saturate"])


def _infer_dequantize(ins, attrs):
    return [(broadcast_shapes(*(v.shape for v in ins if v is not None)), attrs["dtype"])]


def _lower_dequantize(node, args):
    x, scale, zp = (list(args) + [None] * 3)[:3]
    fmt, dtype = node.attrs["fmt"], node.attrs["dtype"]
    shape = node.outputs[0].shape

    def body(*i):
        if fmt in INT_RANGES or fmt == "int32":
            centred = E.cast(_operand(x, i, "int32"), "int32")
            if zp is not None:
                centred = centred - E.cast(_operand(zp, i, "int32"), "int32")
            v = E.cast(centred, "float32")
        else:
            v = decode_expr(_operand(x, i, "uint8"), fmt)
        return E.cast(v * E.cast(_operand(scale, i, "float32"), "float32"), dtype)
    return [compute(shape, body, name="lowbit_dequantize", tag=tags.BROADCAST)]


def dequantize_reference(x, scale, zp, fmt: str, dtype: str) -> np.ndarray:
    if fmt in INT_RANGES or fmt == "int32":
        v = x.astype(np.int32) - (0 if zp is None else zp.astype(np.int32))
        v = v.astype(np.float32)
    else:
        v = from_storage(x, fmt).astype(np.float32)
    return (v * scale.astype(np.float32)).astype(dtype)


def _ref_dequantize(node, x, scale, zp=None):
    return dequantize_reference(x, scale, zp, node.attrs["fmt"], node.attrs["dtype"])


define("lowbit_decode", OpClass.ELEMWISE, _infer_decode, _lower_decode, _ref_decode)
define("lowbit_encode", OpClass.ELEMWISE, _infer_encode, _lower_encode, _ref_encode)
define("lowbit_quantize", OpClass.BROADCAST, _infer_quantize, _lower_quantize, _ref_quantize)
define("lowbit_dequantize", OpClass.BROADCAST, _infer_dequantize, _lower_dequantize,
       _ref_dequantize)
