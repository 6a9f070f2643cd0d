"""Scalar data types: canonical names, their properties and their numpy equivalents."""
from __future__ import annotations

import numpy as np

from .errors import TEError

try:  # registers numpy's "bfloat16" (an onnx dependency); without it bfloat16 is unavailable
    import ml_dtypes  # noqa: F401
    _BF16 = ("bfloat16",)
except ImportError:  # pragma: no cover - onnx pulls it in
    _BF16 = ()

DTYPES = ("float32", "float64", "float16") + _BF16 + (
    "int32", "int64", "int8", "int16", "uint8", "uint16", "uint32", "uint64", "bool")
# float16 and bfloat16: kernels hold their values as float32 in registers and round each
# operation's result to the dtype (nearest-even), as numpy's float16 does; a half reduction
# accumulates in a float32 stage and rounds once (te/tensor.py, codegen/llvm_types.py)
HALF_DTYPES = ("float16",) + _BF16
_ALIASES = {"float": "float32", "int": "int32", "double": "float64", "bool_": "bool"}


def canonical(dtype) -> str:
    """Return Kiln's name for `dtype` (a string, numpy dtype or Python type)."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)
    if name not in DTYPES:
        raise TEError(f"unsupported dtype {dtype!r}; Kiln supports: {', '.join(DTYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def is_half(dtype: str) -> bool:
    """A 16-bit float stored as such and computed in float32 (float16, bfloat16)."""
    return dtype in HALF_DTYPES


def is_int(dtype: str) -> bool:
    """Signed or unsigned integer (not bool)."""
    return dtype.startswith("int") or dtype.startswith("uint")


def is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint") or dtype == "bool"


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def bits(dtype: str) -> int:
    return 1 if dtype == "bool" else np.dtype(dtype).itemsize * 8


def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def to_numpy(dtype: str) -> np.dtype:
    return np.dtype(dtype)


def promote(a: str, b: str) -> str:
    """Result dtype of a binary op on `a` and `b` (float beats int, wider beats narrower)."""
    if a == b:
        return a
    return canonical(np.promote_types(np.dtype(a), np.dtype(b)))


def min_value(dtype: str):
    if is_float(dtype):
        return -np.inf
    if dtype == "bool":
        return False
    return int(np.iinfo(dtype).min)


def max_value(dtype: str):
    if is_float(dtype):
        return np.inf
    if dtype == "bool":
        return True
    return int(np.iinfo(dtype).max)
