"""Normalisation layers built from reductions and broadcasts: softmax, layer and batch norm."""
from __future__ import annotations

import math

from .. import expr as E
from .. import tensor as T
from ..errors import TEError
from ..tensor import Tensor, compute
from ._common import (broadcast_shape, check_tensor, normalize_axes, normalize_axis,
                      read_broadcast, require_float)
from .reduction import reduce
from .tags import BROADCAST


def _keep(idx, axes) -> tuple:
    """Indices into a keepdims reduction of the input: reduced axes read 0."""
    return tuple(0 if d in axes else i for d, i in enumerate(idx))


def softmax(x: Tensor, axis: int = -1, name: str | None = None) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis`, as max, exp, sum and divide stages."""
    check_tensor("softmax", x)
    require_float("softmax", x)
    base = name or "softmax"
    axes = (normalize_axis("softmax", x.name, axis, x.ndim),)
    peak = reduce("softmax", T.max, x, axes, True, name=f"{base}_max")
    floor = _flush_below(x.dtype, x.shape[axes[0]])

    def expo_at(*i):
        d = x(*i) - peak(*_keep(i, axes))
        if floor is None:
            return E.exp(d)
        # exp of the clamped value: exp's own scaling would step into denormals too
        bound = E.const(floor, x.dtype)
        return E.select(d < bound, E.const(0.0, x.dtype), E.exp(E.maximum(d, bound)))

    expo = compute(x.shape, expo_at, name=f"{base}_exp", tag=BROADCAST)
    total = reduce("softmax", T.sum, expo, axes, True, name=f"{base}_sum")
    return compute(x.shape, lambda *i: expo(*i) / total(*_keep(i, axes)), name=base,
                   tag=BROADCAST)


# ln of the smallest normal number per dtype whose denormals cost time on x86 (float32 and
# bfloat16 are computed in float32; half's exponent range is too narrow to flush usefully)
_LN_TINY = {"float32": math.log(2.0 ** -126), "bfloat16": math.log(2.0 ** -126),
            "float64": math.log(2.0 ** -1022)}


def _flush_below(dtype, extent) -> float | None:
    """The shifted logit below which softmax's exp is taken as 0, so that no term, and no
    quotient by the sum (at most `extent`), is a denormal: a masked attention row (-100,
    -1e4 or -inf added) otherwise fills the probabilities, and the MatMul that reads them,
    with denormals, which take microcode assists on x86 (10-15x slower kernels). A flushed
    output is below extent * the smallest normal number (about 1e-36 for 100 float32 terms)."""
    ln_tiny = _LN_TINY.get(str(dtype))
    if ln_tiny is None or not isinstance(extent, int):
        return None
    return ln_tiny + math.log(max(extent, 1))


def log_softmax(x: Tensor, axis: int = -1, name: str | None = None) -> Tensor:
    """x - max - log(sum(exp(x - max))) along `axis`."""
    check_tensor("log_softmax", x)
    require_float("log_softmax", x)
    base = name or "log_softmax"
    axes = (normalize_axis("log_softmax", x.name, axis, x.ndim),)
    peak = reduce("log_softmax", T.max, x, axes, True, name=f"{base}_max")
    shifted = compute(x.shape, lambda *i: x(*i) - peak(*_keep(i, axes)),
                      name=f"{base}_shift", tag=BROADCAST)
    total = reduce("log_softmax", T.sum, shifted, axes, True, name=f"{base}_sum",
                   source=E.exp)
    return compute(x.shape, lambda *i: shifted(*i) - E.log(total(*_keep(i, axes))),
                   name=base, tag=BROADCAST)


def layer_norm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None,
               axis=-1, eps: float = 1e-5, name: str | None = None) -> Tensor:
    """(x - mean) / sqrt(var + eps) * gamma + beta over `axis` (an int or several axes).

    gamma and beta broadcast against the normalised dimensions, x.shape[axes]. The variance
    is computed in two passes (mean first), which is accurate for large means.
    """
    check_tensor("layer_norm", x)
    require_float("layer_norm", x)
    base = name or "layer_norm"
    axes = normalize_axes("layer_norm", x.name, axis, x.ndim)
    if not axes:
        raise TEError(f"layer_norm(): no axes to normalise for '{x.name}'{list(x.shape)}")
    inner = tuple(x.shape[d] for d in axes)
    for param in (gamma, beta):
        if param is not None:
            check_tensor("layer_norm", param, "gamma/beta")
            if broadcast_shape("layer_norm", param, _Shape(inner)) != inner:
                raise TEError(f"layer_norm(): '{param.name}'{list(param.shape)} does not "
                              f"broadcast to the normalised shape {list(inner)}")
    scale = 1.0 / math.prod(inner)
    total = reduce("layer_norm", T.sum, x, axes, True, name=f"{base}_sum")

    def centred(i):
        return x(*i) - total(*_keep(i, axes)) * scale

    var_source = compute(x.shape, lambda *i: centred(i) * centred(i), name=f"{base}_sq",
                         tag=BROADCAST)
    square_sum = reduce("layer_norm", T.sum, var_source, axes, True, name=f"{base}_var")

    def body(*i):
        value = centred(i) * E.rsqrt(square_sum(*_keep(i, axes)) * scale + eps)
        params = [i[d] for d in axes]
        if gamma is not None:
            value = value * read_broadcast(gamma, params)
        if beta is not None:
            value = value + read_broadcast(beta, params)
        return value

    return compute(x.shape, body, name=base, tag=BROADCAST)


class _Shape:
    """A named shape, so broadcast_shape can check a parameter against it."""

    name = "normalised dims"

    def __init__(self, shape):
        self.shape = shape


def batch_norm_inference(x: Tensor, mean: Tensor, var: Tensor, gamma: Tensor | None = None,
                         beta: Tensor | None = None, eps: float = 1e-5, axis: int = 1,
                         name: str | None = None) -> Tensor:
    """(x - mean[c]) * gamma[c] / sqrt(var[c] + eps) + beta[c] with c the `axis` index."""
    check_tensor("batch_norm_inference", x)
    require_float("batch_norm_inference", x)
    axis = normalize_axis("batch_norm_inference", x.name, axis, x.ndim)
    channels = x.shape[axis]
    for param in (mean, var, gamma, beta):
        if param is None:
            continue
        check_tensor("batch_norm_inference", param, "parameter")
        if param.shape != (channels,):
            raise TEError(f"batch_norm_inference(): parameter '{param.name}'"
                          f"{list(param.shape)} must have shape [{channels}] (axis {axis} of "
                          f"'{x.name}'{list(x.shape)})")

    def body(*i):
        c = i[axis]
        value = (x(*i) - mean(c)) * E.rsqrt(var(c) + eps)
        if gamma is not None:
            value = value * gamma(c)
        return value if beta is None else value + beta(c)

    return compute(x.shape, body, name=name or "batch_norm", tag=BROADCAST)
