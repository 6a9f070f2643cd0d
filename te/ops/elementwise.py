"""Elementwise unary operators: activations, math functions and casts (one stage each)."""
from __future__ import annotations

import math

from .. import expr as E
from ..tensor import Tensor, compute
from ._common import check_tensor, require_float
from .tags import ELEMWISE


def _unary(op_name: str, x: Tensor, fn, name: str | None, needs_float: bool = False) -> Tensor:
    check_tensor(op_name, x)
    if needs_float:
        require_float(op_name, x)
    return compute(x.shape, lambda *i: fn(x(*i)), name=name or op_name, tag=ELEMWISE)


def relu(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("relu", x, lambda v: E.maximum(v, 0), name)


def leaky_relu(x: Tensor, alpha: float = 0.01, name: str | None = None) -> Tensor:
    return _unary("leaky_relu", x, lambda v: E.select(v > 0, v, v * alpha), name, True)


def clip(x: Tensor, a_min, a_max, name: str | None = None) -> Tensor:
    """min(max(x, a_min), a_max); a bound of None leaves that side open."""
    def fn(v):
        if a_min is not None:
            v = E.maximum(v, a_min)
        return v if a_max is None else E.minimum(v, a_max)
    return _unary("clip", x, fn, name)


def sigmoid(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("sigmoid", x, E.sigmoid, name, True)


def tanh(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("tanh", x, E.tanh, name, True)


def exp(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("exp", x, E.exp, name, True)


def log(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("log", x, E.log, name, True)


def sqrt(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("sqrt", x, E.sqrt, name, True)


def rsqrt(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("rsqrt", x, E.rsqrt, name, True)


def erf(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("erf", x, E.erf, name, True)


def floor(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("floor", x, E.floor, name, True)


def ceil(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("ceil", x, E.ceil, name, True)


def round(x: Tensor, name: str | None = None) -> Tensor:  # noqa: A001 - numpy's name
    """Round half to even (numpy and ONNX Round semantics)."""
    return _unary("round", x, E.round, name, True)


def gelu(x: Tensor, name: str | None = None) -> Tensor:
    """The exact (erf) form: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    return _unary("gelu", x, lambda v: 0.5 * v * (1.0 + E.erf(v * (1 / math.sqrt(2)))),
                  name, True)


def hard_sigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5,
                 name: str | None = None) -> Tensor:
    """max(0, min(1, alpha * x + beta)), with ONNX's default alpha and beta."""
    return _unary("hard_sigmoid", x,
                  lambda v: E.minimum(E.maximum(v * alpha + beta, 0.0), 1.0), name, True)


def hard_swish(x: Tensor, name: str | None = None) -> Tensor:
    """x * hard_sigmoid(x, 1/6, 0.5) (ONNX HardSwish)."""
    return _unary("hard_swish", x,
                  lambda v: v * E.minimum(E.maximum(v * (1 / 6) + 0.5, 0.0), 1.0), name, True)


def abs(x: Tensor, name: str | None = None) -> Tensor:  # noqa: A001 - numpy's name
    return _unary("abs", x, E.abs, name)


def neg(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("neg", x, lambda v: -v, name)


def sign(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("sign", x, lambda v: E.select(v > 0, 1, E.select(v < 0, -1, 0)).astype(
        v.dtype), name)


def reciprocal(x: Tensor, name: str | None = None) -> Tensor:
    return _unary("reciprocal", x, lambda v: 1.0 / v, name, True)


def cast(x: Tensor, dtype: str, name: str | None = None) -> Tensor:
    """Convert every element to `dtype` (float -> int truncates toward zero)."""
    return _unary("cast", x, lambda v: E.cast(v, dtype), name)
