"""numpy's dtype rules for traced values: numpy itself resolves them.

Binary operators and ufuncs resolve through `ufunc.resolve_dtypes` (numpy >= 2, NEP 50), with
Python scalars (and Python-scalar arguments traced as weak 0-d arrays) passed as the Python
type, so they are "weak" as in numpy: float32_array * 2.0 is float32, int32_array * 2.5 is
float64, float64 stays float64. Reductions take the dtype numpy's own reduction gives on a
one-element array (sum of int32 is int64, mean of int32 is float64).

Where Kiln differs: numpy gives float16 for float math on bool/int8/uint8 (np.exp(bool_array)),
Kiln float32 (its kernels compute no float16 math); complex dtypes are not supported.
"""
from __future__ import annotations

import numpy as np

from .errors import JitError, user_line
from .trace import Tracer

SUPPORTED = frozenset({"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                       "uint64", "float32", "float64"})


def check_dtype(dtype, what: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return np.dtype(np.float32)
    if dtype.name not in SUPPORTED:
        raise JitError(f"{what}: dtype {dtype} is not supported by kiln.jit (supported: "
                       f"{', '.join(sorted(SUPPORTED))}), at {user_line()}")
    return dtype


def promotion_type(x):
    """What numpy's type resolution sees: a dtype, or a Python scalar type (weak)."""
    if isinstance(x, Tracer):
        if x.weak:
            return {"b": bool, "i": int, "u": int, "f": float}[x.dtype.kind] \
                if x.dtype.kind != "b" else np.dtype(bool)
        return x.dtype
    if isinstance(x, (list, tuple)) and any(isinstance(i, Tracer) for i in x):
        return result_type(*x)          # a list holding traced values: stacked (strong)
    if isinstance(x, np.generic):       # numpy scalars are strong (np.float64 is a float)
        return x.dtype
    if isinstance(x, bool):
        return np.dtype(bool)
    if isinstance(x, (int, float)):
        return type(x)
    if isinstance(x, complex) and not isinstance(x, np.generic):
        raise JitError(f"complex numbers are not supported by kiln.jit, at {user_line()}")
    return np.asarray(x).dtype


def ufunc_dtypes(ufunc: np.ufunc, args) -> tuple[np.dtype, ...]:
    """(input dtypes..., output dtype) numpy would pick for `ufunc(*args)`."""
    types = tuple(promotion_type(a) for a in args)
    try:
        resolved = ufunc.resolve_dtypes(types + (None,) * ufunc.nout)
    except TypeError as exc:
        shown = ", ".join(getattr(t, "__name__", str(t)) for t in types)
        raise JitError(f"numpy.{ufunc.__name__} has no loop for ({shown}): {exc}, at "
                       f"{user_line()}") from None
    return tuple(check_dtype(d, f"numpy.{ufunc.__name__}") for d in resolved)


def result_type(*args) -> np.dtype:
    """np.result_type with Python scalars weak (their values, not their types, are passed)."""
    probe = []
    for a in args:
        t = promotion_type(a)
        probe.append({bool: False, int: 0, float: 0.0}[t] if isinstance(t, type) else t)
    return check_dtype(np.result_type(*probe), "dtype promotion")


def reduction_dtype(name: str, dtype: np.dtype, **kwargs) -> np.dtype:
    """The dtype numpy's reduction `name` (sum, mean, prod, ...) gives on `dtype`."""
    return check_dtype(getattr(np, name)(np.ones(1, dtype), **kwargs).dtype, f"numpy.{name}")
