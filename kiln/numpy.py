# ruff: noqa: F401, I001 - the namespace re-exports the implementations, grouped by kind
"""kiln.numpy: the numpy namespace for functions traced by kiln.jit (`import kiln.numpy as knp`).

Each function follows numpy's semantics (broadcasting, dtype promotion, negative axes,
keepdims) on traced arrays and emits Kiln graph ops; on plain numpy arrays (outside a traced
function) it is numpy's own. numpy's functions called directly on traced values (np.exp(x),
np.mean(x)) dispatch here too. A numpy name this module lacks raises UnsupportedNumpyError
naming the function and the line of your code. Where the rules differ from numpy: see
kiln/jit/dtypes.py (float16 results are float32) and kiln/jit/elementwise.py (maximum/minimum
do not propagate NaN; integer division by zero is undefined instead of 0).
"""
from __future__ import annotations

import numpy as _np

from .jit import elementwise as _ew
from .jit import linalg as _linalg
from .jit import methods as _methods
from .jit import reductions as _red
from .jit import shapes as _shapes
from .jit.errors import UnsupportedNumpyError, unsupported as _unsupported
from .jit.trace import Tracer as _Tracer
from .jit.trace import find_trace as _find_trace

# dtypes and constants, as numpy's
bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float32, float64 = _np.float32, _np.float64
dtype, ndarray = _np.dtype, _np.ndarray
pi, e, inf, nan, newaxis, euler_gamma = _np.pi, _np.e, _np.inf, _np.nan, None, _np.euler_gamma

# elementwise
from .jit.elementwise import (absolute, add, arccos, arccosh, arcsin, arcsinh,
                              arctan, arctanh, astype, bitwise_and, bitwise_not, bitwise_or,
                              bitwise_xor, ceil, clip, cos, cosh, divide, equal, exp, exp2,
                              expm1, fabs, floor, floor_divide, fmax, fmin, fmod, greater,
                              greater_equal, hypot, invert, isfinite, isinf, isnan, less,
                              less_equal, log, log1p, log2, log10, logaddexp, logical_and,
                              logical_not, logical_or, logical_xor, maximum, minimum, mod,
                              multiply, negative, not_equal, positive, power, reciprocal,
                              remainder, rint, sign, sin, sinh, sqrt, square, subtract, tan,
                              tanh, true_divide, trunc, where)
abs = absolute
round = _ew.round_
around = round
pow = power
if hasattr(_ew, "erf"):
    erf, expit = _ew.erf, _ew.expit      # scipy.special's, for GELU and sigmoid
# reductions
from .jit.reductions import (all, amax, amin, any, argmax, argmin, cumsum,
                             max, mean, min, prod, std, sum, var)
# shapes and indexing
from .jit.shapes import (broadcast_to, concatenate, expand_dims, moveaxis,
                         ravel, reshape, squeeze, stack, swapaxes, take, transpose)
# linear algebra
from .jit.linalg import dot, einsum, inner, matmul, outer, vdot


def sigmoid(x):
    """1 / (1 + exp(-x)), as one graph op (not in numpy; jax.nn.sigmoid's name)."""
    return expit(x)


def asarray(a, dtype=None):
    if isinstance(a, _Tracer):
        return a if dtype is None else astype(a, dtype)
    return _np.asarray(a, dtype=dtype)


array = asarray


def shape(a):
    return a.shape if isinstance(a, _Tracer) else _np.shape(a)


def ndim(a):
    return a.ndim if isinstance(a, _Tracer) else _np.ndim(a)


def size(a, axis=None):
    if isinstance(a, _Tracer):
        return a.size if axis is None else a.shape[axis]
    return _np.size(a, axis)


def full_like(a, fill_value, dtype=None):
    """numpy.full_like: a broadcast scalar (no array constant in the compiled code)."""
    trace = _find_trace((a,))
    if trace is None:
        return _np.full_like(a, fill_value, dtype=dtype)
    scalar = _shapes.constant(trace, _np.array(fill_value, dtype=dtype or a.dtype))
    return _shapes.broadcast_to(scalar, a.shape) if a.shape else scalar


def zeros_like(a, dtype=None):
    return full_like(a, 0, dtype)


def ones_like(a, dtype=None):
    return full_like(a, 1, dtype)


# array creation from static shapes is numpy's (the arrays become constants where used)
zeros, ones, full, empty = _np.zeros, _np.ones, _np.full, _np.zeros
arange, linspace, eye, identity = _np.arange, _np.linspace, _np.eye, _np.identity

_EXPORTS = {name: value for name, value in dict(globals()).items()
            if not name.startswith("_") and callable(value) and hasattr(_np, name)}
# numpy's own functions called on a traced value (__array_function__) come here
_methods.FUNCTIONS.update({getattr(_np, name): fn for name, fn in _EXPORTS.items()
                           if not isinstance(getattr(_np, name), (_np.ufunc, type))})


class UnsupportedNumpyAttribute(UnsupportedNumpyError, AttributeError):
    """knp.<name> for a numpy name kiln.numpy does not implement (hasattr() sees it as
    missing)."""


def __getattr__(name: str):
    if hasattr(_np, name) and not name.startswith("_"):
        raise UnsupportedNumpyAttribute(str(_unsupported(name)))
    raise AttributeError(f"module 'kiln.numpy' has no attribute {name!r}")
