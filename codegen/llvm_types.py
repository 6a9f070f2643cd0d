"""Kiln dtypes as LLVM types: register types, memory types, vectors and constants.

bool is i1 in registers and i8 in memory; uint8 shares i8 with int8 (signedness lives in the
instructions chosen, not the type). float16 and bfloat16 are float32 in registers and half / i16 in
memory: loads widen exactly, and every arithmetic result of a half dtype is rounded to it
(nearest-even), so a fused kernel gives what the operations give one by one (codegen/emit_expr.py;
a half reduction accumulates in float32, te/tensor.py).
"""
from __future__ import annotations

import math

import numpy as np

import llvmlite.ir as ir

from ..te import dtype as dt
from ..te.errors import CodegenError
from .fold import int_value

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

_REGISTER = {"float32": ir.FloatType(), "float64": ir.DoubleType(), "float16": ir.FloatType(),
             "bfloat16": ir.FloatType(), "int32": I32, "int64": I64, "int8": I8, "uint8": I8,
             "int16": I16, "uint16": I16, "uint32": I32, "uint64": I64, "bool": I1}
_MEMORY = {"bool": I8, "float16": ir.HalfType(), "bfloat16": I16}


def scalar_type(dtype: str) -> ir.Type:
    """The type a value of `dtype` has in registers."""
    try:
        return _REGISTER[dtype]
    except KeyError:
        raise CodegenError(f"codegen does not support dtype {dtype!r}; supported: "
                           f"{', '.join(_REGISTER)}") from None


def memory_type(dtype: str) -> ir.Type:
    """The type a value of `dtype` has in memory (bool is stored as one byte)."""
    return _MEMORY.get(dtype) or scalar_type(dtype)


def value_type(dtype: str, lanes: int | None) -> ir.Type:
    ty = scalar_type(dtype)
    return ty if lanes is None else ir.VectorType(ty, lanes)


def is_vector(value: ir.Value) -> bool:
    return isinstance(value.type, ir.VectorType)


def lanes_of(value: ir.Value) -> int | None:
    return value.type.count if isinstance(value.type, ir.VectorType) else None


# const()'s results by (dtype, lanes, value key): an unrolled kernel asks for the same few
# constants tens of thousands of times (ResNet-50's and MobileNet's convs), and a shared
# ir.Constant is built once and formatted to text once (llvmlite caches its text on the
# object); constants have no parent and are never changed after construction. Bounded: a
# worker compiles many kernels.
_CONSTS: dict = {}
_CONSTS_MAX = 1 << 14


def const(dtype: str, value, lanes: int | None = None) -> ir.Constant:
    """A constant of `dtype` (a splat vector when lanes is given)."""
    if dt.is_float(dtype):
        as_float = float(value)
        # -0.0 == 0.0 in Python but not in LLVM: the key is the exact bits; NaNs (payloads)
        # are not cached
        key = None if as_float != as_float else (dtype, lanes, as_float.hex())
    else:
        key = (dtype, lanes, int(value))
    if key is not None:
        hit = _CONSTS.get(key)
        if hit is None:
            if len(_CONSTS) >= _CONSTS_MAX:
                _CONSTS.clear()
            hit = _CONSTS[key] = _make_const(dtype, value, lanes)
        return hit
    return _make_const(dtype, value, lanes)


def _make_const(dtype: str, value, lanes: int | None) -> ir.Constant:
    ty = scalar_type(dtype)
    if dt.is_float(dtype):   # a float16/bfloat16 constant holds a value its dtype can hold
        scalar = ir.Constant(ty, float(np.asarray(value, dtype).astype("float32"))
                             if dt.is_half(dtype) else float(value))
    else:
        bits = dt.bits(dtype)
        scalar = ir.Constant(ty, int(value) & ((1 << bits) - 1) if bits > 1 else int(bool(value)))
    return scalar if lanes is None else ir.Constant(ir.VectorType(ty, lanes), [scalar] * lanes)


def const_like(ty: ir.Type, value) -> ir.Constant:
    """A constant of LLVM type `ty` (scalar or vector) holding `value` in every lane."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [const_like(ty.element, value)] * ty.count)
    if isinstance(ty, (ir.FloatType, ir.DoubleType)):
        return ir.Constant(ty, float(value))
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        raise CodegenError(f"cannot make integer constant from {value}")
    return ir.Constant(ty, int(value) & ((1 << ty.width) - 1))


def int_type_like(ty: ir.Type) -> ir.Type:
    """The integer type with the bit width (and lane count) of float type `ty`."""
    if isinstance(ty, ir.VectorType):
        return ir.VectorType(int_type_like(ty.element), ty.count)
    return I32 if isinstance(ty, ir.FloatType) else I64


def bool_type_like(ty: ir.Type) -> ir.Type:
    return ir.VectorType(I1, ty.count) if isinstance(ty, ir.VectorType) else I1


def splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """Broadcast a scalar to a vector of `lanes` lanes."""
    vty = ir.VectorType(value.type, lanes)
    if isinstance(value, ir.Constant):
        return ir.Constant(vty, [value] * lanes)
    undef = ir.Constant(vty, ir.Undefined)
    first = builder.insert_element(undef, value, ir.Constant(I32, 0))
    mask = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
    return builder.shuffle_vector(first, undef, mask)


def ramp(builder: ir.IRBuilder, base: ir.Value, lanes: int) -> ir.Value:
    """<base, base+1, ..., base+lanes-1> (int32)."""
    start = int_value(base)
    if start is not None:
        return ir.Constant(ir.VectorType(I32, lanes), [start + k for k in range(lanes)])
    steps = ir.Constant(ir.VectorType(I32, lanes), list(range(lanes)))
    return builder.add(splat(builder, base, lanes), steps)
